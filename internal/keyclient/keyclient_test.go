package keyclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/keyclient/fakemeta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

const bkt = "bkt"

// Sizes of the tests against fake datanodes: 4 KiB chunks, 64 KiB blocks,
// a checkpoint every 4 chunks.
const (
	fChunk  = 4 << 10
	fBlock  = 64 << 10
	fCommit = 16 << 10
)

func fakeOptions() keyclient.Options {
	return keyclient.Options{
		ChunkSize: fChunk, BlockSize: fBlock, CommitEvery: fCommit, BytesPerChecksum: 1 << 10, InFlight: 4,
		Pipeline: fastPipelineOptions(), Logger: quiet(), ReadAttempts: 1, ReadTimeout: 5 * time.Second,
		InlineMaxBytes: -1, // these tests are of the block path; inline_test.go of values inline
		NoPipelineWait: -1, // an ErrNoPipeline is final; TestPutWaitsForAPipeline tests the wait
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// setup returns a key client on a fake meta service with bucket bkt whose
// blocks go round robin to the pipelines.
func setup(t *testing.T, opts keyclient.Options, pipes ...*fakePipeline) (*keyclient.Client, *fakemeta.Meta) {
	t.Helper()
	var ps []metaapi.Pipeline
	for _, p := range pipes {
		ps = append(ps, p.pipeline())
	}
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

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)}))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// mustGet reads a key back and compares it with want.
func mustGet(t *testing.T, ctx context.Context, kc *keyclient.Client, key string, want []byte) metaapi.KeyInfo {
	t.Helper()
	var got bytes.Buffer
	ki, err := kc.Get(ctx, bkt, key, &got, keyclient.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("get %s: %d bytes differ from the %d put (first difference at %d)", key, got.Len(), len(want), firstDiff(got.Bytes(), want))
	}
	if ki.Size != uint64(len(want)) {
		t.Fatalf("get %s: size %d, want %d", key, ki.Size, len(want))
	}
	return ki
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func mustNotExist(t *testing.T, ctx context.Context, kc *keyclient.Client, key string) {
	t.Helper()
	if ki, err := kc.Stat(ctx, bkt, key); !errors.Is(err, metaapi.ErrNotFound) {
		t.Fatalf("stat %s after a failed put: %+v, %v; want not found", key, ki, err)
	}
}

func TestPutGetSizes(t *testing.T) {
	p := newFakePipeline(t, 1, 3)
	kc, _ := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	for _, size := range []int{0, 1, fChunk - 1, fChunk, fChunk + 1, fCommit, fBlock - 1, fBlock, fBlock + 1, 3*fBlock + 5*fChunk + 7} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			data := randomBytes(uint64(size), size)
			key := fmt.Sprintf("sizes/%d", size)
			var progress []int64
			res, err := kc.Put(ctx, bkt, key, bytes.NewReader(data), keyclient.PutOptions{Progress: func(n int64) { progress = append(progress, n) }})
			if err != nil {
				t.Fatal(err)
			}
			ki := mustGet(t, ctx, kc, key, data)
			if ki.CRC32C != crc(data) || res.Key.CRC32C != ki.CRC32C {
				t.Errorf("crc32c %08x (put said %08x), want %08x", ki.CRC32C, res.Key.CRC32C, crc(data))
			}
			wantBlocks := (size + fBlock - 1) / fBlock
			if len(ki.Blocks) != wantBlocks {
				t.Fatalf("%d blocks, want %d", len(ki.Blocks), wantBlocks)
			}
			for i, b := range ki.Blocks {
				if want := uint64(min(fBlock, size-i*fBlock)); b.Length != want {
					t.Errorf("block %d: length %d, want %d", i, b.Length, want)
				}
				// The datanodes committed exactly what the key records.
				if bd, ok := p.committed(b.BlockRef); !ok || bd.Length != b.Length {
					t.Errorf("block %d: datanode committed %d bytes (%v), key has %d", i, bd.Length, ok, b.Length)
				}
			}
			if wantChunks := (size + fChunk - 1) / fChunk; res.Chunks != wantChunks || res.Failovers != 0 {
				t.Errorf("result %+v: want %d chunks, no failover", res, wantChunks)
			}
			if size > 0 && (!slices.IsSorted(progress) || progress[len(progress)-1] != int64(size)) {
				t.Errorf("progress %v: want non-decreasing up to %d", progress, size)
			}
			if size == 0 && len(progress) != 0 {
				t.Errorf("progress %v for an empty value", progress)
			}
		})
	}
}

// TestPutSizeHint: a size hint sizes the chunk buffers only: values of
// the size hinted, and of more or fewer bytes than hinted, read back
// byte-exact with their CRC32C; with the size right, the chunks are as
// many as without a hint.
func TestPutSizeHint(t *testing.T) {
	p := newFakePipeline(t, 1, 3)
	kc, _ := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	for _, size := range []int{fChunk - 1, fChunk, 2*fChunk + 5, fBlock + 3} {
		for _, hint := range []int{size, size - 100, size + 100, 1} {
			t.Run(fmt.Sprintf("%d-hint-%d", size, hint), func(t *testing.T) {
				data := randomBytes(uint64(size), size)
				key := fmt.Sprintf("hint/%d/%d", size, hint)
				res, err := kc.Put(ctx, bkt, key, bytes.NewReader(data), keyclient.PutOptions{SizeHintBytes: int64(hint)})
				if err != nil {
					t.Fatal(err)
				}
				ki := mustGet(t, ctx, kc, key, data)
				if ki.CRC32C != crc(data) {
					t.Errorf("crc32c %08x, want %08x", ki.CRC32C, crc(data))
				}
				if want := (size + fChunk - 1) / fChunk; hint == size && res.Chunks != want {
					t.Errorf("%d chunks, want %d", res.Chunks, want)
				}
			})
		}
	}
}

func TestPutReplacesKey(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	kc, _ := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	v1, v2 := randomBytes(1, 3*fChunk), randomBytes(2, fBlock+3)
	for _, v := range [][]byte{v1, v2} {
		if _, err := kc.Put(ctx, bkt, "k", bytes.NewReader(v), keyclient.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, ctx, kc, "k", v2)
}

// InFlight chunk writes are outstanding at once, never more: the fake
// datanode holds its answers until that many are waiting.
func TestPutKeepsInFlightChunksOutstanding(t *testing.T) {
	for _, depth := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			const chunks = 64
			p := newFakePipeline(t, 1, 1)
			p.set(func() { p.holdN, p.holdTotal = depth, chunks })
			o := fakeOptions()
			o.InFlight, o.BlockSize = depth, chunks*fChunk
			o.CommitEvery = o.BlockSize // no checkpoint pausing the writes
			kc, _ := setup(t, o, p)
			ctx := testCtx(t)
			data := randomBytes(3, chunks*fChunk)
			if _, err := kc.Put(ctx, bkt, "deep", bytes.NewReader(data), keyclient.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			p.set(func() {
				if p.maxHeld != depth {
					t.Errorf("at most %d chunk writes outstanding, want %d", p.maxHeld, depth)
				}
			})
			mustGet(t, ctx, kc, "deep", data)
		})
	}
}

// With PauseAtCheckpoints, no chunk write of a block is in flight with a
// checkpoint PutBlock of it.
func TestPutPausesAtCheckpoints(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	p.set(func() { p.replyDelay = time.Millisecond })
	o := fakeOptions()
	o.PauseAtCheckpoints = true
	kc, _ := setup(t, o, p)
	ctx := testCtx(t)
	data := randomBytes(14, 3*fBlock+fChunk)
	res, err := kc.Put(ctx, bkt, "k", bytes.NewReader(data), keyclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, ctx, kc, "k", data)
	p.set(func() {
		if p.overlaps != 0 || p.putBlocks < 7 { // 3 full blocks: each a checkpoint or more and its last PutBlock
			t.Errorf("%d overlaps of writes and PutBlocks of one block, %d PutBlocks (%+v)", p.overlaps, p.putBlocks, res)
		}
	})
}

// A chunk refused as a hole (it overtook its predecessor) is sent again
// after the earlier chunks, and the block is committed whole.
func TestPutResendsHoles(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	first := metaapi.BlockRef{Container: 1, Local: 1}
	p.set(func() {
		p.holeOnce[fakeChunkKey{first, 2 * fChunk}] = true
		p.holeOnce[fakeChunkKey{first, 3 * fChunk}] = true
		p.holeOnce[fakeChunkKey{metaapi.BlockRef{Container: 1, Local: 2}, 0}] = true
	})
	kc, _ := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	data := randomBytes(4, fBlock+fChunk)
	res, err := kc.Put(ctx, bkt, "holes", bytes.NewReader(data), keyclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Holes < 3 || res.Failovers != 0 {
		t.Errorf("result %+v: want ≥ 3 holes resent, no failover", res)
	}
	ki := mustGet(t, ctx, kc, "holes", data)
	if bd, _ := p.committed(first); bd.Length != fBlock || len(bd.Chunks) != fBlock/fChunk {
		t.Errorf("first block committed with %d bytes in %d chunks, want %d in %d", bd.Length, len(bd.Chunks), fBlock, fBlock/fChunk)
	}
	if len(ki.Blocks) != 2 {
		t.Errorf("%d blocks, want 2", len(ki.Blocks))
	}
}

// A block's chunks reach the datanode in offset order: with many puts at
// once sharing the pipeline's connections (several per member), no chunk
// write ever arrives past the end of its block (the fake would refuse it
// as a hole), so nothing is sent again. The fake never fails a write, so
// the client never retries one: any hole is a reorder on the way.
func TestPutSendsABlocksChunksInOrder(t *testing.T) {
	p := newFakePipeline(t, 1, 3)
	o := fakeOptions()
	o.InFlight = 16
	o.BlockSize, o.CommitEvery = 64*fChunk, 16*fChunk
	o.Pipeline = client.Options{Logger: quiet(), ConnsPerMember: 4, Window: 32} // retry defaults: generous timeouts
	kc, _ := setup(t, o, p)
	ctx := testCtx(t)
	const puts = 8
	errs := make(chan error, puts)
	holes := make(chan int, puts)
	var wg sync.WaitGroup
	for i := range puts {
		wg.Go(func() {
			data := randomBytes(uint64(100+i), 3*64*fChunk)
			res, err := kc.Put(ctx, bkt, fmt.Sprintf("ordered-%d", i), bytes.NewReader(data), keyclient.PutOptions{})
			if err != nil {
				errs <- err
				return
			}
			holes <- res.Holes
			mustGet(t, ctx, kc, fmt.Sprintf("ordered-%d", i), data)
		})
	}
	wg.Wait()
	close(errs)
	close(holes)
	for err := range errs {
		t.Fatal(err)
	}
	for h := range holes {
		if h != 0 {
			t.Errorf("a put sent %d chunk writes again (refused as holes)", h)
		}
	}
	p.set(func() {
		if p.holes != 0 || p.writes != puts*3*64 {
			t.Errorf("the fake refused %d writes as holes and stored %d chunks, want 0 and %d", p.holes, p.writes, puts*3*64)
		}
	})
}

// A pipeline that fails in the middle of a block: the block ends at its
// last checkpoint, the rest of its bytes go to a new block on the other
// pipeline, and the key reads back byte for byte.
func TestPutFailoverMidBlock(t *testing.T) {
	a, b := newFakePipeline(t, 1, 3), newFakePipeline(t, 2, 3)
	const ok = 10 // chunk writes pipeline a accepts: 2.5 checkpoints' worth
	a.set(func() { a.writesLeft = ok })
	kc, _ := setup(t, fakeOptions(), a, b)
	ctx := testCtx(t)
	data := randomBytes(5, 3*fBlock+100)
	res, err := kc.Put(ctx, bkt, "failover", bytes.NewReader(data), keyclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failovers != 1 || !slices.Equal(res.Excluded, []uint64{1}) {
		t.Errorf("result %+v: want one failover, pipeline 1 excluded", res)
	}
	ki := mustGet(t, ctx, kc, "failover", data)
	first := ki.Blocks[0]
	// Pipeline a accepts 10 chunk writes; chunks that overtook each other
	// on the way (holes) are sent again and count too, so whether a
	// checkpoint was reached before the failure depends on timing. If it
	// was, the key's first block is a short block on pipeline 1, ending at
	// that checkpoint; if not, that block was dropped whole.
	start := 0
	if first.Pipeline == 1 {
		bd, _ := a.committed(first.BlockRef)
		if first.Length == 0 || first.Length%fChunk != 0 || first.Length > ok*fChunk || bd.Length < first.Length {
			t.Errorf("short block of %d bytes (datanode committed %d): want whole chunks, at most %d", first.Length, bd.Length, ok*fChunk)
		}
		start = 1
	} else {
		t.Logf("no checkpoint on pipeline 1 before its failure: its block was dropped")
	}
	var total uint64
	for i, kb := range ki.Blocks {
		total += kb.Length
		if i >= start && kb.Pipeline != 2 {
			t.Errorf("block %d on pipeline %d after pipeline 1 failed", i, kb.Pipeline)
		}
	}
	if total != uint64(len(data)) {
		t.Errorf("blocks add up to %d, value %d", total, len(data))
	}
}

// A failure before a block's first checkpoint drops that block entirely.
func TestPutFailoverBeforeFirstCheckpoint(t *testing.T) {
	a, b := newFakePipeline(t, 1, 1), newFakePipeline(t, 2, 1)
	a.set(func() { a.writesLeft = 2 })
	kc, _ := setup(t, fakeOptions(), a, b)
	ctx := testCtx(t)
	data := randomBytes(6, fBlock/2)
	res, err := kc.Put(ctx, bkt, "early", bytes.NewReader(data), keyclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ki := mustGet(t, ctx, kc, "early", data)
	if res.Failovers != 1 || len(ki.Blocks) != 1 || ki.Blocks[0].Pipeline != 2 || ki.Blocks[0].Length != uint64(len(data)) {
		t.Errorf("result %+v, blocks %+v: want the whole value in one block on pipeline 2", res, ki.Blocks)
	}
}

// Every pipeline fails: the put fails with the reason, and commits nothing.
func TestPutFailsWhenEveryPipelineFails(t *testing.T) {
	t.Run("no pipeline left", func(t *testing.T) {
		a, b := newFakePipeline(t, 1, 1), newFakePipeline(t, 2, 1)
		a.set(func() { a.writesLeft = 5 })
		b.set(func() { b.writesLeft = 0 })
		kc, _ := setup(t, fakeOptions(), a, b)
		ctx := testCtx(t)
		_, err := kc.Put(ctx, bkt, "doomed", bytes.NewReader(randomBytes(7, 2*fBlock)), keyclient.PutOptions{})
		if !errors.Is(err, metaapi.ErrNoPipeline) {
			t.Fatalf("put: %v; want no healthy pipeline", err)
		}
		mustNotExist(t, ctx, kc, "doomed")
	})
	t.Run("max failovers", func(t *testing.T) {
		var ps []*fakePipeline
		for id := range uint64(3) {
			p := newFakePipeline(t, id+1, 1)
			p.set(func() { p.writesLeft = 0 })
			ps = append(ps, p)
		}
		o := fakeOptions()
		o.MaxFailovers = 1
		kc, _ := setup(t, o, ps...)
		ctx := testCtx(t)
		_, err := kc.Put(ctx, bkt, "doomed", bytes.NewReader(randomBytes(7, fBlock)), keyclient.PutOptions{})
		if !errors.Is(err, keyclient.ErrPipelineFailed) {
			t.Fatalf("put: %v; want ErrPipelineFailed", err)
		}
		mustNotExist(t, ctx, kc, "doomed")
	})
	t.Run("no pipeline at all", func(t *testing.T) {
		kc, meta := setup(t, fakeOptions())
		ctx := testCtx(t)
		_, err := kc.Put(ctx, bkt, "doomed", bytes.NewReader([]byte("x")), keyclient.PutOptions{})
		if !errors.Is(err, metaapi.ErrNoPipeline) {
			t.Fatalf("put: %v; want no healthy pipeline", err)
		}
		mustNotExist(t, ctx, kc, "doomed")
		if meta.Commits != 0 {
			t.Errorf("%d commits", meta.Commits)
		}
	})
}

// appearingMeta has no pipeline for its first misses allocations, then
// the one given: a pipeline replaced while a put waits.
type appearingMeta struct {
	*fakemeta.Meta
	p      metaapi.Pipeline
	misses int
	calls  int
}

func (m *appearingMeta) Allocate(ctx context.Context, req metaapi.AllocateRequest) (metaapi.AllocateResponse, error) {
	m.calls++ // the stream allocates from one goroutine
	if m.calls == m.misses+1 {
		m.SetPipelines(m.p)
	}
	return m.Meta.Allocate(ctx, req)
}

// A put that finds no pipeline (the meta service has not yet replaced the
// pipelines of dead datanodes) asks again, bounded by NoPipelineWait, and
// succeeds once one exists; with a negative NoPipelineWait it fails at
// once with ErrNoPipeline.
func TestPutWaitsForAPipeline(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	meta := &appearingMeta{Meta: fakemeta.New(), p: p.pipeline(), misses: 3}
	if _, err := meta.CreateBucket(context.Background(), bkt); err != nil {
		t.Fatal(err)
	}
	o := fakeOptions()
	o.NoPipelineWait = time.Minute
	kc, err := keyclient.New(meta, o)
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	ctx := testCtx(t)
	data := randomBytes(3, fChunk)
	if _, err := kc.Put(ctx, bkt, "late", bytes.NewReader(data), keyclient.PutOptions{}); err != nil {
		t.Fatalf("put while the pipeline appears: %v", err)
	}
	if meta.calls != meta.misses+1 {
		t.Fatalf("%d allocations, want %d", meta.calls, meta.misses+1)
	}
	mustGet(t, ctx, kc, "late", data)

	meta2 := &appearingMeta{Meta: fakemeta.New(), p: p.pipeline(), misses: 3}
	if _, err := meta2.CreateBucket(context.Background(), bkt); err != nil {
		t.Fatal(err)
	}
	kc2, err := keyclient.New(meta2, fakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc2)
	if _, err := kc2.Put(ctx, bkt, "late", bytes.NewReader(data), keyclient.PutOptions{}); !errors.Is(err, metaapi.ErrNoPipeline) || meta2.calls != 1 {
		t.Fatalf("put without waiting: %v after %d allocations, want ErrNoPipeline after 1", err, meta2.calls)
	}
}

// healingMeta heals pipeline a (its writes succeed again) when an
// allocation excludes nothing after one that found no pipeline: a
// pipeline that was leaderless for a while and came back.
type healingMeta struct {
	*fakemeta.Meta
	a             *fakePipeline
	sawNoPipeline bool
	healed        bool
}

func (m *healingMeta) Allocate(ctx context.Context, req metaapi.AllocateRequest) (metaapi.AllocateResponse, error) {
	if m.sawNoPipeline && len(req.ExcludePipelines) == 0 && !m.healed {
		m.healed = true
		m.a.set(func() { m.a.writesLeft = -1 })
	}
	ar, err := m.Meta.Allocate(ctx, req)
	m.sawNoPipeline = m.sawNoPipeline || errors.Is(err, metaapi.ErrNoPipeline)
	return ar, err
}

// A put whose pipelines all failed under it (two, on a three-datanode
// cluster: no third to go to) asks again for any open pipeline rather
// than failing at once: those failures were a leader election or a
// timeout as often as for good (teragen under load: both pipelines
// leaderless for 10 s, the put failed with "2 open pipelines, 2 excluded
// by the client"). It fails without allocate's second chance (after
// NoPipelineWait, with ErrNoPipeline).
func TestPutRetriesExcludedPipelinesWhenNoneIsLeft(t *testing.T) {
	a, b := newFakePipeline(t, 1, 1), newFakePipeline(t, 2, 1)
	a.set(func() { a.writesLeft = 0 })
	b.set(func() { b.writesLeft = 0 })
	meta := &healingMeta{Meta: fakemeta.New(a.pipeline(), b.pipeline()), a: a}
	if _, err := meta.CreateBucket(context.Background(), bkt); err != nil {
		t.Fatal(err)
	}
	o := fakeOptions()
	o.NoPipelineWait = 5 * time.Second
	kc, err := keyclient.New(meta, o)
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	ctx := testCtx(t)
	data := randomBytes(8, fBlock/2)
	res, err := kc.Put(ctx, bkt, "second-chance", bytes.NewReader(data), keyclient.PutOptions{})
	if err != nil {
		t.Fatalf("put after both pipelines failed once: %v", err)
	}
	if !meta.healed || res.Failovers != 2 {
		t.Fatalf("result %+v, healed %v: want two failovers, then pipeline 1 again", res, meta.healed)
	}
	ki := mustGet(t, ctx, kc, "second-chance", data)
	if len(ki.Blocks) != 1 || ki.Blocks[0].Pipeline != 1 {
		t.Fatalf("blocks %+v: want the value in one block on pipeline 1", ki.Blocks)
	}
}

// errReader returns data, then err.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, e.err
	}
	return n, err
}

// A source that fails midway (a truncated upload) fails the put; the key
// keeps its older version.
func TestPutTruncatedSource(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	kc, meta := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	old := randomBytes(8, 1000)
	if _, err := kc.Put(ctx, bkt, "k", bytes.NewReader(old), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cut := errors.New("connection reset by client")
	_, err := kc.Put(ctx, bkt, "k", &errReader{bytes.NewReader(randomBytes(9, 2*fBlock+fChunk/2)), cut}, keyclient.PutOptions{})
	if !errors.Is(err, cut) {
		t.Fatalf("put: %v; want the source's error", err)
	}
	_, err = kc.Put(ctx, bkt, "new", &errReader{bytes.NewReader(randomBytes(9, 10)), cut}, keyclient.PutOptions{})
	if !errors.Is(err, cut) {
		t.Fatalf("put: %v; want the source's error", err)
	}
	mustGet(t, ctx, kc, "k", old)
	mustNotExist(t, ctx, kc, "new")
	if meta.Commits != 1 {
		t.Errorf("%d commits, want 1", meta.Commits)
	}
}

// cancelReader cancels a context once it has returned n bytes.
type cancelReader struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
	}
	k, err := c.r.Read(p[:min(len(p), max(c.n, 1))])
	c.n -= k
	return k, err
}

func TestPutCancelled(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	kc, _ := setup(t, fakeOptions(), p)
	ctx, cancel := context.WithCancel(testCtx(t))
	_, err := kc.Put(ctx, bkt, "k", &cancelReader{bytes.NewReader(randomBytes(10, 3*fBlock)), fBlock + 1, cancel}, keyclient.PutOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("put: %v; want cancelled", err)
	}
	mustNotExist(t, testCtx(t), kc, "k")
}

func TestInvalidNames(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	kc, meta := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	for _, bk := range [][2]string{{"B", "k"}, {"ab", "k"}, {bkt, ""}, {bkt, "/k"}, {bkt, "a/../b"}, {bkt, "a\x00b"}} {
		if _, err := kc.Put(ctx, bk[0], bk[1], bytes.NewReader([]byte("x")), keyclient.PutOptions{}); !errors.Is(err, metaapi.ErrInvalid) {
			t.Errorf("put %q/%q: %v; want invalid", bk[0], bk[1], err)
		}
		if _, err := kc.Get(ctx, bk[0], bk[1], io.Discard, keyclient.GetOptions{}); !errors.Is(err, metaapi.ErrInvalid) {
			t.Errorf("get %q/%q: %v; want invalid", bk[0], bk[1], err)
		}
	}
	if meta.Allocations != 0 {
		t.Errorf("%d allocations for invalid names", meta.Allocations)
	}
	if _, err := kc.Get(ctx, bkt, "missing", io.Discard, keyclient.GetOptions{}); !errors.Is(err, metaapi.ErrNotFound) {
		t.Errorf("get of a missing key: %v", err)
	}
}

// Ranges anywhere in the value, across block boundaries.
func TestGetRange(t *testing.T) {
	p := newFakePipeline(t, 1, 2)
	o := fakeOptions()
	o.ReadSize = 3000 // reads not aligned with chunks or pieces
	kc, _ := setup(t, o, p)
	ctx := testCtx(t)
	data := randomBytes(11, 3*fBlock+fBlock/2)
	if _, err := kc.Put(ctx, bkt, "r", bytes.NewReader(data), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	n := int64(len(data))
	for _, r := range [][2]int64{{0, 1}, {0, n}, {n - 1, 1}, {n, 0}, {fBlock - 10, 20}, {fBlock - 1, 2*fBlock + 2}, {fBlock, fBlock}, {123, -1}, {5, 0}, {2*fBlock + 77, 4000}} {
		var got bytes.Buffer
		if _, err := kc.GetRange(ctx, bkt, "r", r[0], r[1], &got, keyclient.GetOptions{}); err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		end := n
		if r[1] >= 0 {
			end = r[0] + r[1]
		}
		if !bytes.Equal(got.Bytes(), data[r[0]:end]) {
			t.Errorf("range %v: %d bytes differ from the value's", r, got.Len())
		}
	}
	for _, r := range [][2]int64{{n + 1, 0}, {n - 1, 2}, {-1, 1}, {0, n + 1}} {
		if _, err := kc.GetRange(ctx, bkt, "r", r[0], r[1], io.Discard, keyclient.GetOptions{}); !errors.Is(err, keyclient.ErrRange) {
			t.Errorf("range %v: %v; want ErrRange", r, err)
		}
	}
}

// A replica whose reads fail verification is skipped; when every replica
// is corrupt the read fails with ErrCorrupt.
func TestGetReadsAnotherReplica(t *testing.T) {
	p := newFakePipeline(t, 1, 3)
	kc, _ := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	data := randomBytes(12, 2*fBlock+1)
	if _, err := kc.Put(ctx, bkt, "k", bytes.NewReader(data), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	p.set(func() { p.corrupt[0], p.corrupt[1] = true, true })
	mustGet(t, ctx, kc, "k", data)
	p.set(func() { p.corrupt[2] = true })
	if _, err := kc.Get(ctx, bkt, "k", io.Discard, keyclient.GetOptions{}); !errors.Is(err, keyclient.ErrCorrupt) {
		t.Fatalf("get with every replica corrupt: %v; want ErrCorrupt", err)
	}
	// A replica that is down: the others serve.
	p.set(func() { clear(p.corrupt) })
	testutil.CloseT(t, p.srvs[0])
	mustGet(t, ctx, kc, "k", data)
}

// tamperMeta changes the CRC32C a key's metadata records.
type tamperMeta struct{ keyclient.Meta }

func (m tamperMeta) GetKey(ctx context.Context, b, k string) (metaapi.KeyInfo, error) {
	ki, err := m.Meta.GetKey(ctx, b, k)
	ki.CRC32C ^= 0x100
	return ki, err
}

func TestGetChecksWholeValueCRC(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	kc, meta := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	data := randomBytes(13, fBlock+5)
	if _, err := kc.Put(ctx, bkt, "k", bytes.NewReader(data), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	bad, err := keyclient.New(tamperMeta{meta}, fakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, bad)
	if _, err := bad.Get(ctx, bkt, "k", io.Discard, keyclient.GetOptions{}); !errors.Is(err, keyclient.ErrCorrupt) {
		t.Fatalf("get with a wrong crc32c: %v; want ErrCorrupt", err)
	}
	// A range is not checked against the whole value's CRC.
	if _, err := bad.GetRange(ctx, bkt, "k", 1, int64(len(data))-1, io.Discard, keyclient.GetOptions{}); err != nil {
		t.Fatalf("range: %v", err)
	}
}

func TestListPagesAndBuckets(t *testing.T) {
	kc, _ := setup(t, fakeOptions())
	ctx := testCtx(t)
	const n = 2*keyclient.ListPageSize + 17
	var want []string
	for i := range n {
		k := fmt.Sprintf("dir/%05d", i)
		if _, err := kc.Put(ctx, bkt, k, bytes.NewReader(nil), keyclient.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	if _, err := kc.Put(ctx, bkt, "other", bytes.NewReader(nil), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := kc.List(ctx, bkt, "dir/", func(ki metaapi.KeyInfo) error { got = append(got, ki.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("listed %d keys, want %d in order", len(got), len(want))
	}
	stop := errors.New("stop")
	count := 0
	if err := kc.List(ctx, bkt, "", func(metaapi.KeyInfo) error { count++; return stop }); !errors.Is(err, stop) || count != 1 {
		t.Errorf("list stopped by its callback: %v after %d keys", err, count)
	}

	if _, err := kc.CreateBucket(ctx, bkt); !errors.Is(err, metaapi.ErrExists) {
		t.Errorf("create existing bucket: %v", err)
	}
	if err := kc.DeleteBucket(ctx, bkt); !errors.Is(err, metaapi.ErrNotEmpty) {
		t.Errorf("delete non-empty bucket: %v", err)
	}
	if _, err := kc.CreateBucket(ctx, "Bad_Name"); !errors.Is(err, metaapi.ErrInvalid) {
		t.Errorf("create bucket with a bad name: %v", err)
	}
	if _, err := kc.CreateBucket(ctx, "second"); err != nil {
		t.Fatal(err)
	}
	bs, err := kc.ListBuckets(ctx)
	if err != nil || len(bs) != 2 || bs[0].Name != bkt || bs[0].Keys != n+1 || bs[1].Name != "second" {
		t.Errorf("buckets %+v, %v", bs, err)
	}
	if err := kc.Delete(ctx, bkt, "other"); err != nil {
		t.Fatal(err)
	}
	if err := kc.Delete(ctx, bkt, "other"); !errors.Is(err, metaapi.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
	if err := kc.DeleteBucket(ctx, "second"); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsValidation(t *testing.T) {
	meta := fakemeta.New()
	for _, o := range []keyclient.Options{
		{ChunkSize: 128 << 20},
		{ChunkSize: 1 << 20, BlockSize: 1 << 19},
		{ChunkSize: 1 << 10, BlockSize: 1 << 30, BytesPerChecksum: 512}, // PutBlock too big
		{BytesPerChecksum: 100},
	} {
		if _, err := keyclient.New(meta, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	kc, err := keyclient.New(meta, keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := kc.Options()
	if o.ChunkSize != 4<<20 || o.BlockSize != 256<<20 || o.InFlight != 8 || o.MaxBufferedChunks() != 16 {
		t.Errorf("defaults %+v, buffered %d chunks", o, o.MaxBufferedChunks())
	}
}

// PutOptions.Commit replaces the CommitKey: it is called once, after the
// source was read to its end, with the value's size, blocks and CRC32C
// (what a CommitKey would carry); its error fails the put and commits
// nothing.
func TestPutCommitHook(t *testing.T) {
	p := newFakePipeline(t, 1, 1)
	kc, meta := setup(t, fakeOptions(), p)
	ctx := testCtx(t)
	data := randomBytes(11, fBlock+fChunk+3)
	src := bytes.NewReader(data)
	calls := 0
	_, err := kc.Put(ctx, bkt, "hooked", src, keyclient.PutOptions{
		Commit: func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
			calls++
			if src.Len() != 0 || ck.Size != uint64(len(data)) || ck.CRC32C != crc(data) || len(ck.Blocks) != 2 || ck.Inline != nil {
				t.Errorf("commit hook: %d bytes left in the source, size %d, crc %08x, %d blocks, %d inline; want 0, %d, %08x, 2, 0",
					src.Len(), ck.Size, ck.CRC32C, len(ck.Blocks), len(ck.Inline), len(data), crc(data))
			}
			return meta.CommitKey(ctx, bkt, "hooked", ck)
		},
	})
	if err != nil || calls != 1 {
		t.Fatalf("put: %v, %d commit calls", err, calls)
	}
	mustGet(t, ctx, kc, "hooked", data)
	refuse := errors.New("checksum mismatch")
	_, err = kc.Put(ctx, bkt, "refused", bytes.NewReader(data), keyclient.PutOptions{
		Commit: func(context.Context, metaapi.CommitKey) (metaapi.KeyInfo, error) {
			return metaapi.KeyInfo{}, refuse
		},
	})
	if !errors.Is(err, refuse) {
		t.Fatalf("put with a refusing commit: %v", err)
	}
	mustNotExist(t, ctx, kc, "refused")
}
