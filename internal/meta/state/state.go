package state

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// node is a registered datanode: its record and what its last heartbeat
// said (memory only).
type Node struct {
	Rec NodeRecord
	// last is the time of the last heartbeat (the service's start time for
	// a node not heard from since).
	Last time.Time
	// seen: a heartbeat arrived since the service started (its reports
	// below are real).
	Seen       bool
	Health     string
	Capacity   uint64
	Used       uint64
	Available  uint64
	Containers map[uint64]metaapi.ContainerReport
	Pipelines  map[uint64]metaapi.PipelineReport
	Copying    map[uint64]bool        // containers being copied to it (Heartbeat.Copying)
	ReadOnly   []metaapi.FailedVolume // Heartbeat.ReadOnlyVolumes
}

// pipelineState is a pipeline's record plus what reports say of it.
type PipelineState struct {
	Rec        PipelineRecord
	Containers []uint64 // every container of the pipeline, in ID order
	RR         uint64   // round-robin cursor over its OPEN containers
	// behind: members its leader reported behind its compacted log
	// (memory only): told to leave at once, their replicas closed
	// locally, ranked behind by their BCSID and replaced.
	Behind map[uint64]bool
	// Degraded: kept OPEN with a DEAD member at the last Tick
	// (cluster/degraded.go; memory only: says it once in the log).
	Degraded bool
}

// containerState is a container's record plus memory-only bookkeeping.
type ContainerState struct {
	Rec       ContainerRecord
	LastClose map[uint64]time.Time // node → last close_container sent
}

// pendingDelete is a block scheduled for deletion.
type PendingDelete struct {
	Rec   DeleteRecord
	Tries map[uint64]int       // node → deliveries to it
	Last  map[uint64]time.Time // node → last delivery to it
	Acked map[uint64]bool      // nodes that acknowledged it
}

// blockRef is a block's identity as a map key.
type BlockRef struct{ Container, Local uint64 }

// State is the meta service's replicated state machine: the Pebble
// store, the memory built from it, and the commit pipeline (commit.go).
// Every concern (the cluster manager, the namespace, re-replication...)
// embeds it and reads and changes it under mu. See the package comment
// for its invariants and concurrency contract.
type State struct {
	Cfg     Config
	Log     *slog.Logger
	Store   *Store
	Started time.Time
	// rep replicates the store (nil: a group of one, raft.go).
	Rep     Group
	Metrics *Metrics

	// awaitHook, when set (tests, before any request), is called by every
	// request once it has released s.mu and before it waits for
	// durability; own says whether it applied a batch of its own.
	AwaitHook func(own bool)
	// dur says which applied batches are durable, and holds the sticky
	// failure of the store (commit.go). It has its own lock.
	Dur durability

	Mu sync.RWMutex
	// applied is the sequence of the last batch applied to the store
	// (commit.go).
	Applied       uint64
	Closed        bool
	Ctr           Counters
	NodeByID      map[uint64]*Node
	NodeByUUID    map[string]uint64
	PipelineByID  map[uint64]*PipelineState
	ContainerByID map[uint64]*ContainerState
	Buckets       map[string]BucketRecord
	Allocs        map[BlockRef]AllocRecord
	Deletes       map[uint64]map[uint64]*PendingDelete // container → local → pending
	NDeletes      int
	RR            uint64 // round-robin cursor over allocatable pipelines
	Repair        RepairState
	S3            s3State    // users (users.go)
	TokenKeys     []TokenKey // block-token signing keys, oldest first (tokenkeys.go)

	// Replicated service only (raft.go): stint is the term this member
	// serves as leader (0: it does not serve), proposed the sequence of
	// its last proposal in the stint, inflight its proposals not known
	// applied (to rebuild the overlay s.db.ov).
	Stint    uint64
	Proposed uint64
	Inflight []inflight
	// InflightBytes is the bytes of Inflight's proposals: the backlog
	// that client writes are held back on (admitLocked).
	InflightBytes int
	// staged: the batches staged for the stint's next proposal (nil:
	// none); flushed before s.mu is released (raft.go, stage).
	Staged *pebble.Batch
}

// Group is the meta raft group as the state machine sees it (the
// replicator of raft.go): the State proposes its batches to it in s.mu
// order and waits on it for their commit.
type Group interface {
	// NotLeader is the error of a member that does not serve.
	NotLeader() error
	// Await waits, outside s.mu, until p is committed (and confirmed by a
	// ReadIndex round for a read).
	Await(p Pending) error
	// Propose queues a proposal for the raft goroutine; under s.mu.
	Propose(p Proposal)
	// AppliedSeqNow is the stint's last proposal applied to the store.
	AppliedSeqNow() uint64
	// StintEnded records the end of the serving stint; under s.mu.
	StintEnded()
	// WaitApplied waits, outside s.mu, at most d until a proposal of
	// stint past seen is applied; an error when the stint ended or the
	// member failed.
	WaitApplied(stint, seen uint64, d time.Duration) error
}

// initMemory empties the in-memory state (Open, and a replicated
// member before it loads the store to serve as leader).
func (s *State) InitMemory() {
	s.Ctr = Counters{}
	s.NodeByID, s.NodeByUUID = map[uint64]*Node{}, map[string]uint64{}
	s.PipelineByID, s.ContainerByID = map[uint64]*PipelineState{}, map[uint64]*ContainerState{}
	s.Buckets, s.Allocs = map[string]BucketRecord{}, map[BlockRef]AllocRecord{}
	s.Deletes, s.NDeletes, s.RR = map[uint64]map[uint64]*PendingDelete{}, 0, 0
	s.Repair = newReplication(&s.Cfg)
}

// scan calls fn for every key/value with the given one-byte prefix.
func (s *State) Scan(prefix byte, fn func(k, v []byte) error) (err error) {
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return err
	}
	defer CloseInto(it, &err, fmt.Sprintf("scan of prefix %#x", prefix))
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

func (s *State) Load() error {
	v, closer, err := s.Store.Get(CounterKey())
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		s.Ctr = Counters{NextNode: 1, NextPipeline: 1, NextContainer: 1}
	case err != nil:
		return err
	default:
		s.Ctr, err = DecodeCounters(v)
		CloseInto(closer, &err, "read counters")
		if err != nil {
			return err
		}
	}
	err = s.Scan(PrefixNode, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		rec, err := DecodeNode(v)
		if err != nil {
			return err
		}
		if !ok || rec.ID != id || id >= s.Ctr.NextNode {
			return fmt.Errorf("%w: node record %x holds node %d (next ID %d)", ErrCorrupt, k, rec.ID, s.Ctr.NextNode)
		}
		s.NodeByID[id] = &Node{Rec: rec, Last: s.Started, Health: metaapi.HealthHealthy,
			Containers: map[uint64]metaapi.ContainerReport{}, Pipelines: map[uint64]metaapi.PipelineReport{}}
		s.NodeByUUID[rec.UUID] = id
		return nil
	})
	if err != nil {
		return err
	}
	err = s.Scan(PrefixPipeline, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		rec, err := DecodePipeline(v)
		if err != nil {
			return err
		}
		if !ok || rec.ID != id || id >= s.Ctr.NextPipeline {
			return fmt.Errorf("%w: pipeline record %x holds pipeline %d", ErrCorrupt, k, rec.ID)
		}
		for _, m := range rec.Members {
			if s.NodeByID[m] == nil {
				return fmt.Errorf("%w: pipeline %d: member %d is not a registered node", ErrCorrupt, id, m)
			}
		}
		s.PipelineByID[id] = &PipelineState{Rec: rec}
		return nil
	})
	if err != nil {
		return err
	}
	err = s.Scan(PrefixContainer, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		rec, err := DecodeContainer(v)
		if err != nil {
			return err
		}
		p := s.PipelineByID[rec.Pipeline]
		if !ok || rec.ID != id || id >= s.Ctr.NextContainer || p == nil {
			return fmt.Errorf("%w: container record %x holds container %d of pipeline %d", ErrCorrupt, k, rec.ID, rec.Pipeline)
		}
		s.ContainerByID[id] = &ContainerState{Rec: rec}
		p.Containers = append(p.Containers, id) // the scan is in ID order
		return nil
	})
	if err != nil {
		return err
	}
	err = s.Scan(prefixBucket, func(k, v []byte) error {
		rec, err := DecodeBucket(v)
		if err != nil {
			return fmt.Errorf("bucket %q: %w", k[1:], err)
		}
		s.Buckets[string(k[1:])] = rec
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.loadS3(); err != nil {
		return err
	}
	if err := s.loadOps(); err != nil { // ops.go
		return err
	}
	if err := s.loadTokenKeys(); err != nil { // tokenkeys.go
		return err
	}
	err = s.Scan(PrefixAlloc, func(k, v []byte) error {
		c, l, ok := parseBlockKey(k)
		rec, err := DecodeAlloc(v)
		if err != nil {
			return err
		}
		if !ok || s.ContainerByID[c] == nil || l >= s.ContainerByID[c].Rec.NextLocal {
			return fmt.Errorf("%w: allocation %x: no such container or local ID not handed out", ErrCorrupt, k)
		}
		s.Allocs[BlockRef{c, l}] = rec
		return nil
	})
	if err != nil {
		return err
	}
	return s.Scan(PrefixDelete, func(k, v []byte) error {
		c, l, ok := parseBlockKey(k)
		rec, err := DecodeDelete(v)
		if err != nil {
			return err
		}
		if !ok || s.ContainerByID[c] == nil {
			return fmt.Errorf("%w: pending delete %x: no such container", ErrCorrupt, k)
		}
		s.AddDelete(BlockRef{c, l}, rec)
		return nil
	})
}

func (s *State) AddDelete(ref BlockRef, rec DeleteRecord) {
	m := s.Deletes[ref.Container]
	if m == nil {
		m = map[uint64]*PendingDelete{}
		s.Deletes[ref.Container] = m
	}
	if _, ok := m[ref.Local]; !ok {
		s.NDeletes++
	}
	m[ref.Local] = &PendingDelete{Rec: rec}
}

func (s *State) RemoveDelete(ref BlockRef) {
	m := s.Deletes[ref.Container]
	if _, ok := m[ref.Local]; !ok {
		return
	}
	delete(m, ref.Local)
	s.NDeletes--
	if len(m) == 0 {
		delete(s.Deletes, ref.Container)
	}
}

// usable returns an error when the service cannot take requests. Callers
// hold s.mu (either mode).
func (s *State) Usable() error {
	if s.Closed {
		return fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
	}
	if err := s.Dur.failure(); err != nil {
		return fmt.Errorf("meta: store failed earlier, refusing requests: %w", err)
	}
	if s.Rep != nil && s.Stint == 0 {
		return s.Rep.NotLeader()
	}
	return nil
}

// set adds key → value to b; Set on a batch fails only on misuse.
func Set(b *pebble.Batch, k, v []byte) {
	if err := b.Set(k, v, nil); err != nil {
		panic(fmt.Sprintf("meta: batch set: %v", err))
	}
}

func Del(b *pebble.Batch, k []byte) {
	if err := b.Delete(k, nil); err != nil {
		panic(fmt.Sprintf("meta: batch delete: %v", err))
	}
}

// fullBytes is when a container counts as full and starts closing: 90 % of
// ContainerSizeBytes. A container is never filled to the byte: writers
// allocated blocks in it before it closes, and a container that ends a few
// bytes short of its size would otherwise stay OPEN while refusing every
// new block with CONTAINER_FULL. The margin leaves room for the blocks in
// flight when it closes.
func (s *State) FullBytes() uint64 {
	return s.Cfg.ContainerSizeBytes - s.Cfg.ContainerSizeBytes/10
}

// trimTask is one extra replica's deletion in flight (at most one per
// container): decided at a Tick, sent once in node's next heartbeat
// response, done when a later report of node lacks the container, dropped
// (and decided again) when node is DEAD or CopyStartTimeout passed since
// the decision or the delivery without it.
type TrimTask struct {
	Container, Node uint64
	Decided         time.Time
	Delivered       time.Time // zero until sent
}

// copyTask is one container copy in flight (at most one per container).
type CopyTask struct {
	Container, Source, Target uint64
	SizeBytes                 uint64
	Started                   time.Time
	// alive is the scheduling time, then the last heartbeat of the target
	// listing the copy in Copying.
	Alive   time.Time
	Attempt int
}

// sourceFailure names a failed copy of a container from a source.
type SourceFailure struct{ Container, Source uint64 }

// replication is the replication manager's state.
type RepairState struct {
	// safeMode: no replication decisions (set at start unless disabled;
	// cleared once, for good).
	SafeMode bool
	// forced: an operator ended safe mode; copies are then decided without
	// waiting for the members not heard from yet (see undecided).
	Forced bool
	Tasks  map[uint64]*CopyTask // container → its copy in flight
	// attempts: copies of a container scheduled since it was last
	// complete (cleared at completion).
	Attempts map[uint64]int
	// failed: when a (container, source) copy last failed; entries older
	// than CopyRetryAfter are pruned at Tick.
	Failed map[SourceFailure]time.Time

	CopiedContainers, CopiedBytes, FailedCopies uint64
	FirstScheduled, LastCompleted               time.Time
	// firstDelivered: the first replicate_container sent to a target (a
	// copy starts then; the time between is the wait for a heartbeat).
	FirstDelivered time.Time

	Trims   map[uint64]*TrimTask // container → its extra replica's deletion
	Trimmed uint64               // deletions done since the start

	// damage: block repairs and scrubber reports (damage.go).
	Damage damageState
	// ops: the operational state of the nodes not IN_SERVICE (ops.go;
	// loaded from the store).
	Ops map[uint64]OpState
	// removed: the datanodes removed for good, by UUID (removed.go;
	// loaded from the store).
	Removed map[string]RemovedNode
}

func newReplication(cfg *Config) RepairState {
	return RepairState{SafeMode: !cfg.DisableSafeMode, Tasks: map[uint64]*CopyTask{},
		Attempts: map[uint64]int{}, Failed: map[SourceFailure]time.Time{}, Trims: map[uint64]*TrimTask{},
		Damage: newDamageState(), Ops: map[uint64]OpState{}, Removed: map[string]RemovedNode{}}
}

// repairKey names one replica: a container on a node.
type RepairKey struct{ Container, Node uint64 }

// repairTask is the block repair of one damaged replica in flight: sent
// in every heartbeat response to node until the node's reports no longer
// list those blocks damaged (done), the node is DEAD or drops the
// replica (dropped), or CopyStartTimeout passes without a block repaired
// (failed: tried again, up to maxRepairAttempts, then the replica is
// replaced whole).
type RepairTask struct {
	Container, Node uint64
	Blocks          []uint64
	Decided, Alive  time.Time
	Left            int // blocks of the task still damaged at the last look
}

// damageState is the damage part of the replication manager's state.
type damageState struct {
	Repairs  map[RepairKey]*RepairTask
	Attempts map[RepairKey]int
	// scrub: each node's scrubber report (Heartbeat.Scrub), by node ID.
	Scrub map[uint64]metaapi.ScrubReport
	// volumes: each node's failed volumes (Heartbeat.FailedVolumes).
	Volumes                       map[uint64][]metaapi.FailedVolume
	RepairedBlocks, FailedRepairs uint64
}

func newDamageState() damageState {
	return damageState{Repairs: map[RepairKey]*RepairTask{}, Attempts: map[RepairKey]int{}, Scrub: map[uint64]metaapi.ScrubReport{},
		Volumes: map[uint64][]metaapi.FailedVolume{}}
}

const PrefixOps = 'O'

// Node operational states, as stored.
const (
	OpInService uint8 = iota
	OpDecommissioning
	OpDecommissioned
	OpMaintenance
	// OpRemoved: removed for good (removed.go); the node record stays
	// (its ID and UUID are never used again), the node is in no memory
	// map but RepairState.Removed.
	OpRemoved
)

// opState is a node's operational state.
type OpState struct {
	State        uint8
	Since, Until time.Time
}

func (o OpState) Encode() []byte {
	e := newEnc()
	e.u8(o.State)
	e.u64(ms(o.Since))
	e.u64(ms(o.Until))
	return e.finish()
}

func decodeOpState(v []byte) (OpState, error) {
	d := newDec("node operational state", v)
	o := OpState{State: d.u8(), Since: d.tm(), Until: d.tm()}
	if o.State > OpRemoved {
		d.fail("state %d", o.State)
	}
	return o, d.done()
}

// loadOps reads the operational states (called by load).
func (s *State) loadOps() error {
	s.Repair.Ops, s.Repair.Removed = map[uint64]OpState{}, map[string]RemovedNode{}
	return s.Scan(PrefixOps, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		o, err := decodeOpState(v)
		if err != nil {
			return err
		}
		if !ok || s.NodeByID[id] == nil {
			return fmt.Errorf("%w: operational state %x of no registered node", ErrCorrupt, k)
		}
		if o.State == OpRemoved {
			return s.loadRemoved(id, o) // removed.go
		}
		s.Repair.Ops[id] = o
		return nil
	})
}

// s3State is the S3 part of the service's memory, under s.mu.
type s3State struct {
	Users    map[string]UserRecord // by name
	ByAccess map[string]string     // access key → name
}

func (s *State) loadS3() error {
	s.S3 = s3State{Users: map[string]UserRecord{}, ByAccess: map[string]string{}}
	return s.Scan(prefixUser, func(k, v []byte) error {
		rec, err := DecodeUser(v)
		if err != nil {
			return fmt.Errorf("user %q: %w", k[1:], err)
		}
		name := string(k[1:])
		if _, dup := s.S3.ByAccess[rec.AccessKey]; dup {
			return fmt.Errorf("%w: user %q: access key held by another user", ErrCorrupt, name)
		}
		s.S3.Users[name] = rec
		s.S3.ByAccess[rec.AccessKey] = name
		return nil
	})
}

// bucketOf checks the names and returns the bucket's record.
func (s *State) BucketOf(bucket, key string) (BucketRecord, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return BucketRecord{}, err
	}
	if err := metaapi.ValidKey(key); err != nil {
		return BucketRecord{}, err
	}
	rec, ok := s.Buckets[bucket]
	if !ok {
		return rec, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
	}
	return rec, nil
}

func (pd *PendingDelete) Totals() (tries int, last time.Time) {
	for _, k := range pd.Tries {
		tries += k
	}
	for _, t := range pd.Last {
		if t.After(last) {
			last = t
		}
	}
	return tries, last
}

func (o OpState) Name() string {
	switch o.State {
	case OpDecommissioning:
		return metaapi.NodeDecommissioning
	case OpDecommissioned:
		return metaapi.NodeDecommissioned
	case OpMaintenance:
		return metaapi.NodeInMaintenance
	case OpRemoved:
		return metaapi.NodeRemoved
	}
	return metaapi.NodeInService
}

// metrics are the service's Prometheus metrics, in a registry of its own
// (several services in one process, as in tests, do not collide).
type Metrics struct {
	Reg             *prometheus.Registry
	Heartbeats      prometheus.Counter
	ReplicaFailures prometheus.Counter
	MembersBehind   prometheus.Counter
	// degradedAllocations: blocks allocated on a pipeline with a member
	// STALE because no pipeline had every member HEALTHY.
	DegradedAllocations prometheus.Counter
	Registrations       prometheus.Counter
	Allocations         prometheus.Counter
	Commits             prometheus.Counter
	Commands            prometheus.Counter
	DeletesScheduled    *prometheus.CounterVec
	DeletesDelivered    prometheus.Counter
	DeletesAcked        prometheus.Counter
	DeletesDropped      prometheus.Counter
	Requests            *prometheus.HistogramVec
	Refused             *prometheus.CounterVec
	// BacklogWaits: client writes held back while the leader's proposals
	// not yet applied reached MaxProposalBacklogBytes; BacklogRefusals:
	// those still held back after ProposalBacklogWait (answered BUSY).
	BacklogWaits    prometheus.Counter
	BacklogRefusals prometheus.Counter
}
