package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults and limits of ClientConfig.
const (
	DefaultWindow         = 64
	MaxWindow             = 4096
	DefaultRequestTimeout = 30 * time.Second
)

// ClientConfig configures a Client. Zero fields take the defaults above.
type ClientConfig struct {
	Conn ConnConfig
	// Window is the most requests outstanding at once on the connection;
	// Call blocks (back-pressure) while the window is full. Clamped to
	// [1, MaxWindow].
	Window int
	// RequestTimeout bounds a Call whose context has no deadline, from the
	// moment it is made (waiting for a window slot included). Negative: no
	// timeout.
	RequestTimeout time.Duration
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	c.Window = min(c.Window, MaxWindow)
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return c
}

// Client pipelines requests on one connection: up to Window outstanding,
// each answered by the Response with its request ID, in any order. One
// goroutine reads the responses; one goroutine writes the requests: callers
// queue their frames and everything queued meanwhile goes out in one
// gathered write, so that many callers sharing a connection cost one
// writev per batch, not one per request. Frames leave in the order they
// were queued (CallQueued tells a caller when its frame is). Safe for
// concurrent use.
//
// A connection error (read or write, a bad frame from the server, Close)
// fails every outstanding request and every later Call with that error; a
// Client is not redialled — make a new one.
type Client struct {
	conn    *Conn
	timeout time.Duration
	sem     chan struct{} // window slots
	done    chan struct{} // closed when the reader has exited

	mu      sync.Mutex
	pending map[uint64]*Result
	nextID  uint64
	err     error // sticky; set once, under mu

	// Write side: frames queued in wq, written by writeLoop.
	wmu     sync.Mutex
	wq      *sendBatch // accepting frames; nil: none queued
	spare   *Encoder   // a reset Encoder for the next batch
	wsig    chan struct{}
	wclosed bool          // no more batches: writeLoop has exited
	wdone   chan struct{} // closed when writeLoop has exited

	late     atomic.Uint64
	batches  atomic.Uint64
	received atomic.Uint64 // response frames read
}

// sendBatch is frames written together; done is closed once they are
// written (or will never be), err then says how it went.
type sendBatch struct {
	enc  *Encoder
	done chan struct{}
	err  error
}

// DialClient connects to addr over TCP (and TLS when cfg.Conn.TLS says
// so) and returns a Client on the connection.
func DialClient(ctx context.Context, addr string, cfg ClientConfig) (*Client, error) {
	nc, err := cfg.Conn.TLS.PinDatanode().Dial(ctx, addr) // datanodes only (issue 33)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", addr, err)
	}
	return NewClient(nc, cfg), nil
}

// NewClient returns a Client on nc (see NewConn) and starts its reader.
func NewClient(nc net.Conn, cfg ClientConfig) *Client {
	cfg = cfg.withDefaults()
	c := &Client{
		conn:    NewConn(nc, cfg.Conn),
		timeout: cfg.RequestTimeout,
		sem:     make(chan struct{}, cfg.Window),
		done:    make(chan struct{}),
		pending: make(map[uint64]*Result, cfg.Window),
		wsig:    make(chan struct{}, 1),
		wdone:   make(chan struct{}),
	}
	go c.readLoop()
	go c.writeLoop()
	return c
}

// Result is a successful Call's response. Payload (a ReadChunk's data)
// belongs to the caller until Release; so do the Response's slices.
type Result struct {
	Response Response
	Payload  []byte

	buf   *[]byte       // pooled buffer holding Payload
	err   error         // set by the reader or fail
	done  chan struct{} // one delivery per use
	timer *time.Timer
}

var resultPool = sync.Pool{New: func() any { return &Result{done: make(chan struct{}, 1)} }}

// Release gives the Result and its payload buffer back for reuse. Neither
// may be used afterwards. Calling it is optional (garbage collection
// reclaims an unreleased Result) but saves allocations.
func (r *Result) Release() {
	if r == nil {
		return
	}
	putBuf(r.buf)
	r.buf, r.Payload, r.err = nil, nil, nil
	resultPool.Put(r)
}

// Call sends req with payload as its frame's payload and waits for the
// response. It sets req's request ID. It blocks while the window is full.
// A Response with a status other than OK is returned as a *StatusError;
// context cancellation or the request timeout wrap the context's error
// (context.DeadlineExceeded for the timeout); a connection error is the
// error every outstanding request fails with.
//
// Call does not retain req or payload once it returns. If it gives up
// before the response arrives, the request may still be executed by the
// server; its late response is discarded (LateResponses counts them).
func (c *Client) Call(ctx context.Context, req Request, payload ...[]byte) (*Result, error) {
	return c.CallQueued(ctx, nil, req, payload...)
}

// CallQueued is Call that also reports when the request is queued: it
// calls queued (unless nil) exactly once, from the calling goroutine and
// before it returns — as soon as the request's frame is queued on the
// connection, or when the Call ends without queueing it (an error before
// that point). A frame queued after queued was called goes out on the
// connection after this one: callers that each start their request once
// the previous one's queued was called put their requests on the wire in
// that order (and a server reading the connection, as transport.Server
// does, handles them in that order).
func (c *Client) CallQueued(ctx context.Context, queued func(), req Request, payload ...[]byte) (*Result, error) {
	r := resultPool.Get().(*Result)
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		if r.timer == nil {
			r.timer = time.NewTimer(c.timeout)
		} else {
			r.timer.Reset(c.timeout)
		}
		timeout = r.timer.C
	}
	res, err := c.call(ctx, req, payload, r, timeout, queued)
	if r.timer != nil {
		r.timer.Stop()
	}
	if err != nil {
		r.Release()
		return nil, err
	}
	return res, nil
}

// call makes one Call; queued, unless nil, is called once the frame is
// queued, or on return when it never was.
func (c *Client) call(ctx context.Context, req Request, payload [][]byte, r *Result, timeout <-chan time.Time, queued func()) (*Result, error) {
	if queued != nil {
		defer func() {
			if queued != nil {
				queued()
			}
		}()
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("transport: %s: %w", req.Type(), err)
	}
	select {
	case c.sem <- struct{}{}:
	default:
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("transport: %s waiting for a window slot: %w", req.Type(), ctx.Err())
		case <-timeout:
			return nil, fmt.Errorf("transport: %s waiting for a window slot for %v: %w", req.Type(), c.timeout, context.DeadlineExceeded)
		case <-c.done:
			return nil, c.Err()
		}
	}
	defer func() { <-c.sem }()

	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextID++
	id := c.nextID
	req.setRequestID(id)
	c.pending[id] = r
	c.mu.Unlock()

	batch, err := c.queue(req, payload)
	if queued != nil {
		queued()
		queued = nil
	}
	if batch != nil {
		// Call never returns while its payload may still be read: the
		// batch is done once written, or once its write has failed or
		// will never happen (bounded by the write timeout).
		defer func() { <-batch.done }()
	}
	if err != nil {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalid) {
			if !c.withdraw(id, r) {
				<-r.done // failed meanwhile by a connection error
			}
			return nil, err
		}
		c.fail(err) // delivers the error to r, below
	}
	// A write error fails the connection, and with it r.

	var gaveUp error
	select {
	case <-r.done:
	case <-ctx.Done():
		gaveUp = fmt.Errorf("transport: %s request %d: %w", req.Type(), id, ctx.Err())
	case <-timeout:
		gaveUp = fmt.Errorf("transport: %s request %d: no response within %v: %w", req.Type(), id, c.timeout, context.DeadlineExceeded)
	}
	if gaveUp != nil {
		if c.withdraw(id, r) {
			return nil, gaveUp
		}
		// The reader (or fail) took r out of pending and is delivering
		// it, with no I/O in between: take the delivery.
		<-r.done
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := r.Response.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

// queue adds a frame to the batch being gathered and wakes the writer. It
// refuses (ErrTooLarge, ErrInvalid) a frame the Encoder refuses, with
// nothing queued.
func (c *Client) queue(req Request, payload [][]byte) (*sendBatch, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wclosed {
		return nil, fmt.Errorf("transport: client writer stopped: %w", ErrClosed)
	}
	b := c.wq
	if b == nil {
		enc := c.spare
		c.spare = nil
		if enc == nil {
			enc = &Encoder{}
		}
		b = &sendBatch{enc: enc, done: make(chan struct{})}
	}
	if err := b.enc.Append(req, payload...); err != nil {
		if c.wq == nil { // a new batch with nothing in it: keep its Encoder
			c.spare = b.enc
		}
		return nil, err
	}
	if c.wq == nil {
		c.wq = b
		select {
		case c.wsig <- struct{}{}:
		default:
		}
	}
	return b, nil
}

// writeLoop writes the queued batches, each with one gathered write, until
// the connection breaks or the client closes; then it fails what is still
// queued. It is the only writer of requests on the connection.
func (c *Client) writeLoop() {
	defer close(c.wdone)
	var err error
	for err == nil {
		select {
		case <-c.wsig:
		case <-c.done: // the reader exited: the connection is broken
			err = c.Err()
			if err == nil {
				err = fmt.Errorf("transport: client closed: %w", ErrClosed)
			}
			continue
		}
		// Let the callers that are runnable now (woken by the
		// responses of the last batch) queue their frames first: they
		// join this write instead of costing one each.
		runtime.Gosched()
		c.wmu.Lock()
		b := c.wq
		c.wq = nil
		c.wmu.Unlock()
		if b == nil {
			continue
		}
		c.batches.Add(1)
		err = c.conn.SendBatch(b.enc)
		b.err = err
		b.enc.Reset()
		close(b.done)
		if err != nil {
			c.fail(err)
			break
		}
		c.wmu.Lock()
		if c.spare == nil {
			c.spare = b.enc
		}
		c.wmu.Unlock()
	}
	c.wmu.Lock()
	c.wclosed = true
	b := c.wq
	c.wq = nil
	c.wmu.Unlock()
	if b != nil {
		b.err = err
		b.enc.Reset()
		close(b.done)
	}
}

// withdraw takes r out of pending if it is still there (and so will never
// be delivered); false means a delivery to r.done is made or on its way.
func (c *Client) withdraw(id uint64, r *Result) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[id] != r {
		return false
	}
	delete(c.pending, id)
	return true
}

// readLoop reads responses and hands each to its caller.
func (c *Client) readLoop() {
	defer close(c.done)
	var scratch Response
	for {
		t, h, n, err := c.conn.ReadHeader()
		if err != nil {
			c.fail(err)
			return
		}
		if t != TypeResponse {
			c.fail(badFrame("unexpected %s frame from a server", t))
			return
		}
		c.received.Add(1)
		if err := scratch.Unmarshal(h); err != nil {
			c.fail(err)
			return
		}
		var buf *[]byte
		var payload []byte
		if n > 0 {
			buf = getBuf(n)
			if payload, err = c.conn.ReadPayload(*buf); err != nil {
				putBuf(buf)
				c.fail(err)
				return
			}
		}
		c.mu.Lock()
		r := c.pending[scratch.RequestID]
		if r != nil {
			delete(c.pending, scratch.RequestID)
		}
		c.mu.Unlock()
		if r == nil {
			c.late.Add(1)
			putBuf(buf)
			continue
		}
		r.Response, scratch = scratch, r.Response
		r.Payload, r.buf = payload, buf
		r.done <- struct{}{}
	}
}

// fail breaks the client with err: every outstanding request fails with
// it, and so does every later Call.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		if errors.Is(err, ErrClosed) {
			c.err = err
		} else {
			c.err = fmt.Errorf("transport: connection to %s: %w", c.conn.RemoteAddr(), err)
		}
	}
	for id, r := range c.pending {
		delete(c.pending, id)
		r.err = c.err
		r.done <- struct{}{}
	}
	c.mu.Unlock()
	closeQuietly(c.conn)
}

// Err returns the error that broke the client, or nil.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Outstanding is the number of requests waiting for a response.
func (c *Client) Outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Received counts the response frames read from the server so far: a
// prober that sees it unchanged while requests are outstanding knows the
// server has answered nothing meanwhile.
func (c *Client) Received() uint64 { return c.received.Load() }

// Abort breaks the client with err, as a connection error does: every
// outstanding request and every later Call fails with it, and the
// connection is closed. Close still has to be called.
func (c *Client) Abort(err error) { c.fail(err) }

// LateResponses counts responses that arrived for requests whose callers
// had given up.
func (c *Client) LateResponses() uint64 { return c.late.Load() }

// RemoteAddr returns the server's address.
func (c *Client) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// Batches is the number of gathered writes that carried requests: fewer
// than the requests when callers share the connection.
func (c *Client) Batches() uint64 { return c.batches.Load() }

// Close closes the connection; outstanding and later calls fail with
// ErrClosed. It waits for the reader and the writer to exit.
func (c *Client) Close() error {
	c.fail(fmt.Errorf("transport: client closed: %w", ErrClosed))
	<-c.done
	<-c.wdone
	return nil
}
