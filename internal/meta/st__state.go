package meta

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// node is a registered datanode: its record and what its last heartbeat
// said (memory only).
type node struct {
	rec nodeRecord
	// last is the time of the last heartbeat (the service's start time for
	// a node not heard from since).
	last time.Time
	// seen: a heartbeat arrived since the service started (its reports
	// below are real).
	seen       bool
	health     string
	capacity   uint64
	used       uint64
	available  uint64
	containers map[uint64]metaapi.ContainerReport
	pipelines  map[uint64]metaapi.PipelineReport
	copying    map[uint64]bool // containers being copied to it (Heartbeat.Copying)
}

// pipelineState is a pipeline's record plus what reports say of it.
type pipelineState struct {
	rec        pipelineRecord
	containers []uint64 // every container of the pipeline, in ID order
	rr         uint64   // round-robin cursor over its OPEN containers
	// behind: members its leader reported behind its compacted log
	// (memory only): told to leave at once, their replicas closed
	// locally, ranked behind by their BCSID and replaced.
	behind map[uint64]bool
}

// containerState is a container's record plus memory-only bookkeeping.
type containerState struct {
	rec       containerRecord
	lastClose map[uint64]time.Time // node → last close_container sent
}

// pendingDelete is a block scheduled for deletion.
type pendingDelete struct {
	rec   deleteRecord
	tries map[uint64]int       // node → deliveries to it
	last  map[uint64]time.Time // node → last delivery to it
	acked map[uint64]bool      // nodes that acknowledged it
}

// blockRef is a block's identity as a map key.
type blockRef struct{ container, local uint64 }

// State is the meta service's replicated state machine: the Pebble
// store, the memory built from it, and the commit pipeline (commit.go).
// Every concern (the cluster manager, the namespace, re-replication...)
// embeds it and reads and changes it under mu. See the package comment
// for its invariants and concurrency contract.
type State struct {
	cfg     Config
	log     *slog.Logger
	db      *store
	started time.Time
	// rep replicates the store (nil: a group of one, raft.go).
	rep     group
	metrics *metrics

	// awaitHook, when set (tests, before any request), is called by every
	// request once it has released s.mu and before it waits for
	// durability; own says whether it applied a batch of its own.
	awaitHook func(own bool)
	// dur says which applied batches are durable, and holds the sticky
	// failure of the store (commit.go). It has its own lock.
	dur durability

	mu sync.RWMutex
	// applied is the sequence of the last batch applied to the store
	// (commit.go).
	applied    uint64
	closed     bool
	ctr        counters
	nodes      map[uint64]*node
	byUUID     map[string]uint64
	pipelines  map[uint64]*pipelineState
	containers map[uint64]*containerState
	buckets    map[string]bucketRecord
	allocs     map[blockRef]allocRecord
	deletes    map[uint64]map[uint64]*pendingDelete // container → local → pending
	nDeletes   int
	rr         uint64 // round-robin cursor over allocatable pipelines
	repl       replication
	s3         s3State // users (users.go)

	// Replicated service only (raft.go): stint is the term this member
	// serves as leader (0: it does not serve), proposed the sequence of
	// its last proposal in the stint, inflight its proposals not known
	// applied (to rebuild the overlay s.db.ov).
	stint    uint64
	proposed uint64
	inflight []inflight
	// staged: the batches staged for the stint's next proposal (nil:
	// none); flushed before s.mu is released (raft.go, stage).
	staged *pebble.Batch
}

// group is the meta raft group as the state machine sees it (the
// replicator of raft.go): the State proposes its batches to it in s.mu
// order and waits on it for their commit.
type group interface {
	// notLeader is the error of a member that does not serve.
	notLeader() error
	// await waits, outside s.mu, until p is committed (and confirmed by a
	// ReadIndex round for a read).
	await(p pending) error
	// propose queues a proposal for the raft goroutine; under s.mu.
	propose(p proposal)
	// appliedSeqNow is the stint's last proposal applied to the store.
	appliedSeqNow() uint64
	// stintEnded records the end of the serving stint; under s.mu.
	stintEnded()
}

// initMemory empties the in-memory state (Open, and a replicated
// member before it loads the store to serve as leader).
func (s *State) initMemory() {
	s.ctr = counters{}
	s.nodes, s.byUUID = map[uint64]*node{}, map[string]uint64{}
	s.pipelines, s.containers = map[uint64]*pipelineState{}, map[uint64]*containerState{}
	s.buckets, s.allocs = map[string]bucketRecord{}, map[blockRef]allocRecord{}
	s.deletes, s.nDeletes, s.rr = map[uint64]map[uint64]*pendingDelete{}, 0, 0
	s.repl = newReplication(&s.cfg)
}

// scan calls fn for every key/value with the given one-byte prefix.
func (s *State) scan(prefix byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

func (s *State) load() error {
	v, closer, err := s.db.Get(counterKey())
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		s.ctr = counters{NextNode: 1, NextPipeline: 1, NextContainer: 1}
	case err != nil:
		return err
	default:
		s.ctr, err = decodeCounters(v)
		closer.Close()
		if err != nil {
			return err
		}
	}
	err = s.scan(prefixNode, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		rec, err := decodeNode(v)
		if err != nil {
			return err
		}
		if !ok || rec.ID != id || id >= s.ctr.NextNode {
			return fmt.Errorf("%w: node record %x holds node %d (next ID %d)", ErrCorrupt, k, rec.ID, s.ctr.NextNode)
		}
		s.nodes[id] = &node{rec: rec, last: s.started, health: metaapi.HealthHealthy,
			containers: map[uint64]metaapi.ContainerReport{}, pipelines: map[uint64]metaapi.PipelineReport{}}
		s.byUUID[rec.UUID] = id
		return nil
	})
	if err != nil {
		return err
	}
	err = s.scan(prefixPipeline, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		rec, err := decodePipeline(v)
		if err != nil {
			return err
		}
		if !ok || rec.ID != id || id >= s.ctr.NextPipeline {
			return fmt.Errorf("%w: pipeline record %x holds pipeline %d", ErrCorrupt, k, rec.ID)
		}
		for _, m := range rec.Members {
			if s.nodes[m] == nil {
				return fmt.Errorf("%w: pipeline %d: member %d is not a registered node", ErrCorrupt, id, m)
			}
		}
		s.pipelines[id] = &pipelineState{rec: rec}
		return nil
	})
	if err != nil {
		return err
	}
	err = s.scan(prefixContainer, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		rec, err := decodeContainer(v)
		if err != nil {
			return err
		}
		p := s.pipelines[rec.Pipeline]
		if !ok || rec.ID != id || id >= s.ctr.NextContainer || p == nil {
			return fmt.Errorf("%w: container record %x holds container %d of pipeline %d", ErrCorrupt, k, rec.ID, rec.Pipeline)
		}
		s.containers[id] = &containerState{rec: rec}
		p.containers = append(p.containers, id) // the scan is in ID order
		return nil
	})
	if err != nil {
		return err
	}
	err = s.scan(prefixBucket, func(k, v []byte) error {
		rec, err := decodeBucket(v)
		if err != nil {
			return fmt.Errorf("bucket %q: %w", k[1:], err)
		}
		s.buckets[string(k[1:])] = rec
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
	err = s.scan(prefixAlloc, func(k, v []byte) error {
		c, l, ok := parseBlockKey(k)
		rec, err := decodeAlloc(v)
		if err != nil {
			return err
		}
		if !ok || s.containers[c] == nil || l >= s.containers[c].rec.NextLocal {
			return fmt.Errorf("%w: allocation %x: no such container or local ID not handed out", ErrCorrupt, k)
		}
		s.allocs[blockRef{c, l}] = rec
		return nil
	})
	if err != nil {
		return err
	}
	return s.scan(prefixDelete, func(k, v []byte) error {
		c, l, ok := parseBlockKey(k)
		rec, err := decodeDelete(v)
		if err != nil {
			return err
		}
		if !ok || s.containers[c] == nil {
			return fmt.Errorf("%w: pending delete %x: no such container", ErrCorrupt, k)
		}
		s.addDelete(blockRef{c, l}, rec)
		return nil
	})
}

func (s *State) addDelete(ref blockRef, rec deleteRecord) {
	m := s.deletes[ref.container]
	if m == nil {
		m = map[uint64]*pendingDelete{}
		s.deletes[ref.container] = m
	}
	if _, ok := m[ref.local]; !ok {
		s.nDeletes++
	}
	m[ref.local] = &pendingDelete{rec: rec}
}

func (s *State) removeDelete(ref blockRef) {
	m := s.deletes[ref.container]
	if _, ok := m[ref.local]; !ok {
		return
	}
	delete(m, ref.local)
	s.nDeletes--
	if len(m) == 0 {
		delete(s.deletes, ref.container)
	}
}

// usable returns an error when the service cannot take requests. Callers
// hold s.mu (either mode).
func (s *State) usable() error {
	if s.closed {
		return fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
	}
	if err := s.dur.failure(); err != nil {
		return fmt.Errorf("meta: store failed earlier, refusing requests: %w", err)
	}
	if s.rep != nil && s.stint == 0 {
		return s.rep.notLeader()
	}
	return nil
}

// set adds key → value to b; Set on a batch fails only on misuse.
func set(b *pebble.Batch, k, v []byte) {
	if err := b.Set(k, v, nil); err != nil {
		panic(fmt.Sprintf("meta: batch set: %v", err))
	}
}

func del(b *pebble.Batch, k []byte) {
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
func (s *State) fullBytes() uint64 {
	return s.cfg.ContainerSizeBytes - s.cfg.ContainerSizeBytes/10
}

// trimTask is one extra replica's deletion in flight (at most one per
// container): decided at a Tick, sent once in node's next heartbeat
// response, done when a later report of node lacks the container, dropped
// (and decided again) when node is DEAD or CopyStartTimeout passed since
// the decision or the delivery without it.
type trimTask struct {
	container, node uint64
	decided         time.Time
	delivered       time.Time // zero until sent
}

// copyTask is one container copy in flight (at most one per container).
type copyTask struct {
	container, source, target uint64
	sizeBytes                 uint64
	started                   time.Time
	// alive is the scheduling time, then the last heartbeat of the target
	// listing the copy in Copying.
	alive   time.Time
	attempt int
}

// sourceFailure names a failed copy of a container from a source.
type sourceFailure struct{ container, source uint64 }

// replication is the replication manager's state.
type replication struct {
	// safeMode: no replication decisions (set at start unless disabled;
	// cleared once, for good).
	safeMode bool
	// forced: an operator ended safe mode; copies are then decided without
	// waiting for the members not heard from yet (see undecided).
	forced bool
	tasks  map[uint64]*copyTask // container → its copy in flight
	// attempts: copies of a container scheduled since it was last
	// complete (cleared at completion).
	attempts map[uint64]int
	// failed: when a (container, source) copy last failed; entries older
	// than CopyRetryAfter are pruned at Tick.
	failed map[sourceFailure]time.Time

	copiedContainers, copiedBytes, failedCopies uint64
	firstScheduled, lastCompleted               time.Time
	// firstDelivered: the first replicate_container sent to a target (a
	// copy starts then; the time between is the wait for a heartbeat).
	firstDelivered time.Time

	trims   map[uint64]*trimTask // container → its extra replica's deletion
	trimmed uint64               // deletions done since the start

	// damage: block repairs and scrubber reports (damage.go).
	damage damageState
	// ops: the operational state of the nodes not IN_SERVICE (ops.go;
	// loaded from the store).
	ops map[uint64]opState
}

func newReplication(cfg *Config) replication {
	return replication{safeMode: !cfg.DisableSafeMode, tasks: map[uint64]*copyTask{},
		attempts: map[uint64]int{}, failed: map[sourceFailure]time.Time{}, trims: map[uint64]*trimTask{},
		damage: newDamageState(), ops: map[uint64]opState{}}
}

// repairKey names one replica: a container on a node.
type repairKey struct{ container, node uint64 }

// repairTask is the block repair of one damaged replica in flight: sent
// in every heartbeat response to node until the node's reports no longer
// list those blocks damaged (done), the node is DEAD or drops the
// replica (dropped), or CopyStartTimeout passes without a block repaired
// (failed: tried again, up to maxRepairAttempts, then the replica is
// replaced whole).
type repairTask struct {
	container, node uint64
	blocks          []uint64
	decided, alive  time.Time
	left            int // blocks of the task still damaged at the last look
}

// damageState is the damage part of the replication manager's state.
type damageState struct {
	repairs  map[repairKey]*repairTask
	attempts map[repairKey]int
	// scrub: each node's scrubber report (Heartbeat.Scrub), by node ID.
	scrub map[uint64]metaapi.ScrubReport
	// volumes: each node's failed volumes (Heartbeat.FailedVolumes).
	volumes                       map[uint64][]metaapi.FailedVolume
	repairedBlocks, failedRepairs uint64
}

func newDamageState() damageState {
	return damageState{repairs: map[repairKey]*repairTask{}, attempts: map[repairKey]int{}, scrub: map[uint64]metaapi.ScrubReport{},
		volumes: map[uint64][]metaapi.FailedVolume{}}
}

const prefixOps = 'O'

// Node operational states, as stored.
const (
	opInService uint8 = iota
	opDecommissioning
	opDecommissioned
	opMaintenance
)

// opState is a node's operational state.
type opState struct {
	state        uint8
	since, until time.Time
}

func (o opState) encode() []byte {
	e := newEnc()
	e.u8(o.state)
	e.u64(ms(o.since))
	e.u64(ms(o.until))
	return e.finish()
}

func decodeOpState(v []byte) (opState, error) {
	d := newDec("node operational state", v)
	o := opState{state: d.u8(), since: d.tm(), until: d.tm()}
	if o.state > opMaintenance {
		d.fail("state %d", o.state)
	}
	return o, d.done()
}

// loadOps reads the operational states (called by load).
func (s *State) loadOps() error {
	s.repl.ops = map[uint64]opState{}
	return s.scan(prefixOps, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		o, err := decodeOpState(v)
		if err != nil {
			return err
		}
		if !ok || s.nodes[id] == nil {
			return fmt.Errorf("%w: operational state %x of no registered node", ErrCorrupt, k)
		}
		s.repl.ops[id] = o
		return nil
	})
}

// s3State is the S3 part of the service's memory, under s.mu.
type s3State struct {
	users    map[string]userRecord // by name
	byAccess map[string]string     // access key → name
}

func (s *State) loadS3() error {
	s.s3 = s3State{users: map[string]userRecord{}, byAccess: map[string]string{}}
	return s.scan(prefixUser, func(k, v []byte) error {
		rec, err := decodeUser(v)
		if err != nil {
			return fmt.Errorf("user %q: %w", k[1:], err)
		}
		name := string(k[1:])
		if _, dup := s.s3.byAccess[rec.AccessKey]; dup {
			return fmt.Errorf("%w: user %q: access key held by another user", ErrCorrupt, name)
		}
		s.s3.users[name] = rec
		s.s3.byAccess[rec.AccessKey] = name
		return nil
	})
}

// bucketOf checks the names and returns the bucket's record.
func (s *State) bucketOf(bucket, key string) (bucketRecord, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return bucketRecord{}, err
	}
	if err := metaapi.ValidKey(key); err != nil {
		return bucketRecord{}, err
	}
	rec, ok := s.buckets[bucket]
	if !ok {
		return rec, fmt.Errorf("%w: bucket %s", metaapi.ErrNotFound, bucket)
	}
	return rec, nil
}

func (pd *pendingDelete) totals() (tries int, last time.Time) {
	for _, k := range pd.tries {
		tries += k
	}
	for _, t := range pd.last {
		if t.After(last) {
			last = t
		}
	}
	return tries, last
}

func (o opState) name() string {
	switch o.state {
	case opDecommissioning:
		return metaapi.NodeDecommissioning
	case opDecommissioned:
		return metaapi.NodeDecommissioned
	case opMaintenance:
		return metaapi.NodeInMaintenance
	}
	return metaapi.NodeInService
}
