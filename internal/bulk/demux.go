package bulk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// MaxPeeking bounds the accepted connections the demux holds: those whose
// first bytes have not arrived yet and those classified as data-path
// connections that the server has not taken yet. When it is reached, the
// connection waiting longest for its first bytes is closed to make room:
// silent connections (stuck or hostile) cannot lock out the peers and
// clients that send at once.
const MaxPeeking = 4096

// DefaultFirstBytesTimeout: a connection whose first two bytes have not
// arrived this long after it was accepted is closed, freeing its
// MaxPeeking slot. Every client of both protocols dials when it has a
// request or a batch to send and sends it at once (data-path clients, raft
// peers, fetches), so only a stuck or hostile peer waits that long.
const DefaultFirstBytesTimeout = time.Minute

// Demux shares one listener between the data-path protocol and bulk
// streams. It accepts from ln, peeks at each connection's first two bytes
// with recv(MSG_PEEK) (consuming nothing, and keeping the connection's
// type: a data-path connection stays a *net.TCPConn, so writev and
// sendfile keep working), hands "SB" connections to bulk and returns every
// other one from Accept.
//
// Concurrency: one goroutine accepts; one goroutine per connection waits
// for its first bytes and, for a data-path connection, for the server to
// take it (at most MaxPeeking such connections, the one waiting longest for
// its first bytes closed to make room; each wait bounded in time by the
// first bytes timeout). Close closes ln, every connection still being peeked,
// and ends Accept with net.ErrClosed.
type Demux struct {
	ln         net.Listener
	tls        *tlsconf.Settings
	bulk       func(net.Conn)
	out        chan net.Conn
	done       chan struct{}
	firstBytes time.Duration

	mu sync.Mutex
	// peeking holds every connection the demux holds (MaxPeeking).
	peeking    map[net.Conn]held
	maxPeeking int
	evicted    int // connections closed to make room (tests)
	closed     bool
	err        error
	wg         sync.WaitGroup
}

// held is a connection the demux holds: accepted then, and classified as
// a data-path connection the server has not taken yet (never evicted).
type held struct {
	accepted   time.Time
	classified bool
}

// NewDemux starts demultiplexing ln. A connection whose first two bytes
// (with TLS: its handshake and its first two bytes) have not arrived within
// firstBytesTimeout (0: DefaultFirstBytesTimeout) is closed. sec nil:
// plaintext.
func NewDemux(ln net.Listener, sec *tlsconf.Settings, bulk func(net.Conn), firstBytesTimeout time.Duration) *Demux {
	return newDemux(ln, sec, bulk, firstBytesTimeout, MaxPeeking)
}

func newDemux(ln net.Listener, sec *tlsconf.Settings, bulk func(net.Conn), firstBytesTimeout time.Duration, maxPeeking int) *Demux {
	if firstBytesTimeout <= 0 {
		firstBytesTimeout = DefaultFirstBytesTimeout
	}
	d := &Demux{ln: ln, tls: sec, bulk: bulk, out: make(chan net.Conn), done: make(chan struct{}),
		peeking: map[net.Conn]held{}, maxPeeking: maxPeeking,
		firstBytes: firstBytesTimeout}
	d.wg.Add(1)
	go d.acceptLoop()
	return d
}

// maxAcceptBackoff bounds the wait before accepting again after an accept
// error that is not the listener's end (EMFILE, ENFILE, ENOMEM,
// ECONNABORTED: the process or the kernel is short of something for a
// while; closing the listener would turn a transient shortage into a
// datanode that serves nothing while it still heartbeats).
const maxAcceptBackoff = time.Second

func (d *Demux) acceptLoop() {
	defer d.wg.Done()
	var backoff time.Duration
	for {
		c, err := d.ln.Accept()
		if err != nil && !errors.Is(err, net.ErrClosed) {
			backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
			slog.Warn("bulk: accept failed; retrying", "addr", d.ln.Addr(), "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-d.done:
			}
		}
		if err != nil {
			d.mu.Lock()
			if d.err == nil {
				d.err = err
			}
			d.mu.Unlock()
			closeQuietly(d)
			return
		}
		backoff = 0
		d.mu.Lock()
		if !d.closed && len(d.peeking) >= d.maxPeeking {
			d.evictLocked()
		}
		if d.closed || len(d.peeking) >= d.maxPeeking {
			d.mu.Unlock()
			closeQuietly(c)
			continue
		}
		d.peeking[c] = held{accepted: time.Now()}
		d.wg.Add(1)
		d.mu.Unlock()
		go d.classify(c)
	}
}

// evictLocked closes the connection that has waited longest for its first
// bytes (not one classified already): its classifier then fails and frees
// the slot. Its entry goes at once, so the new connection takes the slot.
// A scan of the table, only when it is full. d.mu must be held.
func (d *Demux) evictLocked() {
	var oldest net.Conn
	var at time.Time
	for c, h := range d.peeking {
		if h.classified {
			continue
		}
		if oldest == nil || h.accepted.Before(at) {
			oldest, at = c, h.accepted
		}
	}
	if oldest == nil {
		return // every slot holds a classified connection the server has not taken
	}
	delete(d.peeking, oldest)
	d.evicted++
	closeQuietly(oldest)
}

func (d *Demux) classify(raw net.Conn) {
	defer d.wg.Done()
	c, isBulk, err := raw, false, error(nil)
	if d.tls.Enabled() {
		c, isBulk, err = d.classifyTLS(raw)
		if err != nil {
			slog.Debug("bulk: connection refused", "remote", raw.RemoteAddr(), "err", err)
		}
	} else {
		isBulk, err = peekBulk(c, d.firstBytes)
	}
	d.mu.Lock()
	h, kept := d.peeking[raw] // not evicted meanwhile
	closed := d.closed
	if err != nil || closed || !kept || isBulk {
		delete(d.peeking, raw)
	} else {
		h.classified = true
		d.peeking[raw] = h
	}
	d.mu.Unlock()
	if err != nil || closed || !kept {
		closeQuietly(raw)
		return
	}
	if isBulk {
		d.bulk(c)
		return
	}
	// The server takes it when it has room (transport.MaxConns and its
	// parked connections); until then it holds a slot, for at most the
	// first bytes timeout.
	wait := time.NewTimer(d.firstBytes)
	defer wait.Stop()
	select {
	case d.out <- c:
	case <-d.done:
		closeQuietly(c)
	case <-wait.C:
		slog.Debug("bulk: connection not taken by the server in time; closed", "remote", raw.RemoteAddr())
		closeQuietly(c)
	}
	d.mu.Lock()
	delete(d.peeking, raw)
	d.mu.Unlock()
}

// classifyTLS completes raw's server handshake and reads its first two
// bytes, all within the first bytes timeout; the connection returned gives
// those bytes back first.
func (d *Demux) classifyTLS(raw net.Conn) (net.Conn, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.firstBytes)
	defer cancel()
	c, err := d.tls.Server(ctx, raw)
	if err != nil {
		return nil, false, err
	}
	tc := c.(*tls.Conn)
	if err := tc.SetReadDeadline(time.Now().Add(d.firstBytes)); err != nil {
		return nil, false, err
	}
	var b [2]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		return nil, false, fmt.Errorf("first bytes: %w", err)
	}
	if err := tc.SetReadDeadline(time.Time{}); err != nil {
		return nil, false, err
	}
	return &prefixConn{Conn: tc, pre: b[:]}, b[0] == Magic0 && b[1] == Magic1, nil
}

// prefixConn is a TLS connection whose first bytes were read already: its
// reads return them first.
type prefixConn struct {
	*tls.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// peekBulk waits for the first two bytes of c without consuming them and
// says whether they are the bulk magic; none within timeout is an error
// (the read deadline it sets is cleared again on success). A connection
// that is not a TCP connection is never bulk.
func peekBulk(c net.Conn, timeout time.Duration) (bool, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false, err
	}
	if err := tc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return false, err
	}
	isBulk, err := peekMagic(raw)
	if err != nil {
		return false, err
	}
	return isBulk, tc.SetReadDeadline(time.Time{})
}

func peekMagic(raw syscall.RawConn) (bool, error) {
	var b [2]byte
	deadline := time.Now().Add(RequestTimeout)
	for {
		var n int
		var perr error
		err := raw.Read(func(fd uintptr) bool {
			n, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK)
			return perr != unix.EAGAIN
		})
		if err != nil {
			return false, err
		}
		if perr != nil {
			return false, perr
		}
		if n == 0 {
			return false, errors.New("closed before its first bytes")
		}
		if b[0] != Magic0 {
			return false, nil
		}
		if n >= 2 {
			return b[1] == Magic1, nil
		}
		// One byte so far (both protocols send their first 12+ bytes in
		// one write, so this is rare): the socket stays readable, so poll
		// for the second byte, for at most RequestTimeout.
		if time.Now().After(deadline) {
			return false, errors.New("second byte did not arrive")
		}
		time.Sleep(time.Millisecond)
	}
}

// Accept returns the next data-path connection.
func (d *Demux) Accept() (net.Conn, error) {
	select {
	case c := <-d.out:
		return c, nil
	case <-d.done:
		d.mu.Lock()
		defer d.mu.Unlock()
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes the connections being classified.
func (d *Demux) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	for c := range d.peeking {
		closeQuietly(c)
	}
	d.mu.Unlock()
	return d.ln.Close()
}

// Wait waits for the accept loop and the classifiers to end (after Close).
func (d *Demux) Wait() { d.wg.Wait() }

// Addr is the listener's address.
func (d *Demux) Addr() net.Addr { return d.ln.Addr() }
