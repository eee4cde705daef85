package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Over mutual TLS (a server behind tlsconf.Settings.Listener, a client
// dialled with ConnConfig.TLS) frames arrive intact whatever their size,
// with many small frames from concurrent callers coalesced into one write
// (Conn.wbuf) and a 16 MiB payload written past the buffer; a plaintext
// client gets no answer.
func TestClientServerOverTLS(t *testing.T) {
	cliTLS, addr := startTLSServer(t)
	cl := dial(t, addr, ClientConfig{Conn: ConnConfig{TLS: cliTLS}})
	if cl.conn.wbuf == nil {
		t.Fatal("a TLS connection without its write buffer")
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for i := range 256 { // 1 KiB chunks from 256 callers: batched writes
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := bytes.Repeat([]byte{byte(i), byte(i >> 8), 7}, 342)[:1024]
			res, err := cl.Call(ctx, &WriteChunk{ContainerID: 1, LocalID: 1, Offset: uint64(i), Length: 1024, Checksums: []uint32{crcOf(data)}}, data)
			if err != nil {
				errs <- err
				return
			}
			res.Release()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{9, 8, 7, 6, 5}, 16<<20/5)
	if res, err := cl.Call(ctx, &WriteChunk{ContainerID: 1, LocalID: 2, Length: uint64(len(big)), Checksums: []uint32{crcOf(big)}}, big); err != nil {
		t.Fatal(err)
	} else {
		res.Release()
	}
	for i, want := range map[int][]byte{3: bytes.Repeat([]byte{3, 0, 7}, 342)[:1024], 255: bytes.Repeat([]byte{255, 0, 7}, 342)[:1024]} {
		res, err := cl.Call(ctx, &ReadChunk{ContainerID: 1, LocalID: 1, Offset: uint64(i), Length: 1024})
		if err != nil || !bytes.Equal(res.Payload, want) {
			t.Fatalf("chunk %d read back: %v", i, err)
		}
		res.Release()
	}
	res, err := cl.Call(ctx, &ReadChunk{ContainerID: 1, LocalID: 2, Length: uint64(len(big))})
	if err != nil || !bytes.Equal(res.Payload, big) {
		t.Fatalf("16 MiB chunk read back: %v", err)
	}
	res.Release()

	// Plaintext: the handshake fails on the server, the call with it.
	pc, err := DialClient(ctx, addr, ClientConfig{RequestTimeout: 5e9})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, pc)
	if _, err := pc.Call(ctx, &GetBlock{ContainerID: 1, LocalID: 1}); err == nil {
		t.Fatal("a plaintext call to a TLS server answered")
	}
}

// writeCounter counts the writes that reach the socket beneath TLS.
type writeCounter struct {
	net.Conn
	writes atomic.Int64
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	return w.Conn.Write(p)
}

// A frame's TLS records leave as one batch (tlsconf.RecordConn): a 4 MiB
// WriteChunk, 256 records of 16 KiB, reaches the client's socket in one
// write per tlsconf.MaxBatchBytes (crypto/tls alone writes each record),
// arrives intact through the server's read buffer, and the server's reply
// (a Conn over the Listener's RecordConn) comes back.
func TestTLSFrameRecordsBatched(t *testing.T) {
	cliTLS, addr := startTLSServer(t)
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	wc := &writeCounter{Conn: raw}
	ctx := context.Background()
	nc, err := cliTLS.Client(ctx, wc, addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := NewClient(nc, ClientConfig{})
	t.Cleanup(func() { closeT(t, cl) })
	if cl.conn.rc == nil {
		t.Fatal("a TLS connection from tlsconf.Settings without its RecordConn")
	}
	const size = 4 << 20
	big := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, size/7+1)[:size]
	before := wc.writes.Load()
	res, err := cl.Call(ctx, &WriteChunk{ContainerID: 1, LocalID: 3, Length: size, Checksums: []uint32{crcOf(big)}}, big)
	if err != nil {
		t.Fatal(err)
	}
	res.Release()
	if n, limit := wc.writes.Load()-before, int64(size/tlsconf.MaxBatchBytes+1); n > limit {
		t.Fatalf("a %d-byte frame (%d records) reached the socket in %d writes, want at most %d", size, size/(16<<10), n, limit)
	}
	res, err = cl.Call(ctx, &ReadChunk{ContainerID: 1, LocalID: 3, Length: size})
	if err != nil || !bytes.Equal(res.Payload, big) {
		t.Fatalf("4 MiB chunk read back: %v", err)
	}
	res.Release()
}

// localTLS makes a local PKI for 127.0.0.1 and returns the settings of a
// datanode (server) and of an admin (client).
func localTLS(tb testing.TB) (srv, cli *tlsconf.Settings) {
	tb.Helper()
	pki, err := tlsconf.EnsureLocal(tb.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	if srv, err = pki.Settings(tlsconf.RoleDatanode); err != nil {
		tb.Fatal(err)
	}
	if cli, err = pki.Settings(tlsconf.RoleAdmin); err != nil {
		tb.Fatal(err)
	}
	return srv, cli
}

// startTLSServer serves a storeHandler over mutual TLS (the local PKI's
// datanode certificate) on 127.0.0.1 until the test ends, and returns the
// settings of a client with the admin certificate and the address.
func startTLSServer(t *testing.T) (*tlsconf.Settings, string) {
	t.Helper()
	srvTLS, cliTLS := localTLS(t)
	h := &storeHandler{chunks: map[[3]uint64][]byte{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerConfig{Handler: h.handle, Logger: quietLogger})
	done := make(chan error, 1)
	go func() { done <- s.Serve(srvTLS.Listener(l)) }()
	t.Cleanup(func() {
		closeT(t, s)
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return cliTLS, l.Addr().String()
}
