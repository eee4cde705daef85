package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// startServer serves h on 127.0.0.1 and returns the server and its
// address; the server is closed when the test ends.
func startServer(t testing.TB, cfg ServerConfig) (*Server, string) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		closeT(t, s)
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return s, l.Addr().String()
}

func dial(t testing.TB, addr string, cfg ClientConfig) *Client {
	t.Helper()
	c, err := DialClient(context.Background(), addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeT(t, c) })
	return c
}

// storeHandler is a little chunk store: WriteChunk stores, ReadChunk reads
// back, GetBlock answers NOT_LEADER with a leader address, PutBlock echoes
// the block.
type storeHandler struct {
	mu     sync.Mutex
	chunks map[[3]uint64][]byte
}

func (s *storeHandler) handle(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
	switch f.Type {
	case TypeWriteChunk:
		var wc WriteChunk
		if err := f.Decode(&wc); err != nil {
			return &Response{Status: StatusInvalid, Message: err.Error()}, nil
		}
		if crc32c.Checksum(f.Payload) != wc.Checksums[0] {
			return &Response{RequestID: wc.RequestID, Status: StatusChecksumMismatch}, nil
		}
		s.mu.Lock()
		s.chunks[[3]uint64{wc.ContainerID, wc.LocalID, wc.Offset}] = bytes.Clone(f.Payload)
		s.mu.Unlock()
		return &Response{RequestID: wc.RequestID}, nil
	case TypeReadChunk:
		var rc ReadChunk
		if err := f.Decode(&rc); err != nil {
			return &Response{Status: StatusInvalid, Message: err.Error()}, nil
		}
		s.mu.Lock()
		data, ok := s.chunks[[3]uint64{rc.ContainerID, rc.LocalID, rc.Offset}]
		s.mu.Unlock()
		if !ok {
			return &Response{RequestID: rc.RequestID, Status: StatusNotFound, Message: "no such chunk"}, nil
		}
		return &Response{RequestID: rc.RequestID, Offset: rc.Offset, BytesPerChecksum: uint32(len(data)),
			Checksums: []uint32{crc32c.Checksum(data)}}, data
	case TypeGetBlock:
		var gb GetBlock
		if err := f.Decode(&gb); err != nil {
			return &Response{Status: StatusInvalid, Message: err.Error()}, nil
		}
		return &Response{RequestID: gb.RequestID, Status: StatusNotLeader, Leader: "127.0.0.1:1"}, nil
	case TypePutBlock:
		var pb PutBlock
		if err := f.Decode(&pb); err != nil {
			return &Response{Status: StatusInvalid, Message: err.Error()}, nil
		}
		return &Response{RequestID: pb.RequestID, HasBlock: true, Block: pb.Block}, nil
	}
	return &Response{Status: StatusUnsupported}, nil
}

func crcOf(b []byte) uint32 { return crc32c.Checksum(b) }

func TestClientServerRequests(t *testing.T) {
	h := &storeHandler{chunks: map[[3]uint64][]byte{}}
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	cl := dial(t, addr, ClientConfig{})
	ctx := context.Background()

	// 1 KiB and 16 MiB chunks, written and read back.
	for i, size := range []int{1 << 10, 16 << 20} {
		data := bytes.Repeat([]byte{byte(i + 1), 2, 3, 4}, size/4)
		res, err := cl.Call(ctx, &WriteChunk{ContainerID: 1, LocalID: 2, Offset: uint64(i), Length: uint64(size), Checksums: []uint32{crcOf(data)}}, data)
		if err != nil {
			t.Fatal(err)
		}
		res.Release()
		res, err = cl.Call(ctx, &ReadChunk{ContainerID: 1, LocalID: 2, Offset: uint64(i), Length: uint64(size)})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(res.Payload, data) || res.Response.Checksums[0] != crcOf(data) {
			t.Fatalf("%d bytes: read back differs", size)
		}
		res.Release()
	}
	// A status error, with the leader to follow.
	_, err := cl.Call(ctx, &GetBlock{ContainerID: 1, LocalID: 2})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != StatusNotLeader || se.Leader != "127.0.0.1:1" {
		t.Fatalf("GetBlock = %v", err)
	}
	_, err = cl.Call(ctx, &ReadChunk{ContainerID: 9})
	if !errors.As(err, &se) || se.Status != StatusNotFound {
		t.Fatalf("ReadChunk of a missing chunk = %v", err)
	}
	// PutBlock, echoed.
	pb := samplePutBlock()
	res, err := cl.Call(ctx, pb)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Response.HasBlock || !equalMessages(&PutBlock{Block: res.Response.Block}, &PutBlock{Block: pb.Block}) {
		t.Fatalf("PutBlock echo %+v", res.Response.Block)
	}
	if res.Response.RequestID != pb.RequestID {
		t.Fatal("request ID not set on the request")
	}
	// A request the sender refuses leaves the client usable.
	if _, err := cl.Call(ctx, &WriteChunk{Length: 10}, []byte{1}); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if cl.Err() != nil || cl.Outstanding() != 0 {
		t.Fatal(cl.Err(), cl.Outstanding())
	}
}

// heldHandler holds every WriteChunk until released, replying later from
// another goroutine (a deferred reply), so that requests stay outstanding.
type heldHandler struct {
	mu   sync.Mutex
	held []held
	got  chan struct{}
}

type held struct {
	c  *Conn
	id uint64
}

func newHeldHandler() *heldHandler { return &heldHandler{got: make(chan struct{}, 1<<12)} }

func (h *heldHandler) handle(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
	var wc WriteChunk
	if err := f.Decode(&wc); err != nil {
		return &Response{Status: StatusInvalid}, nil
	}
	h.mu.Lock()
	h.held = append(h.held, held{c, wc.RequestID})
	h.mu.Unlock()
	h.got <- struct{}{}
	return nil, nil
}

func (h *heldHandler) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-h.got:
		case <-time.After(10 * time.Second):
			t.Fatal("requests did not arrive")
		}
	}
}

// releaseAll replies to every held request, newest first.
func (h *heldHandler) releaseAll(t *testing.T) {
	h.mu.Lock()
	hs := h.held
	h.held = nil
	h.mu.Unlock()
	for i := len(hs) - 1; i >= 0; i-- {
		if err := hs[i].c.Send(&Response{RequestID: hs[i].id, Message: "done"}); err != nil {
			t.Error(err)
		}
	}
}

// With the window full, the next Call blocks (nothing more reaches the
// server) until a slot frees; responses are matched by ID in any order.
func TestClientWindowFull(t *testing.T) {
	const window = 8
	h := newHeldHandler()
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	cl := dial(t, addr, ClientConfig{Window: window})
	ctx := context.Background()

	type result struct {
		i   int
		err error
	}
	results := make(chan result, window+1)
	for i := range window {
		go func() {
			res, err := cl.Call(ctx, &WriteChunk{ContainerID: uint64(i), Length: 1}, []byte{byte(i)})
			if err == nil {
				res.Release()
			}
			results <- result{i, err}
		}()
	}
	h.wait(t, window)
	if got := cl.Outstanding(); got != window {
		t.Fatalf("%d outstanding, want %d", got, window)
	}
	// The window is full: a Call with a short deadline never gets a slot.
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := cl.Call(sctx, &WriteChunk{Length: 1}, []byte{0})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call on a full window = %v", err)
	}
	// One more, blocked until the window drains.
	go func() {
		res, err := cl.Call(ctx, &WriteChunk{Length: 1}, []byte{0})
		if err == nil {
			res.Release()
		}
		results <- result{window, err}
	}()
	h.mu.Lock()
	if len(h.held) != window {
		t.Fatalf("server saw %d requests with a window of %d", len(h.held), window)
	}
	h.mu.Unlock()
	h.releaseAll(t) // newest first: out of order
	for range window {
		if r := <-results; r.err != nil {
			t.Fatalf("call %d: %v", r.i, r.err)
		}
	}
	h.wait(t, 1) // the blocked call got through
	h.releaseAll(t)
	if r := <-results; r.err != nil {
		t.Fatal(r.err)
	}
	if cl.Outstanding() != 0 {
		t.Fatal("requests left outstanding")
	}
}

// A request that is never answered times out (RequestTimeout, or the
// context's deadline); its late response is discarded; the client goes on.
func TestClientRequestTimeout(t *testing.T) {
	h := newHeldHandler()
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	cl := dial(t, addr, ClientConfig{RequestTimeout: 50 * time.Millisecond})
	_, err := cl.Call(context.Background(), &WriteChunk{Length: 1}, []byte{1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v, want DeadlineExceeded", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		h.wait(t, 2)
		cancel()
	}()
	if _, err := cl.Call(ctx, &WriteChunk{Length: 1}, []byte{1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Call = %v, want Canceled", err)
	}
	if cl.Outstanding() != 0 {
		t.Fatal("abandoned requests still outstanding")
	}
	h.releaseAll(t)
	// The late responses arrive and are dropped; the next call works.
	deadline := time.Now().Add(10 * time.Second)
	for cl.LateResponses() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d late responses", cl.LateResponses())
		}
		time.Sleep(time.Millisecond)
	}
	go func() {
		h.wait(t, 1)
		h.releaseAll(t)
	}()
	if res, err := cl.Call(context.Background(), &WriteChunk{Length: 1}, []byte{1}); err != nil {
		t.Fatal(err)
	} else if res.Response.Message != "done" {
		t.Fatalf("%+v", res.Response)
	}
}

// A connection error fails every outstanding request with that error, and
// every later Call.
func TestClientConnectionError(t *testing.T) {
	h := newHeldHandler()
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	cl := dial(t, addr, ClientConfig{Window: 16})
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := cl.Call(context.Background(), &WriteChunk{Length: 1}, []byte{1})
			errs <- err
		}()
	}
	h.wait(t, n)
	h.mu.Lock()
	closeT(t, h.held[0].c) // the server drops the connection
	h.mu.Unlock()
	var first error
	for range n {
		err := <-errs
		if err == nil {
			t.Fatal("an outstanding call succeeded")
		}
		if first == nil {
			first = err
		} else if err != first {
			t.Fatalf("calls failed with different errors: %v / %v", first, err)
		}
	}
	if cl.Err() != first {
		t.Fatalf("Err = %v, want %v", cl.Err(), first)
	}
	if _, err := cl.Call(context.Background(), &WriteChunk{Length: 1}, []byte{1}); err != first {
		t.Fatalf("later Call = %v", err)
	}
}

// A server that dies in the middle of a response frame: a clean error for
// the caller, wrapping io.ErrUnexpectedEOF.
func TestClientServerDiesMidFrame(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, l)
	served := make(chan error, 1)
	go func() {
		nc, err := l.Accept()
		if err != nil {
			served <- err
			return
		}
		served <- errors.Join(halfResponse(t, nc), nc.Close())
	}()
	cl := dial(t, l.Addr().String(), ClientConfig{})
	_, err = cl.Call(context.Background(), &ReadChunk{Length: 100000})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Call = %v, want io.ErrUnexpectedEOF", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// halfResponse reads a ReadChunk from nc and writes the first half of the
// frame of its answer.
func halfResponse(t testing.TB, nc net.Conn) error {
	f, err := NewConn(nc, ConnConfig{}).ReadFrame()
	if err != nil {
		return err
	}
	var rc ReadChunk
	if err := f.Decode(&rc); err != nil {
		return err
	}
	whole := encodeFrame(t, &Response{RequestID: rc.RequestID}, make([]byte, 100000))
	_, err = nc.Write(whole[:50000])
	return err
}

// A server that sends garbage breaks the client with ErrBadFrame.
func TestClientBadFrameFromServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, l)
	served := make(chan error, 1)
	// Run after the client's Close (cleanups run last first), which ends
	// the server's drain.
	t.Cleanup(func() {
		if err := <-served; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	go func() {
		nc, err := l.Accept()
		if err != nil {
			served <- err
			return
		}
		if _, err = NewConn(nc, ConnConfig{}).ReadFrame(); err == nil {
			if _, err = nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")); err == nil {
				_, err = io.Copy(io.Discard, nc)
				if errors.Is(err, syscall.ECONNRESET) {
					err = nil // the client hung up on the garbage
				}
			}
		}
		served <- errors.Join(err, nc.Close())
	}()
	cl := dial(t, l.Addr().String(), ClientConfig{})
	if _, err := cl.Call(context.Background(), &GetBlock{}); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("Call = %v, want ErrBadFrame", err)
	}
}

// The server closes a connection that sends a bad frame; other
// connections are unaffected.
func TestServerClosesOnBadFrame(t *testing.T) {
	h := &storeHandler{chunks: map[[3]uint64][]byte{}}
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	good := dial(t, addr, ClientConfig{})
	for _, bad := range [][]byte{
		prefixBytes('S', 'W', 1, TypeWriteChunk, MaxHeaderBytes+1, 0),
		prefixBytes('S', 'W', 1, TypeWriteChunk, 0, MaxPayloadBytes+1),
		prefixBytes('X', 'X', 1, TypeWriteChunk, 0, 0),
	} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(bad); err != nil {
			t.Fatal(err)
		}
		if err := nc.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if n, err := nc.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("after a bad frame: read %d, %v; want the server to close", n, err)
		}
		closeT(t, nc)
	}
	if _, err := good.Call(context.Background(), &GetBlock{}); !errors.As(err, new(*StatusError)) {
		t.Fatalf("other connection: %v", err)
	}
}

// PayloadAlloc hands the handler a payload buffer it keeps.
func TestServerPayloadAlloc(t *testing.T) {
	var kept [][]byte
	var mu sync.Mutex
	_, addr := startServer(t, ServerConfig{
		PayloadAlloc: func(_ context.Context, t MsgType, header []byte, n int) (Payload, error) {
			return Payload{Buf: make([]byte, n)}, nil
		},
		Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
			var wc WriteChunk
			if err := f.Decode(&wc); err != nil {
				return &Response{Status: StatusInvalid, Message: err.Error()}, nil
			}
			mu.Lock()
			kept = append(kept, f.Payload)
			mu.Unlock()
			return &Response{RequestID: wc.RequestID}, nil
		},
	})
	cl := dial(t, addr, ClientConfig{})
	for i := range 5 {
		p := bytes.Repeat([]byte{byte(i)}, 70000)
		if _, err := cl.Call(context.Background(), &WriteChunk{Length: uint64(len(p))}, p); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, p := range kept {
		if !bytes.Equal(p, bytes.Repeat([]byte{byte(i)}, 70000)) {
			t.Fatalf("kept payload %d was overwritten", i)
		}
	}
}

// Shutdown lets a handler in progress finish and reply, then closes;
// Serve returns ErrServerClosed; new connections are refused.
func TestServerGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	var ctxDone atomic.Bool
	s := NewServer(ServerConfig{Logger: quietLogger, Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
		var gb GetBlock
		if err := f.Decode(&gb); err != nil {
			t.Errorf("handler: %v", err) // Shutdown waits for the handler: within the test
		}
		close(entered)
		<-release
		ctxDone.Store(ctx.Err() != nil)
		return &Response{RequestID: gb.RequestID, Message: "finished"}, nil
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	cl := dial(t, l.Addr().String(), ClientConfig{})
	type res struct {
		r   *Result
		err error
	}
	got := make(chan res, 1)
	go func() {
		r, err := cl.Call(context.Background(), &GetBlock{})
		got <- res{r, err}
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a handler in progress", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	r := <-got
	if r.err != nil || r.r.Response.Message != "finished" {
		t.Fatalf("in-progress request: %v %+v", r.err, r.r)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if ctxDone.Load() {
		t.Fatal("handler context cancelled during a graceful shutdown")
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		t.Fatal("listener still accepting")
	}
	if err := s.Serve(l); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown = %v", err)
	}
	// The connection was closed: the client fails from now on.
	if _, err := cl.Call(context.Background(), &GetBlock{}); err == nil {
		t.Fatal("call after shutdown succeeded")
	}
}

// Shutdown with a handler that does not finish in time falls back to
// Close: the handler's context is cancelled.
func TestServerShutdownTimeout(t *testing.T) {
	entered := make(chan struct{})
	s := NewServer(ServerConfig{Logger: quietLogger, Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
		close(entered)
		<-ctx.Done()
		return nil, nil
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	cl := dial(t, l.Addr().String(), ClientConfig{})
	called := make(chan error, 1)
	go func() {
		res, err := cl.Call(context.Background(), &GetBlock{})
		if err == nil {
			res.Release()
		}
		called <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
	if err := <-called; err == nil {
		t.Fatal("the call whose handler never answered succeeded")
	}
}

// Many clients, many concurrent calls each: everything matches up.
func TestClientServerConcurrent(t *testing.T) {
	h := &storeHandler{chunks: map[[3]uint64][]byte{}}
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	const clients, callers, calls = 4, 8, 50
	var wg sync.WaitGroup
	for c := range clients {
		cl := dial(t, addr, ClientConfig{Window: 4})
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range calls {
					data := bytes.Repeat([]byte{byte(c), byte(g), byte(i)}, 100+i)
					key := uint64(c*1000000 + g*1000 + i)
					res, err := cl.Call(context.Background(), &WriteChunk{ContainerID: key, Length: uint64(len(data)), Checksums: []uint32{crcOf(data)}}, data)
					if err != nil {
						t.Error(err)
						return
					}
					res.Release()
					res, err = cl.Call(context.Background(), &ReadChunk{ContainerID: key})
					if err != nil {
						t.Error(err)
						return
					}
					if !bytes.Equal(res.Payload, data) {
						t.Error("read back the wrong data")
					}
					res.Release()
				}
			}()
		}
	}
	wg.Wait()
}

// A handler replying with Conn.Scratch: every reply carries its own bytes
// (the server gives the buffer back only after the reply is written, and
// the next frame's handler gets it again), sizes out of range give nil.
func TestServerScratchReplies(t *testing.T) {
	var handed atomic.Int64
	_, addr := startServer(t, ServerConfig{Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
		var rc ReadChunk
		if err := f.Decode(&rc); err != nil {
			return &Response{Status: StatusInvalid, Message: err.Error()}, nil
		}
		if c.Scratch(0) != nil || c.Scratch(MaxPayloadBytes+1) != nil {
			return &Response{RequestID: rc.RequestID, Status: StatusInvalid, Message: "scratch of an invalid size"}, nil
		}
		buf := c.Scratch(int(rc.Length))
		handed.Add(1)
		for i := range buf {
			buf[i] = byte(rc.Offset) + byte(i)
		}
		return &Response{RequestID: rc.RequestID, Offset: rc.Offset}, buf
	}})
	cl := dial(t, addr, ClientConfig{})
	ctx := context.Background()
	for i := range 64 {
		n := 1 + i*4099
		res, err := cl.Call(ctx, &ReadChunk{Offset: uint64(i), Length: uint64(n)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Response.Status != StatusOK || len(res.Payload) != n {
			t.Fatalf("read %d: status %v, %d bytes, want %d", i, res.Response.Status, len(res.Payload), n)
		}
		for j, b := range res.Payload {
			if b != byte(i)+byte(j) {
				t.Fatalf("read %d: byte %d is %d, want %d", i, j, b, byte(i)+byte(j))
			}
		}
		res.Release()
	}
	if n := handed.Load(); n != 64 {
		t.Fatalf("%d scratch buffers handed out, want 64", n)
	}
}

// CallQueued calls queued exactly once, before it returns: as soon as the
// request is queued (while its response is still held by the server), or,
// when the Call fails before queueing it, on the way out.
func TestCallQueuedSignalsOnce(t *testing.T) {
	h := newHeldHandler()
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	cl := dial(t, addr, ClientConfig{Window: 1})
	ctx := context.Background()
	counter := func() (func(), *atomic.Int32) {
		var n atomic.Int32
		return func() { n.Add(1) }, &n
	}

	// Queued while the response is held: called before the Call returns.
	signal := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		res, err := cl.CallQueued(ctx, func() { close(signal) }, &WriteChunk{Length: 1}, []byte{1})
		if err == nil {
			res.Release()
		}
		done <- err
	}()
	<-signal
	h.wait(t, 1)
	select {
	case err := <-done:
		t.Fatalf("Call returned (%v) before its response was sent", err)
	default:
	}

	// The window (1) is full: a Call that gives up waiting for a slot
	// signals on its way out, nothing queued.
	q, n := counter()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := cl.CallQueued(sctx, q, &WriteChunk{Length: 1}, []byte{2}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CallQueued on a full window = %v", err)
	}
	cancel()
	if n.Load() != 1 {
		t.Fatalf("queued called %d times by a Call that gave up before queueing", n.Load())
	}
	h.releaseAll(t)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Refused by the encoder, and with a cancelled context.
	q, n = counter()
	if _, err := cl.CallQueued(ctx, q, &WriteChunk{Length: 2}, []byte{1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CallQueued with a short payload = %v, want ErrInvalid", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := cl.CallQueued(cctx, q, &WriteChunk{Length: 1}, []byte{1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("CallQueued with a cancelled context = %v", err)
	}
	if n.Load() != 2 {
		t.Fatalf("queued called %d times by 2 refused calls, want 2", n.Load())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) != 0 {
		t.Fatalf("%d refused requests reached the server", len(h.held))
	}
}

// orderHandler answers every WriteChunk at once and records the
// (ContainerID, Offset) of each, in the order the connection delivered them.
type orderHandler struct {
	mu  sync.Mutex
	got map[uint64][]uint64
}

func (h *orderHandler) handle(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
	var wc WriteChunk
	if err := f.Decode(&wc); err != nil {
		return &Response{Status: StatusInvalid}, nil
	}
	h.mu.Lock()
	h.got[wc.ContainerID] = append(h.got[wc.ContainerID], wc.Offset)
	h.mu.Unlock()
	return &Response{RequestID: wc.RequestID}, nil
}

// Callers on many goroutines, each starting its Call once the previous
// one's queued was called, reach the server in that order, even with
// other chains' calls interleaved and callers waiting for window slots.
func TestCallQueuedChainsArriveInOrder(t *testing.T) {
	h := &orderHandler{got: map[uint64][]uint64{}}
	_, addr := startServer(t, ServerConfig{Handler: h.handle})
	cl := dial(t, addr, ClientConfig{Window: 4})
	const chains, perChain = 8, 300
	var wg sync.WaitGroup
	errs := make(chan error, chains*perChain)
	for ch := range chains {
		gate := make(chan struct{})
		close(gate)
		for i := range perChain {
			prev, mine := gate, make(chan struct{})
			gate = mine
			wg.Go(func() {
				<-prev
				res, err := cl.CallQueued(context.Background(), func() { close(mine) }, &WriteChunk{ContainerID: uint64(ch), Offset: uint64(i), Length: 1}, []byte{1})
				if err != nil {
					errs <- err
					return
				}
				res.Release()
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range uint64(chains) {
		got := h.got[ch]
		if len(got) != perChain {
			t.Fatalf("chain %d: %d requests arrived, want %d", ch, len(got), perChain)
		}
		for i, off := range got {
			if off != uint64(i) {
				t.Fatalf("chain %d: request %d arrived in position %d", ch, off, i)
			}
		}
	}
}

// TestPingAnsweredWhileHandlerBlocks: the Server answers a Ping itself, on
// any connection, while its handler is stuck on another connection's
// request: a prober learns that the process runs, not that its pipelines
// are fast. A Ping reaches no handler.
func TestPingAnsweredWhileHandlerBlocks(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	var handled atomic.Int64
	entered := make(chan struct{}, 1)
	_, addr := startServer(t, ServerConfig{Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
		handled.Add(1)
		entered <- struct{}{}
		select {
		case <-stuck:
		case <-ctx.Done():
		}
		return &Response{Status: StatusUnavailable}, nil
	}})
	busyDone := make(chan error, 1)
	// Registered before the busy client's cleanup, run after its Close:
	// the held call's answer carries no request ID, so it ends only then.
	t.Cleanup(func() {
		if err := <-busyDone; err == nil {
			t.Error("the held call succeeded; want it failed by its client's Close")
		}
	})
	busy := dial(t, addr, ClientConfig{RequestTimeout: -1})
	go func() {
		res, err := busy.Call(context.Background(), &GetBlock{ContainerID: 1, LocalID: 1})
		if err == nil {
			res.Release()
		}
		busyDone <- err
	}()
	<-entered // the handler holds the request
	prober := dial(t, addr, ClientConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		res, err := prober.Call(ctx, &Ping{})
		if err != nil {
			t.Fatalf("ping while the handler is stuck: %v", err)
		}
		res.Release()
	}
	if n := handled.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1 (pings never reach it)", n)
	}
}

// At MaxConns a new connection is parked: its Pings are answered (a
// client probing whether the process runs is not misled by the limit),
// and its first request waits, unread, until a served connection goes.
// Without parking the Ping waited in the listen backlog until the test's
// bound ran out.
// limitServer starts a server of one served connection that answers
// GetBlocks OK (seen, when set, is told each one's container) and says on
// waiting when a parked connection's request waits for a place; it
// returns the server, a context for the test's calls and a served
// connection that holds the one place.
func limitServer(t *testing.T, waiting chan<- struct{}, seen func(container uint64)) (*Server, context.Context, *Client, string) {
	t.Helper()
	srv, addr := startServer(t, ServerConfig{MaxConns: 1, parkedWaiting: func() { waiting <- struct{}{} },
		Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
			var gb GetBlock
			if err := f.Decode(&gb); err != nil {
				return &Response{Status: StatusInvalid, Message: err.Error()}, nil
			}
			if seen != nil {
				seen(gb.ContainerID)
			}
			return &Response{RequestID: gb.RequestID, Status: StatusOK}, nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	first := dial(t, addr, ClientConfig{})
	res, err := first.Call(ctx, &GetBlock{ContainerID: 1, LocalID: 1})
	if err != nil {
		t.Fatal(err)
	}
	res.Release() // first is served: it holds the one place
	return srv, ctx, first, addr
}

// parkRequest sends a GetBlock of container 2 on c from a goroutine and
// returns once the server says it waits for a place (waiting); the call's
// outcome comes on the channel.
func parkRequest(ctx context.Context, c *Client, waiting <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		res, err := c.Call(ctx, &GetBlock{ContainerID: 2, LocalID: 1})
		if err == nil {
			res.Release()
		}
		done <- err
	}()
	<-waiting
	return done
}

func TestParkedConnectionAtTheLimit(t *testing.T) {
	waiting := make(chan struct{}, 1)
	var firstClosed, servedEarly atomic.Bool
	_, ctx, first, addr := limitServer(t, waiting, func(container uint64) {
		if container == 2 && !firstClosed.Load() {
			servedEarly.Store(true)
		}
	})
	second := dial(t, addr, ClientConfig{})
	for range 3 {
		res, err := second.Call(ctx, &Ping{})
		if err != nil {
			t.Fatalf("ping at the connection limit: %v", err)
		}
		res.Release()
	}
	done := parkRequest(ctx, second, waiting)
	firstClosed.Store(true)
	closeT(t, first)
	if err := <-done; err != nil {
		t.Fatalf("the parked connection's request, once a place was free: %v", err)
	}
	if servedEarly.Load() {
		t.Fatal("the parked connection's request was served while the limit was reached")
	}
}

// Close ends a parked connection that waits for a place: its request
// fails, Close returns.
func TestCloseEndsParkedConnections(t *testing.T) {
	waiting := make(chan struct{}, 1)
	srv, ctx, _, addr := limitServer(t, waiting, nil)
	second := dial(t, addr, ClientConfig{})
	done := parkRequest(ctx, second, waiting)
	closeT(t, srv)
	if err := <-done; err == nil {
		t.Fatal("a parked request was answered by a closed server")
	}
}
