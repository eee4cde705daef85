package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// fakePipeline is a pipeline of fake datanodes served by transport.Server on
// 127.0.0.1: the leader stores chunks in a map shared by all members (reads
// are served by any member), followers answer NotLeader. Its knobs let a
// test script the leader's answers.
type fakePipeline struct {
	t     *testing.T
	nodes []*fakeNode

	mu          sync.Mutex
	leader      int  // index of the leader; -1: none
	hint        bool // followers name the leader in NotLeader
	unavailable int  // the leader answers Unavailable this many more times
	final       transport.Status
	corruptRead bool
	chunks      map[chunkKey][]byte
	blocks      map[BlockID]transport.BlockData
	// arrivals lists the WriteChunks the leader received, in the order
	// it handled them.
	arrivals []arrival
}

type arrival struct {
	conn *transport.Conn
	key  chunkKey
}

type chunkKey struct {
	b   BlockID
	off uint64
}

type fakeNode struct {
	p      *fakePipeline
	index  int
	addr   string
	srv    *transport.Server
	silent atomic.Bool // accept frames, never answer
	conns  atomic.Int64
	frames atomic.Int64
	down   atomic.Bool
}

func newFakePipeline(t *testing.T, n int) *fakePipeline {
	t.Helper()
	return newFakePipelineConn(t, n, transport.ConnConfig{})
}

// newFakePipelineConn is newFakePipeline whose servers' connections have
// configuration cc.
func newFakePipelineConn(t *testing.T, n int, cc transport.ConnConfig) *fakePipeline {
	t.Helper()
	p := &fakePipeline{t: t, leader: 0, hint: true, chunks: map[chunkKey][]byte{}, blocks: map[BlockID]transport.BlockData{}}
	for i := range n {
		nd := &fakeNode{p: p, index: i}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd.addr = l.Addr().String()
		nd.srv = transport.NewServer(transport.ServerConfig{
			Handler: nd.handle,
			Conn:    cc,
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		served := make(chan error, 1)
		go func() { served <- nd.srv.Serve(countingListener{l, &nd.conns}) }()
		p.nodes = append(p.nodes, nd)
		t.Cleanup(func() {
			testutil.CloseT(t, nd.srv) // a second Close (after kill) is nil
			if err := <-served; !errors.Is(err, transport.ErrServerClosed) {
				t.Errorf("fake node %d: Serve: %v", i, err)
			}
		})
	}
	return p
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func (p *fakePipeline) addrs() []string {
	var out []string
	for _, nd := range p.nodes {
		out = append(out, nd.addr)
	}
	return out
}

// set changes the pipeline's knobs under its lock.
func (p *fakePipeline) set(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

func (p *fakePipeline) setLeader(i int) {
	p.mu.Lock()
	p.leader = i
	p.mu.Unlock()
}

// kill closes node i's server: its connections break, dials are refused.
func (p *fakePipeline) kill(i int) {
	p.nodes[i].down.Store(true)
	testutil.CloseT(p.t, p.nodes[i].srv)
}

func (nd *fakeNode) handle(ctx context.Context, c *transport.Conn, f transport.Frame) (transport.Message, []byte) {
	nd.frames.Add(1)
	if nd.silent.Load() {
		return nil, nil
	}
	p := nd.p
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &transport.Response{}
	notLeader := func() (transport.Message, []byte) {
		resp.Status = transport.StatusNotLeader
		if p.hint && p.leader >= 0 {
			resp.Leader = p.nodes[p.leader].addr
		}
		return resp, nil
	}
	leaderChecks := func() bool {
		switch {
		case p.leader != nd.index:
			return false
		case p.unavailable > 0:
			p.unavailable--
			resp.Status = transport.StatusUnavailable
			return false
		case p.final != transport.StatusOK:
			resp.Status = p.final
			return false
		}
		return true
	}
	switch f.Type {
	case transport.TypeWriteChunk:
		var m transport.WriteChunk
		if err := f.Decode(&m); err != nil {
			p.t.Errorf("decode: %v", err)
			return nil, nil
		}
		resp.RequestID = m.RequestID
		if p.leader != nd.index {
			return notLeader()
		}
		if !leaderChecks() {
			return resp, nil
		}
		if m.PipelineID != 7 {
			resp.Status = transport.StatusInvalid
			return resp, nil
		}
		if got := engine.ComputeChecksums(nil, f.Payload, m.BytesPerChecksum); fmt.Sprint(got) != fmt.Sprint(m.Checksums) {
			resp.Status = transport.StatusChecksumMismatch
			return resp, nil
		}
		k := chunkKey{BlockID{Container: m.ContainerID, Local: m.LocalID}, m.Offset}
		p.chunks[k] = bytes.Clone(f.Payload)
		p.arrivals = append(p.arrivals, arrival{c, k})
		return resp, nil
	case transport.TypePutBlock:
		var m transport.PutBlock
		if err := f.Decode(&m); err != nil {
			p.t.Errorf("decode: %v", err)
			return nil, nil
		}
		resp.RequestID = m.RequestID
		if p.leader != nd.index {
			return notLeader()
		}
		if !leaderChecks() {
			return resp, nil
		}
		p.blocks[BlockID{Container: m.Block.ContainerID, Local: m.Block.LocalID}] = cloneBlock(m.Block)
		return resp, nil
	case transport.TypeReadChunk:
		var m transport.ReadChunk
		if err := f.Decode(&m); err != nil {
			p.t.Errorf("decode: %v", err)
			return nil, nil
		}
		resp.RequestID = m.RequestID
		data, ok := p.chunks[chunkKey{BlockID{Container: m.ContainerID, Local: m.LocalID}, m.Offset}]
		if !ok || uint64(len(data)) != m.Length {
			resp.Status = transport.StatusNotFound
			return resp, nil
		}
		resp.Offset = m.Offset
		resp.BytesPerChecksum = 512
		resp.Checksums = engine.ComputeChecksums(nil, data, 512)
		if p.corruptRead {
			resp.Checksums[0] ^= 1
		}
		return resp, data
	case transport.TypeGetBlock:
		var m transport.GetBlock
		if err := f.Decode(&m); err != nil {
			p.t.Errorf("decode: %v", err)
			return nil, nil
		}
		resp.RequestID = m.RequestID
		bd, ok := p.blocks[BlockID{Container: m.ContainerID, Local: m.LocalID}]
		if !ok {
			resp.Status = transport.StatusNotFound
			return resp, nil
		}
		resp.Block, resp.HasBlock = bd, true
		return resp, nil
	}
	resp.Status = transport.StatusUnsupported
	return resp, nil
}

func quietOptions() Options {
	return Options{
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		MinBackoff:     time.Millisecond,
		MaxBackoff:     5 * time.Millisecond,
		AttemptTimeout: 5 * time.Second,
		RetryTimeout:   20 * time.Second,
	}
}

func newTestClient(t *testing.T, addrs []string, o Options) *Client {
	t.Helper()
	c, err := New(addrs, 7, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, c) })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWriteFollowsRedirectAndRemembersLeader(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.setLeader(2)
	c := newTestClient(t, p.addrs(), quietOptions())
	ctx := testCtx(t)
	data := []byte("hello, pipeline")
	ci, err := c.WriteChunk(ctx, BlockID{Container: 1, Local: 1}, 0, data)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Length != uint64(len(data)) || len(ci.Checksums) != 1 || ci.Checksums[0] != engine.CRC32C(data) {
		t.Fatalf("chunk info %+v", ci)
	}
	if got := c.Leader(); got != p.nodes[2].addr {
		t.Fatalf("leader %q, want %q", got, p.nodes[2].addr)
	}
	if st := c.Stats(); st.Redirects != 1 {
		t.Fatalf("stats %+v, want one redirect", st)
	}
	before := p.nodes[0].frames.Load()
	for i := range 10 {
		if _, err := c.WriteChunk(ctx, BlockID{Container: 1, Local: 1}, uint64(len(data)*(i+1)), data); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.nodes[0].frames.Load(); n != before {
		t.Fatalf("writes went to the follower after the leader was known (%d frames)", n-before)
	}
	if st := c.Stats(); st.Redirects != 1 || st.Ops != 11 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNoLeaderHintTriesOtherMembers(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.set(func() { p.hint = false })
	p.setLeader(1)
	c := newTestClient(t, p.addrs(), quietOptions())
	if _, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if c.Leader() != p.nodes[1].addr {
		t.Fatalf("leader %q", c.Leader())
	}
	if st := c.Stats(); st.NoLeader != 1 {
		t.Fatalf("stats %+v, want one NotLeader without a hint", st)
	}
}

// A pipeline that elects no leader (a majority of it down) is given up
// after LeaderlessTimeout, with ErrNoLeader, not waited on for the whole
// RetryTimeout; the caller moves to another pipeline.
func TestWriteWithoutLeaderGivesUpWithErrNoLeader(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.setLeader(-1)
	p.kill(0)
	o := quietOptions()
	o.MaxAttempts = MaxMaxAttempts
	o.RetryTimeout = time.Hour
	o.LeaderlessTimeout = 50 * time.Millisecond
	c := newTestClient(t, p.addrs(), o)
	_, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x"))
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("err %v, want ErrNoLeader", err)
	}
	if st := c.Stats(); st.Attempts >= MaxMaxAttempts {
		t.Fatalf("stats %+v: the leaderless bound did not stop it", st)
	}
	// A leader elected meanwhile is found: the bound counts from an
	// operation's own first failure.
	p.setLeader(2)
	if _, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
}

func TestUnavailableIsRetriedThenSucceeds(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.set(func() { p.unavailable = 5 })
	c := newTestClient(t, p.addrs(), quietOptions())
	if err := c.PutBlock(testCtx(t), transport.BlockData{ContainerID: 1, LocalID: 2, BytesPerChecksum: 512}, ""); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Unavailable != 5 {
		t.Fatalf("stats %+v, want 5 unavailable", st)
	}
	bd, err := c.GetBlock(testCtx(t), p.nodes[1].addr, BlockID{Container: 1, Local: 2})
	if err != nil {
		t.Fatal(err)
	}
	if bd.ContainerID != 1 || bd.LocalID != 2 {
		t.Fatalf("block %+v", bd)
	}
}

func TestAttemptsAreBounded(t *testing.T) {
	p := newFakePipeline(t, 1)
	p.set(func() { p.unavailable = 1 << 30 })
	o := quietOptions()
	o.MaxAttempts = 7
	c := newTestClient(t, p.addrs(), o)
	_, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x"))
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusUnavailable {
		t.Fatalf("err %v, want Unavailable", err)
	}
	if st := c.Stats(); st.Attempts != 7 {
		t.Fatalf("stats %+v, want 7 attempts", st)
	}
}

func TestRetryTimeoutBoundsAnOperation(t *testing.T) {
	p := newFakePipeline(t, 1)
	p.set(func() { p.unavailable = 1 << 30 })
	o := quietOptions()
	o.MaxAttempts = MaxMaxAttempts
	o.RetryTimeout = 50 * time.Millisecond
	c := newTestClient(t, p.addrs(), o)
	_, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x"))
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusUnavailable {
		t.Fatalf("err %v, want Unavailable", err)
	}
	if st := c.Stats(); st.Attempts >= MaxMaxAttempts {
		t.Fatalf("stats %+v: the time bound did not stop it", st)
	}
}

func TestFinalStatusIsNotRetried(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.set(func() { p.final = transport.StatusOverlap })
	c := newTestClient(t, p.addrs(), quietOptions())
	_, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x"))
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusOverlap {
		t.Fatalf("err %v, want Overlap", err)
	}
	if st := c.Stats(); st.Attempts != 1 {
		t.Fatalf("stats %+v, want 1 attempt", st)
	}
}

func TestDeadMemberIsSkipped(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.setLeader(1)
	p.kill(0)
	c := newTestClient(t, p.addrs(), quietOptions())
	if _, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.ConnErrors != 1 {
		t.Fatalf("stats %+v, want one connection error", st)
	}
}

func TestLeaderLossMidStream(t *testing.T) {
	p := newFakePipeline(t, 3)
	c := newTestClient(t, p.addrs(), quietOptions())
	ctx := testCtx(t)
	const writers, perWriter = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	var acked atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := []byte(fmt.Sprintf("writer %d", w))
			for i := range perWriter {
				if _, err := c.WriteChunk(ctx, BlockID{Container: uint64(w), Local: 1}, uint64(i*len(data)), data); err != nil {
					errs <- err
					return
				}
				if acked.Add(1) == writers*perWriter/4 {
					// A quarter in: the leader dies, node 2 takes over.
					p.mu.Lock()
					p.leader = -1
					p.mu.Unlock()
					p.kill(0)
					p.setLeader(2)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c.Leader() != p.nodes[2].addr {
		t.Fatalf("leader %q, want %q", c.Leader(), p.nodes[2].addr)
	}
	// Every chunk reads back from every live member.
	for _, nd := range p.nodes[1:] {
		for w := range writers {
			data := []byte(fmt.Sprintf("writer %d", w))
			for i := range perWriter {
				ch, err := c.ReadChunk(ctx, nd.addr, BlockID{Container: uint64(w), Local: 1}, uint64(i*len(data)), uint64(len(data)))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(ch.Data, data) {
					t.Fatalf("read %q, want %q", ch.Data, data)
				}
			}
		}
	}
}

func TestAttemptTimeoutMovesOn(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.nodes[0].silent.Store(true)
	p.setLeader(1)
	o := quietOptions()
	// Long enough that the answering leader never times out under a
	// loaded CI machine (the count below must be exactly the silent
	// node's one), short enough to keep the test quick.
	o.AttemptTimeout = 500 * time.Millisecond
	c := newTestClient(t, p.addrs(), o)
	// No deadline on the context: the transport's request timeout bounds
	// the attempt.
	if _, err := c.WriteChunk(context.Background(), BlockID{Container: 1, Local: 1}, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// With a deadline far away, the client derives the attempt's own.
	if _, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 1, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Timeouts != 1 {
		t.Fatalf("stats %+v, want one timeout (the second write goes to the known leader)", st)
	}
}

func TestConcurrentWritersShareConnections(t *testing.T) {
	p := newFakePipeline(t, 3)
	o := quietOptions()
	o.ConnsPerMember = 2
	o.Window = 16
	c := newTestClient(t, p.addrs(), o)
	ctx := testCtx(t)
	const writers, perWriter = 64, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := bytes.Repeat([]byte{byte(w)}, 1000)
			for i := range perWriter {
				if _, err := c.WriteChunk(ctx, BlockID{Container: 1, Local: uint64(w)}, uint64(i*len(data)), data); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := p.nodes[0].conns.Load(); n > 2 {
		t.Fatalf("%d connections to the leader, want at most 2", n)
	}
	p.mu.Lock()
	n := len(p.chunks)
	p.mu.Unlock()
	if n != writers*perWriter {
		t.Fatalf("%d chunks stored, want %d", n, writers*perWriter)
	}
}

// Writes of a block, each started once the previous one's request is
// queued (WriteChunkQueued), reach the leader in that order and on one
// connection, even with several connections per member and many blocks'
// writes interleaved on them.
func TestBlockWritesArriveInQueuedOrder(t *testing.T) {
	p := newFakePipeline(t, 3)
	o := quietOptions()
	o.ConnsPerMember = 4
	o.Window = 64 // writes wait for window slots too
	c := newTestClient(t, p.addrs(), o)
	ctx := testCtx(t)
	const blocks, perBlock, size = 16, 400, 512
	if _, err := c.WriteChunk(ctx, BlockID{Container: 2, Local: 0}, 0, []byte("find the leader")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, blocks*perBlock)
	for b := range blocks {
		id := BlockID{Container: 1, Local: uint64(b)}
		data := bytes.Repeat([]byte{byte(b)}, size)
		sums := engine.ComputeChecksums(nil, data, engine.DefaultBytesPerChecksum)
		gate := make(chan struct{})
		close(gate)
		for i := range perBlock {
			prev, mine := gate, make(chan struct{})
			gate = mine
			wg.Go(func() {
				<-prev
				if err := c.WriteChunkQueued(ctx, id, uint64(i*size), data, engine.DefaultBytesPerChecksum, sums, func() { close(mine) }); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	next := map[BlockID]uint64{}
	conn := map[BlockID]*transport.Conn{}
	for _, a := range p.arrivals {
		b := a.key.b
		if b.Container != 1 {
			continue
		}
		if a.key.off != next[b] {
			t.Fatalf("block %s: write at %d arrived when %d was next", b, a.key.off, next[b])
		}
		next[b] += size
		if conn[b] == nil {
			conn[b] = a.conn
		} else if conn[b] != a.conn {
			t.Fatalf("block %s: writes arrived on two connections", b)
		}
	}
	for b := range blocks {
		if got := next[BlockID{Container: 1, Local: uint64(b)}]; got != perBlock*size {
			t.Fatalf("block 1/%d: %d bytes arrived, want %d", b, got, perBlock*size)
		}
	}
	if st := c.Stats(); st.Attempts != st.Ops {
		t.Errorf("stats %+v: retries (the fake never refuses)", st)
	}
}

func TestReadVerifiesChecksums(t *testing.T) {
	p := newFakePipeline(t, 3)
	c := newTestClient(t, p.addrs(), quietOptions())
	ctx := testCtx(t)
	data := bytes.Repeat([]byte("0123456789"), 300) // 6 pieces of 512
	if _, err := c.WriteChunk(ctx, BlockID{Container: 3, Local: 4}, 0, data); err != nil {
		t.Fatal(err)
	}
	ch, err := c.ReadChunk(ctx, "", BlockID{Container: 3, Local: 4}, 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ch.Data, data) || len(ch.Checksums) != 6 || ch.BytesPerChecksum != 512 {
		t.Fatalf("chunk %d bytes, %d checksums, bpc %d", len(ch.Data), len(ch.Checksums), ch.BytesPerChecksum)
	}
	p.set(func() { p.corruptRead = true })
	_, err = c.ReadChunk(ctx, p.nodes[2].addr, BlockID{Container: 3, Local: 4}, 0, uint64(len(data)))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err %v, want ErrCorrupt", err)
	}
	_, err = c.ReadChunk(ctx, p.nodes[2].addr, BlockID{Container: 3, Local: 5}, 0, 1)
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusNotFound {
		t.Fatalf("err %v, want NotFound", err)
	}
}

// ReadChunkLent: the same verified bytes as ReadChunk, lent until
// released; a ReadChunk after the release gets its own copy, which the
// lent buffer's next use does not change; a corrupt answer is refused.
func TestReadChunkLent(t *testing.T) {
	p := newFakePipeline(t, 3)
	c := newTestClient(t, p.addrs(), quietOptions())
	ctx := testCtx(t)
	data := bytes.Repeat([]byte("abcdefghij"), 300)
	other := bytes.Repeat([]byte("ABCDEFGHIJ"), 300)
	if _, err := c.WriteChunk(ctx, BlockID{Container: 3, Local: 4}, 0, data); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteChunk(ctx, BlockID{Container: 3, Local: 6}, 0, other); err != nil {
		t.Fatal(err)
	}
	ch, release, err := c.ReadChunkLent(ctx, "", BlockID{Container: 3, Local: 4}, 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ch.Data, data) || len(ch.Checksums) != 6 || ch.BytesPerChecksum != 512 {
		t.Fatalf("chunk %d bytes, %d checksums, bpc %d", len(ch.Data), len(ch.Checksums), ch.BytesPerChecksum)
	}
	release()
	kept, err := c.ReadChunk(ctx, "", BlockID{Container: 3, Local: 4}, 0, uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // the pooled buffers go round
		ch, release, err := c.ReadChunkLent(ctx, "", BlockID{Container: 3, Local: 6}, 0, uint64(len(other)))
		if err != nil || !bytes.Equal(ch.Data, other) {
			t.Fatalf("read of the other block: %v", err)
		}
		release()
	}
	if !bytes.Equal(kept.Data, data) {
		t.Fatal("ReadChunk's bytes changed after later reads: they were not its own copy")
	}
	p.set(func() { p.corruptRead = true })
	if _, release, err := c.ReadChunkLent(ctx, p.nodes[2].addr, BlockID{Container: 3, Local: 4}, 0, uint64(len(data))); !errors.Is(err, ErrCorrupt) || release != nil {
		t.Fatalf("err %v (release %v), want ErrCorrupt and nothing to release", err, release != nil)
	}
}

func TestClosedClientRefuses(t *testing.T) {
	p := newFakePipeline(t, 1)
	c := newTestClient(t, p.addrs(), quietOptions())
	if _, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	testutil.CloseT(t, c)
	if _, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 1, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("err %v, want ErrClosed", err)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		o     Options
	}{
		{nil, Options{}},
		{[]string{"nohost"}, Options{}},
		{[]string{"127.0.0.1:1", "127.0.0.1:1"}, Options{}},
		{[]string{"127.0.0.1:1"}, Options{BytesPerChecksum: 1}},
	} {
		if _, err := New(tc.addrs, 1, tc.o); err == nil {
			t.Errorf("New(%v, %+v) succeeded", tc.addrs, tc.o)
		}
	}
}

// TestIdleConnectionClosedByServerIsRedialled: a datanode closes a
// connection left idle past its idle timeout; the client's next operation
// dials a new one instead of failing an attempt on the closed one.
func TestIdleConnectionClosedByServerIsRedialled(t *testing.T) {
	p := newFakePipelineConn(t, 1, transport.ConnConfig{IdleTimeout: 20 * time.Millisecond})
	c := newTestClient(t, p.addrs(), quietOptions())
	ctx := testCtx(t)
	data := []byte("idle")
	if _, err := c.WriteChunk(ctx, BlockID{Container: 1, Local: 1}, 0, data); err != nil {
		t.Fatal(err)
	}
	// Barrier: the server has closed the idle connection and the client
	// has seen it.
	m := c.members[0]
	deadline := time.Now().Add(10 * time.Second)
	for {
		broken := 0
		for i := range m.slots {
			if tc := m.slots[i].c.Load(); tc != nil && tc.Err() != nil {
				broken++
			}
		}
		if broken > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not close the idle connection")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := c.WriteChunk(ctx, BlockID{Container: 1, Local: 1}, uint64(len(data)), data); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Dials != 2 || st.Attempts != 2 || st.ConnErrors != 0 {
		t.Fatalf("stats %+v, want 2 dials and no failed attempt", st)
	}
}

// frozenMember listens on 127.0.0.1 and accepts connections but never
// reads or answers them: a stopped process (SIGSTOP), whose kernel still
// completes handshakes and buffers requests. It returns the address.
func frozenMember(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		testutil.CloseT(t, l)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			testutil.CloseT(t, c)
		}
	})
	return l.Addr().String()
}

// TestFrozenLeaderIsProbedAndLeft: writes to a member that takes
// connections and answers nothing (a stopped leader) are failed once it
// also leaves a probe unanswered, and go to the member that leads now;
// while it stays silent no attempt waits on it again. With probing off
// (ProbeAfter < 0) the first write waits out its AttemptTimeout (an hour
// here) and fails with the test's context instead.
func TestFrozenLeaderIsProbedAndLeft(t *testing.T) {
	p := newFakePipeline(t, 2)
	p.setLeader(1)
	frozen := frozenMember(t)
	o := quietOptions()
	o.AttemptTimeout, o.RetryTimeout = time.Hour, time.Hour
	o.ProbeAfter, o.ProbeTimeout = 40*time.Millisecond, 40*time.Millisecond
	c := newTestClient(t, append([]string{frozen}, p.addrs()...), o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 { // writers waiting on the frozen member together
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.WriteChunk(ctx, BlockID{Container: 1, Local: uint64(i)}, 0, []byte("x")); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("write with a frozen first member: %v", err)
	}
	if got := c.Leader(); got != p.nodes[1].addr {
		t.Fatalf("leader %q, want %q", got, p.nodes[1].addr)
	}
	st := c.Stats()
	if st.Unresponsive == 0 || st.Probes == 0 {
		t.Fatalf("stats %+v: want the frozen member probed and found unresponsive", st)
	}
	// An operation addressed to the frozen member fails at once now.
	if _, err := c.ReadChunk(ctx, frozen, BlockID{Container: 1, Local: 0}, 0, 1); !errors.Is(err, ErrUnresponsive) {
		t.Fatalf("read addressed to the frozen member: %v, want ErrUnresponsive", err)
	}
}

// TestSlowMemberAnswersProbes: a member whose process runs but leaves a
// request unanswered (here: for good) is probed and answers the probe
// (its transport server does, whatever its handler does), so it is not
// taken for a stopped one: the attempt waits out its AttemptTimeout as
// before, and the write then goes on to the leader.
func TestSlowMemberAnswersProbes(t *testing.T) {
	p := newFakePipeline(t, 3)
	p.nodes[0].silent.Store(true)
	p.setLeader(1)
	o := quietOptions()
	o.AttemptTimeout = 400 * time.Millisecond
	o.ProbeAfter, o.ProbeTimeout = 20*time.Millisecond, 5*time.Second
	c := newTestClient(t, p.addrs(), o)
	if _, err := c.WriteChunk(testCtx(t), BlockID{Container: 1, Local: 1}, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Probes == 0 || st.Unresponsive != 0 || st.Timeouts != 1 {
		t.Fatalf("stats %+v: want the silent member probed, answering, and the attempt timed out", st)
	}
}
