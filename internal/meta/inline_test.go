package meta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/checkpoint"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

func inlineCommit(v []byte) *metaapi.CommitKey {
	return &metaapi.CommitKey{Size: uint64(len(v)), CRC32C: crc32c.Checksum(v), Inline: v}
}

func inlineValue(seed int64, n int) []byte {
	v := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(v)
	return v
}

// A value committed inline is stored in its key's record: GetKey returns
// it (a listing does not), an identical retry succeeds, it survives a
// restart, and replacing versions schedules the deletion of blocks only
// (an inline version has none). Malformed inline commits change nothing.
func TestInlineKey(t *testing.T) {
	c, _, cfg := memCluster(t, nil)
	s := c.s
	v := inlineValue(1, 4096)
	ki := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "small", inlineCommit(v)))
	if ki.Inline != nil || len(ki.Blocks) != 0 || ki.Size != 4096 {
		t.Fatalf("commit answered %d bytes inline, %d blocks, size %d; want no value back, no block, 4096", len(ki.Inline), len(ki.Blocks), ki.Size)
	}
	got := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "small"))
	if !bytes.Equal(got.Inline, v) || got.CRC32C != crc32c.Checksum(v) {
		t.Fatalf("get: %d bytes inline, crc %08x", len(got.Inline), got.CRC32C)
	}
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "small", inlineCommit(v))) // a retry
	l := must[*metaapi.KeyList](t)(s.List("bkt", namespace.ListOptions{Limit: 10}))
	for _, k := range l.Keys {
		if k.Inline != nil {
			t.Fatalf("listing carries %s's value", k.Key)
		}
	}
	allocs := len(s.Allocs)

	bad := map[string]*metaapi.CommitKey{
		"inline and blocks": {Size: 3, CRC32C: crc32c.Checksum([]byte("abc")), Inline: []byte("abc"),
			Blocks: []metaapi.KeyBlock{{BlockRef: metaapi.BlockRef{Container: 1, Local: 1}, Length: 3}}},
		"wrong crc":  {Size: 3, CRC32C: 1, Inline: []byte("abc")},
		"wrong size": {Size: 4, CRC32C: crc32c.Checksum([]byte("abc")), Inline: []byte("abc")},
		"too large":  inlineCommit(make([]byte, metaapi.MaxInlineBytes+1)),
	}
	for what, ck := range bad {
		wantErr(t, ignore(s.CommitKey("bkt", "bad", ck)), metaapi.ErrInvalid, what)
	}
	wantErr(t, ignore(s.GetKey("bkt", "bad")), metaapi.ErrNotFound, "a refused inline commit")

	// Inline → blocks → inline: only the blocks' version leaves deletions.
	deletes := s.NDeletes
	v2 := inlineValue(2, 100)
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "small", inlineCommit(v2)))
	if s.NDeletes != deletes {
		t.Fatalf("replacing an inline version scheduled %d deletions", s.NDeletes-deletes)
	}
	c.put("bkt", "small", 2, 10)
	if s.NDeletes != deletes {
		t.Fatalf("replacing an inline version by blocks scheduled %d deletions", s.NDeletes-deletes)
	}
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "small", inlineCommit(v)))
	if s.NDeletes != deletes+2 {
		t.Fatalf("replacing 2 blocks by a value inline scheduled %d deletions, want 2", s.NDeletes-deletes)
	}
	if len(s.Allocs) != allocs {
		t.Fatalf("pending allocations %d, want %d: an inline commit allocates nothing", len(s.Allocs), allocs)
	}
	b := s.Buckets["bkt"]

	mustNo(t, s.Close())
	s2 := open(t, cfg)
	got = must[*metaapi.KeyInfo](t)(s2.GetKey("bkt", "small"))
	if !bytes.Equal(got.Inline, v) {
		t.Fatalf("after a restart: %d bytes inline, want the 4096 committed", len(got.Inline))
	}
	if b2 := s2.Buckets["bkt"]; b2.Keys != b.Keys || b2.Bytes != b.Bytes {
		t.Fatalf("bucket counts %d keys %d bytes after a restart, %d %d before", b2.Keys, b2.Bytes, b.Keys, b.Bytes)
	}
}

// TestInlineCommitsCrash: writers commit values inline concurrently; a
// power loss at the k-th filesystem operation (unsynced writes kept or
// lost at random) leaves every acknowledged value whole, and any other key
// either absent or whole.
func TestInlineCommitsCrash(t *testing.T) {
	const writers, perWriter = 4, 40
	for _, k := range []int64{1, 2, 5, 10, 20, 50, 100, 200} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			fs := vfs.NewMem()
			cfg := testConfig("/meta", newClock())
			cfg.FS = fs
			s := open(t, cfg)
			mustNo(t, ignore(s.CreateBucket("bkt")))
			fs.CrashAtOp(k, 50, k)
			var mu sync.Mutex
			acked := map[string][]byte{}
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWriter {
						if fs.Crashed() != nil {
							return
						}
						name := fmt.Sprintf("w%d-%03d", w, i)
						v := inlineValue(int64(w*1000+i), 1+(w*7919+i*104729)%8192)
						if _, err := s.CommitKey("bkt", name, inlineCommit(v)); err != nil {
							t.Errorf("commit %s: %v", name, err)
							return
						}
						if fs.Crashed() == nil { // acknowledged before the crash
							mu.Lock()
							acked[name] = v
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			img := fs.Crashed()
			if img == nil {
				t.Skipf("fewer than %d operations", k)
			}
			cfg.FS = img
			s2 := open(t, cfg)
			for name, v := range acked {
				ki, err := s2.GetKey("bkt", name)
				if err != nil {
					t.Fatalf("acknowledged %s (%d bytes) after the crash: %v", name, len(v), err)
				}
				if !bytes.Equal(ki.Inline, v) {
					t.Fatalf("acknowledged %s after the crash: %d bytes, want the %d committed", name, len(ki.Inline), len(v))
				}
			}
			l := must[*metaapi.KeyList](t)(s2.List("bkt", namespace.ListOptions{Limit: metaapi.MaxListLimit}))
			for _, e := range l.Keys {
				ki, err := s2.GetKey("bkt", e.Key)
				if err != nil || uint64(len(ki.Inline)) != ki.Size || crc32c.Checksum(ki.Inline) != ki.CRC32C {
					t.Fatalf("%s after the crash: %v, not whole", e.Key, err)
				}
			}
			t.Logf("crash at op %d: %d acknowledged, %d keys after", k, len(acked), len(l.Keys))
		})
	}
}

// Over HTTP a value inline travels raw after the JSON both ways
// (metaapi.InlineContentType) with the metaapi client, and base64 in plain
// JSON for any other client; both read the same value back.
func TestInlineOverHTTP(t *testing.T) {
	srv, cl := serve(t, testConfig(t.TempDir(), newClock()))
	must[metaapi.Bucket](t)(cl.CreateBucket(bg, "bkt"))
	v := inlineValue(3, 3000)
	ki := must[metaapi.KeyInfo](t)(cl.CommitKey(bg, "bkt", "k", *inlineCommit(v)))
	if ki.Size != 3000 || ki.Inline != nil {
		t.Fatalf("commit answered size %d, %d bytes inline; want 3000, none", ki.Size, len(ki.Inline))
	}
	got := must[metaapi.KeyInfo](t)(cl.GetKey(bg, "bkt", "k"))
	if !bytes.Equal(got.Inline, v) || got.CRC32C != ki.CRC32C || got.Key != "k" {
		t.Fatalf("get through the client: %d bytes inline, crc %08x, key %q", len(got.Inline), got.CRC32C, got.Key)
	}

	// Plain JSON: a commit with the value base64-encoded, a get without
	// Accept answered as JSON.
	body, _ := json.Marshal(inlineCommit(v[:100]))
	resp, err := http.Post("http://"+srv.Addr()+metaapi.KeyPath("bkt", "plain"), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plain JSON inline commit: HTTP %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + srv.Addr() + metaapi.KeyPath("bkt", "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, resp.Body)
	var plain metaapi.KeyInfo
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("get without Accept: content type %q", ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&plain); err != nil || !bytes.Equal(plain.Inline, v[:100]) {
		t.Fatalf("get as plain JSON: %v, %d bytes inline", err, len(plain.Inline))
	}

	// A framed body whose JSON length runs past the body is refused.
	bad := []byte{0xff, 0, 0, 0, '{', '}'}
	resp, err = http.Post("http://"+srv.Addr()+metaapi.KeyPath("bkt", "bad"), metaapi.InlineContentType, bytes.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, resp.Body)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a framed body with a bad length: HTTP %d, want 400", resp.StatusCode)
	}
}

// A commit batch answers each commit as if it came alone: in order (a
// later commit of the same key replaces the earlier one, counted once),
// a refusal (bad CRC32C, a failed condition, an unknown bucket) changes
// nothing and leaves the others committed.
func TestCommitBatch(t *testing.T) {
	c, _, _ := memCluster(t, nil)
	s := c.s
	v1, v2 := inlineValue(1, 1000), inlineValue(2, 2000)
	keys := s.Buckets["bkt"].Keys
	bad := inlineCommit(v1)
	bad.CRC32C++
	cond := inlineCommit(v1)
	cond.Conditions = metaapi.Conditions{IfNoneMatch: "*"}
	items := []metaapi.BatchedCommit{
		{Bucket: "bkt", Key: "a", CommitKey: *inlineCommit(v1)},
		{Bucket: "bkt", Key: "b", CommitKey: *bad},
		{Bucket: "bkt", Key: "a", CommitKey: *inlineCommit(v2)},
		{Bucket: "bkt", Key: "a", CommitKey: *cond},
		{Bucket: "nope", Key: "c", CommitKey: *inlineCommit(v1)},
		{Bucket: "bkt", Key: "d", CommitKey: *inlineCommit(v1)},
	}
	res := must[[]metaapi.CommitResult](t)(s.CommitKeys(items))
	want := []error{nil, metaapi.ErrInvalid, nil, metaapi.ErrPrecondition, metaapi.ErrNotFound, nil}
	for i, r := range res {
		if want[i] == nil {
			if r.Error != nil || r.Key == nil || r.Key.Key != items[i].Key || r.Key.Size != items[i].Size || r.Key.Inline != nil {
				t.Fatalf("commit %d: %+v, %v; want its key, without the value", i, r.Key, r.Error)
			}
		} else if !errors.Is(r.Error, want[i]) || r.Key != nil {
			t.Fatalf("commit %d: %+v, %v; want %v", i, r.Key, r.Error, want[i])
		}
	}
	if got := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "a")); !bytes.Equal(got.Inline, v2) {
		t.Fatalf("a holds %d bytes, want the later commit's 2000", len(got.Inline))
	}
	wantErr(t, ignore(s.GetKey("bkt", "b")), metaapi.ErrNotFound, "a refused commit of the batch")
	if n := s.Buckets["bkt"].Keys - keys; n != 2 {
		t.Fatalf("the batch added %d keys, want 2 (a, d)", n)
	}
	_, err := s.CommitKeys(make([]metaapi.BatchedCommit, metaapi.MaxCommitBatch+1))
	wantErr(t, err, metaapi.ErrInvalid, "a batch over MaxCommitBatch")
}

// The metaapi client batches concurrent CommitKeys (CommitsRoute) and
// GetKeys (GetsRoute); each caller still gets its own answer or error.
func TestClientBatchesConcurrentCommits(t *testing.T) {
	_, cl := serve(t, testConfig(t.TempDir(), newClock()))
	must[metaapi.Bucket](t)(cl.CreateBucket(bg, "bkt"))
	const callers = 32
	start := make(chan struct{})
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ck := inlineCommit(inlineValue(int64(i), 100+i))
			if i%2 == 1 {
				ck.CRC32C++ // refused, alone
			}
			<-start
			_, errs[i] = cl.CommitKey(bg, "bkt", fmt.Sprintf("k%02d", i), *ck)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if i%2 == 1 && !errors.Is(err, metaapi.ErrInvalid) {
			t.Fatalf("commit %d with a wrong CRC32C: %v, want ErrInvalid", i, err)
		}
	}
	// Concurrent gets are batched too (GetsRoute): each gets its own key
	// with its value, or its own not found.
	kis := make([]metaapi.KeyInfo, callers)
	start = make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			kis[i], errs[i] = cl.GetKey(bg, "bkt", fmt.Sprintf("k%02d", i))
		}()
	}
	close(start)
	wg.Wait()
	for i := range callers {
		if i%2 == 1 {
			wantErr(t, errs[i], metaapi.ErrNotFound, fmt.Sprintf("get k%02d, never committed", i))
			continue
		}
		if errs[i] != nil || kis[i].Key != fmt.Sprintf("k%02d", i) || !bytes.Equal(kis[i].Inline, inlineValue(int64(i), 100+i)) {
			t.Fatalf("get k%02d: %v, key %q, %d bytes inline", i, errs[i], kis[i].Key, len(kis[i].Inline))
		}
	}
	batches, commits, _, _ := cl.BatchStats()
	if commits != callers || batches == 0 || batches > commits {
		t.Fatalf("%d batches of %d commits, want %d commits", batches, commits, callers)
	}
	t.Logf("%d commits in %d batches", commits, batches)
}

// An allocation batch answers each request as if it came alone: fresh
// blocks, and a refusal (an unknown bucket, every pipeline excluded) that
// does not affect the others; each block commits.
func TestAllocateMany(t *testing.T) {
	c, _, _ := memCluster(t, nil)
	s := c.s
	p := c.pipelines()[0].ID
	reqs := []metaapi.AllocateRequest{
		{Bucket: "bkt", Key: "a"},
		{Bucket: "nope", Key: "a"},
		{Bucket: "bkt", Key: "b", ExcludePipelines: []uint64{p}},
		{Bucket: "bkt", Key: "a"},
	}
	res := must[[]metaapi.AllocateResult](t)(s.AllocateMany(reqs))
	want := []error{nil, metaapi.ErrNotFound, metaapi.ErrNoPipeline, nil}
	for i, r := range res {
		if want[i] != nil {
			if !errors.Is(r.Error, want[i]) || r.Block != nil {
				t.Fatalf("allocation %d: %+v, %v; want %v", i, r.Block, r.Error, want[i])
			}
		} else if r.Error != nil || r.Block == nil {
			t.Fatalf("allocation %d: %v", i, r.Error)
		}
	}
	if res[0].Block.Block == res[3].Block.Block {
		t.Fatalf("two allocations of a batch got block %+v", res[0].Block.Block)
	}
	var ck metaapi.CommitKey
	for _, i := range []int{0, 3} {
		a := res[i].Block
		ck.Blocks = append(ck.Blocks, metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 10})
		ck.Size += 10
	}
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "a", &ck))
}

// A block allocated for any key of a bucket (a client's pre-allocation)
// commits under any one key of that bucket, once; not in another bucket;
// and, never committed (its client died, or dropped it), it is deleted
// after the allocation grace like an interrupted put's.
func TestAnyKeyAllocation(t *testing.T) {
	c := threeNodes(t, func(cfg *state.Config) { cfg.AllocationGrace = time.Hour })
	mustNo(t, ignore(c.s.CreateBucket("other")))
	wantErr(t, ignore(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k", AnyKey: true})), metaapi.ErrInvalid, "any key with a key")
	wantErr(t, ignore(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "nope", AnyKey: true})), metaapi.ErrNotFound, "any key of a missing bucket")
	res := must[[]metaapi.AllocateResult](t)(c.s.AllocateMany([]metaapi.AllocateRequest{
		{Bucket: "bkt", AnyKey: true}, {Bucket: "bkt", AnyKey: true}, {Bucket: "bkt", AnyKey: true}}))
	commit := func(bucket, key string, a *metaapi.AllocateResponse) error {
		return ignore(c.s.CommitKey(bucket, key, &metaapi.CommitKey{Size: 5, Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 5}}}))
	}
	wantErr(t, commit("other", "x", res[0].Block), metaapi.ErrInvalid, "a block of bkt committed in another bucket")
	mustNo(t, commit("bkt", "x", res[0].Block))
	mustNo(t, commit("bkt", "y", res[1].Block))
	wantErr(t, commit("bkt", "z", res[0].Block), metaapi.ErrInvalid, "a pre-allocated block committed twice")
	// The third is never committed: deleted after the grace period.
	c.clk.Advance(time.Hour)
	c.round(c.nodes...)
	b := res[2].Block.Block
	if pd := c.s.Deletes[b.Container][b.Local]; pd == nil || pd.Rec.Reason != state.ReasonExpired || len(c.s.Allocs) != 0 {
		t.Fatalf("an unused pre-allocated block after the grace period: deletion %+v, %d allocations left", pd, len(c.s.Allocs))
	}
	wantErr(t, commit("bkt", "z", res[2].Block), metaapi.ErrInvalid, "commit of an expired pre-allocation")
}

// With PreAllocate, the client serves Allocate from a pool filled in one
// request per refill, sized to the demand since the previous refill (at
// most PreAllocate); blocks older than MaxPreAllocatedAge are dropped, not
// handed out; failovers (ExcludePipelines) bypass the pool.
func TestClientPreAllocates(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	srv, _ := serve(t, cfg)
	c := &fakeCluster{t: t, s: srv.Service(), clk: clk}
	for range 3 {
		c.add()
	}
	mustNo(t, c.s.Tick())
	c.settle()
	now := time.Unix(1_000_000, 0) // the client's clock, apart from the service's
	cl, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Timeout: 5 * time.Second, PreAllocate: 4,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	must[metaapi.Bucket](t)(cl.CreateBucket(bg, "bkt"))
	seen := map[metaapi.BlockRef]bool{}
	alloc := func(key string) metaapi.AllocateResponse {
		t.Helper()
		a := must[metaapi.AllocateResponse](t)(cl.Allocate(bg, metaapi.AllocateRequest{Bucket: "bkt", Key: key}))
		if seen[a.Block] {
			t.Fatalf("block %+v handed out twice", a.Block)
		}
		seen[a.Block] = true
		return a
	}
	requests := func(what string, wantBatches, wantAllocs uint64) {
		t.Helper()
		if _, _, batches, allocs := cl.BatchStats(); batches != wantBatches || allocs != wantAllocs {
			t.Fatalf("%s: %d requests for %d blocks, want %d for %d", what, batches, allocs, wantBatches, wantAllocs)
		}
	}
	for i := range 5 {
		a := alloc(fmt.Sprintf("k%d", i))
		must[metaapi.KeyInfo](t)(cl.CommitKey(bg, "bkt", fmt.Sprintf("k%d", i), metaapi.CommitKey{Size: 3,
			Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 3}}}))
	}
	// The first refill asks for one; the second, at once after it, for
	// the most (a block taken in no time); three are left for k2..k4.
	requests("5 allocations at once", 2, 5)
	now = now.Add(10 * time.Second) // 4 taken in 10 s: a second's worth is 1
	alloc("slow")
	requests("an allocation 10 s later", 3, 6)
	now = now.Add(100 * time.Millisecond) // 1 taken in 0.1 s: 10 a second, at most 4
	alloc("fast")
	requests("an allocation 0.1 s later", 4, 10)
	now = now.Add(metaapi.MaxPreAllocatedAge) // the 3 left are too old: dropped
	alloc("late")
	requests("an allocation after the pool's blocks aged", 5, 11)
	p := c.pipelines()[0].ID
	a := must[metaapi.AllocateResponse](t)(cl.Allocate(bg, metaapi.AllocateRequest{Bucket: "bkt", Key: "f", ExcludePipelines: []uint64{p}}))
	if a.Pipeline.ID == p {
		t.Fatalf("a failover's allocation came from the pool, on the excluded pipeline %d", p)
	}
	requests("a failover's allocation", 6, 12) // a batch of its own (the client batches), not from the pool
	// Pending: slow, fast, the 3 dropped, late, the failover's.
	if len(c.s.Allocs) != 7 {
		t.Fatalf("%d allocations pending, want 7", len(c.s.Allocs))
	}
}

// With PoolScope, a block pre-allocated in one scope goes only to that
// scope's calls, and a refill is sent with the context of the call that
// needs it (the gateway's user rides on it).
func TestClientPoolScopes(t *testing.T) {
	clk := newClock()
	srv, _ := serve(t, testConfig(t.TempDir(), clk))
	c := &fakeCluster{t: t, s: srv.Service(), clk: clk}
	for range 3 {
		c.add()
	}
	mustNo(t, c.s.Tick())
	c.settle()
	type who struct{}
	var mu sync.Mutex
	var refills []string // the scope each allocation request was sent with
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == metaapi.AllocationsRoute {
			w, _ := r.Context().Value(who{}).(string)
			mu.Lock()
			refills = append(refills, w)
			mu.Unlock()
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	cl, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Timeout: 5 * time.Second, PreAllocate: 4, NoBatching: true,
		HTTPClient: &http.Client{Transport: rt},
		PoolScope:  func(ctx context.Context) string { w, _ := ctx.Value(who{}).(string); return w }})
	if err != nil {
		t.Fatal(err)
	}
	must[metaapi.Bucket](t)(cl.CreateBucket(bg, "bkt"))
	as := func(w string) context.Context { return context.WithValue(bg, who{}, w) }
	seen := map[metaapi.BlockRef]string{}
	for _, w := range []string{"alice", "alice", "bob", "alice", "bob"} {
		a := must[metaapi.AllocateResponse](t)(cl.Allocate(as(w), metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
		if prev, ok := seen[a.Block]; ok {
			t.Fatalf("block %+v handed to %s, and before to %s", a.Block, w, prev)
		}
		seen[a.Block] = w
	}
	// alice: a refill of 1, then of 4 (3 left, one taken later); bob: his
	// own refills, not alice's blocks.
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"alice", "alice", "bob", "bob"}; !slices.Equal(refills, want) {
		t.Fatalf("refills sent as %q, want %q", refills, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Values inline in a replicated meta service: commits batched by the
// client are acknowledged once a majority has them in its log; after the
// leader is stopped the new leader reads every one back byte for byte, and
// once the old leader is back every member's store holds them all.
func TestReplicatedInlineValues(t *testing.T) {
	g := newRGroup(t, 3)
	mustNo(t, ignore(g.cl.CreateBucket(bg, "inl")))
	const n = 24
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = g.cl.CommitKey(bg, "inl", fmt.Sprintf("k%02d", i), *inlineCommit(inlineValue(int64(i), 500+100*i)))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		mustNo(t, err)
	}
	ld := g.leader()
	g.stop(ld)
	for i := range n {
		ki := must[metaapi.KeyInfo](t)(g.cl.GetKey(bg, "inl", fmt.Sprintf("k%02d", i)))
		if !bytes.Equal(ki.Inline, inlineValue(int64(i), 500+100*i)) {
			t.Fatalf("k%02d on the new leader: %d bytes inline", i, len(ki.Inline))
		}
	}
	g.restart(ld)
	want := g.srvs[g.leader()].Service().MetaStatus().CommitIndex
	waitFor(t, "every member applied the log", func() bool {
		for _, s := range g.srvs {
			if s.Service().MetaStatus().AppliedIndex < want {
				return false
			}
		}
		return true
	})
	for m := range g.srvs {
		g.stop(m)
		svc, err := Open(state.Config{Dir: g.dirs[m], Logger: quiet, TickInterval: -1, DisableSafeMode: true, ID: uint64(m + 1), Peers: g.peers})
		mustNo(t, err)
		for i := range n {
			v, closer, err := svc.Store.Get(state.ObjectKey("inl", fmt.Sprintf("k%02d", i)))
			mustNo(t, err)
			rec, err := state.DecodeKey(v)
			mustClose(t, closer)
			mustNo(t, err)
			if !bytes.Equal(rec.Inline, inlineValue(int64(i), 500+100*i)) {
				t.Fatalf("member %d's store: k%02d holds %d bytes inline", m+1, i, len(rec.Inline))
			}
		}
		mustClose(t, svc)
	}
}

// TestInlineSameBytesNewMetadata: a commit of the same inline bytes with
// other S3 metadata is a new version (a copy onto itself with new
// metadata, a new Content-Type), not a retry; the same commit again is a
// retry and changes nothing. (Judged by the bytes alone, the new metadata
// was dropped.)
func TestInlineSameBytesNewMetadata(t *testing.T) {
	c, _, _ := memCluster(t, nil)
	s := c.s
	v := inlineValue(2, 100)
	first := inlineCommit(v)
	first.Object = &metaapi.ObjectMeta{ETag: "e", UserMeta: map[string]string{"a": "1"}}
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", first))
	second := inlineCommit(v)
	second.Object = &metaapi.ObjectMeta{ETag: "e", UserMeta: map[string]string{"hello": "World"}}
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", second))
	got := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "k"))
	if got.Object == nil || got.Object.UserMeta["hello"] != "World" || got.Object.UserMeta["a"] != "" {
		t.Fatalf("after a commit of the same bytes with new metadata: %+v", got.Object)
	}
	created := got.Created
	c.clk.Advance(time.Second)
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", second)) // a retry
	if again := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "k")); !again.Created.Equal(created) {
		t.Fatalf("a retried commit made a new version (created %v, was %v)", again.Created, created)
	}
}

// TestInlineRetryAfterAnotherPut: a commit of an inline value retried
// (same commit ID) after another put of the key replaced it answers the
// first commit's version and leaves the key as the other put made it —
// applied again, the retry brought the old value back (the meta HA
// acceptance test's hot-key history was not linearizable).
func TestInlineRetryAfterAnotherPut(t *testing.T) {
	c, _, _ := memCluster(t, nil)
	s := c.s
	first := inlineCommit(inlineValue(5, 64))
	first.CommitID = "retried-commit-id-1"
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "hot", first))
	other := inlineCommit(inlineValue(6, 64))
	other.CommitID = "another-commit-id-2"
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "hot", other))
	ki := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "hot", first)) // the retry
	if ki.CRC32C != first.CRC32C {
		t.Fatalf("the retry answered crc %08x, want the first commit's %08x", ki.CRC32C, first.CRC32C)
	}
	got := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "hot"))
	if !bytes.Equal(got.Inline, other.Inline) {
		t.Fatal("the retried commit brought the old value back")
	}
}

// TestInlineValuesInBlobFiles: inline values of at least storeBlobMinBytes
// go to Pebble blob files when the memtable is flushed (value separation:
// compactions then move references, not the values); the values read
// back whole from the store, from a power-loss image taken after the
// flush, and from a backup of it (a checkpoint carries the blob files).
// Without value separation no blob file appears.
func TestInlineValuesInBlobFiles(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig("/meta", newClock())
	cfg.FS = fs
	s := open(t, cfg)
	mustNo(t, ignore(s.CreateBucket("bkt")))
	vals := map[string][]byte{}
	for i := range 200 {
		name := fmt.Sprintf("k%03d", i)
		vals[name] = inlineValue(int64(i), state.StoreBlobMinBytes+i*37)
		must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", name, inlineCommit(vals[name])))
	}
	mustNo(t, s.Store.Flush())
	names, err := fs.List("/meta/pebble")
	mustNo(t, err)
	blobs := 0
	for _, n := range names {
		if strings.HasSuffix(n, ".blob") {
			blobs++
		}
	}
	if blobs == 0 {
		t.Fatalf("no blob file in the store after a flush of %d inline values: %v", len(vals), names)
	}
	check := func(what string, s *Service) {
		t.Helper()
		for name, v := range vals {
			ki, err := s.GetKey("bkt", name)
			if err != nil || !bytes.Equal(ki.Inline, v) {
				t.Fatalf("%s: %s: %v, not the %d bytes committed", what, name, err, len(v))
			}
		}
	}
	check("the store", s)
	cfgImg := cfg
	cfgImg.FS = fs.CrashClone(0, nil)
	img := open(t, cfgImg)
	check("a power-loss image after the flush", img)

	dir, index, err := s.checkpoint()
	mustNo(t, err)
	var backup bytes.Buffer
	_, err = checkpoint.Write(&backup, cfg.FS, dir, index)
	mustNo(t, err)
	restoredDir := filepath.Join(t.TempDir(), "restored")
	_, _, err = UnpackBackup(&backup, restoredDir)
	mustNo(t, err)
	restored, err := Open(state.Config{Dir: restoredDir, Logger: quiet})
	mustNo(t, err)
	defer mustClose(t, restored)
	check("a backup", restored)
}
