package keyclient_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/keyclient/fakemeta"
	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// spindleBin is the spindle binary, built once for the tests that start
// real datanodes.
var spindleBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	dir, err := os.MkdirTemp("", "spindle-keyclient-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}()
	spindleBin = filepath.Join(dir, "spindle")
	cmd := exec.Command("go", "build", "-o", spindleBin, "github.com/spindle-store/spindle/cmd/spindle")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building spindle: %v\n", err)
		return 1
	}
	return m.Run()
}

// Sizes of the tests against real datanodes: 64 KiB chunks, 1 MiB blocks.
const (
	rChunk  = 64 << 10
	rBlock  = 1 << 20
	rCommit = 256 << 10
)

// testLog writes a test's log lines to t.Log.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func realOptions(t testing.TB) keyclient.Options {
	return keyclient.Options{
		ChunkSize: rChunk, BlockSize: rBlock, CommitEvery: rCommit, InFlight: 8, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil)),
		Pipeline:       client.Options{Logger: quiet(), RetryTimeout: 30 * time.Second, MaxAttempts: 1000},
		InlineMaxBytes: -1, // the datanodes' path
	}
}

// startPipeline starts a pipeline of three datanodes under root.
func startPipeline(t testing.TB, root string, id uint64) (*localcluster.Cluster, metaapi.Pipeline) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(root, fmt.Sprintf("p%d", id))
	cl, err := localcluster.Start(ctx, localcluster.Config{
		Binary: spindleBin, PipelineID: id, DataDir: filepath.Join(dir, "data"), LogDir: filepath.Join(dir, "log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(20 * time.Second); err != nil {
			t.Errorf("stop pipeline %d: %v", id, err)
		}
		if t.Failed() {
			t.Logf("pipeline %d logs:\n%s", id, cl.Logs())
		}
	})
	mp := metaapi.Pipeline{ID: id, State: "OPEN"}
	for i, a := range cl.Addrs() {
		mp.Members = append(mp.Members, metaapi.Member{NodeID: uint64(i + 1), Addr: a})
	}
	return cl, mp
}

func realSetup(t testing.TB, opts keyclient.Options, ps ...metaapi.Pipeline) (*keyclient.Client, *fakemeta.Meta) {
	t.Helper()
	meta := fakemeta.New(ps...)
	if _, err := meta.CreateBucket(context.Background(), bkt); err != nil {
		t.Fatal(err)
	}
	kc, err := keyclient.New(meta, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, kc) })
	return kc, meta
}

func TestClusterPutGet(t *testing.T) {
	_, p := startPipeline(t, t.TempDir(), 1)
	kc, _ := realSetup(t, realOptions(t), p)
	ctx := testCtx(t)
	sizes := []int{0, 1, rChunk, rBlock, rBlock + 1, 2*rBlock + rBlock/2 + 3}
	for _, size := range sizes {
		data := randomBytes(uint64(size)+100, size)
		key := fmt.Sprintf("size-%d", size)
		res, err := kc.Put(ctx, bkt, key, bytes.NewReader(data), keyclient.PutOptions{})
		if err != nil {
			t.Fatalf("put %d bytes: %v", size, err)
		}
		ki := mustGet(t, ctx, kc, key, data)
		if want := (size + rBlock - 1) / rBlock; len(ki.Blocks) != want || res.Failovers != 0 {
			t.Errorf("%d bytes: %d blocks (want %d), result %+v", size, len(ki.Blocks), want, res)
		}
		t.Logf("%d bytes: %d chunks, %d PutBlocks, %d holes resent", size, res.Chunks, res.PutBlocks, res.Holes)
	}
	// Ranges across the blocks of the largest value.
	size := sizes[len(sizes)-1]
	data := randomBytes(uint64(size)+100, size)
	key := fmt.Sprintf("size-%d", size)
	for _, r := range [][2]int{{0, 1}, {rBlock - 1, 2}, {rBlock - 100, rBlock + 200}, {size - 1, 1}, {12345, size - 12345}, {2 * rBlock, rBlock / 2}} {
		var got bytes.Buffer
		if _, err := kc.GetRange(ctx, bkt, key, int64(r[0]), int64(r[1]), &got, keyclient.GetOptions{}); err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		if !bytes.Equal(got.Bytes(), data[r[0]:r[0]+r[1]]) {
			t.Errorf("range %v: bytes differ", r)
		}
	}
	// A truncated upload commits nothing.
	cut := errors.New("client went away")
	if _, err := kc.Put(ctx, bkt, "truncated", &errReader{bytes.NewReader(randomBytes(1, 3*rBlock/2)), cut}, keyclient.PutOptions{}); !errors.Is(err, cut) {
		t.Fatalf("truncated put: %v", err)
	}
	mustNotExist(t, ctx, kc, "truncated")
}

// triggerReader calls fn once, when the bytes read reach at.
type triggerReader struct {
	r     io.Reader
	at, n int
	fn    func()
}

func (r *triggerReader) Read(p []byte) (int, error) {
	if r.fn != nil && r.n >= r.at {
		r.fn()
		r.fn = nil
	}
	if r.fn != nil {
		p = p[:min(len(p), r.at-r.n)]
	}
	k, err := r.r.Read(p)
	r.n += k
	return k, err
}

// leaderOf finds the pipeline's leader by writing a probe chunk.
func leaderOf(t *testing.T, cl *localcluster.Cluster) *localcluster.Node {
	t.Helper()
	c, err := client.New(cl.Addrs(), cl.PipelineID(), client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, c)
	if _, err := c.WriteChunk(testCtx(t), client.BlockID{Container: 999, Local: uint64(time.Now().UnixNano())}, 0, []byte("probe")); err != nil {
		t.Fatal(err)
	}
	n := cl.Node(c.Leader())
	if n == nil {
		t.Fatalf("leader %q is not a member", c.Leader())
	}
	return n
}

// A datanode (the leader) killed with SIGKILL during a large put: the put
// completes through the other two, and every key reads back byte for byte.
func TestClusterKillLeaderDuringPut(t *testing.T) {
	cl, p := startPipeline(t, t.TempDir(), 1)
	kc, _ := realSetup(t, realOptions(t), p)
	ctx := testCtx(t)
	values := map[string][]byte{}
	for i := range 3 {
		k := fmt.Sprintf("before-%d", i)
		values[k] = randomBytes(uint64(200+i), rBlock/2+i*rChunk)
		if _, err := kc.Put(ctx, bkt, k, bytes.NewReader(values[k]), keyclient.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	leader := leaderOf(t, cl)
	big := randomBytes(300, 12*rBlock+rChunk/3)
	start := time.Now()
	res, err := kc.Put(ctx, bkt, "big", &triggerReader{r: bytes.NewReader(big), at: 4 * rBlock, fn: func() {
		if err := cl.Kill(leader.ID); err != nil {
			t.Errorf("kill: %v", err)
		}
		t.Logf("killed the leader, datanode %d (%s), %v into the put", leader.ID, leader.Addr, time.Since(start).Round(time.Millisecond))
	}}, keyclient.PutOptions{})
	if err != nil {
		// Allowed, with a clear error and no key; not expected with two
		// of three members alive.
		t.Logf("put failed: %v", err)
		mustNotExist(t, ctx, kc, "big")
	} else {
		values["big"] = big
		t.Logf("put of %d bytes with the leader killed: %v, %d chunks, %d PutBlocks, %d holes resent, %d failovers",
			len(big), time.Since(start).Round(time.Millisecond), res.Chunks, res.PutBlocks, res.Holes, res.Failovers)
	}
	if cl.Running(leader.ID) {
		t.Fatal("the leader is still running")
	}
	values["after"] = randomBytes(400, rBlock+5)
	if _, err := kc.Put(ctx, bkt, "after", bytes.NewReader(values["after"]), keyclient.PutOptions{}); err != nil {
		t.Fatalf("put with a member down: %v", err)
	}
	for k, v := range values {
		mustGet(t, ctx, kc, k, v)
	}
	if _, ok := values["big"]; !ok {
		t.Errorf("the put failed with two of three members alive")
	}
}

// Two members of a pipeline killed during a put: the pipeline has no
// quorum, the put ends that pipeline's block at its last checkpoint and
// goes on on the other pipeline; the key reads back once the members are
// back.
func TestClusterPipelineFailover(t *testing.T) {
	root := t.TempDir()
	cl1, p1 := startPipeline(t, root, 1)
	_, p2 := startPipeline(t, root, 2)
	o := realOptions(t)
	o.Pipeline.RetryTimeout, o.Pipeline.AttemptTimeout = 3*time.Second, time.Second
	kc, _ := realSetup(t, o, p1, p2)
	ctx := testCtx(t)
	data := randomBytes(500, 8*rBlock+rChunk+1)
	res, err := kc.Put(ctx, bkt, "moved", &triggerReader{r: bytes.NewReader(data), at: 5 * rBlock / 2, fn: func() {
		for _, id := range []int{1, 2} {
			if err := cl1.Kill(id); err != nil {
				t.Errorf("kill: %v", err)
			}
		}
	}}, keyclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("result: %d chunks, %d PutBlocks, %d holes, %d failovers, excluded %v", res.Chunks, res.PutBlocks, res.Holes, res.Failovers, res.Excluded)
	if res.Failovers < 1 || len(res.Excluded) != 1 || res.Excluded[0] != 1 {
		t.Errorf("result %+v: want pipeline 1 excluded after a failover", res)
	}
	var total uint64
	for i, b := range res.Key.Blocks {
		total += b.Length
		t.Logf("block %d: pipeline %d, %d/%d, %d bytes", i, b.Pipeline, b.Container, b.Local, b.Length)
	}
	if total != uint64(len(data)) {
		t.Errorf("blocks add up to %d, value %d", total, len(data))
	}
	for _, id := range []int{1, 2} {
		if err := cl1.Restart(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, ctx, kc, "moved", data)
}

// A replica whose block file is damaged on disk: reads go to another
// replica; with every replica damaged the get fails with ErrCorrupt.
func TestClusterCorruptReplica(t *testing.T) {
	cl, p := startPipeline(t, t.TempDir(), 1)
	kc, _ := realSetup(t, realOptions(t), p)
	ctx := testCtx(t)
	data := randomBytes(600, rBlock/2)
	res, err := kc.Put(ctx, bkt, "k", bytes.NewReader(data), keyclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Key.Blocks[0]
	for i, n := range cl.Nodes() {
		flipByte(t, n.DataDir, b.BlockRef, int64(1000+i))
		if i < len(cl.Nodes())-1 {
			mustGet(t, ctx, kc, "k", data)
		}
	}
	if _, err := kc.Get(ctx, bkt, "k", io.Discard, keyclient.GetOptions{}); !errors.Is(err, keyclient.ErrCorrupt) {
		t.Fatalf("get with every replica damaged: %v; want ErrCorrupt", err)
	}
}

// flipByte damages one byte of block b's file under a datanode's volume.
func flipByte(t *testing.T, dataDir string, b metaapi.BlockRef, at int64) {
	t.Helper()
	if err := engine.FlipBlockByte(dataDir, engine.BlockID{Container: engine.ContainerID(b.Container), Local: b.Local}, at, 0xff); err != nil {
		t.Fatal(err)
	}
}

// replacedOnce answers the first GetKey with a version whose blocks are
// gone (as a version replaced, whose blocks the meta service deleted, looks
// to a reader that looked it up just before), then with the key as it is.
type replacedOnce struct {
	*fakemeta.Meta
	gone bool
}

func (r *replacedOnce) GetKey(ctx context.Context, bucket, key string) (metaapi.KeyInfo, error) {
	ki, err := r.Meta.GetKey(ctx, bucket, key)
	if err != nil || r.gone {
		return ki, err
	}
	r.gone = true
	old := ki
	old.Blocks = slices.Clone(ki.Blocks)
	for i := range old.Blocks {
		old.Blocks[i].Local += 1000 // blocks no replica holds
	}
	return old, nil
}

// TestClusterGetOfAReplacedVersion: a get that looked up a version whose
// blocks were deleted before it read them (the key was overwritten
// meanwhile) reads the key as it is now instead of failing. Before, it
// answered NOT_FOUND from every replica (bench chaos counted these as
// failed gets, block_not_found).
func TestClusterGetOfAReplacedVersion(t *testing.T) {
	_, p := startPipeline(t, t.TempDir(), 1)
	meta := &replacedOnce{Meta: fakemeta.New(p)}
	if _, err := meta.CreateBucket(context.Background(), bkt); err != nil {
		t.Fatal(err)
	}
	kc, err := keyclient.New(meta, realOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	ctx := testCtx(t)
	data := randomBytes(601, 5000)
	if _, err := kc.Put(ctx, bkt, "k", bytes.NewReader(data), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ctx, kc, "k", data)
	if !meta.gone {
		t.Fatal("the test's meta service never answered with the replaced version")
	}
}
