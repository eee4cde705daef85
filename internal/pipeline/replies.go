package pipeline

import (
	"sync"

	"github.com/spindle-store/spindle/internal/transport"
)

// maxQueuedRepliesPerConn bounds the responses waiting for one client
// connection (a client pipelines at most transport.MaxWindow): one that
// overflows does not read them, and is closed (its requests in progress
// are carried out, their answers dropped).
const maxQueuedRepliesPerConn = 2 * transport.MaxWindow

// reply is a response to a client request, written by its connection's
// reply writer.
type reply struct {
	conn    *transport.Conn
	resp    *transport.Response
	payload []byte
}

// connReplies is one connection's queue of responses: a writer goroutine
// runs while it is not empty (started by the push that finds it idle,
// gone once it has written everything): a client that stops reading
// stalls its own answers only.
type connReplies struct {
	q       []reply
	running bool
	closed  bool // overflowed: the connection is closed, replies dropped
}

// replies holds the reply queues of the connections that have answers in
// flight.
type replies struct {
	mu    sync.Mutex
	conns map[*transport.Conn]*connReplies
}

// pushReply queues r for its connection's writer, starting the writer if it
// is idle. It never blocks (the loop and the apply worker answer through
// it).
func (n *Node) pushReply(r reply) {
	rs := &n.replies
	rs.mu.Lock()
	cr := rs.conns[r.conn]
	if cr == nil {
		cr = &connReplies{}
		rs.conns[r.conn] = cr
	}
	if cr.closed {
		rs.mu.Unlock()
		return
	}
	if len(cr.q) >= maxQueuedRepliesPerConn {
		cr.closed = true
		clear(cr.q)
		cr.q = nil
		rs.mu.Unlock()
		n.log.Warn("client does not read its responses: closing its connection", "remote", r.conn.RemoteAddr(), "queued", maxQueuedRepliesPerConn)
		n.metrics.replyOverflows.Inc()
		closeQuietly(r.conn)
		return
	}
	cr.q = append(cr.q, r)
	start := !cr.running
	cr.running = true
	rs.mu.Unlock()
	if start {
		n.wg.Add(1)
		go n.writeReplies(r.conn, cr)
	}
}

// writeReplies writes c's queued responses, everything queued meanwhile in
// one gathered write, until the queue is empty. A write that fails or times
// out (transport.ConnConfig.WriteTimeout) breaks and closes c; what is
// queued for it afterwards is dropped the same way.
func (n *Node) writeReplies(c *transport.Conn, cr *connReplies) {
	defer n.wg.Done()
	var enc transport.Encoder
	var batch []reply
	rs := &n.replies
	for {
		rs.mu.Lock()
		if len(cr.q) == 0 || cr.closed {
			cr.running = false
			if rs.conns[c] == cr {
				delete(rs.conns, c)
			}
			rs.mu.Unlock()
			return
		}
		batch = append(batch[:0], cr.q...)
		clear(cr.q)
		cr.q = cr.q[:0]
		rs.mu.Unlock()
		for _, r := range batch {
			if err := enc.Append(r.resp, r.payload); err != nil {
				n.log.Warn("response not encodable", "err", err)
			}
		}
		clear(batch)
		if enc.Frames() > 0 {
			if err := c.SendBatch(&enc); err != nil {
				n.log.Debug("client write failed", "remote", c.RemoteAddr(), "err", err)
			}
		}
		enc.Reset()
	}
}
