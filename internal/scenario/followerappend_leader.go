package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/transport"
)

// The fake leader's raft identity. The follower's group was bootstrapped
// with a snapshot at index 1, term 1 (voters 1, 2, 3), so its log starts
// after index 1 and a fresh follower is at term 0: the leader sends at
// term 2, its first MsgApp after (index 1, term 1).
const (
	faLeaderID   = 1
	faFollowerID = 2
	faOtherID    = 3
	faGroupID    = 3 // its eager first campaigner (pipeline/node_groups.go) is node 1, not the follower
	faLeaderTerm = 2
	faSnapIndex  = 1
	faSnapTerm   = 1
)

// Limits of the fake leader.
const (
	// faTick is how often the leader's loop wakes up when nothing else
	// happens: to send a heartbeat when idle, check for a stall and print
	// progress.
	faTick = 250 * time.Millisecond
	// faHeartbeatInterval: a MsgHeartbeat goes out when nothing was sent
	// for this long.
	faHeartbeatInterval = time.Second
	// faMaxInboundConns bounds the connections the follower may open to
	// the leader's address (it dials node 1 and, were it to campaign, node
	// 3, both the leader).
	faMaxInboundConns = 16
	// faSendErrWait bounds the wait, after a write to the follower
	// failed, for the follower's own account of why (see sendFailed).
	faSendErrWait = 2 * time.Second
	// faMaxWindow bounds AppendEntries in flight.
	faMaxWindow = 1024
	// faMaxBatch bounds the WriteChunks of one AppendEntries (one entry:
	// pipeline.MaxCommandsPerEntry, less room for the DeleteBlocks).
	faMaxBatch = 1024
	// faMaxEntryBytes bounds the entry data of one AppendEntries (WriteChunk
	// headers with their checksums), well inside transport.MaxHeaderBytes.
	faMaxEntryBytes = 768 << 10
)

// leaderConfig is what the fake leader sends.
type leaderConfig struct {
	Messages      int64 // WriteChunks in total
	Batch         int   // WriteChunks per AppendEntries
	Chunk         []byte
	Checksums     []uint32
	BPC           uint32
	Window        int
	BlockSize     int64
	BlocksPerCont int
	RetainBytes   int64
	// Stall fails the run when no AppendEntries was acknowledged for this
	// long while some were in flight.
	Stall time.Duration
	// Progress receives a progress line per second (nil: none).
	Progress io.Writer
	Label    string
}

func (c leaderConfig) appendEntries() int64 {
	return (c.Messages + int64(c.Batch) - 1) / int64(c.Batch)
}

// leaderStats is the outcome of one leader run.
type leaderStats struct {
	Messages       int64
	AppendEntries  int64
	Bytes          int64
	Elapsed        time.Duration
	Latency        *bench.Latency // per AppendEntries round trip
	LastIndex      uint64
	Heartbeats     int64
	HeartbeatResps int64
	DeleteBlocks   int64
	Blocks         int64
	Containers     int64
	// CPU: this process (the played leader) and the follower during the
	// run.
	CPU *bench.CPUUse
}

// sentAE is an AppendEntries waiting for its acknowledgement.
type sentAE struct {
	last uint64 // index of its (last) entry
	at   time.Time
}

// ackTracker is shared by the leader's loop (which records what it sends)
// and the goroutines reading the follower's messages (which record what it
// acknowledges): an AppendEntries is done when the follower's
// acknowledged index reaches its last entry, and its round trip is timed
// at the moment the acknowledgement was read. All fields under mu.
type ackTracker struct {
	mu             sync.Mutex
	inflight       []sentAE // FIFO, ascending last
	acked          uint64   // highest index the follower acknowledged
	ackedAEs       int64
	lastAckAt      time.Time
	lat            *bench.Latency
	heartbeatResps int64
	err            error
	wake           chan struct{} // capacity 1: "something changed"
}

func newAckTracker() *ackTracker {
	return &ackTracker{lat: bench.NewLatency(), wake: make(chan struct{}, 1)}
}

func (a *ackTracker) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// sent records an AppendEntries about to be written.
func (a *ackTracker) sent(last uint64, at time.Time) {
	a.mu.Lock()
	a.inflight = append(a.inflight, sentAE{last: last, at: at})
	a.mu.Unlock()
}

// ack records that the follower has everything up to index durably.
func (a *ackTracker) ack(index uint64, at time.Time) {
	a.mu.Lock()
	if index > a.acked {
		a.acked = index
		a.lastAckAt = at
	}
	n := 0
	for n < len(a.inflight) && a.inflight[n].last <= a.acked {
		a.lat.Record(at.Sub(a.inflight[n].at))
		n++
	}
	if n > 0 {
		a.inflight = append(a.inflight[:0], a.inflight[n:]...)
		a.ackedAEs += int64(n)
	}
	a.mu.Unlock()
	if n > 0 {
		a.signal()
	}
}

func (a *ackTracker) heartbeatResp() {
	a.mu.Lock()
	a.heartbeatResps++
	a.mu.Unlock()
}

// fail records the first error.
func (a *ackTracker) fail(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
	a.signal()
}

type ackState struct {
	inflight  int
	acked     uint64
	ackedAEs  int64
	lastAckAt time.Time
	err       error
}

func (a *ackTracker) state() ackState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return ackState{inflight: len(a.inflight), acked: a.acked, ackedAEs: a.ackedAEs, lastAckAt: a.lastAckAt, err: a.err}
}

// blockRef names a block and the bytes written to it.
type blockRef struct {
	container, local uint64
	bytes            int64
}

// blockPlan places chunks: sequentially into blocks of blockSize bytes,
// blocksPerCont blocks per container (so that a container stays under the
// engine's size limit), and schedules the deletion of the oldest blocks
// once more than retain bytes are live. Local IDs are unique across
// containers.
type blockPlan struct {
	blockSize     int64
	blocksPerCont int
	retain        int64

	container, local uint64
	off              int64
	inContainer      int
	live             []blockRef // oldest first; the last is the current block
	liveBytes        int64
	blocks           int64
	containers       int64
}

func newBlockPlan(blockSize int64, blocksPerCont int, retain int64) *blockPlan {
	return &blockPlan{blockSize: blockSize, blocksPerCont: blocksPerCont, retain: retain}
}

// next returns where a chunk of n bytes goes.
func (p *blockPlan) next(n int64) (container, local uint64, off int64) {
	if len(p.live) == 0 || p.off+n > p.blockSize {
		if p.container == 0 || p.inContainer == p.blocksPerCont {
			p.container++
			p.containers++
			p.inContainer = 0
		}
		p.local++
		p.inContainer++
		p.blocks++
		p.off = 0
		p.live = append(p.live, blockRef{container: p.container, local: p.local})
	}
	off = p.off
	p.off += n
	p.live[len(p.live)-1].bytes += n
	p.liveBytes += n
	return p.container, p.local, off
}

// expire appends to dst the blocks to delete now: the oldest ones, never
// the current one, until at most retain bytes are live.
func (p *blockPlan) expire(dst []blockRef) []blockRef {
	for p.liveBytes > p.retain && len(p.live) > 1 {
		b := p.live[0]
		p.live = p.live[1:]
		p.liveBytes -= b.bytes
		dst = append(dst, b)
	}
	return dst
}

// leader is the fake raft leader: node 1 of group faGroupID at term
// faLeaderTerm, replicating WriteChunk entries to follower node 2.
type leader struct {
	cfg  leaderConfig
	out  *transport.Conn
	acks *ackTracker
	plan *blockPlan

	lastIndex, lastTerm uint64
	deletes             []blockRef
	entry               []byte
	payloads            [][]byte
	rm                  transport.RaftMessage
	heartbeats          int64
	deleteBlocks        int64
}

// leaderSession is the fake leader's network side: the connection it
// sends on and the goroutines reading the connections the follower opens
// to its listener. The follower stays connected until close, so that
// stopping the datanode finds it in its steady state (no reconnects).
type leaderSession struct {
	ctx     context.Context
	cancel  context.CancelFunc
	acks    *ackTracker
	ln      net.Listener
	out     *transport.Conn
	readers sync.WaitGroup
	stop    func() bool
}

// startLeader starts accepting the follower's connections on ln; out is
// the connection to the follower.
func startLeader(ctx context.Context, ln net.Listener, out *transport.Conn) *leaderSession {
	s := &leaderSession{acks: newAckTracker(), ln: ln, out: out}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.stop = context.AfterFunc(s.ctx, func() {
		closeQuietly(ln)
		closeQuietly(out)
	})
	s.readers.Add(1)
	go func() {
		defer s.readers.Done()
		acceptFollower(s.ctx, ln, s.acks, &s.readers)
	}()
	return s
}

// close closes every connection and waits for the reading goroutines.
func (s *leaderSession) close() {
	s.cancel()
	closeQuietly(s.ln)
	closeQuietly(s.out)
	s.readers.Wait()
}

// run replicates cfg.Messages WriteChunks to the follower and returns once
// every AppendEntries is acknowledged. procDone, when closed, means the
// follower's process has exited. One run per session.
func (s *leaderSession) run(cfg leaderConfig, procDone <-chan struct{}) (leaderStats, error) {
	l := &leader{
		cfg: cfg, out: s.out, acks: s.acks,
		plan:      newBlockPlan(cfg.BlockSize, cfg.BlocksPerCont, cfg.RetainBytes),
		lastIndex: faSnapIndex, lastTerm: faSnapTerm,
	}
	return l.run(s.ctx, procDone)
}

func (l *leader) run(ctx context.Context, procDone <-chan struct{}) (leaderStats, error) {
	total := l.cfg.appendEntries()
	var st leaderStats
	st.Latency = l.acks.lat
	ticker := time.NewTicker(faTick)
	defer ticker.Stop()
	var sentAEs, sentMsgs int64
	var start, lastSend time.Time
	lastProgress := time.Now()
	// Every iteration either sends an AppendEntries (at most total) or
	// waits for an acknowledgement, a tick or the end; ctx bounds the time.
	maxIter := 8*total + 1<<20
	for iter := int64(0); ; iter++ {
		if iter == maxIter {
			return st, fmt.Errorf("leader: loop bound %d reached with %d of %d AppendEntries acknowledged", maxIter, l.acks.state().ackedAEs, total)
		}
		s := l.acks.state()
		if s.err != nil {
			return st, s.err
		}
		if s.ackedAEs == total {
			st.Elapsed = s.lastAckAt.Sub(start)
			break
		}
		if sentAEs < total && s.inflight < l.cfg.Window {
			n := min(int64(l.cfg.Batch), l.cfg.Messages-sentMsgs)
			now := time.Now()
			if sentAEs == 0 {
				start = now
			}
			if err := l.sendAppend(int(n), s.acked, now); err != nil {
				return st, l.sendFailed(err)
			}
			sentAEs++
			sentMsgs += n
			lastSend = now
			continue
		}
		select {
		case <-l.acks.wake:
		case now := <-ticker.C:
			if now.Sub(lastSend) >= faHeartbeatInterval {
				if err := l.sendHeartbeat(s.acked); err != nil {
					return st, l.sendFailed(err)
				}
				lastSend = now
			}
			last := s.lastAckAt
			if last.IsZero() {
				last = start
			}
			if s.inflight > 0 && l.cfg.Stall > 0 && now.Sub(last) > l.cfg.Stall {
				return st, fmt.Errorf("leader: no acknowledgement from the follower for %v (index %d acknowledged, %d AppendEntries in flight, last sent index %d)", l.cfg.Stall, s.acked, s.inflight, l.lastIndex)
			}
			if l.cfg.Progress != nil && now.Sub(lastProgress) >= time.Second {
				el := now.Sub(start).Seconds()
				done := min(s.ackedAEs*int64(l.cfg.Batch), l.cfg.Messages)
				progressf(l.cfg.Progress, "\r\033[K%s %6.1fs  %d/%d messages  %.0f messages/s", l.cfg.Label, el, done, l.cfg.Messages, float64(done)/max(el, 1e-9))
				lastProgress = now
			}
		case <-procDone:
			return st, errors.New("leader: the follower's process exited during the run")
		case <-ctx.Done():
			return st, fmt.Errorf("leader: %w (%d of %d AppendEntries acknowledged)", context.Cause(ctx), l.acks.state().ackedAEs, total)
		}
	}
	if l.cfg.Progress != nil {
		progressf(l.cfg.Progress, "\r\033[K")
	}
	// Let the follower learn that everything is committed (it applies the
	// last deletions); no answer is awaited.
	final := l.acks.state()
	if err := l.sendHeartbeat(final.acked); err != nil {
		return st, err
	}
	st.Messages = sentMsgs
	st.AppendEntries = sentAEs
	st.Bytes = sentMsgs * int64(len(l.cfg.Chunk))
	st.LastIndex = l.lastIndex
	st.Heartbeats = l.heartbeats
	l.acks.mu.Lock()
	st.HeartbeatResps = l.acks.heartbeatResps
	l.acks.mu.Unlock()
	st.DeleteBlocks = l.deleteBlocks
	st.Blocks = l.plan.blocks
	st.Containers = l.plan.containers
	return st, nil
}

// sendFailed is the error of a run whose write to the follower failed
// (err): a follower that gives up (it campaigned, it rejected) says why on
// its own connection to the leader and then closes, and the leader's write
// may hit the closed connection before its readers have read that. So it
// waits, at most faSendErrWait, for the readers' verdict (they end when
// the follower's connections close) and puts it first.
func (l *leader) sendFailed(err error) error {
	bound := time.NewTimer(faSendErrWait)
	defer bound.Stop()
	for {
		if s := l.acks.state(); s.err != nil {
			return fmt.Errorf("%w (then %v)", s.err, err)
		}
		select {
		case <-l.acks.wake:
		case <-bound.C:
			return err
		}
	}
}

// sendAppend sends one MsgApp with one entry holding n WriteChunks (and
// the DeleteBlocks due), their chunk bytes as the frame's payload.
func (l *leader) sendAppend(n int, commit uint64, now time.Time) error {
	data := l.entry[:0]
	payloads := l.payloads[:0]
	chunkLen := int64(len(l.cfg.Chunk))
	for range n {
		c, b, off := l.plan.next(chunkLen)
		data = pipeline.AppendCommand(data, &pipeline.Command{
			Kind: pipeline.KindWriteChunk,
			WriteChunk: transport.WriteChunk{
				PipelineID: faGroupID, ContainerID: c, LocalID: b,
				Offset: uint64(off), Length: uint64(chunkLen),
				BytesPerChecksum: l.cfg.BPC, Checksums: l.cfg.Checksums,
			},
		})
		payloads = append(payloads, l.cfg.Chunk)
	}
	// Blocks past the retention go in this entry; the follower deletes
	// them once it learns the entry is committed.
	l.deletes = l.plan.expire(l.deletes[:0])
	for _, d := range l.deletes {
		data = pipeline.AppendCommand(data, &pipeline.Command{
			Kind: pipeline.KindDeleteBlock,
			Ref:  transport.GetBlock{PipelineID: faGroupID, ContainerID: d.container, LocalID: d.local},
		})
		l.deleteBlocks++
	}
	l.entry, l.payloads = data, payloads

	index := l.lastIndex + 1
	m := &raftpb.Message{
		Type:    raftpb.MessageType_MsgApp.Enum(),
		To:      proto.Uint64(faFollowerID),
		From:    proto.Uint64(faLeaderID),
		Term:    proto.Uint64(faLeaderTerm),
		LogTerm: proto.Uint64(l.lastTerm),
		Index:   proto.Uint64(l.lastIndex),
		Commit:  proto.Uint64(commit),
		Entries: []*raftpb.Entry{{
			Term:  proto.Uint64(faLeaderTerm),
			Index: proto.Uint64(index),
			Type:  raftpb.EntryType_EntryNormal.Enum(),
			Data:  data,
		}},
	}
	l.rm.GroupID = faGroupID
	l.rm.Message = m
	l.rm.SetPayloads(payloads)
	l.acks.sent(index, now)
	if err := l.out.Send(&l.rm, payloads...); err != nil {
		return fmt.Errorf("leader: send MsgApp for index %d: %w", index, err)
	}
	l.lastIndex, l.lastTerm = index, faLeaderTerm
	return nil
}

// sendHeartbeat sends a MsgHeartbeat; commit must not pass what the
// follower acknowledged (raft's leader sends min(match, committed)).
func (l *leader) sendHeartbeat(commit uint64) error {
	m := &raftpb.Message{
		Type:   raftpb.MessageType_MsgHeartbeat.Enum(),
		To:     proto.Uint64(faFollowerID),
		From:   proto.Uint64(faLeaderID),
		Term:   proto.Uint64(faLeaderTerm),
		Commit: proto.Uint64(commit),
	}
	rm := transport.RaftMessage{GroupID: faGroupID, Message: m}
	if err := l.out.Send(&rm); err != nil {
		return fmt.Errorf("leader: send MsgHeartbeat: %w", err)
	}
	l.heartbeats++
	return nil
}

// acceptFollower accepts the follower's connections to the leader's
// address (at most faMaxInboundConns) and reads each on its own goroutine
// until ln is closed.
func acceptFollower(ctx context.Context, ln net.Listener, acks *ackTracker, readers *sync.WaitGroup) {
	for n := 0; ; n++ {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				acks.fail(fmt.Errorf("leader: accept: %w", err))
			}
			return
		}
		if n >= faMaxInboundConns {
			closeQuietly(nc)
			acks.fail(fmt.Errorf("leader: the follower opened more than %d connections", faMaxInboundConns))
			return
		}
		conn := transport.NewConn(nc, transport.ConnConfig{})
		stop := context.AfterFunc(ctx, func() { closeQuietly(conn) })
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer stop()
			defer closeQuietly(conn)
			readFollower(ctx, conn, acks)
		}()
	}
}

// readFollower reads raft messages from one connection of the follower.
// Its loop ends at the end of the stream or on the first error; the
// connection is closed when the run ends.
func readFollower(ctx context.Context, conn *transport.Conn, acks *ackTracker) {
	var rm transport.RaftMessage
	for {
		f, err := conn.ReadFrame()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, io.EOF) {
				acks.fail(fmt.Errorf("leader: read from the follower (%s): %w", conn.RemoteAddr(), err))
			}
			return
		}
		now := time.Now()
		if f.Type != transport.TypeRaftMessage {
			acks.fail(fmt.Errorf("leader: the follower sent a %s frame, want RaftMessage", f.Type))
			return
		}
		if err := f.Decode(&rm); err != nil {
			acks.fail(fmt.Errorf("leader: decode the follower's raft message: %w", err))
			return
		}
		if err := handleFollowerMessage(&rm, now, acks); err != nil {
			acks.fail(err)
			return
		}
	}
}

// handleFollowerMessage interprets one message of the follower.
func handleFollowerMessage(rm *transport.RaftMessage, now time.Time, acks *ackTracker) error {
	m := rm.Message
	if rm.GroupID != faGroupID {
		return fmt.Errorf("leader: the follower sent a message for group %d, want %d", rm.GroupID, faGroupID)
	}
	if m.GetTerm() > faLeaderTerm {
		return fmt.Errorf("leader: the follower sent %s at term %d, past the leader's term %d (did its election timeout fire?)", m.GetType(), m.GetTerm(), faLeaderTerm)
	}
	switch m.GetType() {
	case raftpb.MessageType_MsgAppResp:
		if m.GetReject() {
			return fmt.Errorf("leader: the follower rejected the MsgApp after index %d (reject hint %d, log term %d): its log does not start after the bootstrap snapshot (index %d, term %d)", m.GetIndex(), m.GetRejectHint(), m.GetLogTerm(), faSnapIndex, faSnapTerm)
		}
		if m.GetTerm() == faLeaderTerm {
			acks.ack(m.GetIndex(), now)
		}
	case raftpb.MessageType_MsgHeartbeatResp:
		acks.heartbeatResp()
	case raftpb.MessageType_MsgVote, raftpb.MessageType_MsgPreVote:
		return fmt.Errorf("leader: the follower campaigned (%s to node %d at term %d): its election timeout fired", m.GetType(), m.GetTo(), m.GetTerm())
	default:
		return fmt.Errorf("leader: unexpected %s from the follower (node %d to %d, term %d)", m.GetType(), m.GetFrom(), m.GetTo(), m.GetTerm())
	}
	return nil
}
