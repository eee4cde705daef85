package pipeline

import (
	"context"
	"errors"
	"fmt"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"log/slog"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/raftqueue"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/wal"
)

// Defaults and limits of Config.
const (
	DefaultTickInterval   = 100 * time.Millisecond
	DefaultElectionTicks  = 10
	DefaultHeartbeatTicks = 1
	// eagerCampaignElections bounds a new pipeline's eager campaign (in
	// election timeouts): past it, raft's randomized timeout alone elects.
	eagerCampaignElections = 3
	// DefaultRetainEntries is how many applied entries a group keeps in
	// its log for lagging followers before compacting.
	DefaultRetainEntries = 20000
	// DefaultMaxRetainEntries bounds what a leader keeps for a follower
	// that lags behind (or is down): up to this many applied entries, so
	// that it catches up from the log; past it the log is compacted anyway
	// and that follower needs a container copy.
	DefaultMaxRetainEntries = 500000
	// DefaultCompactEveryEntries is how far the applied index moves
	// between two compactions of a group.
	DefaultCompactEveryEntries = 10000
	// maxEventsPerTurn bounds the events the loop takes before it looks at
	// its groups again.
	maxEventsPerTurn = 4096
	// maxRaftPayloadBytes bounds the chunk bytes of one RaftMessage frame:
	// a MsgApp carrying more is split (raft's MaxSizePerMsg counts the
	// entries' headers only). A smaller raft budget lowers the bound
	// (Node.framePayloadBytes).
	maxRaftPayloadBytes = 32 << 20
	// maxMsgEntriesBytes is raft's MaxSizePerMsg: the entries of one
	// MsgApp (their data, inline chunk bytes included) travel in its
	// frame's header, which must stay under transport.MaxHeaderBytes;
	// the room left is for the message's other fields. One entry is
	// always below it (Node.entryBytesMax).
	maxMsgEntriesBytes = transport.MaxHeaderBytes - 64<<10
	// maxLoggedFiles bounds the block files holding logged (inline)
	// chunk writes not yet synced (each keeps a descriptor open): past
	// it, the append worker checkpoints (engine.SyncLogged).
	maxLoggedFiles = 512
	// maxPeerBatchBytes bounds the frames a peer writer encodes before it
	// writes them: the chunk bytes it reads back from the engine for a
	// lagging follower are held at most this much plus one frame's
	// (maxRaftPayloadBytes) at a time.
	maxPeerBatchBytes = 2 * maxRaftPayloadBytes
	// peerQueueMax bounds the messages waiting for one peer's writer; more
	// are dropped (raft resends: the transport is allowed to lose messages).
	peerQueueMax  = 8192
	eventQueueCap = 16384
	// DefaultMaxInflightPayloadBytes bounds the client chunk bytes a node
	// holds between their arrival and their answer (the client budget).
	DefaultMaxInflightPayloadBytes = 512 << 20
	// DefaultMaxInflightRaftPayloadBytes bounds the chunk bytes of raft
	// messages from peers a node holds between their arrival and their
	// append (the raft budget).
	DefaultMaxInflightRaftPayloadBytes = 256 << 20
	// DefaultLogInlineMaxBytes is the datanode's --log-inline-max-bytes:
	// chunks up to this size travel in their raft entries (Config.
	// LogInlineMaxBytes; 0 in a Config means never).
	DefaultLogInlineMaxBytes = 64 << 10
	// DefaultDiskStallThreshold is how long one append or apply round
	// (chunk writes, fdatasyncs, block commits) may take before the disk
	// is declared stalled and the node fails (as CockroachDB's
	// storage.max_sync_duration, 20 s): a replica whose fsync hangs must
	// stop claiming it serves its pipelines.
	DefaultDiskStallThreshold = 20 * time.Second
)

// ErrDiskStall is the failure of a node whose storage did not complete an
// append or apply round within Config.DiskStallThreshold.
var ErrDiskStall = errors.New("pipeline: disk stalled")

// Member is one datanode of a pipeline.
type Member struct {
	ID   uint64
	Addr string
	// CertName is the name of the datanode certificate the member is
	// bound to (the meta service's binding, metaapi.Member.CertName);
	// with TLS, its raft messages are accepted only from a connection
	// with that certificate (auth.go). Empty: not known.
	CertName string `json:",omitempty"`
}

// PipelineConfig declares one pipeline: a raft group and its members.
type PipelineConfig struct {
	ID      uint64
	Members []Member
}

// Config configures a Node.
type Config struct {
	// ID is this datanode's raft ID (≥ 1), the same in every pipeline.
	ID uint64
	// Listener serves raft messages from peers and client requests.
	Listener net.Listener
	Engine   *engine.Engine
	Log      *wal.Log
	// Pipelines this datanode is a member of.
	Pipelines []PipelineConfig
	// RequirePeerCertNames (with TLS): a raft message from a member whose
	// certificate name (Member.CertName) is not known is dropped (auth.go).
	// A datanode run by the meta service sets it: every member's binding
	// comes with its pipelines and peers.
	RequirePeerCertNames bool
	// BlockTokens checks clients' block tokens (nil: none; auth.go).
	BlockTokens *blocktoken.Verifier
	// TickInterval is raft's tick; ElectionTicks and HeartbeatTicks count
	// ticks.
	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// RetainEntries and CompactEveryEntries drive log compaction.
	RetainEntries       uint64
	MaxRetainEntries    uint64
	CompactEveryEntries uint64
	// MaxInflightPayloadBytes bounds client chunk bytes held in memory
	// (DefaultMaxInflightPayloadBytes).
	MaxInflightPayloadBytes int64
	// MaxInflightRaftPayloadBytes bounds the chunk bytes of received raft
	// messages held in memory (DefaultMaxInflightRaftPayloadBytes).
	MaxInflightRaftPayloadBytes int64
	// Conn configures the served connections (read, idle and write
	// timeouts; transport defaults for zero fields); its TLS secures the
	// raft connections this node dials to its peers (the listener secures
	// the served ones).
	Conn transport.ConnConfig
	// DiskStallThreshold: an append or apply round still running after
	// it fails the node with ErrDiskStall (DefaultDiskStallThreshold).
	DiskStallThreshold time.Duration
	// LogInlineMaxBytes: a client's chunk of at most this many bytes is
	// proposed with its bytes in the raft entry (FORMAT.md §12, kind 5),
	// made durable by the log's fsync; its block file is written without
	// a sync of its own and synced at its PutBlock or at the checkpoint
	// before the log is compacted past it (ARCHITECTURE §12.6). 0: never
	// (every chunk's bytes go to its block file, fsynced before the log
	// record). At most MaxLogInlineBytesLimit. Only the leader's setting
	// counts: a follower stores whatever entries it is sent.
	LogInlineMaxBytes int
	// Metrics, when set, receives the node's Prometheus metrics.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.ID == 0 || out.ID >= 1<<16 {
		return out, fmt.Errorf("pipeline: node ID %d out of range [1, 65535]", out.ID)
	}
	if out.Listener == nil || out.Engine == nil || out.Log == nil {
		return out, errors.New("pipeline: Listener, Engine and Log are required")
	}
	if out.TickInterval <= 0 {
		out.TickInterval = DefaultTickInterval
	}
	if out.ElectionTicks <= 0 {
		out.ElectionTicks = DefaultElectionTicks
	}
	if out.HeartbeatTicks <= 0 {
		out.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if out.HeartbeatTicks >= out.ElectionTicks {
		return out, fmt.Errorf("pipeline: heartbeat ticks %d must be below election ticks %d", out.HeartbeatTicks, out.ElectionTicks)
	}
	if out.RetainEntries == 0 {
		out.RetainEntries = DefaultRetainEntries
	}
	if out.MaxRetainEntries == 0 {
		out.MaxRetainEntries = DefaultMaxRetainEntries
	}
	if out.MaxRetainEntries < out.RetainEntries {
		out.MaxRetainEntries = out.RetainEntries
	}
	if out.CompactEveryEntries == 0 {
		out.CompactEveryEntries = DefaultCompactEveryEntries
	}
	if out.MaxInflightPayloadBytes <= 0 {
		out.MaxInflightPayloadBytes = DefaultMaxInflightPayloadBytes
	}
	if out.MaxInflightRaftPayloadBytes <= 0 {
		out.MaxInflightRaftPayloadBytes = DefaultMaxInflightRaftPayloadBytes
	}
	if out.DiskStallThreshold <= 0 {
		out.DiskStallThreshold = DefaultDiskStallThreshold
	}
	if out.LogInlineMaxBytes < 0 || out.LogInlineMaxBytes > MaxLogInlineBytesLimit {
		return out, fmt.Errorf("pipeline: LogInlineMaxBytes %d not in [0, %d]", out.LogInlineMaxBytes, MaxLogInlineBytesLimit)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	seen := map[uint64]bool{}
	for _, p := range out.Pipelines {
		if seen[p.ID] {
			return out, fmt.Errorf("pipeline: pipeline ID %d repeated", p.ID)
		}
		seen[p.ID] = true
		if err := validPipeline(out.ID, p); err != nil {
			return out, err
		}
	}
	return out, nil
}

func validPipeline(self uint64, p PipelineConfig) error {
	if p.ID == 0 {
		return errors.New("pipeline: pipeline ID 0")
	}
	me := false
	ids := map[uint64]bool{}
	for _, m := range p.Members {
		if m.ID == 0 || m.ID >= 1<<16 || ids[m.ID] || m.Addr == "" {
			return fmt.Errorf("pipeline %d: member %d is 0, too large, repeated or has no address", p.ID, m.ID)
		}
		ids[m.ID] = true
		me = me || m.ID == self
	}
	if !me {
		return fmt.Errorf("pipeline %d: this node (%d) is not a member", p.ID, self)
	}
	return nil
}

// Node is a datanode's replication layer: every pipeline it is a member of,
// one event loop driving them all, one append worker, one apply worker, one
// writer per peer and one reply writer per client connection with answers
// in flight (see connReplies). See docs/ARCHITECTURE.md §12.
//
// Concurrency: the loop goroutine owns every group's RawNode, payload cache
// and pending proposals; the other goroutines talk to it through the
// events channel (connection goroutines and workers → loop) and unbounded
// queues (loop → workers). Leader, Term and Status read atomics.
type Node struct {
	cfg    Config
	log    *slog.Logger
	eng    *engine.Engine
	wal    *wal.Log
	server *transport.Server
	// groups and order are written by the loop only, under groupsMu;
	// the loop reads them without it, other goroutines under RLock.
	groupsMu sync.RWMutex
	groups   map[uint64]*group
	order    []*group

	events chan event
	// appendq and applyq feed the append and apply workers (storage.go):
	// the loop pushes without blocking, raft's flow control bounds them.
	appendq *raftqueue.Queue[*appendJob]
	applyq  *raftqueue.Queue[*applyJob]
	replies replies
	peersMu sync.Mutex
	peers   map[uint64]*peer
	addrs   map[uint64]string
	// certNames: each peer's certificate name (Member.CertName), under
	// certMu (read by every raft frame's check, auth.go); raft messages
	// from a peer are accepted only under it.
	certMu    sync.RWMutex
	certNames map[uint64]string
	// authLogAt: when a refused frame was last logged (auth.go), unix ns.
	authLogAt atomic.Int64
	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	propSeq   uint64 // loop-owned
	// cmds is flushProposals' scratch (loop-owned; cleared after each
	// entry, so that it keeps no chunk alive; one per node, not per
	// group: it grows to the largest batch, up to MaxCommandsPerEntry).
	cmds     []Command
	inflight *byteBudget // the client budget
	raftBuf  *byteBudget // the raft budget
	metrics  *metrics
	failed   atomic.Pointer[error]
	serveErr chan error
	// failedGroups are the pipelines stopped after a replica failure
	// (written by the loop under groupsMu; at most
	// MaxFailedPipelinesKept).
	failedGroups map[uint64]PipelineFailure
	// opening: pipelines being opened by AddPipeline (loop-owned).
	opening map[uint64]bool
	// inlineWrites counts the chunks written as logged writes (their
	// bytes in their entry), by the append worker and at recovery.
	inlineWrites atomic.Uint64
	// appendSince and applySince are when the worker's current round
	// began (Unix ns; 0: idle), for the disk-stall watchdog.
	appendSince atomic.Int64
	applySince  atomic.Int64
	// pipelinesChanged counts changes of the served pipelines made by the
	// node itself (a failed replica), for the owner that persists the
	// list.
	pipelinesChanged atomic.Uint64
}

// group is one pipeline's state, owned by the loop goroutine unless noted.
type group struct {
	id           uint64
	rn           *raft.RawNode
	members      map[uint64]string
	isLeader     bool
	pending      map[uint64]*proposal
	queue        []*proposal
	cache        map[uint64]*cachedEntry // by index: decoded entries and their chunk bytes
	snapWarnedAt time.Time               // last "needs a container copy" warning (rate limit)
	// eagerTicks: ticks left in which this member, the one a new
	// pipeline designates (see openGroup), campaigns at every tick while
	// the group has no leader; 0 elsewhere.
	eagerTicks int
	// payloadLow: indexes below it have no cache entries left.
	payloadLow uint64

	// Read from other goroutines.
	// leases: raft budget of the frames stepped since the last Ready
	// (handed to that Ready's append job, or released with it).
	leases []*rxLease

	// Read from other goroutines.
	leader  atomic.Uint64
	term    atomic.Uint64
	applied atomic.Uint64
	// minMatch is, on a leader, 1 + the lowest index every follower is
	// known to hold (0 elsewhere): compaction keeps the entries above it.
	minMatch atomic.Uint64
	// behind lists, on a leader, the followers it can no longer catch
	// up from its log (they would need a raft snapshot): written by the
	// loop (copy on write), read by Pipelines.
	behind atomic.Pointer[[]uint64]
	// failed is set by a worker that found this replica unable to store
	// what the group appends or applies: from then on nothing of the
	// group is appended, acknowledged or applied here.
	failed atomic.Bool
	// gone: the blocks whose DeleteBlock this node applied, for the
	// catch-ups that cannot read their chunks back (gone.go).
	gone goneBlocks
}

// proposal is a client request waiting for its entry to commit and apply.
type proposal struct {
	id      uint64
	kind    Kind
	wc      transport.WriteChunk
	pb      transport.PutBlock
	ref     transport.GetBlock // DeleteBlock, CloseContainer
	payload []byte
	// verified: payload matched its checksums when it arrived (handle),
	// so this leader's append writes it without a second CRC pass.
	verified bool
	// release gives payload's admission (the client budget) back; nil
	// without a payload.
	release func()
	conn    *transport.Conn
	reqID   uint64
	// done receives the result of a proposal made by Propose (conn nil).
	done    chan error
	arrived time.Time
	// Set by the loop when the leader's own append of the entry is done:
	// a WriteChunk's result is its append's.
	appended  bool
	appendErr error
}

type eventKind uint8

const (
	evRaft eventKind = iota + 1
	evPropose
	evAppendDone
	evApplyDone
	evUnreachable
	evAddPipeline
	evRemovePipeline
	evGroupFailed
	evPeers
	evInstallGroup
)

type event struct {
	kind    eventKind
	group   uint64
	msg     *raftpb.Message
	segs    [][]byte
	gone    []uint64 // evRaft: the frame's GoneAt
	lease   *rxLease // evRaft: the frame's raft budget, if it had a payload
	prop    *proposal
	appends []*appendJob
	apply   *applyJob
	peer    uint64
	pc      PipelineConfig
	failure PipelineFailure
	members []Member
	// evAddPipeline: set when the caller is to open the group;
	// evInstallGroup: the opened group (nil: opening failed).
	opened *bool
	g      *group
	done   chan error
}

// Start opens every pipeline from the log (bootstrapping new ones), adopts
// the chunks their logs hold, and starts serving.
func Start(c Config) (*Node, error) {
	cfg, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.ID),
		eng:       cfg.Engine,
		wal:       cfg.Log,
		groups:    map[uint64]*group{},
		events:    make(chan event, eventQueueCap),
		appendq:   raftqueue.New[*appendJob](),
		applyq:    raftqueue.New[*applyJob](),
		replies:   replies{conns: map[*transport.Conn]*connReplies{}},
		peers:     map[uint64]*peer{},
		addrs:     map[uint64]string{},
		certNames: map[uint64]string{},
		stop:      make(chan struct{}),
		serveErr:  make(chan error, 1),
		inflight:  newByteBudget(cfg.MaxInflightPayloadBytes),
		raftBuf:   newByteBudget(cfg.MaxInflightRaftPayloadBytes),

		failedGroups: map[uint64]PipelineFailure{},
		opening:      map[uint64]bool{},
	}
	n.metrics = newMetrics(n, cfg.Metrics)
	for _, p := range cfg.Pipelines {
		n.setPeerAddrs(p.Members)
		g, err := n.openGroup(p)
		if err != nil {
			return nil, err
		}
		n.groups[p.ID] = g
		n.order = append(n.order, g)
	}
	// The payload buffers kept for reuse (transport.NewPayload) count
	// beyond the budgets: a quarter of them at most.
	transport.SetPayloadRecycleLimit((cfg.MaxInflightPayloadBytes + cfg.MaxInflightRaftPayloadBytes) / 4)
	n.server = transport.NewServer(transport.ServerConfig{
		Handler:      n.handle,
		PayloadAlloc: n.payloadAlloc,
		Conn:         cfg.Conn,
		Logger:       n.log,
	})
	n.wg.Add(3)
	go n.run()
	go n.appendWorker()
	go n.applyWorker()
	go n.stallWatchdog()
	go func() {
		err := n.server.Serve(cfg.Listener)
		n.serveErr <- err
		select {
		case <-n.stop:
		default:
			// The listener is gone while the node runs: it can take no
			// raft message and no client request any more. A node that
			// serves nothing must not go on as if healthy: it fails (its
			// process exits; the meta service sees it DEAD and closes
			// its pipelines).
			n.fail(fmt.Errorf("serving %s stopped: %v", cfg.Listener.Addr(), err))
		}
	}()
	return n, nil
}

// Addr is the address the node serves on.
func (n *Node) Addr() string { return n.cfg.Listener.Addr().String() }

// Leader returns the ID of the pipeline's leader as this node knows it
// (0: none known) and its term.
func (n *Node) Leader(pipeline uint64) (leader, term uint64) {
	g := n.group(pipeline)
	if g == nil {
		return 0, 0
	}
	return g.leader.Load(), g.term.Load()
}

// Applied returns the pipeline's applied index on this node.
func (n *Node) Applied(pipeline uint64) uint64 {
	if g := n.group(pipeline); g != nil {
		return g.applied.Load()
	}
	return 0
}

func (n *Node) group(id uint64) *group {
	n.groupsMu.RLock()
	defer n.groupsMu.RUnlock()
	return n.groups[id]
}

// PipelineStatus is one pipeline as this node sees it.
type PipelineStatus struct {
	ID, Leader, Term, Applied uint64
	Members                   []Member
	// Behind: on the leader, the followers behind its compacted log,
	// which only a container copy can bring back (the meta service
	// closes the pipeline and has them replaced).
	Behind []uint64
}

// Pipelines returns the pipelines this node serves, in the order they were
// added.
func (n *Node) Pipelines() []PipelineStatus {
	n.groupsMu.RLock()
	defer n.groupsMu.RUnlock()
	out := make([]PipelineStatus, 0, len(n.order))
	for _, g := range n.order {
		st := PipelineStatus{ID: g.id, Leader: g.leader.Load(), Term: g.term.Load(), Applied: g.applied.Load()}
		if b := g.behind.Load(); b != nil {
			st.Behind = slices.Clone(*b)
		}
		n.certMu.RLock()
		for id, addr := range g.members {
			st.Members = append(st.Members, Member{ID: id, Addr: addr, CertName: n.certNames[id]})
		}
		n.certMu.RUnlock()
		sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
		out = append(out, st)
	}
	return out
}

// AddPipeline starts serving a pipeline (bootstrapping it on first use, or
// recovering it from the log). Adding a pipeline already served with the
// same members is a no-op; with other members it is an error.
//
// The group is opened (its bootstrap record written and synced, or its log
// read back and its chunks adopted: disk work) on the caller's goroutine,
// never on the event loop, which keeps ticking every other pipeline
// meanwhile; the loop only checks and reserves the ID first and installs
// the opened group after.
func (n *Node) AddPipeline(ctx context.Context, pc PipelineConfig) error {
	if err := validPipeline(n.cfg.ID, pc); err != nil {
		return err
	}
	ev := event{kind: evAddPipeline, pc: pc, opened: new(bool)}
	if err := n.call(ctx, ev); err != nil || !*ev.opened {
		return err
	}
	g, err := n.openGroup(pc)
	if err != nil {
		_ = n.call(context.Background(), event{kind: evInstallGroup, pc: pc})
		return err
	}
	return n.call(context.Background(), event{kind: evInstallGroup, pc: pc, g: g})
}

// RemovePipeline stops serving a pipeline (it was closed): its pending
// requests fail, and its log records are compacted away.
func (n *Node) RemovePipeline(ctx context.Context, id uint64) error {
	return n.call(ctx, event{kind: evRemovePipeline, pc: PipelineConfig{ID: id}})
}

// Propose proposes commands (DeleteBlock, CloseContainer, PutBlock) to a
// pipeline this node leads, and waits for each to be applied here. It
// returns the first error (transport.StatusError-like errors of statusOf are
// plain errors here; ErrNotLeader when this node does not lead it).
func (n *Node) Propose(ctx context.Context, pipeline uint64, cmds []Command) error {
	var dones []chan error
	for i := range cmds {
		c := &cmds[i]
		p := &proposal{kind: c.Kind, done: make(chan error, 1)}
		switch c.Kind {
		case KindPutBlock:
			p.pb = c.PutBlock
		case KindDeleteBlock, KindCloseContainer:
			p.ref = c.Ref
		default:
			return fmt.Errorf("pipeline: Propose: %s carries a payload; clients write chunks", c.Kind)
		}
		if !n.post(event{kind: evPropose, group: pipeline, prop: p}) {
			return errStopped
		}
		dones = append(dones, p.done)
	}
	var first error
	for _, d := range dones {
		select {
		case err := <-d:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return errStopped
		}
	}
	return first
}

// ErrNotLeader is returned by Propose on a node that does not lead the
// pipeline.
var ErrNotLeader = errors.New("pipeline: not the leader")

var errStopped = errors.New("pipeline: node stopped")

// call runs a loop event that answers on its done channel.
func (n *Node) call(ctx context.Context, ev event) error {
	ev.done = make(chan error, 1)
	if !n.post(ev) {
		return errStopped
	}
	select {
	case err := <-ev.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return errStopped
	}
}

// Err returns the failure that stopped the node, or nil.
func (n *Node) Err() error {
	if p := n.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops serving and every goroutine. It does not close the engine or
// the log (their owner does, after Close). After a disk stall it does not
// wait for the workers stuck in the storage (they may never return; the
// owner should not close the engine or the log either, but exit).
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.server.Shutdown(ctx)
	if errors.Is(n.Err(), ErrDiskStall) {
		return n.Err()
	}
	n.wg.Wait()
	n.peersMu.Lock()
	for _, p := range n.peers {
		p.close()
	}
	n.peersMu.Unlock()
	return n.Err()
}

// Stopped returns a channel closed when the node stops on its own (a
// storage failure).
func (n *Node) Stopped() <-chan struct{} { return n.stop }

// fail records a storage failure and stops the node: after a failed
// fdatasync nothing more may be acknowledged (the engine and the log refuse
// too; this stops the loop from waiting on them).
func (n *Node) fail(err error) {
	if n.failed.CompareAndSwap(nil, &err) {
		n.log.Error("node failed: stopping", "err", err)
	}
	n.stopOnce.Do(func() { close(n.stop) })
}

// post hands an event to the loop; false when the node is stopping.
func (n *Node) post(ev event) bool {
	select {
	case n.events <- ev:
		return true
	case <-n.stop:
		return false
	}
}
