package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Over mutual TLS (a server behind tlsconf.Settings.Listener, a client
// dialled with ConnConfig.TLS) frames arrive intact whatever their size,
// with many small frames from concurrent callers coalesced into one write
// (Conn.wbuf) and a 16 MiB payload written past the buffer; a plaintext
// client gets no answer.
func TestClientServerOverTLS(t *testing.T) {
	pki, err := tlsconf.EnsureLocal(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.Settings(tlsconf.RoleDatanode)
	if err != nil {
		t.Fatal(err)
	}
	cliTLS, err := pki.Settings(tlsconf.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	h := &storeHandler{chunks: map[[3]uint64][]byte{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerConfig{Handler: h.handle, Logger: quietLogger})
	done := make(chan error, 1)
	go func() { done <- s.Serve(srvTLS.Listener(l)) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	addr := l.Addr().String()
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
	defer pc.Close()
	if _, err := pc.Call(ctx, &GetBlock{ContainerID: 1, LocalID: 1}); err == nil {
		t.Fatal("a plaintext call to a TLS server answered")
	}
}
