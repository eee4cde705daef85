package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Defaults and limits of ServerConfig.
const (
	DefaultMaxConns = 1024
	// DefaultSkipBytesPerSecond is the rate at which a connection's
	// skipped payloads (ErrSkipPayload) are read, after a first
	// MaxPayloadBytes: a client sent a few refused frames (a write to a
	// follower before its redirect) is not slowed; a peer flooding the
	// server with frames it refuses gets TCP back-pressure, not the CPU.
	DefaultSkipBytesPerSecond = 32 << 20
	// maxAcceptBackoff bounds the pause after a failed Accept (EMFILE…).
	maxAcceptBackoff = time.Second
	// MaxParkedConns bounds the connections accepted beyond MaxConns
	// (see ServerConfig.MaxConns).
	MaxParkedConns = 64
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("transport: server closed")

// Handler handles one frame. It runs on its connection's goroutine, so a
// connection's frames are handled one at a time, in order, and the next
// frame is not read until it returns. f.Header is valid only until it
// returns; so is f.Payload, unless ServerConfig.PayloadAlloc supplied its
// buffer (then the handler owns it). A frame whose payload was skipped or
// refused by its check (f.CheckErr) comes without one (f.Skipped).
//
// It returns the reply to send on c (reply nil: none — a one-way message
// such as a RaftMessage, or a reply the handler will send later with
// c.Send from another goroutine, which lets a connection have many
// requests in progress at once; return an untyped nil, not a nil
// *Response). payload is the reply frame's payload. If sending the reply
// fails, the connection is closed.
//
// ctx is cancelled when the connection closes or the server is closed.
type Handler func(ctx context.Context, c *Conn, f Frame) (reply Message, payload []byte)

// ServerConfig configures a Server. Zero fields take the defaults above.
type ServerConfig struct {
	// Handler handles every frame. Required.
	Handler Handler
	Conn    ConnConfig
	// PayloadAlloc, if set, gives the buffer a frame's payload is read
	// into (or ErrSkipPayload: the payload is dropped unread, see
	// Frame.Skipped; the Payload returned with it is ignored), called
	// after the header is read, with the payload length n ≥ 1, before
	// any of the payload is read or a buffer allocated for it: the place
	// to admit the bytes against a memory budget, and to say how to check
	// them as they arrive (Payload.Check, see PayloadCheck). It may wait
	// (the connection is not read meanwhile, so TCP pushes back on its
	// sender) until ctx ends (the connection or the server closes). An
	// error closes the connection. Payload.Release
	// (nil: none) gives the admission back: the Server calls it if the
	// payload is not read in full or its check refuses it, else hands it
	// to the handler in Frame.Release. A buffer shorter than n is ignored
	// and the connection's own buffer used. The handler owns the buffer:
	// the way to keep chunk bytes past the handler's return without
	// copying them.
	PayloadAlloc func(ctx context.Context, t MsgType, header []byte, n int) (Payload, error)
	// SkipBytesPerSecond bounds the rate at which one connection's
	// skipped payloads, and the payloads their check refused, are read
	// (DefaultSkipBytesPerSecond; negative: none): beyond a burst of
	// MaxPayloadBytes, the connection's reader waits before skipping
	// more.
	SkipBytesPerSecond int64
	// MaxConns bounds the connections served at once. Beyond it up to
	// MaxParkedConns more are accepted and parked: a parked connection's
	// Pings are answered (a client probing whether this process runs,
	// client.Options.ProbeAfter, gets its answer at the limit too), and
	// its first other frame waits, unread, for a place among the served
	// ones. With that many parked too, Accept waits.
	MaxConns int
	// Logger receives connection errors; slog.Default() when nil.
	Logger *slog.Logger

	// parkedWaiting (tests only; nil: none) is called when a parked
	// connection's first frame that is not a Ping starts to wait for a
	// place among the served connections.
	parkedWaiting func()

	// skipPaced (tests only; nil: none) is called with the bytes of each
	// payload charged to its connection's skip pacing, before they are
	// dropped.
	skipPaced func(n int)
}

// Payload is PayloadAlloc's answer for a payload it admits.
type Payload struct {
	// Buf is the buffer the payload is read into (see PayloadAlloc).
	Buf []byte
	// Release gives the payload's admission back (nil: none).
	Release func()
	// Check, if its Check is set, checks the payload as it arrives.
	Check PayloadCheck
	// Decoded (nil: none) is what PayloadAlloc made of the header, handed
	// to the handler in Frame.Decoded, so that it need not decode the
	// header a second time. Not handed on when the payload is not read
	// in full or its check refuses it.
	Decoded any
}

// PayloadCheck checks a payload as it arrives, a step at a time, so that
// each step is checked while it is still in the CPU's cache and a payload
// that fails is not read any further into its buffer.
//
// Contract. The Server's connection goroutine (the one that called
// PayloadAlloc and then calls the Handler) reads the payload in steps of
// the largest whole number of PieceBytes pieces within CheckStepBytes (one
// piece when a piece is larger) and calls Check once per step, right after
// reading it, with the step's offset in the payload and its bytes: every
// byte once, in order, each span starting on a piece boundary and holding
// whole pieces, the last one ending with the payload (its last piece may
// be short). A step not read in full (a read error, which closes the
// connection) is not checked. span is part of the payload's buffer: Check
// must not write it, nor keep it once it returns an error. While Check
// runs, its connection is not read (other connections are).
//
// If every call returns nil, the handler gets the payload as usual with
// Frame.Checked set: it need not check the bytes again. The first error
// stops the read: nothing more is read into the buffer or checked; the
// Server calls Payload.Release at once and lets go of the buffer, reads
// the rest of the payload through the connection's buffer and drops it,
// paced as a skipped payload (the whole payload's length is charged to
// SkipBytesPerSecond), so the connection stays in step with its frames;
// then it calls the Handler with Frame.CheckErr set to the error,
// Frame.Skipped to the payload's length, no Payload and no Release.
type PayloadCheck struct {
	// PieceBytes is the unit of the check (≥ 1; less is taken as 1).
	PieceBytes int
	// Check checks span, the payload's bytes [off, off+len(span)).
	Check func(off int, span []byte) error
}

// Server accepts connections and serves frames with one goroutine per
// connection (never one per frame).
type Server struct {
	cfg    ServerConfig
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}
	parked chan struct{} // places for connections beyond MaxConns (MaxParkedConns)
	quit   chan struct{} // closed when shutdown starts

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	draining  bool
	wg        sync.WaitGroup // Serve loops and connection goroutines
}

// NewServer returns a Server. It panics without a Handler.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Handler == nil {
		panic("transport: ServerConfig.Handler is nil")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.SkipBytesPerSecond == 0 {
		cfg.SkipBytesPerSecond = DefaultSkipBytesPerSecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Conn = cfg.Conn.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:       cfg,
		ctx:       ctx,
		cancel:    cancel,
		slots:     make(chan struct{}, cfg.MaxConns),
		parked:    make(chan struct{}, MaxParkedConns),
		quit:      make(chan struct{}),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
	}
}

// Serve accepts connections on l until Shutdown or Close, then returns
// ErrServerClosed (or the listener's error if it fails for another
// reason). It closes l.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		closeQuietly(l)
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		closeQuietly(l)
		s.wg.Done()
	}()

	var backoff time.Duration
	for {
		// A place among the served connections, else a parked one.
		served := true
		select {
		case s.slots <- struct{}{}:
		default:
			select {
			case s.slots <- struct{}{}:
			case s.parked <- struct{}{}:
				served = false
			case <-s.quit:
				return ErrServerClosed
			}
		}
		release := func() {
			if served {
				<-s.slots
			} else {
				<-s.parked
			}
		}
		nc, err := l.Accept()
		if err != nil {
			release()
			select {
			case <-s.quit:
				return ErrServerClosed
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("transport: accept: %w", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
			s.cfg.Logger.Warn("transport: accept failed", "addr", l.Addr(), "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-s.quit:
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		c := NewConn(nc, s.cfg.Conn)
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			closeQuietly(nc)
			release()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		if served {
			go s.serveConn(c)
		} else {
			go s.serveParked(c)
		}
	}
}

// serveParked serves a connection accepted beyond MaxConns: it answers
// its Pings and, at its first other frame (left unread), waits for a
// place among the served connections and serves it from there on. The
// connection keeps its idle timeout while it waits for a frame; none
// while it waits for a place (as before parking existed, a client at
// the limit waits: its own timeouts bound it).
func (s *Server) serveParked(c *Conn) {
	promoted := false
	defer func() {
		if !promoted {
			closeQuietly(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			<-s.parked
			s.wg.Done()
		}
	}()
	for {
		select {
		case <-s.quit:
			return
		default:
		}
		t, err := c.PeekType()
		if err != nil {
			s.logReadErr(c, err)
			return
		}
		if t != TypePing {
			break
		}
		if _, h, _, err := c.ReadHeader(); err != nil || !s.answerPing(c, h) {
			if err != nil {
				s.logReadErr(c, err)
			}
			return
		}
	}
	if s.cfg.parkedWaiting != nil {
		s.cfg.parkedWaiting()
	}
	select {
	case s.slots <- struct{}{}:
	case <-s.quit:
		return
	}
	<-s.parked
	promoted = true
	s.serveConn(c) // gives the slot back, and the rest
}

// answerPing answers a Ping whose header is h (see serveConn); false: the
// connection is to be closed.
func (s *Server) answerPing(c *Conn, h []byte) bool {
	var ping Ping
	if err := ping.Unmarshal(h); err != nil {
		s.logReadErr(c, err)
		return false
	}
	return c.Send(&Response{RequestID: ping.RequestID, Status: StatusOK}) == nil
}

func (s *Server) serveConn(c *Conn) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer func() {
		cancel()
		closeQuietly(c)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		<-s.slots
		s.wg.Done()
	}()
	log := s.cfg.Logger
	skips := skipBucket{rate: s.cfg.SkipBytesPerSecond}
	for {
		select {
		case <-s.quit:
			return
		default:
		}
		t, h, n, err := c.ReadHeader()
		if err != nil {
			s.logReadErr(c, err)
			return
		}
		if t == TypePing {
			// Answered here, whatever the handler and the budgets are
			// doing: it asks whether the process runs, nothing more.
			if !s.answerPing(c, h) {
				return
			}
			continue
		}
		var payload []byte
		var pl Payload
		var checkErr error
		skipped := 0
		if n > 0 {
			if s.cfg.PayloadAlloc != nil {
				pl, err = s.cfg.PayloadAlloc(ctx, t, h, n)
				if errors.Is(err, ErrSkipPayload) {
					pl = Payload{}
					if !s.dropPayload(ctx, c, &skips, n) {
						return
					}
					skipped = n
				} else if err != nil {
					s.logAdmitErr(c, t, n, err)
					return
				}
			}
			if skipped == 0 {
				payload, checkErr, err = c.readPayload(pl.Buf, pl.Check)
				if (err != nil || checkErr != nil) && pl.Release != nil {
					pl.Release() // not read in full, or refused
				}
				if err != nil {
					s.logReadErr(c, err)
					return
				}
				if checkErr != nil {
					// Refused for its content: its admission and
					// buffer go at once, the rest of it is dropped
					// as a skipped payload is.
					pl = Payload{}
					if !s.dropPayload(ctx, c, &skips, n) {
						return
					}
					skipped = n
				}
			}
		}
		checked := n > 0 && skipped == 0 && pl.Check.Check != nil
		reply, rp := s.cfg.Handler(ctx, c, Frame{Type: t, Header: h, Payload: payload, Release: pl.Release, Skipped: skipped, CheckErr: checkErr, Checked: checked, Decoded: pl.Decoded})
		if reply != nil {
			if err := c.Send(reply, rp); err != nil {
				log.Warn("transport: reply failed, closing connection", "remote", c.RemoteAddr(), "type", reply.Type(), "err", err)
				c.ReleaseScratch()
				return
			}
		}
		c.ReleaseScratch() // the reply is written: the handler's scratch is free
	}
}

// dropPayload drops the n-byte payload of the frame being read (skipped,
// or refused by its check) through the connection's buffer, once the
// connection's skip pacing lets it. False when the connection or the
// server closes first, or the read fails (logged): the connection is done.
func (s *Server) dropPayload(ctx context.Context, c *Conn, b *skipBucket, n int) bool {
	if s.cfg.skipPaced != nil {
		s.cfg.skipPaced(n)
	}
	if !b.wait(ctx, s.quit, n) {
		return false
	}
	if err := c.SkipPayload(); err != nil {
		s.logReadErr(c, err)
		return false
	}
	return true
}

func (s *Server) logAdmitErr(c *Conn, t MsgType, n int, err error) {
	select {
	case <-s.quit:
		return
	default:
	}
	s.cfg.Logger.Info("transport: payload not admitted, closing connection", "remote", c.RemoteAddr(), "type", t, "bytes", n, "err", err)
}

func (s *Server) logReadErr(c *Conn, err error) {
	select {
	case <-s.quit:
		return // shutting down: reads are interrupted on purpose
	default:
	}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, ErrIdle):
		s.cfg.Logger.Debug("transport: connection closed", "remote", c.RemoteAddr(), "err", err)
	case errors.Is(err, ErrBadFrame):
		s.cfg.Logger.Warn("transport: bad frame, closing connection", "remote", c.RemoteAddr(), "err", err)
	default:
		s.cfg.Logger.Info("transport: connection lost", "remote", c.RemoteAddr(), "err", err)
	}
}

// startDrain stops accepting and interrupts every connection's wait for
// its next frame. Handlers in progress finish and send their replies;
// frames not yet read are dropped (their clients see the connection
// close).
func (s *Server) startDrain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	s.draining = true
	close(s.quit)
	for l := range s.listeners {
		closeQuietly(l)
	}
	for c := range s.conns {
		c.interruptReads()
	}
}

// Shutdown stops the server gracefully: no new connections, no new
// frames; it waits for handlers in progress to return and send their
// replies, then closes every connection. If ctx ends first, it closes the
// server as Close does and returns ctx's error. Replies a handler has
// deferred to another goroutine are that goroutine's to send before
// Shutdown is called.
func (s *Server) Shutdown(ctx context.Context) error {
	s.startDrain()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
		_ = s.Close() // always nil: Close reports nothing
		return ctx.Err()
	}
}

// Close stops the server at once: listeners and connections are closed,
// handler contexts cancelled. It waits for the connection goroutines, so
// handlers must return when their context is cancelled.
func (s *Server) Close() error {
	s.startDrain()
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		closeQuietly(c)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// skipBucket paces one connection's skipped payload bytes: a token bucket
// of MaxPayloadBytes refilled at rate bytes per second.
type skipBucket struct {
	rate   int64 // ≤ 0: no pacing
	tokens int64
	at     time.Time
}

// take accounts n bytes read at now and returns how long to wait first:
// none while the bucket holds tokens (it may go below zero by one frame:
// a frame over the burst is let through once the bucket is full), else
// until it has refilled to zero.
func (b *skipBucket) take(now time.Time, n int) time.Duration {
	if b.rate <= 0 {
		return 0
	}
	if b.at.IsZero() {
		b.tokens, b.at = MaxPayloadBytes, now
	}
	if now.After(b.at) {
		b.tokens = min(MaxPayloadBytes, b.tokens+int64(now.Sub(b.at).Seconds()*float64(b.rate)))
		b.at = now
	}
	var d time.Duration
	if b.tokens < 0 {
		d = time.Duration(float64(-b.tokens) / float64(b.rate) * float64(time.Second))
		b.tokens, b.at = 0, b.at.Add(d)
	}
	b.tokens -= int64(n)
	return d
}

// wait waits as take says. False when ctx ends or quit is closed first.
func (b *skipBucket) wait(ctx context.Context, quit <-chan struct{}, n int) bool {
	d := b.take(time.Now(), n)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-quit:
		return false
	}
}
