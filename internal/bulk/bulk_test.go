package bulk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

const testBPC = 16 << 10

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func blockBytes(b engine.BlockID, n int) []byte {
	out := make([]byte, n)
	x := uint64(b.Container)*1_000_003 + b.Local*7919
	for i := range out {
		x = x*6364136223846793005 + 1442695040888963407
		out[i] = byte(x >> 56)
	}
	return out
}

func openEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, e) })
	return e
}

// fill creates container id with blocks of the given sizes (chunks of at
// most 1 MiB), block i put at commit sequence 10·(i+1), and closes it
// unless open.
func fill(t testing.TB, e *engine.Engine, id engine.ContainerID, open bool, sizes ...int) map[uint64][]byte {
	t.Helper()
	if err := e.CreateContainer(id); err != nil {
		t.Fatal(err)
	}
	want := map[uint64][]byte{}
	for i, n := range sizes {
		b := engine.BlockID{Container: id, Local: uint64(i + 1)}
		data := blockBytes(b, n)
		bd := &engine.BlockData{ID: b, BytesPerChecksum: testBPC, Length: uint64(n)}
		for off := 0; off < n; off += 1 << 20 {
			c := data[off:min(n, off+1<<20)]
			sums := engine.ComputeChecksums(nil, c, testBPC)
			if err := e.WriteChunk(b, uint64(off), c, testBPC, sums); err != nil {
				t.Fatal(err)
			}
			bd.Chunks = append(bd.Chunks, engine.ChunkInfo{Offset: uint64(off), Length: uint64(len(c)), Checksums: sums})
		}
		if err := e.PutBlock(bd, 10*uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		want[b.Local] = data
	}
	if !open {
		if err := e.CloseContainer(id); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// serve starts a Server for e behind a Demux on 127.0.0.1; data-path
// connections come out of the returned Demux.
func serve(t testing.TB, e *engine.Engine, maxExports int) (*Server, *Demux) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(e, maxExports, quiet)
	d := NewDemux(ln, nil, s.Handle, 0)
	t.Cleanup(func() { stopDemux(t, d, s) })
	return s, d
}

// bulkClosingDemux is a plaintext demux on a new loopback listener whose
// bulk connections are closed at once, stopped at the end of the test.
func bulkClosingDemux(t *testing.T, firstBytes time.Duration, maxPeeking int) *Demux {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := newDemux(ln, nil, func(c net.Conn) { testutil.CloseT(t, c) }, firstBytes, maxPeeking)
	t.Cleanup(func() { stopDemux(t, d, nil) })
	return d
}

func importFrom(ctx context.Context, dst *engine.Engine, addr string, id uint64) (FetchResult, error) {
	var im *engine.Importer
	res, err := Fetch(ctx, nil, addr, id, func(h ContainerHeader) (Sink, error) {
		var err error
		im, err = dst.ImportContainer(engine.ContainerID(id), h.MaxSizeBytes, h.BCSID)
		return im, err
	})
	if err == nil {
		err = im.Commit()
	}
	if err != nil {
		err = abortInto(err, im)
	}
	return res, err
}

func TestCopyRoundTrip(t *testing.T) {
	src, dst := openEngine(t), openEngine(t)
	want := fill(t, src, 7, false, 3<<20+123, 1, 64<<10, 5<<20)
	s, d := serve(t, src, 0)
	res, err := importFrom(context.Background(), dst, d.Addr().String(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if res.Blocks != 4 || res.Bytes != 3<<20+123+1+64<<10+5<<20 {
		t.Fatalf("fetched %d blocks, %d bytes", res.Blocks, res.Bytes)
	}
	info, err := dst.Container(7)
	if err != nil || info.State != engine.StateClosed || info.UsedBytes != res.Bytes || info.BCSID != 40 || res.BCSID != 40 {
		t.Fatalf("imported container: %+v (fetched BCSID %d, want the source's 40), %v", info, res.BCSID, err)
	}
	for local, data := range want {
		got, err := dst.ReadChunk(engine.BlockID{Container: 7, Local: local}, 0, uint64(len(data)), nil)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("block %d: %d bytes read, err %v", local, len(got), err)
		}
		a, _ := src.GetBlock(engine.BlockID{Container: 7, Local: local})
		b, _ := dst.GetBlock(engine.BlockID{Container: 7, Local: local})
		if a.Length != b.Length || len(a.Chunks) != len(b.Chunks) {
			t.Fatalf("block %d metadata differs: %+v vs %+v", local, a, b)
		}
	}
	st := s.Stats()
	if st.Exports != 1 || st.Bytes != res.Bytes || !st.Sendfile {
		t.Fatalf("server stats %+v: want one export of %d bytes by sendfile", st, res.Bytes)
	}
}

func TestCopyRefusals(t *testing.T) {
	src, dst := openEngine(t), openEngine(t)
	fill(t, src, 1, true, 1000)
	s, d := serve(t, src, 1)
	addr := d.Addr().String()
	_, err := importFrom(context.Background(), dst, addr, 2)
	if !errors.Is(err, ErrRemote) {
		t.Fatalf("missing container: %v, want ErrRemote", err)
	}
	_, err = importFrom(context.Background(), dst, addr, 1)
	if !errors.Is(err, ErrRemote) {
		t.Fatalf("OPEN container: %v, want ErrRemote", err)
	}
	// A full export semaphore answers BUSY.
	fill(t, src, 3, false, 1000)
	s.sema <- struct{}{}
	_, err = importFrom(context.Background(), dst, addr, 3)
	<-s.sema
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("busy source: %v, want ErrBusy", err)
	}
	if _, err := dst.Container(3); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("refused copy left container 3: %v", err)
	}
	if st := s.Stats(); st.Refused != 3 {
		t.Fatalf("refused %d, want 3", st.Refused)
	}
	// And then it works.
	if _, err := importFrom(context.Background(), dst, addr, 3); err != nil {
		t.Fatal(err)
	}
}

// fakeSource serves one connection with the bytes mangle makes of a real
// export of container id from e.
func fakeSource(t *testing.T, e *engine.Engine, id uint64, mangle func([]byte) []byte) string {
	t.Helper()
	// Capture a real stream first.
	_, d := serve(t, e, 0)
	c, err := Dial(context.Background(), nil, d.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(request{op: OpExportContainer, container: id}.encode()); err != nil {
		t.Fatal(err)
	}
	stream, err := io.ReadAll(c)
	testutil.CloseT(t, c)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		testutil.CloseT(t, ln)
		if err := <-done; err != nil {
			t.Errorf("fake source: %v", err)
		}
	})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- nil // closed by the cleanup: no fetch came
			return
		}
		var rb [requestBytes]byte
		if _, err := io.ReadFull(c, rb[:]); err != nil {
			done <- errors.Join(err, c.Close())
			return
		}
		_, err = c.Write(mangle(stream))
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			err = nil // the fetch stops at the first record it refuses and hangs up on the rest
		}
		done <- errors.Join(err, c.Close())
	}()
	return ln.Addr().String()
}

func TestCopyOfBrokenStreamsLeavesNothing(t *testing.T) {
	src := openEngine(t)
	fill(t, src, 9, false, 2<<20, 300<<10)
	cases := map[string]struct {
		mangle func([]byte) []byte
		want   error
	}{
		"truncated mid-block": {func(b []byte) []byte { return b[:len(b)/2] }, io.ErrUnexpectedEOF},
		"no end record":       {func(b []byte) []byte { return b[:len(b)-endRecordBytes-1] }, io.ErrUnexpectedEOF},
		"flipped data byte": {func(b []byte) []byte {
			out := bytes.Clone(b)
			out[len(out)/3] ^= 1
			return out
		}, engine.ErrCorrupt},
		"bad end record": {func(b []byte) []byte {
			out := bytes.Clone(b)
			out[len(out)-5] ^= 1
			return out
		}, ErrProtocol},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dst := openEngine(t)
			addr := fakeSource(t, src, 9, tc.mangle)
			_, err := importFrom(context.Background(), dst, addr, 9)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if _, err := dst.Container(9); !errors.Is(err, engine.ErrNotFound) {
				t.Fatalf("a broken copy left the container: %v", err)
			}
			if n := len(dst.ListContainers()); n != 0 {
				t.Fatalf("%d containers after a broken copy", n)
			}
		})
	}
}

func TestDemuxPassesDataPathConnections(t *testing.T) {
	e := openEngine(t)
	_, d := serve(t, e, 0)
	c, err := net.Dial("tcp", d.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, c)
	var enc transport.Encoder
	if err := enc.Append(&transport.GetBlock{RequestID: 1, ContainerID: 1, LocalID: 1}); err != nil {
		t.Fatal(err)
	}
	var fb bytes.Buffer
	bufs := enc.Buffers()
	if _, err := bufs.WriteTo(&fb); err != nil {
		t.Fatal(err)
	}
	frame := fb.Bytes()
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	got, err := d.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, got)
	if _, ok := got.(*net.TCPConn); !ok {
		t.Fatalf("data-path connection came out as %T, want *net.TCPConn (writev and sendfile need it)", got)
	}
	buf := make([]byte, len(frame))
	if _, err := io.ReadFull(got, buf); err != nil || !bytes.Equal(buf, frame) {
		t.Fatalf("the peeked bytes were consumed: %q, %v", buf, err)
	}
}

func TestCancelledFetchLeavesNothing(t *testing.T) {
	src, dst := openEngine(t), openEngine(t)
	fill(t, src, 4, false, 4<<20)
	_, d := serve(t, src, 0)
	ctx, cancel := context.WithCancel(context.Background())
	var im *engine.Importer
	_, err := Fetch(ctx, nil, d.Addr().String(), 4, func(h ContainerHeader) (Sink, error) {
		var err error
		im, err = dst.ImportContainer(4, h.MaxSizeBytes, h.BCSID)
		cancel() // the stream is cut before the first block
		return im, err
	})
	if err == nil {
		t.Fatal("a cancelled fetch succeeded")
	}
	if err := im.Abort(); err != nil {
		t.Fatal(err)
	}
	if len(dst.ListContainers()) != 0 {
		t.Fatal("a cancelled fetch left a container")
	}
}

func FuzzDecodeBlockRecord(f *testing.F) {
	bd := &engine.BlockData{ID: engine.BlockID{Container: 1, Local: 5}, Length: 20000, BytesPerChecksum: testBPC,
		Chunks: []engine.ChunkInfo{{Offset: 0, Length: 20000, Checksums: []uint32{1, 2}}}}
	f.Add(appendBlockRecord(nil, bd)[5:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeBlockRecord(1, b)
		if err != nil {
			return
		}
		again := appendBlockRecord(nil, got)[5:]
		if !bytes.Equal(again, b) {
			t.Fatalf("decode/encode not canonical")
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(request{op: OpExportContainer, container: 3}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err == nil && !bytes.Equal(r.encode(), b) {
			t.Fatalf("decode/encode not canonical")
		}
	})
}

func TestDownloadContainer(t *testing.T) {
	src := openEngine(t)
	want := fill(t, src, 5, false, 2<<20+77, 40000)
	_, d := serve(t, src, 0)
	dir := filepath.Join(t.TempDir(), "c5")
	m, err := DownloadContainer(context.Background(), nil, d.Addr().String(), 5, dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Container != 5 || len(m.Blocks) != 2 || m.Bytes != 2<<20+77+40000 || m.BCSID != 20 {
		t.Fatalf("manifest %+v", m)
	}
	for local, data := range want {
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%016x.blk", local)))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("block %d: %d bytes, %v", local, len(got), err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	// A corrupted stream: nothing is left.
	bad := fakeSource(t, src, 5, func(b []byte) []byte {
		out := bytes.Clone(b)
		out[len(out)/2] ^= 1
		return out
	})
	dir2 := filepath.Join(t.TempDir(), "bad")
	if _, err := DownloadContainer(context.Background(), nil, bad, 5, dir2); !errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("corrupted download: %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(dir2); !os.IsNotExist(err) {
		t.Fatalf("a failed download left %s", dir2)
	}
	// A source that sends more than it announced (here: a header saying
	// 1 MiB, used and maximum) is refused before the disk fills.
	liar := fakeSource(t, src, 5, func(b []byte) []byte {
		out := bytes.Clone(b)
		h := out[8 : 8+containerHdrBytes]
		binary.LittleEndian.PutUint64(h[0:], 1<<20)
		binary.LittleEndian.PutUint64(h[8:], 1<<20)
		binary.LittleEndian.PutUint32(h[24:], engine.CRC32C(h[:24]))
		return out
	})
	dir3 := filepath.Join(t.TempDir(), "liar")
	if _, err := DownloadContainer(context.Background(), nil, liar, 5, dir3); !errors.Is(err, ErrProtocol) {
		t.Fatalf("download of more than announced: %v, want ErrProtocol", err)
	}
	if _, err := os.Stat(dir3); !os.IsNotExist(err) {
		t.Fatalf("a refused download left %s", dir3)
	}
	// An existing directory is refused.
	if _, err := DownloadContainer(context.Background(), nil, d.Addr().String(), 5, dir); err == nil {
		t.Fatal("download into an existing directory")
	}
}

// A connection that sends nothing is closed once the first bytes timeout
// passes (its MaxPeeking slot freed); one that sent its first bytes keeps
// no deadline from the demux.
func TestDemuxFirstBytesTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	d := bulkClosingDemux(t, timeout, MaxPeeking)

	silent, err := net.Dial("tcp", d.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, silent)
	if err := silent.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil { // the test's own bound
		t.Fatal(err)
	}
	if n, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("silent connection: read %d, %v; want EOF (closed by the demux)", n, err)
	}

	c, err := net.Dial("tcp", d.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, c)
	frame := []byte("data-path bytes")
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	got, err := d.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, got)
	time.Sleep(2 * timeout) // past the first bytes deadline, had it been left set
	buf := make([]byte, len(frame))
	if _, err := io.ReadFull(got, buf); err != nil || !bytes.Equal(buf, frame) {
		t.Fatalf("data-path connection after the first bytes timeout: %q, %v", buf, err)
	}
}

// emfileListener fails its first Accepts with EMFILE (out of file
// descriptors), then accepts from the real listener.
type emfileListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestDemuxSurvivesEMFILE: accept errors that are not the listener's end
// (EMFILE here) are retried after a bounded backoff; the demux goes on
// passing connections. Before, it closed the shared listener on the first
// one, and the datanode served nothing from then on while it heartbeated
// HEALTHY.
func TestDemuxSurvivesEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &emfileListener{Listener: ln}
	fl.failures.Store(3)
	d := NewDemux(fl, nil, func(c net.Conn) { testutil.CloseT(t, c) }, 0)
	defer stopDemux(t, d, nil)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, c)
	if _, err := c.Write([]byte{0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	got, err := d.Accept()
	if err != nil {
		t.Fatalf("accept after EMFILE: %v", err)
	}
	testutil.CloseT(t, got)
	if fl.failures.Load() >= 0 {
		t.Fatalf("the injected failures were not all seen (%d left)", fl.failures.Load()+1)
	}
}

// With TLS the demux completes each connection's handshake before it
// classifies it: a copy from a peer with a certificate of the cluster's CA
// arrives whole (by read, encrypt, write: Stats.Sendfile is false), a
// data-path connection comes out of Accept with its first bytes intact,
// and a plaintext fetch or one with another CA's certificate is refused
// while the demux keeps serving. The source's TLS records go out gathered
// (tlsconf.RecordConn): about 200 records of 16 KiB in one write per
// tlsconf.MaxBatchBytes, not one per record.
func TestCopyOverTLS(t *testing.T) {
	pkiDir := t.TempDir()
	pki, err := tlsconf.EnsureLocal(pkiDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.Settings(tlsconf.RoleDatanode)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := openEngine(t), openEngine(t)
	want := fill(t, src, 7, false, 3<<20+123, 1, 64<<10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(src, 0, quiet)
	cl := &writeCountingListener{Listener: ln}
	d := NewDemux(cl, srvTLS, s.Handle, 0)
	t.Cleanup(func() { stopDemux(t, d, s) })
	addr := d.Addr().String()

	// Refused: plaintext, and another CA's certificate.
	fetch := func(sec *tlsconf.Settings) (FetchResult, error) {
		var im *engine.Importer
		res, err := Fetch(context.Background(), sec, addr, 7, func(h ContainerHeader) (Sink, error) {
			var err error
			im, err = dst.ImportContainer(7, h.MaxSizeBytes, h.BCSID)
			return im, err
		})
		if err == nil {
			err = im.Commit()
		}
		if err != nil {
			err = abortInto(err, im)
		}
		return res, err
	}
	if _, err := fetch(nil); err == nil {
		t.Fatal("a plaintext fetch from a TLS source succeeded")
	}
	other, err := tlsconf.EnsureLocal(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// The other CA's certificate, trusting the real CA: the source must
	// refuse it (the client would accept the source).
	f := other.Files(tlsconf.RoleDatanode)
	f.CA = pki.CA
	foreign, err := tlsconf.NewSettings(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(foreign); err == nil {
		t.Fatal("a fetch with another CA's certificate succeeded")
	}

	// Refused: a certificate of the cluster whose role may not fetch
	// containers (the gateway's, a meta member's); without
	// authorizeExport they would get the container.
	for _, r := range []tlsconf.Role{tlsconf.RoleS3, tlsconf.RoleMeta} {
		sec, err := pki.Settings(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fetch(sec); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("a fetch with the %s certificate: %v, want forbidden", r, err)
		}
	}

	// Accepted: the cluster's certificate.
	peer, err := pki.Settings(tlsconf.RoleDatanode)
	if err != nil {
		t.Fatal(err)
	}
	before := cl.writes.Load()
	res, err := fetch(peer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Blocks != 3 || s.Stats().Sendfile {
		t.Fatalf("fetched %d blocks, sendfile %v: want 3 blocks, not by sendfile", res.Blocks, s.Stats().Sendfile)
	}
	// The handshake's few writes, then the stream in batches.
	records, batches := res.Bytes/(16<<10), res.Bytes/tlsconf.MaxBatchBytes+1
	if n := uint64(cl.writes.Load() - before); n > batches+4 {
		t.Fatalf("the source wrote %d bytes (%d records) in %d writes, want at most %d", res.Bytes, records, n, batches+4)
	}
	for local, data := range want {
		got, err := dst.ReadChunk(engine.BlockID{Container: 7, Local: local}, 0, uint64(len(data)), nil)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("block %d: %d bytes read, err %v", local, len(got), err)
		}
	}

	// A data-path connection keeps its first bytes.
	read := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		c, err := peer.Dial(context.Background(), addr)
		if err != nil {
			sent <- err
			return
		}
		_, err = c.Write([]byte("SWdata-path"))
		<-read // open until the test has read it
		sent <- errors.Join(err, c.Close())
	}()
	c, err := d.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, c)
	b := make([]byte, len("SWdata-path"))
	_, err = io.ReadFull(c, b)
	close(read)
	if err != nil || string(b) != "SWdata-path" {
		t.Fatalf("data-path connection read %q, %v", b, err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("data-path client: %v", err)
	}
}

// writeCountingListener counts the writes on every connection it accepted.
type writeCountingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeCountingConn{Conn: c, writes: &l.writes}, nil
}

type writeCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *writeCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestDemuxEvictsTheOldestSilentConnection: with every slot held by a
// connection that sends nothing, a new connection that sends at once is
// still served: the one waiting longest is closed to make room. Before,
// the new connection was closed at once (silent connections could lock
// out every raft peer and client for the first bytes timeout).
func TestDemuxEvictsTheOldestSilentConnection(t *testing.T) {
	d := bulkClosingDemux(t, time.Minute, 4)
	held := func() int { d.mu.Lock(); defer d.mu.Unlock(); return len(d.peeking) }
	var silent []net.Conn
	for i := range 4 {
		c, err := net.Dial("tcp", d.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer testutil.CloseT(t, c)
		silent = append(silent, c)
		for deadline := time.Now().Add(10 * time.Second); held() < i+1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the demux holds %d connections, want %d", held(), i+1)
			}
		}
	}
	c, err := net.Dial("tcp", d.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, c)
	if _, err := c.Write([]byte("data-path bytes")); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if got, err := d.Accept(); err == nil {
			accepted <- got
		}
	}()
	select {
	case got := <-accepted:
		testutil.CloseT(t, got)
	case <-time.After(10 * time.Second): // the test's own bound
		t.Fatal("a connection that sent at once was not served while silent ones held every slot")
	}
	if err := silent[0].SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := silent[0].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("oldest silent connection: read %d, %v; want EOF (evicted)", n, err)
	}
	d.mu.Lock()
	evicted := d.evicted
	d.mu.Unlock()
	if evicted != 1 {
		t.Fatalf("%d connections evicted, want 1", evicted)
	}
}

// TestDemuxBoundsTheWaitForTheServer: a data-path connection the server
// does not take (it is at its connection limit) is closed after the first
// bytes timeout and frees its slot, instead of holding a descriptor and a
// goroutine for ever.
func TestDemuxBoundsTheWaitForTheServer(t *testing.T) {
	d := bulkClosingDemux(t, 100*time.Millisecond, 4)
	c, err := net.Dial("tcp", d.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, c)
	if _, err := c.Write([]byte("data-path bytes")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil { // the test's own bound
		t.Fatal(err)
	}
	// Closed with its bytes unread: a reset, or an end of file.
	if n, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection never taken: read %d, %v; want it closed", n, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		d.mu.Lock()
		n := len(d.peeking)
		d.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left after the connection was closed", n)
		}
	}
}
