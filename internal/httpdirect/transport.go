// Package httpdirect is an HTTP/1.1 client transport (an
// http.RoundTripper) in which the calling goroutine does the whole
// exchange: it writes the request, reads the answer's head and, through
// the response body, the rest, on a kept-alive connection of its own
// pool. net/http's Transport hands each request to a connection's writer
// goroutine and each answer from its reader goroutine, four goroutine
// wake-ups per call; for the small, frequent calls of a gateway to the
// meta service (a 4 KiB object's whole server work is ~200 µs of CPU on
// the project's machine) those wake-ups are a measured part of the cost
// (docs/ARCHITECTURE.md §17.1). Here a call costs the one wake-up of its
// own goroutine when the answer arrives.
//
// What it does not do: proxies, HTTP/2, 100-continue, redirects (the
// http.Client above it follows those), response compression. Requests go
// to req.URL.Host ("http" or "https" only).
//
// Invariants:
//   - A connection is used by one call at a time: taken from the idle
//     pool (or dialled) by RoundTrip, and put back only once its answer's
//     body was read to its end, the answer did not ask to close, and the
//     call's ctx did not cut it (its deadline was not forced). Anything
//     else closes it.
//   - A pooled connection is at most IdleTimeout idle, and its socket is
//     peeked at before each reuse (one non-blocking recv): a peer's close
//     or stray bytes drop it, so a restarted server costs no failed call
//     where net/http's reader goroutine would have seen the close.
//   - A request is written once, except on a reused connection that
//     failed before any byte of an answer came back when the request is
//     replayable (GET or HEAD without a body): then it is written once
//     more, on a new connection — the same rule as net/http's. Other
//     failures are the caller's to retry (metaapi's rules).
//
// Concurrency: a Transport is safe for concurrent use; its pool is
// guarded by one mutex held only to push or pop.
package httpdirect

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Bounds.
const (
	// DefaultMaxIdlePerHost bounds the idle connections kept per address.
	DefaultMaxIdlePerHost = 64
	// DefaultIdleTimeout closes a connection idle that long (below the
	// meta service's own 2 minutes, so the client, not the server, is
	// the one closing an idle connection as a rule).
	DefaultIdleTimeout = 90 * time.Second
	// bufferBytes is each connection's read and write buffer.
	bufferBytes = 16 << 10
	// drainBytes bounds what Close reads of an unread body to keep its
	// connection; a longer rest closes the connection instead.
	drainBytes = 64 << 10
)

// Transport is an http.RoundTripper; the zero value dials plain TCP for
// http and refuses https.
type Transport struct {
	// DialTLS dials an https address (host:port) and returns a
	// connection whose handshake is done or will be on first use; nil:
	// https refused.
	DialTLS func(ctx context.Context, addr string) (net.Conn, error)
	// MaxIdlePerHost (DefaultMaxIdlePerHost) and IdleTimeout
	// (DefaultIdleTimeout) bound the pool.
	MaxIdlePerHost int
	IdleTimeout    time.Duration

	mu   sync.Mutex
	idle map[string][]*conn // per scheme://host:port, most recent last
}

// conn is one kept-alive connection.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	raw       syscall.RawConn // the socket, for alive; nil when not TCP
	key       string
	idleSince time.Time
}

// errNoAnswer marks a failure before any byte of an answer was read.
type errNoAnswer struct{ err error }

func (e errNoAnswer) Error() string { return e.err.Error() }
func (e errNoAnswer) Unwrap() error { return e.err }

// RoundTrip runs one exchange in the calling goroutine (http.RoundTripper).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Host == "" {
		closeBody(req)
		return nil, errors.New("httpdirect: request without a host")
	}
	addr := req.URL.Host
	switch req.URL.Scheme {
	case "http":
		if req.URL.Port() == "" {
			addr = net.JoinHostPort(req.URL.Hostname(), "80")
		}
	case "https":
		if req.URL.Port() == "" {
			addr = net.JoinHostPort(req.URL.Hostname(), "443")
		}
		if t.DialTLS == nil {
			closeBody(req)
			return nil, errors.New("httpdirect: https without DialTLS")
		}
	default:
		closeBody(req)
		return nil, fmt.Errorf("httpdirect: scheme %q: want http or https", req.URL.Scheme)
	}
	key := req.URL.Scheme + "://" + addr
	replayable := (req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == "") && (req.Body == nil || req.Body == http.NoBody)
	for {
		c, reused := t.take(key)
		if c == nil {
			var err error
			if c, err = t.dial(req.Context(), req.URL.Scheme, addr, key); err != nil {
				closeBody(req)
				return nil, err
			}
		}
		resp, err := t.exchange(c, req)
		var na errNoAnswer
		if err != nil && reused && replayable && errors.As(err, &na) && req.Context().Err() == nil {
			continue // the server closed it while idle: once more on another (a dial, at worst)
		}
		return resp, err
	}
}

// exchange writes req on c and reads the answer's head; the body is read
// by the caller through the response.
func (t *Transport) exchange(c *conn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var deadline time.Time // zero: none
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		_ = c.nc.Close() // broken: its error is the one returned
		closeBody(req)
		return nil, errNoAnswer{err}
	}
	// ctx's end cuts the exchange: a deadline in the past fails any
	// read or write under way.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) error {
		stop()
		_ = c.nc.Close() // broken mid-exchange: never reused
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%w (%v)", cerr, err)
		}
		return err
	}
	if err := req.Write(c.bw); err != nil { // req.Write closes req.Body
		return nil, fail(errNoAnswer{err})
	}
	if err := c.bw.Flush(); err != nil {
		return nil, fail(errNoAnswer{err})
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil, fail(errNoAnswer{err})
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return nil, fail(err)
	}
	b := &body{rc: resp.Body, c: c, t: t, stop: stop, keep: !resp.Close && !req.Close}
	resp.Body = b
	if req.Method == http.MethodHead || resp.ContentLength == 0 {
		b.finish(true)
	}
	return resp, nil
}

// dial opens a connection for key.
func (t *Transport) dial(ctx context.Context, scheme, addr, key string) (*conn, error) {
	var nc net.Conn
	var err error
	if scheme == "https" {
		nc, err = t.DialTLS(ctx, addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, raw: rawOf(nc), br: bufio.NewReaderSize(nc, bufferBytes), bw: bufio.NewWriterSize(nc, bufferBytes), key: key}, nil
}

// take pops the most recently idle connection of key that is still good
// (nil: none); reused says it came from the pool.
func (t *Transport) take(key string) (c *conn, reused bool) {
	now := time.Now()
	for {
		t.mu.Lock()
		l := t.idle[key]
		if len(l) == 0 {
			t.mu.Unlock()
			return nil, false
		}
		c = l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[key] = l[:len(l)-1]
		t.mu.Unlock()
		if now.Sub(c.idleSince) > t.idleTimeout() || !alive(c) {
			_ = c.nc.Close() // stale: nothing to report
			continue
		}
		return c, true
	}
}

// alive peeks at an idle connection's socket without waiting: nothing
// to read (EAGAIN) means the peer still holds it open; an end of stream,
// an error or stray bytes (a TLS close_notify, an HTTP 408) mean it is
// done with. Buffered bytes the connection already holds count as stray.
func alive(c *conn) bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.raw == nil {
		return true // no socket to look at (not TCP): the exchange will tell
	}
	ok := false
	var b [1]byte
	err := c.raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = rerr == syscall.EAGAIN
		return true // never wait for readiness
	})
	return err == nil && ok
}

// rawOf is the socket under nc, through its wrappers (TLS, and the
// tlsconf.RecordConn beneath it), nil when it has none.
func rawOf(nc net.Conn) syscall.RawConn {
	for range 4 { // a bound on the wrappers looked through
		if sc, ok := nc.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				return rc
			}
			return nil
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = u.NetConn()
	}
	return nil
}

// put returns c to the pool (or closes it when the pool is full).
func (t *Transport) put(c *conn) {
	c.idleSince = time.Now()
	max := t.MaxIdlePerHost
	if max <= 0 {
		max = DefaultMaxIdlePerHost
	}
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*conn)
	}
	if l := t.idle[c.key]; len(l) < max {
		t.idle[c.key] = append(l, c)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	_ = c.nc.Close() // the pool is full
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return DefaultIdleTimeout
}

// CloseIdleConnections closes the pooled connections (http.Client's
// CloseIdleConnections calls it).
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			_ = c.nc.Close() // idle: nothing to report
		}
	}
}

// body is an answer's body; its end puts the connection back.
type body struct {
	rc   io.ReadCloser
	c    *conn
	t    *Transport
	stop func() bool
	keep bool
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

// Close reads what is left of a short rest, to keep the connection.
func (b *body) Close() error {
	if b.done {
		return nil
	}
	n, err := io.CopyN(io.Discard, b.rc, drainBytes+1)
	b.finish(err == io.EOF && n <= drainBytes)
	return nil
}

// finish ends the exchange: the connection back to the pool when whole.
func (b *body) finish(whole bool) {
	if b.done {
		return
	}
	b.done = true
	cut := !b.stop() // ctx ended: its deadline was forced into the past
	if whole && b.keep && !cut {
		b.t.put(b.c)
		return
	}
	_ = b.c.nc.Close() // not reusable: nothing to report
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close() // RoundTrip must close it, even on error
	}
}
