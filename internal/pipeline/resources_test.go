package pipeline

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/wal"
)

// startLone starts one node with cfg's limits, serving no pipeline, or
// with solo the one-member pipeline 1 (it waits until the node leads it).
func startLone(t *testing.T, cfg Config, solo bool) *Node {
	t.Helper()
	dir := t.TempDir()
	eng, err := engine.Open(engine.Config{DataDirs: []string{dir + "/data"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	wl, err := wal.Open(wal.Config{Dir: dir + "/log", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ID, cfg.Listener, cfg.Engine, cfg.Log, cfg.Logger = 1, ln, eng, wl, quiet
	if solo {
		cfg.Pipelines = []PipelineConfig{{ID: 1, Members: []Member{{ID: 1, Addr: ln.Addr().String()}}}}
		cfg.TickInterval = 10 * time.Millisecond
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closeT(t, n)
		closeT(t, wl)
		closeT(t, eng)
	})
	if solo {
		deadline := time.Now().Add(waitBound)
		for l, _ := n.Leader(1); l != 1; l, _ = n.Leader(1) {
			if time.Now().After(deadline) {
				t.Fatal("the node does not lead its one-member pipeline")
			}
			time.Sleep(time.Millisecond)
		}
	}
	return n
}

// maxSocketBufferBytes is the most the kernel may buffer on a loopback
// connection between a writer and a reader that does not read: the
// writer's send buffer at its largest plus the reader's receive buffer.
func maxSocketBufferBytes(t *testing.T, rcvbuf int) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err != nil {
		return 64<<20 + 2*rcvbuf // not Linux: generous
	}
	f := strings.Fields(string(b))
	w, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatal(err)
	}
	return w + 2*rcvbuf // the kernel doubles SO_RCVBUF
}

// TestStalledClientDoesNotDelayOthers: a client that never reads its
// socket, sent more answers than the kernel can buffer for it, does not
// hold up another client's answer (each connection has its own reply
// writer; one reply writer for all used to block on the stalled socket
// for its 30 s write timeout).
func TestStalledClientDoesNotDelayOthers(t *testing.T) {
	n := startLone(t, Config{}, false)
	const rcvbuf = 4 << 10
	nc, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Closed already when the node hung up on it (stalled's send failed).
		if err := nc.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	}()
	if err := nc.(*net.TCPConn).SetReadBuffer(rcvbuf); err != nil {
		t.Fatal(err)
	}
	// Every PutBlock to a pipeline not served here is answered NOT_FOUND
	// (a reply of more than 40 bytes): enough of them to fill the
	// stalled client's socket buffers several times over.
	stalled := transport.NewConn(nc, transport.ConnConfig{})
	var enc transport.Encoder
	probe := &transport.Response{RequestID: 1, Status: transport.StatusNotFound, Message: "pipeline 99 is not served here"}
	if err := enc.Append(probe); err != nil {
		t.Fatal(err)
	}
	replyBytes := 0
	for _, b := range enc.Buffers() {
		replyBytes += len(b)
	}
	enc.Reset()
	requests := 2*maxSocketBufferBytes(t, rcvbuf)/replyBytes + 1
	sent := 0
	var sendErr error
	for i := 1; i <= requests && sendErr == nil; i++ {
		if err := enc.Append(&transport.PutBlock{RequestID: uint64(i), PipelineID: 99}); err != nil {
			t.Fatal(err)
		}
		if enc.Frames() == 1024 || i == requests {
			if sendErr = stalled.SendBatch(&enc); sendErr == nil {
				sent = i
			}
			enc.Reset()
		}
	}
	// Barrier: every one of those answers has been handed to the reply
	// path (the stalled client's queue, or its socket), unless the node
	// closed the stalled connection first (its reply queue overflowed).
	if sendErr == nil {
		notFound := n.metrics.proposals.WithLabelValues("PutBlock", "NOT_FOUND")
		deadline := time.Now().Add(30 * time.Second)
		for counterValue(notFound) < float64(sent) && counterValue(n.metrics.replyOverflows) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%v of %d requests answered", counterValue(notFound), sent)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("%d requests sent (send error: %v), %d reply queue overflows", sent, sendErr, int(counterValue(n.metrics.replyOverflows)))
	// Another client is answered (not after the stalled one's write
	// timeout: well within it).
	cl, err := transport.DialClient(context.Background(), n.Addr(), transport.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), transport.DefaultWriteTimeout/3)
	defer cancel()
	_, err = cl.Call(ctx, &transport.PutBlock{RequestID: 1, PipelineID: 98})
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusNotFound {
		t.Fatalf("a well-behaved client's request behind a stalled client: %v, want its NOT_FOUND answer", err)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestCatchUpReadBackBoundedByBytes: a catch-up MsgApp naming far more
// chunk bytes than maxPeerBatchBytes, none of them cached, is read back
// and sent part by part: the bytes read back and not yet written never
// exceed maxPeerBatchBytes plus one frame's. (The peer writer used to read
// back every missing chunk of every queued message before one write.)
func TestCatchUpReadBackBoundedByBytes(t *testing.T) {
	const seg = 16 << 20
	const entries = 12 // 192 MiB
	zeros := make([]byte, seg)
	held, maxHeld := 0, 0
	p := &peer{read: func(w *transport.WriteChunk) []byte {
		held += int(w.Length)
		maxHeld = max(maxHeld, held)
		return zeros[:w.Length]
	}}
	m := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Term: proto.Uint64(3), LogTerm: proto.Uint64(3), Index: proto.Uint64(10), Commit: proto.Uint64(30)}
	om := &outMsg{group: 7, msg: m}
	for i := uint64(11); i < 11+entries; i++ {
		wc := transport.WriteChunk{ContainerID: 1, LocalID: i, Length: seg}
		data := AppendCommand(nil, &Command{Kind: KindWriteChunk, WriteChunk: wc})
		m.Entries = append(m.Entries, &raftpb.Entry{Term: proto.Uint64(3), Index: proto.Uint64(i), Type: raftpb.EntryType_EntryNormal.Enum(), Data: data})
		om.miss = append(om.miss, missing{seg: len(om.segs), wc: wc})
		om.segs = append(om.segs, nil)
		om.perEntry = append(om.perEntry, 1)
	}
	var enc transport.Encoder
	sent, flushes := 0, 0
	flush := func() error {
		for _, f := range enc.Buffers() {
			sent += len(f)
		}
		held = 0 // written: the read-back buffers are free
		flushes++
		enc.Reset()
		return nil
	}
	if err := p.encode(&enc, om, flush); err != nil {
		t.Fatal(err)
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	if limit := maxPeerBatchBytes + maxRaftPayloadBytes; maxHeld > limit {
		t.Fatalf("%d bytes read back before a write, want at most %d", maxHeld, limit)
	}
	if sent < entries*seg || flushes < 2 {
		t.Fatalf("%d bytes sent in %d writes", sent, flushes)
	}
}

// TestPayloadAdmittedBeforeAllocation: a flood of large frames — client
// writes and raft messages, each stalled after its header so that its
// payload stays held — allocates no more than the two budgets: a frame
// beyond them waits for admission before its buffer exists (it used to be
// allocated as soon as its header was read, and raft payloads had no
// budget). Closing the connections gives every admitted byte back.
func TestPayloadAdmittedBeforeAllocation(t *testing.T) {
	const (
		frameBytes  = 8 << 20
		limitBytes  = 4 * frameBytes
		framesEach  = 16 // per kind: 128 MiB each, 4× the budget
		slackBytes  = 16 << 20
		waitSeconds = 30
	)
	n := startLone(t, Config{MaxInflightPayloadBytes: limitBytes, MaxInflightRaftPayloadBytes: limitBytes}, true)
	payload := make([]byte, frameBytes)
	header := func(m transport.Message) []byte {
		var e transport.Encoder
		if err := e.Append(m, payload); err != nil {
			t.Fatal(err)
		}
		var out []byte
		for _, b := range e.Buffers() {
			out = append(out, b...)
		}
		return out[:len(out)-frameBytes]
	}
	wc := header(&transport.WriteChunk{RequestID: 1, PipelineID: 1, Length: frameBytes,
		BytesPerChecksum: engine.DefaultBytesPerChecksum, Checksums: make([]uint32, engine.PieceCount(frameBytes, engine.DefaultBytesPerChecksum))})
	data := AppendCommand(nil, &Command{Kind: KindWriteChunk, WriteChunk: transport.WriteChunk{ContainerID: 1, LocalID: 1, Length: frameBytes}})
	// Of the group's current term: a MsgApp of an older one is dropped
	// unread (raftRoutable).
	_, term := n.Leader(1)
	rm := &transport.RaftMessage{GroupID: 1, Message: &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(1), From: proto.Uint64(2),
		Term: proto.Uint64(max(term, 1)), LogTerm: proto.Uint64(1), Index: proto.Uint64(1), Commit: proto.Uint64(1),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(1), Index: proto.Uint64(2), Type: raftpb.EntryType_EntryNormal.Enum(), Data: data}}}}
	rm.SetPayloads([][]byte{payload})
	raft := header(rm)
	payload = nil

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			// Closed already when the test got to its end.
			if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				t.Errorf("close: %v", err)
			}
		}
	}()
	for i := 0; i < framesEach; i++ {
		for _, h := range [][]byte{wc, raft} {
			c, err := net.Dial("tcp", n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := c.Write(h); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Barrier: every frame's header has been read, and its payload is
	// admitted (held) or waiting for admission.
	settled := func(b *byteBudget) bool {
		used, _, waiting := b.stats()
		return int(used/frameBytes)+waiting == framesEach
	}
	deadline := time.Now().Add(waitSeconds * time.Second)
	for !settled(n.inflight) || !settled(n.raftBuf) {
		if time.Now().After(deadline) {
			t.Fatalf("frames not all read: budgets %+v", n.Budgets())
		}
		time.Sleep(time.Millisecond)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	st := n.Budgets()
	t.Logf("heap grew %d MiB for %d frames of %d MiB; budgets %+v", grew>>20, 2*framesEach, frameBytes>>20, st)
	if grew > 2*limitBytes+slackBytes {
		t.Fatalf("heap grew %d MiB, want at most the budgets (2 × %d MiB) + %d MiB", grew>>20, limitBytes>>20, slackBytes>>20)
	}
	if st.ClientPeakBytes > limitBytes || st.RaftPeakBytes > limitBytes {
		t.Fatalf("budget exceeded: %+v", st)
	}
	// Every connection closes mid-frame: every admission is given back.
	for _, c := range conns {
		closeT(t, c)
	}
	for st := n.Budgets(); st.ClientBytes != 0 || st.RaftBytes != 0; st = n.Budgets() {
		if time.Now().After(deadline) {
			t.Fatalf("admissions not given back after the connections closed: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSmallBudgetsReplicate: with both budgets a few chunks small, writes
// from several clients at once still commit on every replica (a follower's
// raft budget is released once its append is durable, whatever its own
// client writes hold), and once they are answered every admitted byte is
// given back on every node.
func TestSmallBudgetsReplicate(t *testing.T) {
	const chunk = 256 << 10
	nodes, _ := startClusterWith(t, func(tn *testNode) { tn.budget = 4 * chunk })
	leader := waitLeader(t, nodes)
	var wg sync.WaitGroup
	for b := uint64(1); b <= 4; b++ {
		cl := dial(t, leader.addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			writeChunks(t, cl, b, 0, 16, chunk)
		}()
	}
	wg.Wait()
	for _, tn := range nodes {
		for b := uint64(1); b <= 4; b++ {
			readBack(t, tn, b, 16*chunk)
		}
	}
	deadline := time.Now().Add(waitBound)
	for _, tn := range nodes {
		for st := tn.node.Budgets(); st.ClientBytes != 0 || st.RaftBytes != 0; st = tn.node.Budgets() {
			if time.Now().After(deadline) {
				t.Fatalf("node %d holds admitted bytes after every write was answered: %+v", tn.id, st)
			}
			time.Sleep(time.Millisecond)
		}
		st := tn.node.Budgets()
		if tn != leader && st.RaftPeakBytes == 0 {
			t.Fatalf("follower %d admitted no raft payload: %+v", tn.id, st)
		}
		if st.ClientPeakBytes > 4*chunk || st.RaftPeakBytes > 4*chunk {
			t.Fatalf("node %d: budget exceeded: %+v", tn.id, st)
		}
	}
}

// TestRefusedPayloadSkipped: a write to a pipeline not served here, or not
// led here, and a raft message of a group not served here, are answered
// (or dropped) without their payload being admitted or allocated: a flood
// of them costs no budget. And a write to a served pipeline still is.
func TestRefusedPayloadSkipped(t *testing.T) {
	nodes, _ := startCluster(t)
	leader := waitLeader(t, nodes)
	var follower *testNode
	for _, tn := range nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	data := chunkData(1, 0, 1<<20)
	sums := engine.ComputeChecksums(nil, data, bpc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := dial(t, follower.addr)
	for _, tc := range []struct {
		pipeline uint64
		status   transport.Status
		leader   string
	}{{1, transport.StatusNotLeader, leader.addr}, {77, transport.StatusNotFound, ""}} {
		_, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: tc.pipeline, ContainerID: 5, LocalID: 1, Length: uint64(len(data)), BytesPerChecksum: bpc, Checksums: sums}, data)
		var se *transport.StatusError
		if !errors.As(err, &se) || se.Status != tc.status || se.Leader != tc.leader {
			t.Fatalf("write to pipeline %d on a follower: %v, want %v naming %q", tc.pipeline, err, tc.status, tc.leader)
		}
	}
	if st := follower.node.Budgets(); st.ClientPeakBytes != 0 {
		t.Fatalf("refused writes were admitted: %+v", st)
	}
	// The leader refuses a malformed chunk write (a checksum missing)
	// from its header, and takes a good one (admitted).
	lc := dial(t, leader.addr)
	_, err := lc.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: 1, Length: uint64(len(data)), BytesPerChecksum: bpc, Checksums: sums[1:]}, data)
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusInvalid {
		t.Fatalf("malformed chunk write: %v, want INVALID", err)
	}
	if _, err := lc.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: 1, Length: uint64(len(data)), BytesPerChecksum: bpc, Checksums: sums}, data); err != nil {
		t.Fatal(err)
	}
	if st := leader.node.Budgets(); st.ClientPeakBytes != int64(len(data)) {
		t.Fatalf("leader budgets %+v, want one admitted write of %d bytes", st, len(data))
	}
}

// TestStaleTermPayloadSkipped: a MsgApp of a term older than its group's
// (raft rejects it whatever it carries) has its payload dropped unread:
// no budget is taken for it. Before, such frames were admitted and
// allocated, so a flood of them held the raft budget.
func TestStaleTermPayloadSkipped(t *testing.T) {
	n := startLone(t, Config{}, true)
	deadline := time.Now().Add(waitBound)
	for {
		if l, term := n.Leader(1); l == 1 && term >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lone node did not lead its pipeline at term 2 or later")
		}
		time.Sleep(time.Millisecond)
	}
	_, term := n.Leader(1)
	const frameBytes = 8 << 20
	payload := make([]byte, frameBytes)
	c := sendMsgApp(t, n.Addr(), term-1, 1, transport.WriteChunk{ContainerID: 1, LocalID: 1, Length: frameBytes}, 0, payload)
	defer closeT(t, c)
	for testCounter(t, n.metrics.staleRaftPayloads) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stale MsgApp's payload was not dropped")
		}
		time.Sleep(time.Millisecond)
	}
	if st := n.Budgets(); st.RaftPeakBytes != 0 {
		t.Fatalf("raft budget peak %d bytes: the stale payload was admitted", st.RaftPeakBytes)
	}
}

// sendMsgApp sends node addr, as member 2 at term, a MsgApp of one
// WriteChunk entry (index 2, term entryTerm, after the bootstrap entry)
// proposed by node proposer, with payload as its chunk bytes; it returns
// the connection (the caller closes it).
func sendMsgApp(t *testing.T, addr string, term, entryTerm uint64, wc transport.WriteChunk, proposer uint64, payload []byte) net.Conn {
	t.Helper()
	data := AppendCommand(nil, &Command{Kind: KindWriteChunk, ProposalID: proposer << 48, WriteChunk: wc})
	rm := &transport.RaftMessage{GroupID: 1, Message: &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(1), From: proto.Uint64(2),
		Term: proto.Uint64(term), LogTerm: proto.Uint64(1), Index: proto.Uint64(1), Commit: proto.Uint64(1),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(entryTerm), Index: proto.Uint64(2), Type: raftpb.EntryType_EntryNormal.Enum(), Data: data}}}}
	rm.SetPayloads([][]byte{payload})
	var e transport.Encoder
	if err := e.Append(rm, payload); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range e.Buffers() {
		if _, err := c.Write(b); err != nil {
			closeT(t, c)
			t.Fatal(err)
		}
	}
	return c
}
