package meta

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	dto "github.com/prometheus/client_model/go"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/vfs"
)

const (
	maxBlocksPerKey = metaapi.MaxBlocksPerKey
	maxBucketBytes  = metaapi.MaxBucketBytes
	maxKeyBytes     = metaapi.MaxKeyBytes
)

// PipelineSize is the number of datanodes in a pipeline.
const PipelineSize = 3

// MaxNodeID is the highest node ID the meta service assigns (a datanode's
// raft ID must fit in 16 bits: the pipeline's proposal IDs carry it).
const MaxNodeID = 1<<16 - 1

// Defaults of the service's own limits (the cluster defaults are in
// metaapi).
const (
	// DefaultAllocationGrace: a block allocated and not committed for this
	// long is garbage (an interrupted put) and scheduled for deletion.
	DefaultAllocationGrace = time.Hour
	// DefaultContainersPerPipeline: OPEN containers kept per OPEN pipeline.
	DefaultContainersPerPipeline = 1
	// DefaultLeaveTimeout: a CLOSED pipeline's members are told to leave it
	// once none of its containers is reported OPEN, or after this long.
	DefaultLeaveTimeout = time.Minute
	// DefaultDeleteRedeliverAfter: a block deletion delivered and not
	// acknowledged is delivered again after this long.
	DefaultDeleteRedeliverAfter = 30 * time.Second
	// DefaultMaxDeleteAttempts: deliveries of one block deletion before the
	// meta service gives up on it (logged and counted).
	DefaultMaxDeleteAttempts = 5
	// DefaultCloseResendAfter: a close_container command is repeated, to a
	// node still reporting the container OPEN, at most this often.
	DefaultCloseResendAfter = 3 * time.Second
)

// Named bounds.
const (
	// MaxDeleteBlocksPerHeartbeat bounds the block IDs of the delete_blocks
	// commands in one heartbeat response.
	MaxDeleteBlocksPerHeartbeat = 1000
	// MaxCommandsPerHeartbeat bounds the commands in one heartbeat response
	// (a datanode runs a bounded number of them at once).
	MaxCommandsPerHeartbeat = 64
	// MaxExpiredPerTick bounds the expired allocations turned into pending
	// deletions in one Tick.
	MaxExpiredPerTick = 10000
	// MaxRequestBytes bounds a request body.
	MaxRequestBytes = 32 << 20
	// DefaultMinAvailableBytes is Config.MinAvailableBytes' default: room
	// for a few heartbeat intervals of writes before the volumes' own
	// reserve refuses them.
	DefaultMinAvailableBytes = 64 << 20
)

// Config configures a meta service. Zero values take the defaults.
type Config struct {
	// Dir holds the Pebble store (created if missing).
	Dir string
	// BodyReadTimeout, MaxBodyBytesInFlight and BodyAdmitWait bound the
	// request bodies being read (admission.go; defaults
	// DefaultBodyReadTimeout, DefaultMaxBodyBytesInFlight and
	// DefaultBodyAdmitWait).
	BodyReadTimeout      time.Duration
	MaxBodyBytesInFlight int64
	BodyAdmitWait        time.Duration
	// FS is the filesystem of the store (default vfs.Default, the OS);
	// tests give a vfs.MemFS to crash it or inject faults.
	FS vfs.FS
	// Listen is the HTTP address of Start/Run (default 127.0.0.1:0).
	Listen string
	// ReadyFile, when set, receives "ADDR\nPID\n" once Run serves.
	ReadyFile string

	HeartbeatInterval     time.Duration
	StaleAfter            time.Duration
	DeadAfter             time.Duration
	PipelinesPerNode      int
	ContainerSizeBytes    uint64
	ContainersPerPipeline int
	AllocationGrace       time.Duration
	LeaveTimeout          time.Duration
	DeleteRedeliverAfter  time.Duration
	MaxDeleteAttempts     int
	CloseResendAfter      time.Duration
	// MinAvailableBytes: a datanode reporting less space available for
	// new data (above its volumes' reserves) gets no new pipeline, and
	// its OPEN pipelines are closed, so that puts go to nodes with room
	// (DefaultMinAvailableBytes).
	MinAvailableBytes uint64

	// Replication manager (replication.go; zero: the Default* values).
	ReplicationFactor  int
	CopyRetryAfter     time.Duration
	MaxCopiesPerTarget int
	MaxCopiesPerSource int
	MaxInflightCopies  int
	// CopyStartTimeout: a scheduled copy its target has not listed in
	// Copying for this long is taken as lost (default 3 heartbeat
	// intervals + 10 s).
	CopyStartTimeout time.Duration
	// CopyTimeoutMin: a copy older than this and than its size at
	// MinCopyBytesPerS is taken as lost (DefaultCopyTimeoutMin).
	CopyTimeoutMin time.Duration
	// Safe mode: SafeModeMinNodes datanodes (default min(3, registered))
	// reported and SafeModeContainerFraction (default 0.99) of the CLOSED
	// containers with a healthy replica; DisableSafeMode starts without
	// it (tests).
	SafeModeMinNodes          int
	SafeModeContainerFraction float64
	DisableSafeMode           bool

	// TickInterval is how often Start runs Tick (default
	// HeartbeatInterval); negative: never (tests call Tick themselves).
	TickInterval time.Duration
	// Now is the clock (default time.Now); tests inject one.
	Now    func() time.Time
	Logger *slog.Logger

	// Replication (raft.go): with Peers set, the service is member ID of
	// the raft group of Peers (member ID → host:port, each member's
	// Listen: it serves the API and the raft messages on it). Without,
	// it is a group of one that commits straight to its store.
	ID    uint64
	Peers map[uint64]string
	// RaftTickInterval (DefaultRaftTickInterval) and ElectionTicks
	// (DefaultElectionTicks): a follower that hears no leader for
	// ElectionTicks ticks (randomised up to twice that) campaigns.
	RaftTickInterval time.Duration
	ElectionTicks    int
	// SnapshotEntries (DefaultSnapshotEntries): a member checkpoints its
	// store once this many entries were applied since its last; the raft
	// log is then compacted to LogRetainEntries (DefaultLogRetainEntries)
	// entries behind the checkpoint (snapshot.go).
	SnapshotEntries  int
	LogRetainEntries int
	// Join: a member being added to a running group (spindle admin meta
	// add) starts with an empty log instead of bootstrapping Peers as the
	// group, and waits for the leader's snapshot.
	Join bool

	// Listener, when set (tests, benches), is what Start serves on instead of
	// listening on Listen (a member restarted on its address).
	Listener net.Listener
	// TLS secures the HTTP API (mutual TLS 1.3: every client, datanode and
	// peer presents a certificate of the cluster CA) and the raft messages
	// and snapshots it sends to its peers; nil: plaintext (--insecure).
	TLS *tlsconf.Settings
	// AdminToken, without TLS (--insecure), is the admin credential: the
	// calls of the admin classes (auth.go) need "Authorization: Bearer
	// AdminToken". Empty: none (plaintext: every call allowed). Ignored
	// with TLS, where the credential is an admin certificate.
	AdminToken string
	// JoinCA, with TLS, lets datanodes join with a one-time token (join.go):
	// it signs their certificates. Nil: no joins.
	JoinCA *tlsconf.CA
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.MinAvailableBytes == 0 {
		c.MinAvailableBytes = DefaultMinAvailableBytes
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = metaapi.DefaultHeartbeatInterval
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = metaapi.DefaultStaleAfter
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = metaapi.DefaultDeadAfter
	}
	if c.PipelinesPerNode <= 0 {
		c.PipelinesPerNode = metaapi.DefaultPipelinesPerNode
	}
	if c.ContainerSizeBytes == 0 {
		c.ContainerSizeBytes = metaapi.DefaultContainerSizeBytes
	}
	if c.ContainersPerPipeline <= 0 {
		c.ContainersPerPipeline = DefaultContainersPerPipeline
	}
	if c.AllocationGrace <= 0 {
		c.AllocationGrace = DefaultAllocationGrace
	}
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = DefaultLeaveTimeout
	}
	if c.DeleteRedeliverAfter <= 0 {
		c.DeleteRedeliverAfter = DefaultDeleteRedeliverAfter
	}
	if c.MaxDeleteAttempts <= 0 {
		c.MaxDeleteAttempts = DefaultMaxDeleteAttempts
	}
	if c.CloseResendAfter <= 0 {
		c.CloseResendAfter = DefaultCloseResendAfter
	}
	if c.ReplicationFactor <= 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.CopyRetryAfter <= 0 {
		c.CopyRetryAfter = DefaultCopyRetryAfter
	}
	if c.MaxCopiesPerTarget <= 0 {
		c.MaxCopiesPerTarget = DefaultMaxCopiesPerTarget
	}
	if c.MaxCopiesPerSource <= 0 {
		c.MaxCopiesPerSource = DefaultMaxCopiesPerSource
	}
	if c.MaxInflightCopies <= 0 {
		c.MaxInflightCopies = DefaultMaxInflightCopies
	}
	if c.CopyStartTimeout <= 0 {
		c.CopyStartTimeout = 3*c.HeartbeatInterval + copyStartSlack
	}
	if c.CopyTimeoutMin <= 0 {
		c.CopyTimeoutMin = DefaultCopyTimeoutMin
	}
	if c.SafeModeContainerFraction == 0 {
		c.SafeModeContainerFraction = DefaultSafeModeContainerFraction
	}
	if c.TickInterval == 0 {
		c.TickInterval = c.HeartbeatInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.BodyReadTimeout <= 0 {
		c.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if c.MaxBodyBytesInFlight <= 0 {
		c.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	// One body of the largest size must always fit.
	c.MaxBodyBytesInFlight = max(c.MaxBodyBytesInFlight, MaxRequestBytes)
	if c.BodyAdmitWait <= 0 {
		c.BodyAdmitWait = DefaultBodyAdmitWait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RaftTickInterval <= 0 {
		c.RaftTickInterval = DefaultRaftTickInterval
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = DefaultElectionTicks
	}
	if c.SnapshotEntries <= 0 {
		c.SnapshotEntries = DefaultSnapshotEntries
	}
	if c.LogRetainEntries < 0 {
		c.LogRetainEntries = 0
	} else if c.LogRetainEntries == 0 {
		c.LogRetainEntries = DefaultLogRetainEntries
	}
}

func (c *Config) validate() error {
	if c.Dir == "" {
		return errors.New("meta: --dir is required")
	}
	if c.DeadAfter <= c.StaleAfter {
		return fmt.Errorf("meta: dead-after %s must exceed stale-after %s", c.DeadAfter, c.StaleAfter)
	}
	if c.SafeModeContainerFraction < 0 || c.SafeModeContainerFraction > 1 {
		return fmt.Errorf("meta: safe-mode container fraction %g: want 0..1", c.SafeModeContainerFraction)
	}
	return nil
}

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
	rep     *replicator
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

// Service is the meta service: the concerns over one State, composed.
type Service struct {
	*State
	*Cluster
	*BlockGC
	*Allocator
	*Damage
	*Ops
	*Rerepl
	*Namespace
	*Multipart
	*S3Users

	joins  joinTokens // join.go
	bodies *bodyGate  // admission.go
}

// Cluster is the cluster manager: datanodes, pipelines, containers and their replicas.
type Cluster struct{ *State }

// BlockGC schedules and delivers block deletions.
type BlockGC struct {
	*State
	cl *Cluster
}

// Allocator hands out blocks in containers of open pipelines.
type Allocator struct {
	*State
	cl *Cluster
}

// Damage tracks scrubber findings and block repairs.
type Damage struct {
	*State
	cl *Cluster
}

// Ops is the operational state of datanodes: decommission, maintenance.
type Ops struct {
	*State
	cl  *Cluster
	dmg *Damage
}

// Rerepl is the re-replication manager of closed containers.
type Rerepl struct {
	*State
	cl  *Cluster
	dmg *Damage
	ops *Ops
}

// Namespace holds buckets and keys.
type Namespace struct {
	*State
	cl    *Cluster
	alloc *Allocator
	gc    *BlockGC
	mp    *Multipart
}

// Multipart holds the S3 multipart uploads.
type Multipart struct {
	*State
	ns *Namespace
	gc *BlockGC
}

// S3Users holds the S3 users.
type S3Users struct{ *State }

// compose builds the concerns over st.
func compose(st *State) *Service {
	s := &Service{State: st}
	s.Cluster = &Cluster{st}
	s.BlockGC = &BlockGC{st, s.Cluster}
	s.Allocator = &Allocator{st, s.Cluster}
	s.Damage = &Damage{st, s.Cluster}
	s.Ops = &Ops{st, s.Cluster, s.Damage}
	s.Rerepl = &Rerepl{st, s.Cluster, s.Damage, s.Ops}
	s.Multipart = &Multipart{State: st, gc: s.BlockGC}
	s.Namespace = &Namespace{st, s.Cluster, s.Allocator, s.BlockGC, s.Multipart}
	s.Multipart.ns = s.Namespace
	s.S3Users = &S3Users{st}
	return s
}

// Open opens (creating if needed) the meta service's store in cfg.Dir and
// loads its state.
func Open(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "meta")
	db, err := openStore(cfg.FS, cfg.Dir, log)
	if err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	s := compose(&State{cfg: cfg, log: log, db: &store{DB: db}, started: cfg.Now()})
	s.bodies = newBodyGate(&s.cfg)
	s.initMemory()
	s.dur.init()
	if err := s.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("meta: load %s: %w", cfg.Dir, err)
	}
	if len(cfg.Peers) > 0 {
		if s.rep, err = openReplicator(s.State, db); err != nil {
			db.Close()
			return nil, err
		}
		// The load checked the store; a member holds memory only while
		// it serves as leader (it loads again then).
		s.initMemory()
	}
	s.metrics = newMetrics(s)
	if s.rep != nil {
		s.rep.start()
	}
	log.Info("meta store opened", "dir", cfg.Dir, "nodes", len(s.nodes), "pipelines", len(s.pipelines),
		"containers", len(s.containers), "buckets", len(s.buckets), "pending_allocations", len(s.allocs), "pending_deletes", s.nDeletes)
	return s, nil
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

// Close closes the store. Requests after Close fail with ErrUnavailable.
func (s *Service) Close() error {
	var rerr error
	if s.rep != nil {
		// Before s.mu: the raft goroutine takes it.
		rerr = s.rep.close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// Batches applied and not yet synced belong to requests waiting
	// outside s.mu; their syncs end (or fail) without it.
	_ = s.dur.wait(s.applied)
	if s.db.ov != nil {
		s.db.ov.Close()
		s.db.ov = nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("meta: close store: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("meta: close raft log: %w", rerr)
	}
	return nil
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

// Serving says whether the service takes requests: always for a group of
// one, only while it serves as leader for a replicated member.
func (s *Service) Serving() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return !s.closed && (s.rep == nil || s.stint != 0)
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

// bloomBitsPerKey sizes the store's Bloom filters (1 % false positives).
const bloomBitsPerKey = 10

// openStore opens (creating if needed) the Pebble store in dir/pebble,
// every file operation through fs. Pebble syncs the entries of its own
// directory, not the directories above it: dir and its missing parents are
// created durably and dir is synced once the store exists, so that a power
// loss right after the first acknowledged commit keeps the store.
func openStore(fs vfs.FS, dir string, log *slog.Logger) (*pebble.DB, error) {
	if err := vfs.MkdirAllDurable(fs, dir); err != nil {
		return nil, err
	}
	if err := finishStoreInstall(fs, dir); err != nil { // snapshot.go
		return nil, err
	}
	cache := pebble.NewCache(storeCacheBytes)
	defer cache.Unref() // the DB holds its own reference
	opts := &pebble.Options{FS: vfs.ToPebble(fs), Logger: pebbleLogger{log}, Cache: cache, MemTableSize: storeMemTableBytes}
	// Bloom filters: a key commit looks its key up under s.mu, and a new
	// key is a miss that would otherwise read a block of every sstable
	// level (21 µs of the lock per commit in bench meta without them, 8 %
	// of its CPU; 15 µs with them).
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
	}
	// Inline values (ARCHITECTURE §18) go to blob files, written once at
	// flush: compactions move their keys and references, not their bytes
	// (Pebble's value separation, as WiscKey). Without it, compactions
	// rewrote every 4 KiB value level after level: 35 % of all CPU of
	// bench key-write 4 KiB x 32, flushes another 9 %. A store opened
	// by a build without this is ratcheted to FormatValueSeparation (one
	// way; any build on Pebble v2.1 reads it).
	opts.FormatMajorVersion = pebble.FormatValueSeparation
	opts.Experimental.EnableColumnarBlocks = func() bool { return true }
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           storeBlobMinBytes,
			MaxBlobReferenceDepth: storeBlobMaxReferenceDepth,
			RewriteMinimumAge:     storeBlobRewriteMinAge,
			TargetGarbageRatio:    storeBlobTargetGarbageRatio,
		}
	}
	db, err := pebble.Open(filepath.Join(dir, "pebble"), opts)
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	if err := fs.SyncDir(dir); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	return db, nil
}

// The store's Pebble sizes. Values inline (ARCHITECTURE §18) put value
// bytes in the store: with Pebble's defaults (4 MiB memtables, an 8 MiB
// block cache) 160 MB of 4 KiB puts flushed 40 memtables and compacted
// them again and again (20 % of a key-write bench's CPU), and a commit's
// lookup of its key (a miss, for a new key) read filter and index blocks
// from the files (11 %). A 64 MiB cache held a fifth of 20,000 inline
// values of 4 KiB (80 MB) and most gets read their block from the file;
// 256 MiB holds them (bench key-read, 4 KiB, 32 clients, at load 7:
// 11,814 and 13,253 gets/s before, 16,408 and 24,135 after). Pebble
// allocates cache blocks as they are filled: a small store costs no more.
const (
	storeMemTableBytes = 32 << 20
	storeCacheBytes    = 256 << 20
	// Value separation: values of at least storeBlobMinBytes (inline
	// values; records and key entries are smaller) go to blob files; an
	// sstable references at most storeBlobMaxReferenceDepth overlapping
	// ones; a blob file older than storeBlobRewriteMinAge is rewritten
	// once more than storeBlobTargetGarbageRatio of it is garbage
	// (deleted or overwritten keys).
	storeBlobMinBytes           = 1 << 10
	storeBlobMaxReferenceDepth  = 10
	storeBlobRewriteMinAge      = 5 * time.Minute
	storeBlobTargetGarbageRatio = 0.2
)

// pebbleLogger routes Pebble's logs to slog; Fatalf panics (the default
// would exit the process).
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic("pebble: " + msg)
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

// WALSyncs is the number of syncs of the store's write-ahead log since
// Open and the time they took, in seconds (a replicated member: its raft
// log's fdatasyncs, time 0). Concurrent synced batches share
// a sync (Pebble's group commit), so commits per sync says how well
// commits are grouped.
func (s *Service) WALSyncs() (syncs uint64, seconds float64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, 0, fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
	}
	if s.rep != nil {
		// The store is written without syncs: the raft log's are the
		// ones (their time is not measured: seconds 0).
		return s.rep.wal.Stats().SyncDatas, 0, nil
	}
	h := s.db.Metrics().LogWriter.FsyncLatency
	if h == nil {
		return 0, 0, errors.New("meta: the store reports no WAL sync histogram")
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0, 0, fmt.Errorf("meta: read the WAL sync histogram: %w", err)
	}
	// Pebble observes each sync's time.Duration: nanoseconds.
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum() / 1e9, nil
}
