package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/engine"
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

	events  chan event
	appendq *queue[*appendJob]
	applyq  *queue[*applyJob]
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
		appendq:   newQueue[*appendJob](),
		applyq:    newQueue[*applyJob](),
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

// payloadAlloc admits a frame's payload against its budget, then
// allocates its buffer: a client's chunk against the client budget, a
// peer's raft message against the raft budget; it waits (the connection
// is not read meanwhile) until the bytes fit or the connection or the node
// closes. A payload that will be refused whatever its bytes — a write to a
// pipeline not served or not led here, a raft message of a group not
// served here, a header that does not decode or does not match its
// payload's length — is skipped: read and dropped, nothing allocated (see
// handleSkipped). A chunk's CRC32C pieces are checked as they arrive
// (chunkCheck); one that fails is refused there (handleRefused). No other
// frame carries a payload a datanode takes.
func (n *Node) payloadAlloc(ctx context.Context, t transport.MsgType, header []byte, size int) (transport.Payload, error) {
	var b *byteBudget
	var check transport.PayloadCheck
	var prop *proposal
	switch t {
	case transport.TypeWriteChunk:
		// The proposal the write becomes, its header decoded in place
		// once: the handler takes it from Frame.Decoded.
		prop = &proposal{kind: KindWriteChunk}
		wc := &prop.wc
		if err := wc.Unmarshal(header); err != nil || wc.Length != uint64(size) || engine.CheckChunkArgs(wc.Length, wc.BytesPerChecksum, wc.Checksums) != nil {
			return transport.Payload{}, transport.ErrSkipPayload
		}
		if g := n.group(wc.PipelineID); g == nil || g.leader.Load() != n.cfg.ID {
			return transport.Payload{}, transport.ErrSkipPayload
		}
		b = n.inflight
		check = chunkCheck(wc)
	case transport.TypeRaftMessage:
		if !n.raftRoutable(header) {
			return transport.Payload{}, transport.ErrSkipPayload
		}
		b = n.raftBuf
	default:
		return transport.Payload{}, fmt.Errorf("pipeline: a %v frame with a payload is not served by a datanode", t)
	}
	if err := b.acquire(ctx, int64(size)); err != nil {
		return transport.Payload{}, fmt.Errorf("pipeline: admitting %d payload bytes: %w", size, err)
	}
	out := transport.Payload{Buf: transport.NewPayload(size), Release: b.releaser(int64(size)), Check: check}
	if prop != nil {
		out.Decoded = prop
	}
	return out, nil
}

// chunkCheck verifies a chunk's CRC32C pieces as its payload arrives, on
// the connection's goroutine (transport.PayloadCheck): every replica would
// refuse a chunk whose bytes do not match their checksums, so the leader
// refuses it before it is proposed, at its first bad piece, without
// reading the rest into a buffer. wc has passed CheckChunkArgs for a
// payload of wc.Length bytes: one checksum per piece.
func chunkCheck(wc *transport.WriteChunk) transport.PayloadCheck {
	bpc := int(wc.BytesPerChecksum)
	return transport.PayloadCheck{PieceBytes: bpc, Check: func(off int, span []byte) error {
		if bad := engine.VerifyPieces(span, wc.Checksums[off/bpc:], wc.BytesPerChecksum); bad >= 0 {
			return &pieceMismatch{offsetBytes: uint64(off) + uint64(bad)*uint64(bpc)}
		}
		return nil
	}}
}

// pieceMismatch is chunkCheck's refusal: the piece at offsetBytes into the
// chunk does not match its checksum.
type pieceMismatch struct{ offsetBytes uint64 }

func (e *pieceMismatch) Error() string {
	return fmt.Sprintf("checksum mismatch at offset %d of the chunk", e.offsetBytes)
}

// framePayloadBytes bounds the chunk bytes of one RaftMessage frame (and
// so of one entry): maxRaftPayloadBytes, or less when the raft payload
// budget is smaller — the followers admit a frame against the same budget
// (the members of a pipeline run with the same settings), and a frame
// larger than the whole budget is admitted only alone.
func (n *Node) framePayloadBytes() int {
	return int(min(maxRaftPayloadBytes, n.raftBuf.limit))
}

// raftRoutable reports whether a RaftMessage's payload can be of use: its
// header names a group served here (the loop drops the messages of any
// other), and it is not a MsgApp of a term older than the group's (raft
// rejects those whatever their entries: the transport may lose any
// message, and the stale leader learns of the newer term from the others).
func (n *Node) raftRoutable(header []byte) bool {
	r, err := transport.RaftMessageRouteOf(header)
	if err != nil {
		return false
	}
	g := n.group(r.Group)
	if g == nil {
		return false
	}
	if raftpb.MessageType(r.Type) == raftpb.MessageType_MsgApp && r.Term < g.term.Load() {
		n.metrics.staleRaftPayloads.Inc()
		return false
	}
	return true
}

// BudgetStats are a node's payload budgets: bytes held now and the most
// held at once, client writes and raft messages.
type BudgetStats struct {
	ClientBytes, ClientPeakBytes int64
	RaftBytes, RaftPeakBytes     int64
}

// Budgets returns the payload budgets' use.
func (n *Node) Budgets() BudgetStats {
	var s BudgetStats
	s.ClientBytes, s.ClientPeakBytes, _ = n.inflight.stats()
	s.RaftBytes, s.RaftPeakBytes, _ = n.raftBuf.stats()
	return s
}

// setPeerAddrs records the members' addresses (and certificate names,
// when given). A peer has one address for
// all pipelines: the newest one given wins (a datanode restarted on
// another port is reached there from then on); a peer whose address
// changed redials it before its next send.
func (n *Node) setPeerAddrs(ms []Member) {
	n.certMu.Lock()
	for _, m := range ms {
		if m.CertName != "" && m.ID != n.cfg.ID && n.certNames[m.ID] != m.CertName {
			if old, ok := n.certNames[m.ID]; ok {
				n.log.Info("peer certificate changed", "peer", m.ID, "old", old, "new", m.CertName)
			}
			n.certNames[m.ID] = m.CertName
		}
	}
	n.certMu.Unlock()
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	for _, m := range ms {
		if m.ID == n.cfg.ID || m.Addr == "" || n.addrs[m.ID] == m.Addr {
			continue
		}
		if old, ok := n.addrs[m.ID]; ok {
			n.log.Info("peer address changed", "peer", m.ID, "old", old, "new", m.Addr)
		}
		n.addrs[m.ID] = m.Addr
		if p := n.peers[m.ID]; p != nil {
			p.setAddr(m.Addr)
		}
	}
}

// UpdatePeers records the current addresses of peers (the meta service's
// view, from a heartbeat): the peer connections follow them, and the
// pipelines' member lists (redirects, status) show them.
func (n *Node) UpdatePeers(ctx context.Context, ms []Member) error {
	return n.call(ctx, event{kind: evPeers, members: ms})
}

// onPeers applies UpdatePeers (loop only).
func (n *Node) onPeers(ms []Member) {
	n.setPeerAddrs(ms)
	n.groupsMu.Lock()
	defer n.groupsMu.Unlock()
	for _, m := range ms {
		if m.Addr == "" {
			continue
		}
		for _, g := range n.order {
			if a, ok := g.members[m.ID]; ok && a != m.Addr {
				g.members[m.ID] = m.Addr
			}
		}
	}
}

// openGroup bootstraps or recovers one pipeline's raft state.
func (n *Node) openGroup(p PipelineConfig) (*group, error) {
	g := &group{id: p.ID, members: map[uint64]string{}, pending: map[uint64]*proposal{}, cache: map[uint64]*cachedEntry{}}
	var voters []uint64
	for _, m := range p.Members {
		g.members[m.ID] = m.Addr
		voters = append(voters, m.ID)
	}
	sort.Slice(voters, func(i, j int) bool { return voters[i] < voters[j] })
	last, err := n.wal.LastIndex(p.ID)
	if err != nil {
		return nil, err
	}
	_, hasSnap, err := n.wal.Snapshot(p.ID)
	if err != nil {
		return nil, err
	}
	if last == 0 && !hasSnap {
		// Bootstrap: every member starts from the same snapshot at (1, 1)
		// holding the membership, so that no member needs to be told it.
		cs, err := proto.Marshal(&raftpb.ConfState{Voters: voters})
		if err != nil {
			return nil, err
		}
		seq, err := n.wal.Append(wal.SnapshotRecord(p.ID, 1, 1, cs), wal.HardStateRecord(p.ID, wal.HardState{Term: 1, Commit: 1}))
		if err != nil {
			return nil, fmt.Errorf("pipeline %d: bootstrap: %w", p.ID, err)
		}
		if err := n.wal.WaitDurable(seq); err != nil {
			return nil, fmt.Errorf("pipeline %d: bootstrap: %w", p.ID, err)
		}
		n.log.Info("pipeline bootstrapped", "pipeline", p.ID, "voters", voters)
		// A new pipeline's first election would wait a randomized
		// election timeout (1-2 s) and could split; writers wait on it.
		// One member, designated by the pipeline ID (so that leaders
		// spread over the nodes), campaigns at every tick instead until a
		// leader is known, for at most eagerCampaignElections election
		// timeouts: its PreVotes are dropped until the other members have
		// joined (each at its next heartbeat), then win at once. Only
		// Follower and PreCandidate campaign again: a Candidate's term is
		// not raised by it.
		if voters[p.ID%uint64(len(voters))] == n.cfg.ID {
			g.eagerTicks = eagerCampaignElections * n.cfg.ElectionTicks
		}
	} else if err := n.adoptChunks(p.ID); err != nil {
		return nil, err
	}
	first, err := n.wal.FirstIndex(p.ID)
	if err != nil {
		return nil, err
	}
	rc := &raft.Config{
		ID:                        n.cfg.ID,
		ElectionTick:              n.cfg.ElectionTicks,
		HeartbeatTick:             n.cfg.HeartbeatTicks,
		Storage:                   n.wal.RaftStorage(p.ID),
		Applied:                   first - 1,
		AsyncStorageWrites:        true,
		MaxSizePerMsg:             maxMsgEntriesBytes,
		MaxCommittedSizePerReady:  8 << 20,
		MaxUncommittedEntriesSize: 64 << 20,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    wal.RaftLogger{L: n.log.With("pipeline", p.ID)},
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("pipeline %d: %w", p.ID, err)
	}
	g.rn = rn
	g.payloadLow = first
	g.applied.Store(first - 1)
	return g, nil
}

// adoptChunks tells the engine about the chunks of the WriteChunk entries
// the log holds: their bytes were made durable before their log records
// (see appendWorker), but the engine rebuilt its blocks from their last
// PutBlock only. A chunk the entry carries is written again from the log
// (engine.ReplayLoggedChunk: its block file was written without a sync, so
// a crash may have lost it); in log order, so a block's chunks come back
// contiguously, the header-only ones adopted from the file between them.
func (n *Node) adoptChunks(gid uint64) error {
	first, err := n.wal.FirstIndex(gid)
	if err != nil {
		return err
	}
	last, err := n.wal.LastIndex(gid)
	if err != nil {
		return err
	}
	adopted, failed := 0, 0
	for lo := first; lo <= last; {
		ents, err := n.wal.Entries(gid, lo, last+1, 8<<20)
		if err != nil {
			return fmt.Errorf("pipeline %d: recover entries from %d: %w", gid, lo, err)
		}
		for _, e := range ents {
			if raftpb.EntryType(e.Type) != raftpb.EntryType_EntryNormal {
				continue
			}
			err := DecodeEntry(e.Data, func(c *Command) error {
				if c.Kind != KindWriteChunk {
					return nil
				}
				w := &c.WriteChunk
				b := engine.BlockID{Container: engine.ContainerID(w.ContainerID), Local: w.LocalID}
				adopt := func() error { return n.eng.AdoptChunk(b, w.Offset, w.Length, w.BytesPerChecksum, w.Checksums) }
				if c.Inline != nil {
					// The log holds the bytes; the block file may not
					// (written without a sync): write them again.
					adopt = func() error {
						return n.eng.ReplayLoggedChunk(b, w.Offset, c.Inline, w.BytesPerChecksum, w.Checksums)
					}
				}
				if err := adopt(); err != nil {
					// A chunk whose block was deleted later, or a
					// write that failed when it was first made.
					failed++
					n.log.Debug("recovery: chunk not adopted", "pipeline", gid, "index", e.Index, "err", err)
					return nil
				}
				if c.Inline != nil {
					n.inlineWrites.Add(1)
				}
				adopted++
				return nil
			})
			if err != nil {
				return fmt.Errorf("pipeline %d: entry %d: %w", gid, e.Index, err)
			}
		}
		lo = ents[len(ents)-1].Index + 1
	}
	n.log.Info("pipeline recovered", "pipeline", gid, "first_index", first, "last_index", last, "chunks_adopted", adopted, "chunks_not_adopted", failed)
	return nil
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

// run is the event loop: it owns every RawNode.
func (n *Node) run() {
	defer n.wg.Done()
	defer func() {
		// Stopping: connections waiting for budget give up.
		n.inflight.close()
		n.raftBuf.close()
	}()
	// raft panics when its storage answers an error other than
	// ErrCompacted or ErrUnavailable: a failed log (wal.ErrFailed, sticky
	// after a failed write or fdatasync) serves no reads, and the loop may
	// still step or propose before it sees the failure. That panic is the
	// log's failure reaching the loop: the node fails (as after a failed
	// engine sync) instead of the process dying; no RawNode is touched
	// again. Any other panic is a bug and goes on.
	defer func() {
		if r := recover(); r != nil {
			// raft panics with the error, or with a message holding it
			// (Logger.Panicf): ask the log whether it failed.
			_, lerr := n.wal.Groups()
			if !errors.Is(lerr, wal.ErrFailed) {
				panic(r)
			}
			n.fail(fmt.Errorf("raft stopped on the failed log (%v): %w", r, lerr))
			n.failAllPending()
		}
	}()
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.stop:
			n.failAllPending()
			return
		case <-ticker.C:
			for _, g := range n.order {
				g.rn.Tick()
				if g.eagerTicks > 0 {
					g.eagerTicks--
					switch st := g.rn.BasicStatus(); {
					case st.Lead != raft.None:
						g.eagerTicks = 0
					case st.RaftState == raft.StateFollower || st.RaftState == raft.StatePreCandidate:
						_ = g.rn.Campaign() // refused only when it cannot campaign: the timeout still applies
					}
				}
			}
		case ev := <-n.events:
			n.onEvent(ev)
		drain:
			for i := 0; i < maxEventsPerTurn; i++ {
				select {
				case ev := <-n.events:
					n.onEvent(ev)
				default:
					break drain
				}
			}
		}
		for _, g := range n.order {
			if g.failed.Load() {
				continue // evGroupFailed removes it
			}
			n.flushProposals(g)
			if g.rn.HasReady() {
				n.onReady(g)
			} else if len(g.leases) > 0 {
				// Stepped without effect: nothing of them is kept.
				n.releaseLeases(g, g.leases)
				g.leases = nil
			}
		}
	}
}

func (n *Node) onEvent(ev event) {
	g := n.groups[ev.group]
	switch ev.kind {
	case evRaft:
		if g == nil || g.failed.Load() {
			ev.lease.release()
			return
		}
		m := ev.msg
		stashed := false
		if m.GetType() == raftpb.MessageType_MsgApp && len(m.GetEntries()) > 0 {
			if err := g.stashPayloads(m, ev.segs, ev.gone, ev.lease); err != nil {
				n.log.Warn("raft message dropped", "pipeline", g.id, "from", m.GetFrom(), "err", err)
				ev.lease.release()
				return
			}
			stashed = ev.lease != nil
		}
		if err := g.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			n.log.Debug("raft step", "pipeline", g.id, "type", m.GetType(), "err", err)
		}
		if stashed {
			g.leases = append(g.leases, ev.lease)
		} else {
			ev.lease.release()
		}
	case evPropose:
		if g == nil && ev.prop.done != nil {
			ev.prop.done <- fmt.Errorf("%w: pipeline %d is not served here", engine.ErrNotFound, ev.group)
			return
		}
		if g == nil {
			n.replyErr(ev.prop, transport.StatusNotFound, fmt.Sprintf("pipeline %d is not served here", ev.group), "")
			return
		}
		g.queue = append(g.queue, ev.prop)
	case evAppendDone:
		for _, j := range ev.appends {
			// The chunks are durable here (read back when needed):
			// the frames' bytes are let go.
			n.releaseLeases(j.g, j.leases)
			j.leases = nil
			if j.g.failed.Load() || n.groups[j.g.id] != j.g {
				continue
			}
			for _, r := range j.results {
				if p := j.g.pending[r.proposal]; p != nil {
					p.appended, p.appendErr = true, r.err
				}
			}
			for _, resp := range j.msg.GetResponses() {
				n.deliver(j.g, resp)
			}
		}
	case evApplyDone:
		j := ev.apply
		if j.g.failed.Load() || n.groups[j.g.id] != j.g {
			return
		}
		j.g.applied.Store(j.last)
		for i := j.g.payloadLow; i <= j.last; i++ {
			delete(j.g.cache, i)
		}
		j.g.payloadLow = max(j.g.payloadLow, j.last+1)
		for _, resp := range j.msg.GetResponses() {
			n.deliver(j.g, resp)
		}
	case evAddPipeline:
		ev.done <- n.addGroup(ev.pc, ev.opened)
	case evInstallGroup:
		delete(n.opening, ev.pc.ID)
		if ev.g != nil {
			n.groupsMu.Lock()
			n.groups[ev.pc.ID] = ev.g
			n.order = append(n.order, ev.g)
			n.groupsMu.Unlock()
			n.log.Info("pipeline added", "pipeline", ev.pc.ID, "members", ev.pc.Members)
		}
		ev.done <- nil
	case evRemovePipeline:
		ev.done <- n.removeGroup(ev.pc.ID)
	case evGroupFailed:
		n.stopFailedGroup(ev.failure)
	case evPeers:
		n.onPeers(ev.members)
		ev.done <- nil
	case evUnreachable:
		for _, g := range n.order {
			if _, ok := g.members[ev.peer]; ok {
				g.rn.ReportUnreachable(ev.peer)
			}
		}
	}
}

// addGroup checks an AddPipeline (loop only): a pipeline served with the
// same members gets their addresses; one being opened, served with other
// members, or failed here is refused; otherwise its ID is reserved and
// *open set: the caller opens it and installs it with evInstallGroup.
func (n *Node) addGroup(pc PipelineConfig, open *bool) error {
	n.groupsMu.RLock()
	f, failed := n.failedGroups[pc.ID]
	n.groupsMu.RUnlock()
	if failed {
		return fmt.Errorf("pipeline %d: this node's replica failed (%s); it does not serve it again", pc.ID, f.Reason)
	}
	if n.opening[pc.ID] {
		return fmt.Errorf("pipeline %d: being added already", pc.ID)
	}
	if g := n.groups[pc.ID]; g != nil {
		if len(g.members) != len(pc.Members) {
			return fmt.Errorf("pipeline %d: already served with other members", pc.ID)
		}
		for _, m := range pc.Members {
			if _, ok := g.members[m.ID]; !ok {
				return fmt.Errorf("pipeline %d: already served with other members", pc.ID)
			}
		}
		// Same members, maybe at new addresses: the newest win.
		n.onPeers(pc.Members)
		return nil
	}
	n.setPeerAddrs(pc.Members)
	n.opening[pc.ID] = true
	*open = true
	return nil
}

func (n *Node) removeGroup(id uint64) error {
	g := n.groups[id]
	if g == nil {
		return nil
	}
	// Nothing more of it is appended or applied here: an append job
	// queued or running stops at its next entry and creates no container
	// (inContainer).
	g.failed.Store(true)
	n.failPending(g, "pipeline closed")
	n.releaseLeases(g, g.leases)
	g.leases = nil
	for _, p := range g.queue {
		n.replyErr(p, transport.StatusNotFound, fmt.Sprintf("pipeline %d closed", id), "")
	}
	g.queue = nil
	n.groupsMu.Lock()
	delete(n.groups, id)
	for i, o := range n.order {
		if o == g {
			n.order = append(n.order[:i], n.order[i+1:]...)
			break
		}
	}
	n.groupsMu.Unlock()
	// Its records in the shared log are no longer needed: compact them
	// away (in the background: Compact waits for a sync).
	last, err := n.wal.LastIndex(id)
	if err == nil && last > 0 {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.wal.Compact(id, last); err != nil {
				n.log.Warn("compacting a removed pipeline's log", "pipeline", id, "err", err)
			}
		}()
	}
	n.log.Info("pipeline removed", "pipeline", id)
	return nil
}

// deliver steps a local response into the group or sends it to a peer.
func (n *Node) deliver(g *group, m *raftpb.Message) {
	if m.GetTo() == n.cfg.ID {
		if err := g.rn.Step(m); err != nil {
			n.log.Debug("raft step (local)", "pipeline", g.id, "type", m.GetType(), "err", err)
		}
		return
	}
	n.send(g, m)
}

// stashPayloads decodes the entries of a received MsgApp and keeps them
// with the chunk bytes that came in its frame, for the append worker (and
// for this node's own MsgApps should it become leader before they are
// durable here), marked with the frame's lease. An entry cached already
// with its bytes (same index and term: the same entry) is kept.
func (g *group) stashPayloads(m *raftpb.Message, segs [][]byte, gone []uint64, l *rxLease) error {
	k := 0
	for i, e := range m.GetEntries() {
		if i > 0 && e.GetIndex() != m.GetEntries()[i-1].GetIndex()+1 {
			return fmt.Errorf("entry %d follows entry %d", e.GetIndex(), m.GetEntries()[i-1].GetIndex())
		}
	}
	if l != nil && len(m.GetEntries()) > 0 {
		l.lo, l.hi = m.GetEntries()[0].GetIndex(), m.GetEntries()[len(m.GetEntries())-1].GetIndex()
	}
	for _, e := range m.GetEntries() {
		ce := decodeCached(e)
		ce.lease = l
		if ce.err != nil {
			return fmt.Errorf("entry %d: %w", e.GetIndex(), ce.err)
		}
		w := 0
		for i := range ce.cmds {
			c := &ce.cmds[i]
			if c.Kind != KindWriteChunk {
				continue
			}
			if c.Inline != nil {
				w++ // its bytes came in the entry (decodeCached)
				continue
			}
			switch {
			case k >= len(segs):
				return fmt.Errorf("entry %d: WriteChunk %d has no payload segment", e.GetIndex(), w)
			case len(segs[k]) == 0:
				// The leader could not read the bytes back (peer.readBack):
				// none rather than wrong ones (writeMissing), with the
				// index of the block's delete if it knows one (gone.go).
				ce.segs[w] = nil
				if k < len(gone) && gone[k] != 0 {
					if ce.gone == nil {
						ce.gone = make([]uint64, len(ce.segs))
					}
					ce.gone[w] = gone[k]
				}
			case uint64(len(segs[k])) != c.WriteChunk.Length:
				return fmt.Errorf("entry %d: WriteChunk %d has a payload segment of %d bytes, want %d", e.GetIndex(), w, len(segs[k]), c.WriteChunk.Length)
			default:
				ce.segs[w] = segs[k]
			}
			w++
			k++
		}
		if old := g.cache[e.GetIndex()]; old != nil && old.term == ce.term && old.hasBytes() {
			continue
		}
		if e.GetIndex() >= g.payloadLow {
			g.cache[e.GetIndex()] = ce
		}
	}
	if k != len(segs) {
		return fmt.Errorf("%d payload segments for %d WriteChunk", len(segs), k)
	}
	return nil
}

// flushProposals puts the requests that arrived since the last turn into
// as few entries as the limits allow (the batch grows with the load):
// MaxCommandsPerEntry commands, maxEntryBytes of headers and
// maxRaftPayloadBytes of chunk bytes (one entry always fits one frame).
func (n *Node) flushProposals(g *group) {
	if len(g.queue) == 0 {
		return
	}
	q := g.queue
	g.queue = g.queue[:0:0]
	if !g.isLeader {
		lead := g.leader.Load()
		for _, p := range q {
			n.replyErr(p, transport.StatusNotLeader, fmt.Sprintf("node %d is not the leader of pipeline %d", n.cfg.ID, g.id), g.members[lead])
		}
		return
	}
	// The batch's commands are collected first and the entry built at
	// its exact size: appended to a growing slice, the copies of its
	// growth were 14 % of a leader's CPU at 4 KiB inline chunks.
	cmds := n.cmds[:0]
	var batch []*proposal
	entryBytes := 0 // the entry's size so far: version byte and commands
	payload := 0    // chunk bytes of the batch's payload segments
	propose := func() {
		if len(batch) == 0 {
			return
		}
		data := make([]byte, 0, entryBytes)
		for i := range cmds {
			data = AppendCommand(data, &cmds[i])
		}
		if len(data) != entryBytes {
			panic(fmt.Sprintf("pipeline: entry of %d bytes, sized at %d", len(data), entryBytes))
		}
		if err := g.rn.Propose(data); err != nil {
			for _, p := range batch {
				delete(g.pending, p.id)
				n.replyErr(p, transport.StatusUnavailable, "proposal dropped: "+err.Error(), "")
			}
		}
		clear(cmds) // the chunks' bytes are the entry's now, or dropped
		cmds, batch, entryBytes, payload = cmds[:0], nil, 0, 0
	}
	entryMax := n.entryBytesMax()
	for _, p := range q {
		// A small chunk travels in the entry; its command counts towards
		// the entry's size, which stays within one log record and one
		// frame header. Other chunks travel as payload segments; an
		// entry's segments fit one RaftMessage frame, so that a MsgApp
		// can always be split between entries.
		c := Command{Kind: p.kind} // its ProposalID (fixed size) is set below
		switch p.kind {
		case KindWriteChunk:
			c.WriteChunk = p.wc
			c.WriteChunk.RequestID = 0
			if len(p.payload) > 0 && len(p.payload) <= n.cfg.LogInlineMaxBytes {
				c.Inline = p.payload
			}
		case KindPutBlock:
			c.PutBlock = p.pb
			c.PutBlock.RequestID = 0
		case KindDeleteBlock, KindCloseContainer:
			c.Ref = p.ref
		}
		size := CommandBytes(&c)
		if c.Inline != nil && 1+size > entryMax {
			c.Inline = nil // too large for an entry of its own: a payload segment
			size = CommandBytes(&c)
		}
		if c.Inline != nil {
			if len(batch) > 0 && entryBytes+size > entryMax {
				propose()
			}
		} else {
			if len(batch) > 0 && payload+len(p.payload) > n.framePayloadBytes() {
				propose()
			}
			payload += len(p.payload)
		}
		n.propSeq++
		p.id = n.cfg.ID<<48 | n.propSeq&(1<<48-1)
		c.ProposalID = p.id
		if len(batch) == 0 {
			entryBytes = 1 // the version byte
		}
		entryBytes += size
		cmds = append(cmds, c)
		g.pending[p.id] = p
		batch = append(batch, p)
		if entryBytes >= maxEntryBytes || len(batch) >= MaxCommandsPerEntry {
			propose()
		}
	}
	propose()
	n.cmds = cmds
}

// entryBytesMax bounds the data of an entry into which this leader puts a
// chunk's bytes: one log record's payload, and one frame header's room for
// a MsgApp's entries. (A batch of header-only commands is cut at
// maxEntryBytes, after the command that reaches it, as before.)
func (n *Node) entryBytesMax() int {
	return min(n.wal.MaxPayloadBytes(), maxMsgEntriesBytes)
}

// onReady handles one Ready of a group: local appends first (they register
// the payloads this Ready's MsgApps carry), then applies, then the network.
func (n *Node) onReady(g *group) {
	rd := g.rn.Ready()
	if rd.SoftState != nil {
		was := g.isLeader
		g.isLeader = rd.SoftState.RaftState == raft.StateLeader
		g.leader.Store(rd.SoftState.Lead)
		if was && !g.isLeader {
			n.failPending(g, "leadership lost")
		}
		if g.leader.Load() != 0 {
			n.metrics.leaderChanges.Inc()
		}
		if g.isLeader && !was {
			st := g.rn.BasicStatus()
			n.log.Info("became leader", "pipeline", g.id, "term", st.GetTerm())
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		g.term.Store(rd.HardState.GetTerm())
	}
	if g.isLeader {
		var lo uint64 = math.MaxUint64
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id != n.cfg.ID {
				lo = min(lo, pr.Match)
			}
		})
		if lo == math.MaxUint64 {
			lo = 0
		}
		g.minMatch.Store(lo + 1)
	} else {
		g.minMatch.Store(0)
	}
	var appends []*appendJob
	for _, m := range rd.Messages {
		if m.GetTo() == raft.LocalAppendThread {
			appends = append(appends, n.newAppendJob(g, m))
		}
	}
	// The frames stepped since the last Ready: what raft took of them is
	// in this Ready's append, and their budget is released once it is
	// durable; nothing of them is kept without one.
	if len(g.leases) > 0 {
		if len(appends) > 0 {
			j := appends[len(appends)-1]
			j.leases = append(j.leases, g.leases...)
		} else {
			n.releaseLeases(g, g.leases)
		}
		g.leases = nil
	}
	for _, j := range appends {
		n.appendq.push(j)
	}
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
		case raft.LocalApplyThread:
			n.applyq.push(n.newApplyJob(g, m))
		default:
			n.send(g, m)
		}
	}
}

func (n *Node) failPending(g *group, why string) {
	lead := g.leader.Load()
	for id, p := range g.pending {
		delete(g.pending, id)
		n.replyErr(p, transport.StatusNotLeader, why, g.members[lead])
	}
}

func (n *Node) failAllPending() {
	for _, g := range n.order {
		for id, p := range g.pending {
			delete(g.pending, id)
			n.replyErr(p, transport.StatusUnavailable, "datanode stopping", "")
		}
		for _, p := range g.queue {
			n.replyErr(p, transport.StatusUnavailable, "datanode stopping", "")
		}
		g.queue = nil
	}
}

// stallWatchdog fails the node when an append or apply round has been
// running for longer than DiskStallThreshold (a hung write or fdatasync):
// the node stops serving and heartbeating, so that the meta service sees
// it go and closes its pipelines, instead of a replica that holds up its
// pipelines' acknowledgements forever while it looks healthy. It checks
// four times per threshold.
func (n *Node) stallWatchdog() {
	every := max(n.cfg.DiskStallThreshold/4, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			for _, w := range []struct {
				name  string
				since *atomic.Int64
			}{{"append", &n.appendSince}, {"apply", &n.applySince}} {
				s := w.since.Load()
				if s == 0 {
					continue
				}
				if d := now.Sub(time.Unix(0, s)); d > n.cfg.DiskStallThreshold {
					n.fail(fmt.Errorf("%w: the %s worker's round has run for %v (threshold %v): a write or fdatasync hangs", ErrDiskStall, w.name, d.Round(time.Millisecond), n.cfg.DiskStallThreshold))
					return
				}
			}
		}
	}
}
