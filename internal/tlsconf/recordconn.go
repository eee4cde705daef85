package tlsconf

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
)

// RecordConn is the net.Conn beneath every tls.Conn that Settings makes
// (Server, Client, Dial, Listener). crypto/tls hands it each encrypted
// record (≤ 16 KiB of plaintext) with a write of its own, and reads about
// one record per read: a 1 MiB frame would be 64 write syscalls on the
// sender and as many reads on the receiver. RecordConn lets a data-path
// writer gather those records, and its reader read many at once:
//
//   - Writes pass straight through, except between BeginBatch and
//     FlushBatch: the records written meanwhile (by the batch's writer, or
//     an alert from another goroutine) are collected in one buffer, in the
//     order crypto/tls wrote them, and written with one write of up to
//     MaxBatchBytes (a larger batch is written every MaxBatchBytes).
//     The handshake, alerts and every connection whose owner never calls
//     BeginBatch are written as they come.
//   - Reads go through a buffer of the size BufferReads asked for (none
//     until then: the handshake and connections that do not ask read
//     directly), so one read syscall brings in as many records as have
//     arrived.
//
// A write that RecordConn collected returns success before its bytes are
// on the socket; FlushBatch reports the error of writing them, and an
// owner must treat that as a broken connection (crypto/tls does not know
// of it). Nothing about the records changes: the bytes on the wire are the
// ones crypto/tls produced, in its order.
//
// Concurrency: crypto/tls serialises its writes (its write lock), so
// Write is never called concurrently; BeginBatch and FlushBatch come from
// one goroutine at a time (the owner's writer, outside any tls.Conn call),
// and a mutex orders them with the writes. FlushBatch does not hold the
// mutex while it writes, so that a concurrent Close (whose close_notify
// alert is then collected behind the batch) closes the socket at once
// instead of waiting for the batch. Reads come from crypto/tls's reader
// (one goroutine at a time, its read lock).
type RecordConn struct {
	net.Conn

	mu       sync.Mutex
	batching bool    // between BeginBatch and the end of FlushBatch
	buf      *[]byte // collected records (batching), from batchPool

	readBufBytes atomic.Int64  // BufferReads' size; 0: direct reads
	br           *bufio.Reader // the read buffer, made at the first read after BufferReads

	guard atomic.Pointer[Guard] // the Guard tracking this connection (set at its handshake)
}

// Close closes the connection and ends its tracking by a Guard.
func (c *RecordConn) Close() error {
	if g := c.guard.Load(); g != nil {
		g.untrack(c)
	}
	return c.Conn.Close()
}

// MaxBatchBytes bounds the records a RecordConn collects before it writes
// them (during a batch): 64 records of 16 KiB, a 1 MiB frame in one write.
const MaxBatchBytes = 1 << 20

// batchPool holds the buffers of batches in progress: a connection holds
// one only between BeginBatch and FlushBatch.
var batchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, MaxBatchBytes+maxRecordBytes)
	return &b
}}

// maxRecordBytes bounds one TLS 1.3 record on the wire: 16 KiB of
// plaintext, its content type, padding none, a 16-byte tag, a 5-byte
// header (256 bytes of expansion allowed by RFC 8446).
const maxRecordBytes = 16<<10 + 256 + 5

// NewRecordConn wraps c; Settings does it for every connection it secures.
func NewRecordConn(c net.Conn) *RecordConn { return &RecordConn{Conn: c} }

// NetConn is the connection beneath c (its socket, for callers that look
// at the socket itself, as httpdirect's check of an idle connection).
func (c *RecordConn) NetConn() net.Conn { return c.Conn }

// RecordConnOf returns the RecordConn beneath c (a tls.Conn made by
// Settings, or a type embedding one), nil for any other connection.
func RecordConnOf(c net.Conn) *RecordConn {
	nc, ok := c.(interface{ NetConn() net.Conn })
	if !ok {
		return nil
	}
	rc, _ := nc.NetConn().(*RecordConn)
	return rc
}

// BufferReads makes the reads to come go through a buffer of n bytes
// (n ≤ 0: no change). Call it once, before the connection's reader starts
// reading data (the buffer is made by the reader itself at its next read).
func (c *RecordConn) BufferReads(n int) {
	if n > 0 {
		c.readBufBytes.CompareAndSwap(0, int64(n))
	}
}

// Read reads through the read buffer once BufferReads asked for one.
func (c *RecordConn) Read(p []byte) (int, error) {
	if c.br == nil {
		n := c.readBufBytes.Load()
		if n == 0 {
			return c.Conn.Read(p)
		}
		c.br = bufio.NewReaderSize(c.Conn, int(n))
	}
	return c.br.Read(p)
}

// Write writes p, or collects it while a batch is open.
func (c *RecordConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.batching {
		c.mu.Unlock()
		return c.Conn.Write(p)
	}
	defer c.mu.Unlock()
	b := c.buf
	if b == nil { // FlushBatch is writing the previous buffer
		b = batchPool.Get().(*[]byte)
		c.buf = b
	}
	if len(*b) > 0 && len(*b)+len(p) > MaxBatchBytes {
		// Only the batch's own writer gets here (FlushBatch does not
		// collect), so writing now keeps the records in order.
		_, err := c.Conn.Write(*b)
		*b = (*b)[:0]
		if err != nil {
			return 0, err
		}
	}
	*b = append(*b, p...)
	return len(p), nil
}

// BeginBatch starts collecting the records written from now on, until
// FlushBatch.
func (c *RecordConn) BeginBatch() {
	c.mu.Lock()
	c.batching = true
	c.mu.Unlock()
}

// FlushBatch writes the records collected since BeginBatch in one write
// (and what was collected while it wrote), then lets writes pass through
// again. An error is a broken connection.
func (c *RecordConn) FlushBatch() error {
	c.mu.Lock()
	for {
		b := c.buf
		if b == nil || len(*b) == 0 {
			c.batching = false
			c.buf = nil
			c.mu.Unlock()
			putBatch(b)
			return nil
		}
		c.buf = nil // a write meanwhile collects into a new buffer
		c.mu.Unlock()
		_, err := c.Conn.Write(*b)
		putBatch(b)
		c.mu.Lock()
		if err != nil {
			putBatch(c.buf)
			c.buf = nil
			c.batching = false
			c.mu.Unlock()
			return err
		}
	}
}

func putBatch(b *[]byte) {
	if b == nil {
		return
	}
	if cap(*b) > 2*MaxBatchBytes {
		return // grown by an oversized write: not kept
	}
	*b = (*b)[:0]
	batchPool.Put(b)
}

// recordListener is tls.NewListener with a RecordConn beneath each
// connection.
type recordListener struct {
	net.Listener
	cfg *tls.Config
}

// Accept returns the next connection as a TLS server connection (its
// handshake runs at its first read or write).
func (l recordListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(NewRecordConn(c), l.cfg), nil
}
