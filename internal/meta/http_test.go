package meta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// serve starts a Server on 127.0.0.1 and a client of it.
func serve(t *testing.T, cfg state.Config) (*Server, *metaapi.Client) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, srv) })
	cl, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return srv, cl
}

// snapshot is everything the admin and namespace views show, as JSON.
func snapshot(t *testing.T, cl *metaapi.Client) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	nodes := must[[]metaapi.NodeInfo](t)(cl.Nodes(bg))
	mustNo(t, enc.Encode(nodes))
	mustNo(t, enc.Encode(must[[]metaapi.Pipeline](t)(cl.Pipelines(bg))))
	mustNo(t, enc.Encode(must[[]metaapi.ContainerInfo](t)(cl.Containers(bg))))
	bl := must[metaapi.BucketList](t)(cl.ListBuckets(bg))
	mustNo(t, enc.Encode(bl))
	for _, bk := range bl.Buckets {
		l := must[metaapi.KeyList](t)(cl.List(bg, bk.Name, metaapi.ListOptions{}))
		mustNo(t, enc.Encode(l))
		for _, k := range l.Keys {
			ki := must[metaapi.KeyInfo](t)(cl.GetKey(bg, bk.Name, k.Key))
			for i := range ki.Blocks {
				ki.Blocks[i].Token = "" // minted per lookup, not state
			}
			mustNo(t, enc.Encode(ki))
		}
	}
	return b.String()
}

// sameSnapshot fails with the first line that differs.
func sameSnapshot(t *testing.T, when, before, after string) {
	t.Helper()
	b, a := strings.Split(before, "\n"), strings.Split(after, "\n")
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(b) {
			x = b[i]
		}
		if i < len(a) {
			y = a[i]
		}
		if x != y {
			t.Fatalf("state changed %s, line %d:\nbefore %s\nafter  %s", when, i+1, x, y)
		}
	}
}

func TestMalformedHeartbeatsRefusedAndChangeNothing(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	srv, cl := serve(t, cfg)
	c := &fakeCluster{t: t, s: srv.Service(), clk: clk}
	for range 3 {
		c.add()
	}
	mustNo(t, c.s.Tick())
	c.settle()
	mustNo(t, ignore(cl.CreateBucket(bg, "bkt")))
	c.put("bkt", "k", 1, 10)
	good := c.nodes[0].report()
	if len(good.Containers) == 0 || len(good.Pipelines) == 0 {
		t.Fatalf("the good report has no containers or pipelines: %+v", good)
	}
	before := snapshot(t, cl)
	// A refused heartbeat must not even refresh the node's heartbeat
	// time, which the snapshot shows.
	clk.Advance(time.Second)
	mod := func(f func(hb *metaapi.Heartbeat)) *metaapi.Heartbeat {
		b, _ := json.Marshal(good)
		var hb metaapi.Heartbeat
		mustNo(t, json.Unmarshal(b, &hb))
		f(&hb)
		return &hb
	}
	cases := []struct {
		name string
		hb   *metaapi.Heartbeat
		want string // in the message
	}{
		{"unknown container state", mod(func(hb *metaapi.Heartbeat) { hb.Containers[0].State = "HALF_OPEN" }), "unknown state"},
		{"absurd container size", mod(func(hb *metaapi.Heartbeat) { hb.Containers[0].UsedBytes = 1 << 60 }), "bytes used"},
		{"duplicate container", mod(func(hb *metaapi.Heartbeat) { hb.Containers = append(hb.Containers, hb.Containers[0]) }), "reported twice"},
		{"container ID 0", mod(func(hb *metaapi.Heartbeat) { hb.Containers[0].ID = 0 }), "ID 0"},
		{"duplicate pipeline", mod(func(hb *metaapi.Heartbeat) { hb.Pipelines = append(hb.Pipelines, hb.Pipelines[0]) }), "reported twice"},
		{"address without port", mod(func(hb *metaapi.Heartbeat) { hb.Addr = "127.0.0.1" }), "addr"},
		{"address port 0", mod(func(hb *metaapi.Heartbeat) { hb.Addr = "127.0.0.1:0" }), "addr"},
		{"address garbage", mod(func(hb *metaapi.Heartbeat) { hb.Addr = "not an address" }), "addr"},
		{"no UUID", mod(func(hb *metaapi.Heartbeat) { hb.UUID = "" }), "uuid"},
		{"UUID with spaces", mod(func(hb *metaapi.Heartbeat) { hb.UUID = "a b" }), "uuid"},
		{"used over capacity", mod(func(hb *metaapi.Heartbeat) { hb.Capacity, hb.Used = 10, 11 }), "capacity"},
		{"metrics URL", mod(func(hb *metaapi.Heartbeat) { hb.MetricsURL = "ftp://x" }), "metrics_url"},
		{"deleted block 0", mod(func(hb *metaapi.Heartbeat) { hb.DeletedBlocks = []metaapi.BlockRef{{}} }), "deleted block"},
		{"wrong node ID", mod(func(hb *metaapi.Heartbeat) { hb.NodeID = 2 }), "registered as node"},
		{"copy failure of container 0", mod(func(hb *metaapi.Heartbeat) { hb.CopyFailures = []metaapi.CopyFailure{{Source: 1}} }), "container 0"},
		{"copy failures over the bound", mod(func(hb *metaapi.Heartbeat) {
			hb.CopyFailures = make([]metaapi.CopyFailure, metaapi.MaxCopyFailuresReport+1)
			for i := range hb.CopyFailures {
				hb.CopyFailures[i].Container = 1
			}
		}), "copy failures"},
		{"copy error too long", mod(func(hb *metaapi.Heartbeat) {
			hb.CopyFailures = []metaapi.CopyFailure{{Container: 1, Error: strings.Repeat("x", metaapi.MaxCopyErrorBytes+1)}}
		}), "error of"},
		{"copying twice", mod(func(hb *metaapi.Heartbeat) { hb.Copying = []uint64{5, 5} }), "copying twice"},
		{"copying over the bound", mod(func(hb *metaapi.Heartbeat) {
			hb.Copying = make([]uint64, metaapi.MaxCopyingReport+1)
			for i := range hb.Copying {
				hb.Copying[i] = uint64(i + 1)
			}
		}), "containers copying"},
	}
	for _, tc := range cases {
		_, err := cl.Heartbeat(bg, tc.hb)
		var e *metaapi.Error
		if !errors.As(err, &e) || !errors.Is(err, metaapi.ErrInvalid) || !strings.Contains(e.Message, tc.want) {
			t.Fatalf("%s: got %v, want INVALID mentioning %q", tc.name, err, tc.want)
		}
	}
	// Bodies that are not a heartbeat at all.
	for _, body := range []string{"", "{", "[]", `{"uuid": 5}`, `{"uuid":"x","addr":"127.0.0.1:1"} trailing`, `{"containers": [{"id": -1}]}`} {
		resp, err := http.Post("http://"+srv.Addr()+"/v1/heartbeat", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		mustClose(t, resp.Body)
		var e metaapi.Error
		if resp.StatusCode != 400 || json.Unmarshal(b, &e) != nil || e.Code != metaapi.CodeInvalid {
			t.Fatalf("body %q: HTTP %d %s, want 400 INVALID", body, resp.StatusCode, b)
		}
	}
	sameSnapshot(t, "after refused heartbeats", before, snapshot(t, cl))
	// The good one still works.
	must[*metaapi.HeartbeatResponse](t)(cl.Heartbeat(bg, good))
}

func TestClientErrorsAndKeyNames(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	srv, cl := serve(t, cfg)
	c := &fakeCluster{t: t, s: srv.Service(), clk: clk}
	for range 3 {
		c.add()
	}
	mustNo(t, c.s.Tick())
	c.settle()
	mustNo(t, ignore(cl.CreateBucket(bg, "bkt")))
	_, err := cl.CreateBucket(bg, "bkt")
	wantErr(t, err, metaapi.ErrExists, "create twice")
	_, err = cl.GetKey(bg, "bkt", "nope")
	wantErr(t, err, metaapi.ErrNotFound, "get missing")
	if !strings.Contains(err.Error(), "bkt/nope") {
		t.Fatalf("message %q does not name the key", err)
	}
	_, err = cl.GetKey(bg, "bkt", "../x")
	wantErr(t, err, metaapi.ErrInvalid, "bad key, client side")

	names := []string{"a//b", "dir/", "x?y#z%25&", "sp ace/ü/🙂", "a/b/c.d", "%2F", "+plus"}
	for i, k := range names {
		a := must[metaapi.AllocateResponse](t)(cl.Allocate(bg, metaapi.AllocateRequest{Bucket: "bkt", Key: k}))
		ck := &metaapi.CommitKey{Size: uint64(i + 1), CRC32C: uint32(i), Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: uint64(i + 1)}}}
		ki := must[metaapi.KeyInfo](t)(cl.CommitKey(bg, "bkt", k, *ck))
		if ki.Key != k {
			t.Fatalf("committed %q as %q", k, ki.Key)
		}
		// The commit is idempotent: a retry with the same blocks works.
		must[metaapi.KeyInfo](t)(cl.CommitKey(bg, "bkt", k, *ck))
	}
	for i, k := range names {
		ki := must[metaapi.KeyInfo](t)(cl.GetKey(bg, "bkt", k))
		if ki.Key != k || ki.Size != uint64(i+1) || len(ki.Blocks[0].Members) != 3 {
			t.Fatalf("get %q: %+v", k, ki)
		}
	}
	l := must[metaapi.KeyList](t)(cl.List(bg, "bkt", metaapi.ListOptions{Prefix: "a/b", Limit: 1}))
	if len(l.Keys) != 1 || l.Keys[0].Key != "a/b/c.d" || l.Next != "" {
		t.Fatalf("list a/: %+v", l)
	}
	_, err = cl.List(bg, "bkt", metaapi.ListOptions{Limit: metaapi.MaxListLimit + 1})
	wantErr(t, err, metaapi.ErrInvalid, "list over the limit")
	mustNo(t, cl.DeleteKey(bg, "bkt", "a//b"))
	wantErr(t, cl.DeleteKey(bg, "bkt", "a//b"), metaapi.ErrNotFound, "delete twice")
	wantErr(t, cl.DeleteBucket(bg, "bkt"), metaapi.ErrNotEmpty, "delete non-empty bucket")

	// No pipeline left: NO_PIPELINE.
	p := c.pipelines()[0].ID
	_, err = cl.Allocate(bg, metaapi.AllocateRequest{Bucket: "bkt", Key: "k", ExcludePipelines: []uint64{p}})
	wantErr(t, err, metaapi.ErrNoPipeline, "allocate excluding everything")

	// Routes and methods that do not exist.
	req, _ := http.NewRequest(http.MethodPut, "http://"+srv.Addr()+"/v1/keys/bkt/k", nil)
	resp := mustDo(t, req)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("PUT on a key: HTTP %d", resp.StatusCode)
	}
	resp = mustDo(t, must[*http.Request](t)(http.NewRequest(http.MethodGet, "http://"+srv.Addr()+"/metrics", nil)))
	body, _ := io.ReadAll(resp.Body)
	for _, m := range []string{`spindle_meta_datanodes{health="HEALTHY"} 3`, `spindle_meta_pipelines{state="OPEN"} 1`,
		`spindle_meta_keys 6`, `spindle_meta_buckets 1`, `spindle_meta_request_seconds_count{code="200",route="commit_batch"} 14`,
		`spindle_meta_heartbeats_total`, `spindle_meta_containers{state="OPEN"} 1`} {
		if !bytes.Contains(body, []byte(m)) {
			t.Fatalf("/metrics lacks %q:\n%s", m, body)
		}
	}
}

func mustDo(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, resp.Body) })
	return resp
}

func TestClientUnreachable(t *testing.T) {
	// A port nobody listens on (a port taken and closed could be anyone's
	// by the time the client dials it).
	const addr = "127.0.0.1:1"
	cl := must[*metaapi.Client](t)(metaapi.NewClient(addr, metaapi.ClientOptions{Attempts: 2, Backoff: time.Millisecond}))
	_, err := cl.ListBuckets(bg)
	wantErr(t, err, metaapi.ErrUnavailable, "unreachable meta")
	if !strings.Contains(err.Error(), "meta unreachable at "+addr) {
		t.Fatalf("message %q does not say where", err)
	}
	for _, bad := range []string{"", "ftp://x:1", "http://", "http://h:1/path", "h:1?q"} {
		if _, err := metaapi.NewClient(bad, metaapi.ClientOptions{}); err == nil {
			t.Fatalf("NewClient(%q) accepted", bad)
		}
	}
}

// flaky answers 503 UNAVAILABLE to the first fails requests of each path.
type flaky struct {
	fails int
	seen  map[string]int
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.seen[r.Method+" "+r.URL.Path]++
	if f.seen[r.Method+" "+r.URL.Path] <= f.fails {
		metaapi.WriteError(w, 503, metaapi.CodeUnavailable, "not now")
		return
	}
	if r.Method == http.MethodPut {
		metaapi.WriteError(w, 503, metaapi.CodeUnavailable, "never for PUT")
		return
	}
	httpio.WriteJSON(w, 200, metaapi.BucketList{Buckets: []metaapi.Bucket{{Name: "ok"}}})
}

func TestClientRetriesIdempotentCallsOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{fails: 2, seen: map[string]int{}}
	hs := &http.Server{Handler: f}
	go func() {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() { mustClose(t, hs) })
	cl := must[*metaapi.Client](t)(metaapi.NewClient("http://"+ln.Addr().String(), metaapi.ClientOptions{Attempts: 3, Backoff: time.Millisecond}))
	l := must[metaapi.BucketList](t)(cl.ListBuckets(bg))
	if len(l.Buckets) != 1 || f.seen["GET /v1/buckets"] != 3 {
		t.Fatalf("list after 2 failures: %+v, %d tries", l, f.seen["GET /v1/buckets"])
	}
	_, err = cl.CreateBucket(bg, "abc")
	wantErr(t, err, metaapi.ErrUnavailable, "create bucket on a 503")
	if n := f.seen["PUT /v1/buckets/abc"]; n != 1 {
		t.Fatalf("create bucket tried %d times, want 1 (not idempotent)", n)
	}
	f.fails = 10
	_, err = cl.Nodes(bg)
	wantErr(t, err, metaapi.ErrUnavailable, "nodes after 3 failures")
	if n := f.seen["GET /v1/nodes"]; n != 3 {
		t.Fatalf("nodes tried %d times, want 3", n)
	}
}

func TestRestartIntact(t *testing.T) {
	dir, clk := t.TempDir(), newClock()
	cfg := testConfig(dir, clk)
	cfg.PipelinesPerNode = 2
	cfg.ContainerSizeBytes = 1000
	srv, cl := serve(t, cfg)
	c := &fakeCluster{t: t, s: srv.Service(), clk: clk}
	for range 4 {
		c.add()
	}
	mustNo(t, c.s.Tick())
	c.settle()
	for _, n := range c.nodes {
		n.noAck = true // keep deletions pending
	}
	for _, b := range []string{"alpha", "beta"} {
		mustNo(t, ignore(cl.CreateBucket(bg, b)))
	}
	for i := range 12 {
		c.put("alpha", fmt.Sprint("key", i), 2, 100)
	}
	c.put("beta", "k", 1, 1)
	c.put("beta", "k", 1, 2) // replaced: a pending deletion
	mustNo(t, cl.DeleteKey(bg, "alpha", "key3"))
	pending := must[metaapi.AllocateResponse](t)(cl.Allocate(bg, metaapi.AllocateRequest{Bucket: "beta", Key: "later"}))
	c.settle()
	before := snapshot(t, cl)
	ctr, nDel, nAlloc := c.s.Ctr, c.s.NDeletes, len(c.s.Allocs)
	if nDel == 0 || nAlloc != 1 {
		t.Fatalf("setup: %d deletions, %d allocations", nDel, nAlloc)
	}
	mustNo(t, srv.Close())

	srv, cl = serve(t, cfg)
	c.s = srv.Service()
	// Reports (used bytes, leaders) are memory only: one heartbeat each
	// brings them back.
	for _, n := range c.nodes {
		n.beat()
	}
	sameSnapshot(t, "across a restart", before, snapshot(t, cl))
	if c.s.Ctr != ctr || c.s.NDeletes != nDel || len(c.s.Allocs) != nAlloc {
		t.Fatalf("counters %+v/%+v, deletions %d/%d, allocations %d/%d", c.s.Ctr, ctr, c.s.NDeletes, nDel, len(c.s.Allocs), nAlloc)
	}
	// The pending allocation can still be committed.
	must[metaapi.KeyInfo](t)(cl.CommitKey(bg, "beta", "later", metaapi.CommitKey{Size: 5, Blocks: []metaapi.KeyBlock{{BlockRef: pending.Block, Length: 5}}}))
}

func TestRunReadyFileAndStop(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, state.Config{Dir: filepath.Join(dir, "meta"), Listen: "127.0.0.1:0", ReadyFile: ready, Logger: quiet})
	}()
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if b, err := os.ReadFile(ready); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) != 2 || lines[1] != fmt.Sprint(os.Getpid()) {
				t.Fatalf("ready file %q", b)
			}
			addr = lines[0]
		} else if time.Now().After(deadline) {
			t.Fatal("no ready file within 10 s")
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	cl := must[*metaapi.Client](t)(metaapi.NewClient(addr, metaapi.ClientOptions{}))
	mustNo(t, ignore(cl.CreateBucket(bg, "bkt")))
	cancel()
	select {
	case err := <-done:
		mustNo(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of the cancel")
	}
	_, err := cl.ListBuckets(bg)
	wantErr(t, err, metaapi.ErrUnavailable, "after stop")
}

func TestConcurrentPutsOverHTTP(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 2
	srv, cl := serve(t, cfg)
	c := &fakeCluster{t: t, s: srv.Service(), clk: clk}
	for range 3 {
		c.add()
	}
	mustNo(t, c.s.Tick())
	c.settle()
	mustNo(t, ignore(cl.CreateBucket(bg, "bkt")))
	const writers, each = 8, 15
	type put struct {
		key    string
		blocks []metaapi.BlockRef
	}
	results := make(chan put, writers*each)
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				key := fmt.Sprintf("w%d/k%d", w, i)
				ck := metaapi.CommitKey{}
				var refs []metaapi.BlockRef
				for range 2 {
					a, err := cl.Allocate(bg, metaapi.AllocateRequest{Bucket: "bkt", Key: key})
					if err != nil {
						errs <- err
						return
					}
					ck.Blocks = append(ck.Blocks, metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 10})
					ck.Size += 10
					refs = append(refs, a.Block)
				}
				if _, err := cl.CommitKey(bg, "bkt", key, ck); err != nil {
					errs <- err
					return
				}
				results <- put{key, refs}
			}
			errs <- nil
		}()
	}
	for range writers {
		mustNo(t, <-errs)
	}
	close(results)
	seen := map[metaapi.BlockRef]string{}
	for p := range results {
		for _, r := range p.blocks {
			r.Token = "" // the allocation's write token
			if k, dup := seen[r]; dup {
				t.Fatalf("block %v handed out for %s and %s", r, k, p.key)
			}
			seen[r] = p.key
		}
		ki := must[metaapi.KeyInfo](t)(cl.GetKey(bg, "bkt", p.key))
		same := func(a, b metaapi.BlockRef) bool { return a.Container == b.Container && a.Local == b.Local }
		if len(ki.Blocks) != 2 || !same(ki.Blocks[0].BlockRef, p.blocks[0]) || !same(ki.Blocks[1].BlockRef, p.blocks[1]) {
			t.Fatalf("key %s: %+v, committed %v", p.key, ki.Blocks, p.blocks)
		}
	}
	bl := must[metaapi.BucketList](t)(cl.ListBuckets(bg))
	if len(seen) != 2*writers*each || bl.Buckets[0].Keys != writers*each || bl.Buckets[0].Bytes != 20*writers*each {
		t.Fatalf("%d blocks, bucket %+v", len(seen), bl.Buckets[0])
	}
}

// openBlockedFS holds the first MkdirAll of an Open (the store's
// directory) until release is closed.
type openBlockedFS struct {
	vfs.FS
	once             sync.Once
	entered, release chan struct{}
}

func (b *openBlockedFS) MkdirAll(dir string, perm os.FileMode) error {
	b.once.Do(func() {
		close(b.entered)
		<-b.release
	})
	return b.FS.MkdirAll(dir, perm)
}

// TestAnswersUnavailableWhileOpening: a member serves its listener from
// the start of Start; while its store opens every request is answered at
// once UNAVAILABLE (not the leader, no leader known), as the members of
// a new group ask each other at their bootstrap (raftgroup.rejoinTerm)
// and a raft stream must learn at once that nobody reads it. Without it
// the request waits out its timeout on a listener nobody serves, and a
// new group's members took 2-8 s each to start.
func TestAnswersUnavailableWhileOpening(t *testing.T) {
	fs := &openBlockedFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
	ln := must[net.Listener](t)(net.Listen("tcp", "127.0.0.1:0"))
	started := make(chan error, 1)
	var srv *Server
	go func() {
		var err error
		srv, err = Start(state.Config{Dir: filepath.Join(t.TempDir(), "meta"), Listener: ln, FS: fs, Logger: quiet})
		started <- err
	}()
	released := false
	defer func() {
		if !released {
			close(fs.release)
			if err := <-started; err != nil {
				t.Error(err)
			}
		}
		if srv != nil {
			mustNo(t, srv.Close())
		}
	}()
	<-fs.entered // Start is inside Open, and stays there until release
	cl := must[*metaapi.Client](t)(metaapi.NewClient(ln.Addr().String(), metaapi.ClientOptions{Attempts: 1, Timeout: time.Minute}))
	_, err := cl.MetaStatus(bg)
	var me *metaapi.Error
	if !errors.As(err, &me) || me.Code != metaapi.CodeUnavailable || !me.NotLeader || !strings.Contains(me.Message, "opening") {
		t.Fatalf("a request while the member opens: %v, want UNAVAILABLE, not the leader, opening", err)
	}
	close(fs.release)
	released = true
	mustNo(t, <-started)
	mustNo(t, ignore(cl.CreateBucket(bg, "bkt")))
}
