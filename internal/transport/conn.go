package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Defaults and limits of ConnConfig.
const (
	DefaultReadBufferBytes    = 64 << 10
	MinReadBufferBytes        = 4 << 10
	MaxReadBufferBytes        = 16 << 20
	DefaultRetainPayloadBytes = 4 << 20
	DefaultWriteTimeout       = 30 * time.Second
	// DefaultIdleTimeout is how long a connection may stay without a
	// frame starting before its reader gives up (raft peers send
	// heartbeats every tick, busy clients requests: only the idle go).
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultReadTimeout is how long a frame's bytes may stop arriving,
	// once it has begun, before its reader gives up.
	DefaultReadTimeout = 30 * time.Second
)

// ErrIdle is the read error of a connection on which no frame began
// within its idle timeout.
var ErrIdle = errors.New("transport: connection idle")

// ConnConfig configures the read and write sides of a Conn (and a Reader).
// Zero fields take the defaults above.
type ConnConfig struct {
	// ReadBufferBytes is the size of the buffered reader that prefixes,
	// headers and small payloads are read through: one read syscall
	// brings in as many small frames as fit. Clamped to
	// [MinReadBufferBytes, MaxReadBufferBytes].
	ReadBufferBytes int
	// RetainPayloadBytes bounds the payload buffer a Reader keeps between
	// frames (it grows to the largest payload seen up to this bound).
	// Larger payloads are read into a buffer from a pool, given back at
	// the next read.
	RetainPayloadBytes int
	// WriteTimeout bounds each frame write; a write that times out breaks
	// the connection. Negative: no timeout.
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for the next frame to begin (its first
	// bytes); the read then fails with ErrIdle. Negative: no timeout.
	// Only a reader on a connection with read deadlines (a net.Conn)
	// has timeouts.
	IdleTimeout time.Duration
	// ReadTimeout bounds each wait for more bytes of a frame that has
	// begun (so a slow but moving transfer is not cut, a stalled one is):
	// the read then fails with a timeout (os.ErrDeadlineExceeded).
	// Negative: no timeout.
	ReadTimeout time.Duration
	// TLS secures the connections DialConn and DialClient make (mutual
	// TLS 1.3; nil: plaintext). A Server's connections are secured by its
	// listener (tlsconf.Settings.Listener, bulk.Demux).
	TLS *tlsconf.Settings
}

func (c ConnConfig) withDefaults() ConnConfig {
	if c.ReadBufferBytes <= 0 {
		c.ReadBufferBytes = DefaultReadBufferBytes
	}
	c.ReadBufferBytes = min(max(c.ReadBufferBytes, MinReadBufferBytes), MaxReadBufferBytes)
	if c.RetainPayloadBytes <= 0 {
		c.RetainPayloadBytes = DefaultRetainPayloadBytes
	}
	c.RetainPayloadBytes = min(c.RetainPayloadBytes, MaxPayloadBytes)
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	return c
}

// readDeadliner is what a Reader needs of its source for timeouts.
type readDeadliner interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// deadlineReader sets a read deadline before the reads of its source: at
// most timeout from now (kept within an eighth of it, to not reset a timer
// per read). timeout is set by the Reader: idle between frames, read
// within one; ≤ 0: none.
type deadlineReader struct {
	src         readDeadliner
	timeout     time.Duration
	deadline    time.Time // set on src; zero: none
	interrupted atomic.Bool
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	if d.interrupted.Load() {
		return 0, os.ErrDeadlineExceeded
	}
	if d.timeout > 0 {
		want := time.Now().Add(d.timeout)
		if diff := want.Sub(d.deadline); d.deadline.IsZero() || diff > d.timeout/8 || diff < -d.timeout/8 {
			setReadDeadline(d.src, want)
			d.deadline = want
			if d.interrupted.Load() {
				// interrupt ran meanwhile: its deadline wins.
				setReadDeadline(d.src, time.Now())
			}
		}
	} else if !d.deadline.IsZero() {
		setReadDeadline(d.src, time.Time{})
		d.deadline = time.Time{}
	}
	return d.src.Read(p)
}

// interrupt makes every read, now and later, fail at once.
func (d *deadlineReader) interrupt() {
	d.interrupted.Store(true)
	setReadDeadline(d.src, time.Now())
}

// Reader reads frames from a byte stream. It is not safe for concurrent
// use: one goroutine reads.
//
// Aliasing: the header returned by ReadHeader, and the payload returned by
// ReadPayload when it was read into the Reader's own buffer, are valid
// until the next ReadHeader or ReadFrame call; copy (or decode) what must
// outlive it. A payload read into a caller's dst belongs to the caller.
//
// Errors are sticky: after any error every call returns it again. A clean
// end of stream at a frame boundary is io.EOF (unwrapped); an end inside a
// frame wraps io.ErrUnexpectedEOF; invalid bytes wrap ErrBadFrame.
type Reader struct {
	br     *bufio.Reader
	hdr    []byte  // reused header buffer, grown to the largest header seen
	pay    []byte  // reused payload buffer, up to retain bytes
	big    *[]byte // pooled buffer holding the current payload, if any
	retain int
	typ    MsgType
	left   int  // payload bytes of the current frame still unread
	inPay  bool // ReadHeader done, payload not read yet
	err    error
	// dl, when r has read deadlines, applies the idle and read timeouts.
	dl          *deadlineReader
	idle, inTim time.Duration
}

// NewReader returns a Reader on r. If r has read deadlines (a net.Conn),
// the Reader applies cfg's IdleTimeout and ReadTimeout.
func NewReader(r io.Reader, cfg ConnConfig) *Reader {
	cfg = cfg.withDefaults()
	rd := &Reader{retain: cfg.RetainPayloadBytes, idle: cfg.IdleTimeout, inTim: cfg.ReadTimeout}
	if src, ok := r.(readDeadliner); ok && (cfg.IdleTimeout > 0 || cfg.ReadTimeout > 0) {
		rd.dl = &deadlineReader{src: src}
		r = rd.dl
	}
	rd.br = bufio.NewReaderSize(r, cfg.ReadBufferBytes)
	return rd
}

// setTimeout sets the timeout of the reads to come (no-op without
// deadlines).
func (r *Reader) setTimeout(d time.Duration) {
	if r.dl != nil {
		r.dl.timeout = d
	}
}

func (r *Reader) fail(what string, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	r.err = fmt.Errorf("transport: read %s: %w", what, err)
	return r.err
}

// ReadHeader reads the next frame's prefix and header, skipping the
// payload of the previous frame if it was not read. It returns the type,
// the header bytes and the payload length (already checked against
// MaxPayloadBytes); the caller then calls ReadPayload (unless the length
// is 0).
func (r *Reader) ReadHeader() (MsgType, []byte, int, error) {
	if err := r.endFrame(); err != nil {
		return 0, nil, 0, err
	}
	pf, err := r.peekPrefix()
	if err != nil {
		return 0, nil, 0, err
	}
	r.setTimeout(r.inTim)
	_, _ = r.br.Discard(PrefixBytes) // cannot fail: the bytes are buffered
	if pf.headerLen > cap(r.hdr) {
		r.hdr = make([]byte, pf.headerLen) // bounded by MaxHeaderBytes
	}
	h := r.hdr[:pf.headerLen]
	if _, err := io.ReadFull(r.br, h); err != nil {
		return 0, nil, 0, r.fail(pf.typ.String()+" header", err)
	}
	r.typ, r.left, r.inPay = pf.typ, pf.payloadLen, true
	return pf.typ, h, pf.payloadLen, nil
}

// endFrame finishes the previous frame: its big buffer back to the pool,
// its unread payload skipped.
func (r *Reader) endFrame() error {
	if r.err != nil {
		return r.err
	}
	if r.big != nil {
		putBuf(r.big)
		r.big = nil
	}
	if r.left > 0 {
		if _, err := r.br.Discard(r.left); err != nil {
			return r.fail("skipped payload", err)
		}
		r.left = 0
	}
	r.inPay = false
	return nil
}

// peekPrefix waits for the next frame's prefix (between frames the idle
// timeout applies, once a frame has begun the read timeout) and parses
// it, consuming nothing. r is at a frame boundary.
func (r *Reader) peekPrefix() (prefix, error) {
	if r.br.Buffered() == 0 {
		r.setTimeout(r.idle)
	} else {
		r.setTimeout(r.inTim)
	}
	p, err := r.br.Peek(PrefixBytes)
	if err != nil {
		if err == io.EOF && len(p) == 0 {
			r.err = io.EOF
			return prefix{}, io.EOF
		}
		if len(p) == 0 && errors.Is(err, os.ErrDeadlineExceeded) && (r.dl == nil || !r.dl.interrupted.Load()) {
			r.err = fmt.Errorf("%w: no frame within %v", ErrIdle, r.idle)
			return prefix{}, r.err
		}
		return prefix{}, r.fail("frame prefix", err)
	}
	pf, err := parsePrefix(p)
	if err != nil {
		r.err = err
		return prefix{}, err
	}
	return pf, nil
}

// PeekType returns the type of the next frame without reading it (see
// ReadHeader for the timeouts and errors, and for the previous frame's
// unread payload, skipped); the next ReadHeader reads it.
func (r *Reader) PeekType() (MsgType, error) {
	if err := r.endFrame(); err != nil {
		return 0, err
	}
	pf, err := r.peekPrefix()
	return pf.typ, err
}

// ReadPayload reads the payload of the frame whose header ReadHeader just
// returned. It reads into dst[:n] when cap(dst) ≥ n (the caller owns the
// bytes), else into the Reader's own buffer (see Reader for how long they
// stay valid). A payload of 0 bytes returns an empty slice and reads
// nothing. Large payloads go straight from the socket into the buffer;
// only what the buffered reader already holds is copied.
func (r *Reader) ReadPayload(dst []byte) ([]byte, error) {
	buf, _, err := r.readPayload(dst, PayloadCheck{})
	return buf, err
}

// CheckStepBytes bounds the step in which a payload with a PayloadCheck is
// read and checked: the largest whole number of its pieces within it (one
// piece when a piece is larger). Each step is checked right after it is
// read, while it is still in the CPU's cache (a CRC32C over a freshly
// received 1 MiB buffer runs at a third of its speed over bytes in cache),
// and a payload refused by its check is not read further into its buffer.
const CheckStepBytes = 256 << 10

// readPayload is ReadPayload with chk applied (see PayloadCheck), when it
// has a Check: the payload is read in steps of whole pieces within
// CheckStepBytes, and each step handed to chk.Check once read. If Check
// fails, readPayload returns its error as checkErr (err nil, buf nil) and
// stops there: the rest of the payload is unread, and the caller drops it
// with SkipPayload (or the next ReadHeader does). A checkErr is not sticky;
// err is, as every read error.
func (r *Reader) readPayload(dst []byte, chk PayloadCheck) (buf []byte, checkErr, err error) {
	if r.err != nil {
		return nil, nil, r.err
	}
	if !r.inPay {
		panic("transport: ReadPayload without ReadHeader")
	}
	r.inPay = false
	n := r.left
	switch {
	case cap(dst) >= n:
		buf = dst[:n]
	case n <= r.retain:
		if n > cap(r.pay) {
			r.pay = make([]byte, min(max(n, 2*cap(r.pay)), r.retain))
		}
		buf = r.pay[:n]
	default:
		r.big = getBuf(n)
		buf = *r.big
	}
	if n == 0 {
		return buf, nil, nil
	}
	step := n
	if chk.Check != nil {
		piece := max(1, chk.PieceBytes)
		step = max(1, CheckStepBytes/piece) * piece
	}
	for off := 0; off < n; {
		end := min(off+step, n)
		if _, err := io.ReadFull(r.br, buf[off:end]); err != nil {
			return nil, nil, r.fail(r.typ.String()+" payload", err)
		}
		r.left = n - end
		if chk.Check != nil {
			if err := chk.Check(off, buf[off:end]); err != nil {
				// Stop reading into buf: the rest is dropped
				// (SkipPayload), the buffer given back at once.
				r.inPay = true
				putBuf(r.big)
				r.big = nil
				return nil, err, nil
			}
		}
		off = end
	}
	return buf, nil, nil
}

// SkipPayload reads the payload of the frame whose header ReadHeader just
// returned and drops it, through the read buffer (nothing allocated).
func (r *Reader) SkipPayload() error {
	if r.err != nil {
		return r.err
	}
	if !r.inPay {
		panic("transport: SkipPayload without ReadHeader")
	}
	r.inPay = false
	if _, err := r.br.Discard(r.left); err != nil {
		return r.fail(r.typ.String()+" payload", err)
	}
	r.left = 0
	return nil
}

// ReadFrame reads a whole frame, its payload into the Reader's own buffer.
func (r *Reader) ReadFrame() (Frame, error) {
	t, h, _, err := r.ReadHeader()
	if err != nil {
		return Frame{}, err
	}
	p, err := r.ReadPayload(nil)
	if err != nil {
		return Frame{}, err
	}
	return Frame{Type: t, Header: h, Payload: p}, nil
}

// Conn is a framed connection: a Reader on one side, a frame writer on the
// other.
//
// Concurrency: reads (ReadHeader, ReadPayload, ReadFrame) from one
// goroutine at a time; Send and SendBatch from any number of goroutines —
// a mutex serialises them, so frames are never interleaved, and each is
// one gathered write (writev on a *net.TCPConn). Close from any goroutine.
//
// A write error (including a timeout) is sticky and closes the connection:
// part of a frame may have been sent, so the stream is broken.
type Conn struct {
	*Reader
	nc       net.Conn
	wtimeout time.Duration

	wmu  sync.Mutex
	enc  Encoder
	wnb  net.Buffers
	werr error
	// wbuf coalesces a gathered write on a TLS connection (nil on any
	// other): without writev each iovec would be a TLS record and a write
	// syscall of its own; copied into one buffer, small frames share
	// records. Payloads larger than the buffer go straight through.
	wbuf *bufio.Writer
	// rc, on a TLS connection made by tlsconf.Settings, is the connection
	// beneath crypto/tls: each gathered write is one batch of records
	// (BeginBatch…FlushBatch), written with one syscall per
	// tlsconf.MaxBatchBytes instead of one per 16 KiB record.
	rc *tlsconf.RecordConn

	closed atomic.Bool

	scratch *[]byte // Scratch's buffer, from the payload pool, until ReleaseScratch
	// peer, peerErr: the verified identity of the TLS peer (Peer),
	// computed at its first use. Owned by the reading goroutine.
	peerKnown bool
	peer      tlsconf.Peer
	peerErr   error
}

// Peer is the verified identity (certificate name and role) of the peer
// of a TLS connection, the zero Peer over plaintext; an error when its
// certificate carries no Spindle role. Looked up once per connection.
// Only from the Handler (the reading goroutine).
func (c *Conn) Peer() (tlsconf.Peer, error) {
	if !c.peerKnown {
		c.peer, c.peerErr = tlsconf.PeerOfConn(c.nc)
		c.peerKnown = true
	}
	return c.peer, c.peerErr
}

// Scratch returns a buffer of length n (1..MaxPayloadBytes; else nil) from
// the payload pool, for a Handler's reply payload: it is the handler's
// until ReleaseScratch, which a Server calls once the handler's reply has
// been sent (so a handler that replies later, from another goroutine,
// must not use it). One buffer per connection at a time: a second call
// gives the first back. Like the reads, Scratch and ReleaseScratch belong
// to the goroutine that reads the connection.
func (c *Conn) Scratch(n int) []byte {
	c.ReleaseScratch()
	if n < 1 || n > MaxPayloadBytes {
		return nil
	}
	c.scratch = getBuf(n)
	return *c.scratch
}

// ReleaseScratch gives Scratch's buffer back to the pool (nothing without
// one).
func (c *Conn) ReleaseScratch() {
	putBuf(c.scratch)
	c.scratch = nil
}

// NewConn wraps nc. Pass the *net.TCPConn itself: a wrapper type hides
// writev from net.Buffers (one write per iovec instead).
func NewConn(nc net.Conn, cfg ConnConfig) *Conn {
	cfg = cfg.withDefaults()
	c := &Conn{Reader: NewReader(nc, cfg), nc: nc, wtimeout: cfg.WriteTimeout}
	if _, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		c.wbuf = bufio.NewWriterSize(nc, TLSWriteBufferBytes)
		if c.rc = tlsconf.RecordConnOf(nc); c.rc != nil {
			c.rc.BufferReads(TLSReadBufferBytes)
		}
	}
	return c
}

// TLSWriteBufferBytes is the buffer a TLS connection's gathered writes are
// copied into (see Conn.wbuf): four TLS records of 16 KiB.
const TLSWriteBufferBytes = 64 << 10

// TLSReadBufferBytes is the read buffer beneath crypto/tls on a TLS
// connection (tlsconf.RecordConn.BufferReads): crypto/tls reads about one
// 16 KiB record per read; through this buffer one read syscall brings in
// every record that has arrived, up to 16 of them.
const TLSReadBufferBytes = 256 << 10

// DialConn connects to addr over TCP (and TLS when cfg.TLS says so).
func DialConn(ctx context.Context, addr string, cfg ConnConfig) (*Conn, error) {
	nc, err := cfg.TLS.Pin(tlsconf.RoleDatanode).Dial(ctx, addr) // datanodes only (issue 33)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	return NewConn(nc, cfg), nil
}

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Send writes one frame: header m, payload the concatenation of payload.
// It returns once the frame is written (the payload slices are not
// retained). ErrTooLarge and ErrInvalid leave the connection usable;
// any other error is a broken connection.
func (c *Conn) Send(m Message, payload ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if err := c.enc.Append(m, payload...); err != nil {
		c.enc.Reset()
		return err
	}
	err := c.writeLocked(&c.enc)
	c.enc.Reset()
	return err
}

// SendBatch writes every frame of e with one gathered write. e is not
// reset; the caller owns it.
func (c *Conn) SendBatch(e *Encoder) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	return c.writeLocked(e)
}

func (c *Conn) writeLocked(e *Encoder) error {
	if e.Len() == 0 {
		return nil
	}
	if c.wtimeout > 0 {
		// Fails only on a closed connection, whose write below fails.
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.wtimeout))
	}
	c.wnb = e.Buffers()
	var err error
	if c.wbuf != nil {
		if c.rc != nil {
			c.rc.BeginBatch()
		}
		for _, b := range c.wnb {
			if _, err = c.wbuf.Write(b); err != nil {
				break
			}
		}
		if err == nil {
			err = c.wbuf.Flush()
		}
		if c.rc != nil {
			if ferr := c.rc.FlushBatch(); err == nil {
				err = ferr
			}
		}
	} else {
		_, err = c.wnb.WriteTo(c.nc)
	}
	c.wnb = nil
	if err != nil {
		if c.closed.Load() {
			err = ErrClosed
		}
		c.werr = fmt.Errorf("transport: write to %s: %w", c.nc.RemoteAddr(), err)
		closeQuietly(c.nc)
		return c.werr
	}
	return nil
}

// interruptReads makes the connection's reads, the one in progress and
// every later one, fail at once (a Server draining).
func (c *Conn) interruptReads() {
	if c.dl != nil {
		c.dl.interrupt()
		return
	}
	setReadDeadline(c.nc, time.Now())
}

// Close closes the connection; a blocked read or write returns.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	err := c.nc.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
