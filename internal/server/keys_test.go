package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// value returns n deterministic bytes for seed.
func value(seed, n int) []byte {
	out := make([]byte, n)
	x := uint64(seed)*0x9E3779B97F4A7C15 + 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = byte(x)
	}
	return out
}

const (
	testChunk = 64 << 10
	testBlock = 1 << 20
)

func keyClient(t *testing.T, s *Server) *keyclient.Client {
	t.Helper()
	kc, err := keyclient.New(s.Meta(), keyclient.Options{ChunkSize: testChunk, BlockSize: testBlock, CommitEvery: 4 * testChunk,
		Pipeline: client.Options{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, kc) })
	return kc
}

func startServer(t *testing.T, dir string, mutate ...func(*Config)) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := testConfig(dir)
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, kc *keyclient.Client, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var buf bytes.Buffer
	if _, err := kc.Get(ctx, bucket, key, &buf, keyclient.GetOptions{}); err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	return buf.Bytes()
}

// TestKeysThroughTheEmbeddedCluster: keys from 0 bytes to more than a block
// put and read back byte for byte through the meta service and three
// datanode processes, ranged reads across a block boundary, and everything
// still there after the whole cluster restarts.
func TestKeysThroughTheEmbeddedCluster(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	kc := keyClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// Datanode dnN (its directories, its log file) is node N in the meta
	// service (they registered in the order they started: issue 18).
	nodes, err := s.Meta().Nodes(ctx)
	if err != nil {
		testutil.CloseT(t, s)
		t.Fatal(err)
	}
	for _, n := range s.cluster.Nodes() {
		if i := slices.IndexFunc(nodes, func(ni metaapi.NodeInfo) bool { return ni.Addr == n.Addr }); i < 0 || nodes[i].NodeID != uint64(n.ID) {
			testutil.CloseT(t, s)
			t.Fatalf("dn%d at %s: the meta service lists %+v", n.ID, n.Addr, nodes)
		}
	}
	if _, err := kc.CreateBucket(ctx, "data"); err != nil {
		testutil.CloseT(t, s)
		t.Fatal(err)
	}
	sizes := []int{0, 1, testChunk - 1, testChunk, testBlock, testBlock + 1, 3*testBlock + 12345}
	for i, n := range sizes {
		if _, err := kc.Put(ctx, "data", fmt.Sprintf("k/%d", n), bytes.NewReader(value(i, n)), keyclient.PutOptions{}); err != nil {
			testutil.CloseT(t, s)
			t.Fatalf("put %d bytes: %v", n, err)
		}
	}
	check := func(kc *keyclient.Client) {
		for i, n := range sizes {
			if got := get(t, kc, "data", fmt.Sprintf("k/%d", n)); !bytes.Equal(got, value(i, n)) {
				t.Fatalf("key of %d bytes: %d bytes back, not equal", n, len(got))
			}
		}
		var buf bytes.Buffer
		last := len(sizes) - 1
		off, ln := int64(testBlock-100), int64(300)
		if _, err := kc.GetRange(ctx, "data", fmt.Sprintf("k/%d", sizes[last]), off, ln, &buf, keyclient.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), value(last, sizes[last])[off:off+ln]) {
			t.Fatal("range across a block boundary: wrong bytes")
		}
	}
	check(kc)
	if _, err := kc.Stat(ctx, "data", "missing"); !errors.Is(err, metaapi.ErrNotFound) {
		t.Fatalf("stat of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := kc.Put(ctx, "data", "../x", bytes.NewReader(nil), keyclient.PutOptions{}); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("put of an invalid key name: %v, want ErrInvalid", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = startServer(t, dir)
	defer testutil.CloseT(t, s)
	check(keyClient(t, s))
}

// failingReader returns n bytes, then an error: a truncated upload.
type failingReader struct {
	r *bytes.Reader
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil {
		return n, errors.New("upload cut")
	}
	return n, nil
}

// TestDatanodeKilledDuringPut: kill -9 of a datanode in the middle of a
// large put: the put completes (the pipelines keep a 2-of-3 raft quorum)
// and reads back byte for byte, as does a key committed before the kill. A
// truncated upload leaves no key; with every datanode gone a put says there
// is no healthy pipeline.
//
// With 3 datanodes every pipeline holds the killed one: once it turns
// STALE (1 s here), blocks go to a pipeline whose raft majority is HEALTHY
// (meta: degradedAllocatable). Before, the put failed at its next block
// with ErrNoPipeline when it outlasted StaleAfter (3 runs in 5).
func TestDatanodeKilledDuringPut(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, func(c *Config) {
		c.Meta.StaleAfter = 1 * time.Second
		c.Meta.DeadAfter = 3 * time.Second
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := kc.CreateBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	before := value(1, 2*testBlock)
	if _, err := kc.Put(ctx, "data", "before", bytes.NewReader(before), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	big := value(2, 12*testBlock)
	var once sync.Once
	killed := make(chan error, 1)
	_, perr := kc.Put(ctx, "data", "big", bytes.NewReader(big), keyclient.PutOptions{Progress: func(done int64) {
		if done >= 3*testBlock {
			once.Do(func() {
				// Kill one datanode (member 1 of the embedded cluster: a
				// member of every pipeline, with 3 datanodes).
				killed <- s.Cluster().Kill(1)
			})
		}
	}})
	select {
	case err := <-killed:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the put finished before a datanode could be killed")
	}
	if perr != nil {
		t.Fatalf("put with one of three datanodes killed: %v", perr)
	}
	if got := get(t, kc, "data", "big"); !bytes.Equal(got, big) {
		t.Fatal("the put survived the kill but the key reads back wrong")
	}
	if got := get(t, kc, "data", "before"); !bytes.Equal(got, before) {
		t.Fatal("a key committed before the kill reads back wrong")
	}
	// Truncated upload: no key.
	if _, err := kc.Put(ctx, "data", "cut", &failingReader{r: bytes.NewReader(value(3, testBlock))}, keyclient.PutOptions{}); err == nil {
		t.Fatal("a truncated upload committed")
	}
	if _, err := kc.Stat(ctx, "data", "cut"); !errors.Is(err, metaapi.ErrNotFound) {
		t.Fatalf("a truncated upload left a key: %v", err)
	}
	// No datanode left: a put fails saying so (once the meta service sees
	// them dead).
	for _, n := range s.Cluster().Nodes() {
		if s.Cluster().Running(n.ID) {
			if err := s.Cluster().Kill(n.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A value small enough to be stored inline needs no datanode: it
	// commits in the meta service alone.
	if _, err := kc.Put(ctx, "data", "inline", bytes.NewReader(value(5, 10)), keyclient.PutOptions{}); err != nil {
		t.Fatalf("an inline put with every datanode dead: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := kc.Put(ctx, "data", "none", bytes.NewReader(value(4, keyclient.DefaultInlineMaxBytes+1)), keyclient.PutOptions{})
		if errors.Is(err, metaapi.ErrNoPipeline) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put with every datanode dead: %v, want ErrNoPipeline", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
