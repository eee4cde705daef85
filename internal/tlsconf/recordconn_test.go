package tlsconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"
)

// countingConn counts the writes and reads that reach the socket.
type countingConn struct {
	net.Conn
	mu            sync.Mutex
	writes, reads int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Conn.Read(p)
}

func (c *countingConn) counts() (writes, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.reads
}

// tlsPair is a mutual TLS connection over loopback TCP made by Settings
// (client: Client, server: Listener), each over a countingConn beneath its
// RecordConn.
func tlsPair(t *testing.T) (cli, srv *tls.Conn, cliCount, srvCount *countingConn) {
	t.Helper()
	pki, err := EnsureLocal(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srvSet, err := pki.Settings(RoleDatanode)
	if err != nil {
		t.Fatal(err)
	}
	cliSet, err := pki.Settings(RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, l) })
	srvCount = &countingConn{}
	accepted := make(chan *tls.Conn, 1)
	var acceptErr error // set before accepted is closed
	go func() {
		c, err := l.Accept()
		if err != nil {
			acceptErr = err
			close(accepted)
			return
		}
		srvCount.Conn = c
		tc := tls.Server(NewRecordConn(srvCount), srvSet.ServerConfig())
		if err := tc.HandshakeContext(context.Background()); err != nil {
			acceptErr = errors.Join(err, tc.Close())
			close(accepted)
			return
		}
		accepted <- tc
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cliCount = &countingConn{Conn: raw}
	c, err := cliSet.Client(context.Background(), cliCount, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := <-accepted
	if !ok {
		t.Fatalf("server handshake failed: %v", acceptErr)
	}
	cli = c.(*tls.Conn)
	t.Cleanup(func() { testutil.CloseT(t, cli); testutil.CloseT(t, srv) })
	return cli, srv, cliCount, srvCount
}

// The handshake passes through a RecordConn (nothing is held: it would
// never complete otherwise). Between BeginBatch and FlushBatch the records
// of a 4 MiB write (256 records of 16 KiB) reach the socket in one write
// per MaxBatchBytes, 5 in all, instead of one per record (the same write
// outside a batch: 256 and more); the reader, through BufferReads, gets
// them with fewer reads than records; and every byte arrives in order.
func TestRecordConnBatchesRecords(t *testing.T) {
	cli, srv, cliCount, srvCount := tlsPair(t)
	rc := RecordConnOf(cli)
	if rc == nil || RecordConnOf(srv) == nil {
		t.Fatal("a connection from Settings without its RecordConn")
	}
	RecordConnOf(srv).BufferReads(256 << 10)
	const size = 4 << 20
	const records = size / (16 << 10)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	got := make(chan []byte, 2)
	go func() {
		for range 2 {
			b := make([]byte, size)
			if _, err := io.ReadFull(srv, b); err != nil {
				got <- nil
				return
			}
			got <- b
		}
	}()

	w0, _ := cliCount.counts()
	if _, err := cli.Write(data); err != nil {
		t.Fatal(err)
	}
	w1, _ := cliCount.counts()
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatal("unbatched write: bytes differ")
	}
	if w1-w0 < records {
		t.Fatalf("a write outside a batch reached the socket in %d writes; crypto/tls writes each of its %d records", w1-w0, records)
	}

	_, r1 := srvCount.counts()
	rc.BeginBatch()
	if _, err := cli.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := rc.FlushBatch(); err != nil {
		t.Fatal(err)
	}
	w2, _ := cliCount.counts()
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatal("batched write: bytes differ")
	}
	if n, want := w2-w1, size/MaxBatchBytes+1; n != want {
		t.Fatalf("a batch of %d records reached the socket in %d writes, want %d (one per MaxBatchBytes)", records, n, want)
	}
	if _, r2 := srvCount.counts(); r2-r1 >= records {
		t.Fatalf("the buffered reader read %d records with %d reads", records, r2-r1)
	}

	// After the batch, writes pass through again: a small write is on the
	// wire without a flush, and close_notify ends the stream cleanly.
	if _, err := cli.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(srv, b); err != nil || string(b) != "after" {
		t.Fatalf("write after the batch: %q, %v", b, err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Read(b); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read after close_notify: %d, %v", n, err)
	}
}

// A record written while a batch is open by another goroutine (crypto/tls
// writes alerts, such as Close's close_notify, from whichever goroutine
// sends them) is collected behind the batch's records, in order, and goes
// out with FlushBatch (were it written at once, the reader would see the
// stream end before the batch).
func TestRecordConnCollectsOtherWritesInOrder(t *testing.T) {
	cli, srv, cliCount, _ := tlsPair(t)
	rc := RecordConnOf(cli)
	rc.BeginBatch()
	if _, err := cli.Write([]byte("batched")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cli.CloseWrite() }() // close_notify, another goroutine
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// closeNotify leaves a write deadline of now behind it (crypto/tls:
	// "any subsequent writes will fail"); clear it so that the flush
	// can write what was collected.
	if err := cli.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	w0, _ := cliCount.counts()
	if err := rc.FlushBatch(); err != nil {
		t.Fatal(err)
	}
	if w1, _ := cliCount.counts(); w1-w0 != 1 {
		t.Fatalf("FlushBatch wrote %d times, want 1", w1-w0)
	}
	b, err := io.ReadAll(srv)
	if err != nil || string(b) != "batched" {
		t.Fatalf("read %q, %v; want the batch then close_notify's clean end", b, err)
	}
}
