package ecnode_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/ecnode"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// TestShardsOverBulk: shards stored through the bulk server are verified
// before they are kept (a corrupt one is refused and leaves nothing), read
// back by range, and a set opened over them reads the container's bytes,
// also with a shard gone.
func TestShardsOverBulk(t *testing.T) {
	eng, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	dir := filepath.Join(t.TempDir(), "ec")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "9.0.shard.tmp-0123456789abcdef"), []byte("left by a crash"), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := ecnode.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a crash's temporary survived OpenStore: %v", ents)
	}
	srv := bulk.NewServer(eng, 0, quiet)
	srv.Shards = store
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dm := bulk.NewDemux(ln, nil, srv.Handle, 0)
	t.Cleanup(func() { _ = dm.Close(); dm.Wait(); srv.Close() })
	addr := ln.Addr().String()

	p, _ := ec.ParsePolicy("rs-3-2")
	p.CellBytes = 16 << 10
	data := make([]byte, 200<<10+123)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	bufs := make([]*bytes.Buffer, p.Shards())
	dst := make([]io.Writer, p.Shards())
	for i := range bufs {
		bufs[i] = &bytes.Buffer{}
		dst[i] = bufs[i]
	}
	if err := ec.Encode(bytes.NewReader(data), int64(len(data)), p, 42, dst); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bad := bytes.Clone(bufs[0].Bytes())
	bad[100] ^= 1
	if err := bulk.PutShard(ctx, nil, addr, 42, 0, bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, bulk.ErrRemote) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a corrupt shard: %v", err)
	}
	if err := bulk.PutShard(ctx, nil, addr, 42, 1, bytes.NewReader(bufs[0].Bytes()), int64(bufs[0].Len())); err == nil {
		t.Fatal("shard 0 stored as shard 1")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("refused shards left files: %v", ents)
	}
	for i, b := range bufs {
		if err := bulk.PutShard(ctx, nil, addr, 42, i, bytes.NewReader(b.Bytes()), int64(b.Len())); err != nil {
			t.Fatal(err)
		}
	}
	readers := make([]io.ReaderAt, p.Shards())
	for i := range readers {
		r := &bulk.ShardReader{Addr: addr, Container: 42, Index: i}
		t.Cleanup(func() { _ = r.Close() })
		readers[i] = r
	}
	check := func(what string) {
		s, err := ec.Open(readers)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := make([]byte, len(data))
		if _, err := s.ReadAt(got, 0); err != nil && err != io.EOF || !bytes.Equal(got, data) {
			t.Fatalf("%s: read back: equal %v, %v", what, bytes.Equal(got, data), err)
		}
		part := make([]byte, 5000)
		if _, err := s.ReadAt(part, 70000); err != nil || !bytes.Equal(part, data[70000:75000]) {
			t.Fatalf("%s: range: %v", what, err)
		}
	}
	check("every shard")
	if err := os.Remove(store.Path(42, 1)); err != nil {
		t.Fatal(err)
	}
	_ = readers[1].(*bulk.ShardReader).Close()
	check("shard 1 gone")
	if got, err := store.Shards(); err != nil || len(got[42]) != 4 {
		t.Fatalf("shards listed: %v %v", got, err)
	}
	// A quarantined shard: not held, listed as quarantined, its copy
	// deleted by DropQuarantined (the meta service's answer once it was
	// rebuilt elsewhere).
	if err := store.Quarantine(ecapi.ShardRef{Container: 42, Index: 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := store.Shards(); err != nil || len(got[42]) != 3 {
		t.Fatalf("shards listed with one quarantined: %v %v", got, err)
	}
	if q, err := store.Quarantined(); err != nil || len(q) != 1 || q[0] != (ecapi.ShardRef{Container: 42, Index: 2}) {
		t.Fatalf("quarantined: %v %v", q, err)
	}
	if ok, err := store.DropQuarantined(ecapi.ShardRef{Container: 42, Index: 2}); !ok || err != nil {
		t.Fatalf("drop the quarantined copy: %v %v", ok, err)
	}
	if q, err := store.Quarantined(); err != nil || len(q) != 0 {
		t.Fatalf("quarantined after the drop: %v %v", q, err)
	}
	if _, err := os.Stat(store.Path(42, 2) + ".corrupt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the quarantined copy is still there: %v", err)
	}
}

func TestSpecs(t *testing.T) {
	for text, want := range map[string]string{
		"rep3": "rep3", "rs-3-2": "rs-3-2", "rs-6-3,cell=1MiB": "rs-6-3", "rs-10-4,cell=64KiB,min-age=2h,min-bytes=1GiB": "rs-10-4,cell=65536,min-age=2h0m0s,min-bytes=1073741824",
	} {
		s, err := ec.ParseSpec(text)
		if err != nil || s.String() != want {
			t.Fatalf("%q: %q, %v (want %q)", text, s.String(), err, want)
		}
		if back, err := ec.ParseSpec(s.String()); err != nil || back != s {
			t.Fatalf("%q does not read back: %+v %v", s.String(), back, err)
		}
	}
	for _, bad := range []string{"", "rs-4-2", "rep3,cell=1MiB", "rs-3-2,cell=1000", "rs-3-2,cell=32MiB", "rs-3-2,min-age=-1h", "rs-3-2,colour=red", "rs-3-2,cell=1MiB,cell=2MiB"} {
		if _, err := ec.ParseSpec(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// TestShardRolesOverTLS: over TLS only a datanode's certificate may store
// a shard, and a meta member's may not read one (clients, gateways and
// datanodes may).
func TestShardRolesOverTLS(t *testing.T) {
	pki, err := tlsconf.EnsureLocal(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tlsconf.LoadCA(filepath.Join(pki.Dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	settings := func(r tlsconf.Role) *tlsconf.Settings {
		c, k, err := ca.Issue(tlsconf.IssueRequest{Name: "test-" + string(r), Role: r, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		cp, kp, err := tlsconf.WritePair(certDir, "test-"+string(r), c, k)
		if err != nil {
			t.Fatal(err)
		}
		s, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: pki.CA})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	eng, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	store, err := ecnode.OpenStore(filepath.Join(t.TempDir(), "ec"))
	if err != nil {
		t.Fatal(err)
	}
	srv := bulk.NewServer(eng, 0, quiet)
	srv.Shards = store
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dm := bulk.NewDemux(ln, settings(tlsconf.RoleDatanode), srv.Handle, 0)
	t.Cleanup(func() { _ = dm.Close(); dm.Wait(); srv.Close() })
	addr := ln.Addr().String()

	p, _ := ec.ParsePolicy("rs-3-2")
	p.CellBytes = 16 << 10
	data := bytes.Repeat([]byte("shard"), 10000)
	bufs := make([]*bytes.Buffer, p.Shards())
	dst := make([]io.Writer, p.Shards())
	for i := range bufs {
		bufs[i] = &bytes.Buffer{}
		dst[i] = bufs[i]
	}
	if err := ec.Encode(bytes.NewReader(data), int64(len(data)), p, 5, dst); err != nil {
		t.Fatal(err)
	}
	put := func(r tlsconf.Role) error {
		return bulk.PutShard(context.Background(), settings(r), addr, 5, 0, bytes.NewReader(bufs[0].Bytes()), int64(bufs[0].Len()))
	}
	for _, r := range []tlsconf.Role{tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin, tlsconf.RoleMeta} {
		if err := put(r); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("a shard stored with the %s certificate: %v, want forbidden", r, err)
		}
	}
	if err := put(tlsconf.RoleDatanode); err != nil {
		t.Fatal(err)
	}
	read := func(r tlsconf.Role) error {
		sr := &bulk.ShardReader{Sec: settings(r), Addr: addr, Container: 5, Index: 0}
		defer func() { _ = sr.Close() }()
		b := make([]byte, 64)
		_, err := sr.ReadAt(b, 0)
		return err
	}
	if err := read(tlsconf.RoleMeta); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("a shard read with the meta certificate: %v, want forbidden", err)
	}
	for _, r := range []tlsconf.Role{tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleDatanode, tlsconf.RoleAdmin} {
		if err := read(r); err != nil {
			t.Fatalf("a shard read with the %s certificate: %v", r, err)
		}
	}
}

// TestShardGenerationsOverBulk: a later generation's shards go over the
// bulk address under the generation (bytes 17..19 of the request), are
// kept beside generation 0's under names of their own, listed with their
// generation, read back as their own set; one stored again is refused
// (another attempt's never replaced), one whose header names another
// generation than the request's is refused.
func TestShardGenerationsOverBulk(t *testing.T) {
	eng, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	store, err := ecnode.OpenStore(filepath.Join(t.TempDir(), "ec"))
	if err != nil {
		t.Fatal(err)
	}
	srv := bulk.NewServer(eng, 0, quiet)
	srv.Shards = store
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dm := bulk.NewDemux(ln, nil, srv.Handle, 0)
	t.Cleanup(func() { _ = dm.Close(); dm.Wait(); srv.Close() })
	addr := ln.Addr().String()
	ctx := context.Background()
	p := ec.Policy{Data: 2, Parity: 1, CellBytes: 16 << 10}
	enc := func(data []byte, gen uint32) [][]byte {
		bufs := make([]bytes.Buffer, p.Shards())
		dst := make([]io.Writer, p.Shards())
		for i := range bufs {
			dst[i] = &bufs[i]
		}
		if err := ec.EncodeGeneration(bytes.NewReader(data), int64(len(data)), p, 8, gen, dst); err != nil {
			t.Fatal(err)
		}
		out := make([][]byte, len(bufs))
		for i := range bufs {
			out[i] = bufs[i].Bytes()
		}
		return out
	}
	old, young := bytes.Repeat([]byte("old generation "), 5000), []byte("the live blocks")
	g0, g2 := enc(old, 0), enc(young, 2)
	for i := range p.Shards() {
		if err := bulk.PutShard(ctx, nil, addr, 8, i, bytes.NewReader(g0[i]), int64(len(g0[i]))); err != nil {
			t.Fatal(err)
		}
		if err := bulk.PutShardGeneration(ctx, nil, addr, 8, 2, i, bytes.NewReader(g2[i]), int64(len(g2[i]))); err != nil {
			t.Fatal(err)
		}
	}
	if err := bulk.PutShardGeneration(ctx, nil, addr, 8, 2, 0, bytes.NewReader(g2[0]), int64(len(g2[0]))); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("generation 2's shard 0 stored twice: %v", err)
	}
	if err := bulk.PutShard(ctx, nil, addr, 8, 0, bytes.NewReader(g0[0]), int64(len(g0[0]))); err != nil {
		t.Fatalf("generation 0's shard stored again (a conversion's retry): %v", err)
	}
	if err := bulk.PutShardGeneration(ctx, nil, addr, 8, 3, 1, bytes.NewReader(g2[1]), int64(len(g2[1]))); err == nil {
		t.Fatal("a generation 2 shard stored as generation 3")
	}
	held, err := store.Held()
	if err != nil || len(held) != 6 {
		t.Fatalf("held %v %v", held, err)
	}
	for _, h := range held {
		if h.Generation != 0 && h.Generation != 2 {
			t.Fatalf("held %+v", h)
		}
		if _, err := os.Stat(store.PathOf(h.ShardRef)); err != nil {
			t.Fatal(err)
		}
	}
	for gen, want := range map[uint32][]byte{0: old, 2: young} {
		readers := make([]io.ReaderAt, p.Shards())
		for i := range readers {
			sr := &bulk.ShardReader{Addr: addr, Container: 8, Generation: gen, Index: i}
			t.Cleanup(func() { _ = sr.Close() })
			readers[i] = sr
		}
		readers[1] = nil // one missing: the other generation's is never used instead
		set, err := ec.Open(readers)
		if err != nil || set.Generation() != gen {
			t.Fatalf("generation %d: %v", gen, err)
		}
		got := make([]byte, len(want))
		if _, err := set.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("generation %d read back: %v", gen, err)
		}
	}
	if ok, err := store.Drop(ecapi.ShardRef{Container: 8, Index: 1}, 0); ok || err != nil {
		t.Fatalf("dropped with a wrong mtime: %v %v", ok, err)
	}
}
