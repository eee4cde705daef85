package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/raftgroup"
	"github.com/spindle-store/spindle/internal/meta/state"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
	"github.com/spindle-store/spindle/internal/wal"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// rgroup is a replicated meta service of len(addrs) members in this
// process, each on its own 127.0.0.1 listener.
type rgroup struct {
	t     *testing.T
	dirs  []string
	addrs []string
	peers map[uint64]string
	srvs  []*Server // nil: stopped
	cl    *metaapi.Client
	// tweak, when set, changes each member's Config before it starts.
	tweak func(*state.Config)
}

func newRGroup(t *testing.T, n int) *rgroup { return newRGroupWith(t, n, nil) }

func newRGroupWith(t *testing.T, n int, tweak func(*state.Config)) *rgroup {
	t.Helper()
	g := &rgroup{t: t, peers: map[uint64]string{}, srvs: make([]*Server, n), tweak: tweak}
	lns := make([]net.Listener, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		g.addrs = append(g.addrs, ln.Addr().String())
		g.dirs = append(g.dirs, filepath.Join(t.TempDir(), fmt.Sprintf("meta%d", i+1)))
		g.peers[uint64(i+1)] = ln.Addr().String()
	}
	// Started together, as an operator starts a new group's members: each
	// one's bootstrap asks the others (raftgroup.rejoinTerm), which answer
	// at once while they open (Start); one after the other, a member
	// would wait out its probes of listeners nobody serves yet.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { g.srvs[i], errs[i] = g.open(i, lns[i]) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for i := range g.srvs {
			g.stop(i)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var err error
	if g.cl, err = metaapi.NewClient(strings.Join(g.addrs, ","), metaapi.ClientOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *rgroup) start(i int, ln net.Listener) {
	g.t.Helper()
	srv, err := g.open(i, ln)
	if err != nil {
		g.t.Fatal(err)
	}
	g.srvs[i] = srv
}

// open starts member i on ln (any goroutine: it does not fail the test).
func (g *rgroup) open(i int, ln net.Listener) (*Server, error) {
	// The test datanodes (dns) heartbeat when a test says so, not on a
	// clock: they stay HEALTHY for the test's length however slow the
	// machine (a test that wants them STALE or DEAD sets its own times).
	cfg := state.Config{Dir: g.dirs[i], Logger: quiet, ID: uint64(i + 1), Peers: g.peers, TickInterval: -1, DisableSafeMode: true,
		RaftTickInterval: 20 * time.Millisecond, Listener: ln, StaleAfter: 10 * time.Minute, DeadAfter: 20 * time.Minute}
	if g.tweak != nil {
		g.tweak(&cfg)
	}
	srv, err := Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("member %d: %w", i+1, err)
	}
	return srv, nil
}

func (g *rgroup) stop(i int) {
	if g.srvs[i] != nil {
		if err := g.srvs[i].Close(); err != nil {
			g.t.Errorf("member %d: close: %v", i+1, err)
		}
		g.srvs[i] = nil
	}
}

// restart starts member i again on its address and directory.
func (g *rgroup) restart(i int) {
	g.t.Helper()
	ln, err := net.Listen("tcp", g.addrs[i])
	if err != nil {
		g.t.Fatalf("member %d: listen again on %s: %v", i+1, g.addrs[i], err)
	}
	g.start(i, ln)
}

// leader waits until a running member serves and returns its index.
func (g *rgroup) leader() int {
	g.t.Helper()
	idx := -1
	waitFor(g.t, "a meta leader serving", func() bool {
		for i, s := range g.srvs {
			if s != nil && s.Service().Serving() {
				idx = i
				return true
			}
		}
		return false
	})
	return idx
}

// dns registers three datanodes through the client, makes the leader
// form a pipeline, and has them report it.
func (g *rgroup) dns() []*testDN {
	g.t.Helper()
	ctx := context.Background()
	var dns []*testDN
	for i := range state.PipelineSize {
		d := &testDN{uuid: fmt.Sprintf("dn-%d", i+1), addr: fmt.Sprintf("127.0.0.1:%d", 1+i), pipelines: map[uint64]bool{}}
		mustNo(g.t, d.beat(ctx, g.cl))
		dns = append(dns, d)
	}
	mustNo(g.t, g.srvs[g.leader()].Service().Tick())
	for _, d := range dns {
		mustNo(g.t, d.beat(ctx, g.cl))
		mustNo(g.t, d.beat(ctx, g.cl))
	}
	return dns
}

// testDN heartbeats as a datanode that joins what it is told to.
type testDN struct {
	uuid, addr string
	id         uint64
	pipelines  map[uint64]bool
}

func (d *testDN) beat(ctx context.Context, mc *metaapi.Client) error {
	hb := &metaapi.Heartbeat{UUID: d.uuid, NodeID: d.id, Addr: d.addr}
	for id := range d.pipelines {
		hb.Pipelines = append(hb.Pipelines, metaapi.PipelineReport{ID: id, LeaderID: d.id, Term: 1})
	}
	resp, err := mc.Heartbeat(ctx, hb)
	if err != nil {
		return err
	}
	d.id = resp.NodeID
	for _, c := range resp.Commands {
		if c.Kind == metaapi.CmdJoinPipeline && c.Pipeline != nil {
			d.pipelines[c.Pipeline.ID] = true
		}
	}
	return nil
}

// put allocates a block for bucket/key and commits it (size bytes).
func put(ctx context.Context, cl *metaapi.Client, bucket, key string, size uint64) error {
	a, err := cl.Allocate(ctx, metaapi.AllocateRequest{Bucket: bucket, Key: key})
	if err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	_, err = cl.CommitKey(ctx, bucket, key, metaapi.CommitKey{Size: size, Blocks: []metaapi.KeyBlock{
		{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: size}}})
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// TestReplicatedFollowerRedirects: a follower refuses with NOT_LEADER and
// the leader's address; a client given the follower first reaches the
// leader, a non-idempotent call included (the refusal changed nothing);
// every member's store ends with the bucket.
func TestReplicatedFollowerRedirects(t *testing.T) {
	g := newRGroup(t, 3)
	ld := g.leader()
	f := (ld + 1) % 3
	fc, err := metaapi.NewClient(g.addrs[f], metaapi.ClientOptions{Attempts: 1})
	mustNo(t, err)
	_, err = fc.CreateBucket(bg, "direct")
	var e *metaapi.Error
	if !errors.As(err, &e) || !e.NotLeader || e.Leader != g.addrs[ld] || !errors.Is(err, metaapi.ErrUnavailable) {
		t.Fatalf("create on follower %d: %v (%+v), want NOT_LEADER naming %s", f+1, err, e, g.addrs[ld])
	}
	order := []string{g.addrs[f], g.addrs[(f+1)%3], g.addrs[(f+2)%3]}
	cl, err := metaapi.NewClient(strings.Join(order, ","), metaapi.ClientOptions{})
	mustNo(t, err)
	if _, err := cl.CreateBucket(bg, "via-follower"); err != nil {
		t.Fatalf("create through a client starting at follower %d: %v", f+1, err)
	}
	if cl.Addr() != g.addrs[ld] {
		t.Fatalf("client follows %s, want the leader %s", cl.Addr(), g.addrs[ld])
	}
	// Every member applies the entry: each store, opened alone, holds it.
	st := g.srvs[ld].Service().MetaStatus()
	waitFor(t, "every member applied the bucket", func() bool {
		for _, s := range g.srvs {
			if s.Service().MetaStatus().AppliedIndex < st.AppliedIndex {
				return false
			}
		}
		return true
	})
	for i := range g.srvs {
		g.stop(i)
		svc, err := Open(state.Config{Dir: g.dirs[i], Logger: quiet, TickInterval: -1, DisableSafeMode: true, ID: uint64(i + 1), Peers: g.peers})
		mustNo(t, err)
		_, closer, err := svc.Store.Get(state.BucketKey("via-follower"))
		ok := err == nil
		if ok {
			mustClose(t, closer)
		}
		mustClose(t, svc)
		if !ok {
			t.Errorf("member %d: the store lacks bucket via-follower", i+1)
		}
	}
}

// TestReplicatedLeaderLossKeepsAcknowledgedKeys: clients put keys while
// the leader is stopped (twice, the second time with the first one back);
// every key whose commit was acknowledged reads back from the group, and
// the members' stores agree.
func TestReplicatedLeaderLossKeepsAcknowledgedKeys(t *testing.T) {
	g := newRGroup(t, 3)
	g.dns()
	mustNo(t, func() error { _, err := g.cl.CreateBucket(bg, "hab"); return err }())
	// SPINDLE_META_SOAK=N (make soak-meta): N leader stops over 150·N
	// puts per writer instead of 2 over 60.
	writers, perWriter, stops := 4, 60, 2
	if v := os.Getenv("SPINDLE_META_SOAK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SPINDLE_META_SOAK=%q: want a number of leader stops ≥ 1", v)
		}
		perWriter, stops = 150*n, n
	}
	var mu sync.Mutex
	var acked []string
	progress := make(chan struct{}, writers*perWriter)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(stops)*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perWriter {
				k := fmt.Sprintf("w%d-%d", w, j)
				if err := put(ctx, g.cl, "hab", k, uint64(1+j)); err != nil {
					t.Logf("put %s: %v", k, err) // outcome unknown: not counted
				} else {
					mu.Lock()
					acked = append(acked, k)
					mu.Unlock()
				}
				progress <- struct{}{}
			}
		}()
	}
	// Deterministic points: the leader is stopped after every
	// total/(stops+1) puts; the odd stops restart it at once (it rejoins
	// as a follower), the even ones leave it down until the next stop.
	total := writers * perWriter
	every := total / (stops + 1)
	down := -1
	for n := 1; n <= total; n++ {
		<-progress
		if n%every != 0 || n/every > stops {
			continue
		}
		if down >= 0 {
			g.restart(down)
			down = -1
		}
		ld := g.leader()
		g.stop(ld)
		if (n/every)%2 == 1 {
			g.restart(ld)
		} else {
			down = ld
		}
	}
	wg.Wait()
	if len(acked) < writers*perWriter/2 {
		t.Fatalf("only %d of %d puts acknowledged", len(acked), writers*perWriter)
	}
	for i := range g.srvs {
		if g.srvs[i] == nil {
			g.restart(i)
		}
	}
	for _, k := range acked {
		j, _ := strconv.Atoi(k[strings.Index(k, "-")+1:])
		ki, err := g.cl.GetKey(bg, "hab", k)
		if err != nil || ki.Size != uint64(1+j) {
			t.Errorf("acknowledged key %s: %+v, %v", k, ki, err)
		}
	}
	// The members converge on the same applied index, and their stores
	// hold the same keys.
	want := g.srvs[g.leader()].Service().MetaStatus().CommitIndex
	waitFor(t, "every member applied the log", func() bool {
		for _, s := range g.srvs {
			if s.Service().MetaStatus().AppliedIndex < want {
				return false
			}
		}
		return true
	})
	var lists []string
	for i := range g.srvs {
		g.stop(i)
		svc, err := Open(state.Config{Dir: g.dirs[i], Logger: quiet, TickInterval: -1, DisableSafeMode: true, ID: uint64(i + 1), Peers: g.peers})
		mustNo(t, err)
		var keys []string
		mustNo(t, svc.Scan(state.PrefixKey, func(k, v []byte) error { keys = append(keys, string(k)); return nil }))
		mustClose(t, svc)
		lists = append(lists, strings.Join(keys, ","))
	}
	if lists[0] != lists[1] || lists[1] != lists[2] {
		t.Fatalf("the members' stores differ:\n%s\n%s\n%s", lists[0], lists[1], lists[2])
	}
	if strings.Count(lists[0], ",")+1 < len(acked) {
		t.Fatalf("the stores hold %d keys, %d acknowledged", strings.Count(lists[0], ",")+1, len(acked))
	}
}

// TestMetaLogEntryEncoding: a folded entry (version 2) round-trips and
// every flipped byte is caught; a version 1 entry (one proposal, written
// before proposals were folded) still decodes as proposals seq..seq.
func TestMetaLogEntryEncoding(t *testing.T) {
	data := state.EncodeEntry(7, 9, []byte("batch"))
	first, last, repr, err := state.DecodeEntry(data)
	if err != nil || first != 7 || last != 9 || string(repr) != "batch" {
		t.Fatalf("decode: %d..%d %q %v", first, last, repr, err)
	}
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 1
		if _, _, _, err := state.DecodeEntry(bad); !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
	// Version 1: 01 | seq u64 | batch | crc (FORMAT.md's example layout).
	v1 := []byte{1, 5, 0, 0, 0, 0, 0, 0, 0}
	v1 = append(v1, "batch"...)
	v1 = binary.LittleEndian.AppendUint32(v1, crc32c.Checksum(v1))
	if first, last, repr, err := state.DecodeEntry(v1); err != nil || first != 5 || last != 5 || string(repr) != "batch" {
		t.Fatalf("version 1: %d..%d %q %v", first, last, repr, err)
	}
	for _, fl := range [][2]uint64{{0, 0}, {4, 3}} {
		if _, _, _, err := state.DecodeEntry(state.EncodeEntry(fl[0], fl[1], nil)); !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("proposals %d..%d: %v, want ErrCorrupt", fl[0], fl[1], err)
		}
	}
	a := raftgroup.AppliedState{Index: 9, Term: 3, Seq: 4}
	if got, err := raftgroup.DecodeAppliedState(a.Encode()); err != nil || got != a {
		t.Fatalf("applied state: %+v %v", got, err)
	}
}

// TestAppliedStateFollows: a proposal is applied only when it continues
// its leader's stint without a gap (a dropped proposal ends the stint and
// every member skips what its leader proposed after it).
func TestAppliedStateFollows(t *testing.T) {
	a := raftgroup.AppliedState{Index: 10, Term: 3, Seq: 4}
	cases := []struct {
		term, seq uint64
		want      bool
	}{{3, 5, true}, {3, 6, false}, {3, 4, false}, {4, 1, true}, {4, 2, false}, {2, 1, false}}
	for _, c := range cases {
		if got := a.Follows(c.term, c.seq); got != c.want {
			t.Errorf("follows(%d, %d) = %v, want %v", c.term, c.seq, got, c.want)
		}
	}
}

// TestReplicatedRefusesSingleStore: a store written by a single meta
// service is not silently made a member.
func TestReplicatedRefusesSingleStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	svc, err := Open(state.Config{Dir: dir, Logger: quiet, TickInterval: -1})
	mustNo(t, err)
	_, err = svc.CreateBucket("b01")
	mustNo(t, err)
	mustNo(t, svc.Close())
	_, err = Open(state.Config{Dir: dir, Logger: quiet, TickInterval: -1, ID: 1, Peers: map[uint64]string{1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: "127.0.0.1:3"}})
	if err == nil || !strings.Contains(err.Error(), "single meta service") {
		t.Fatalf("open as a member: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft")); err == nil {
		t.Fatal("a raft log was created")
	}
}

// TestRestartWithStoreAheadOfCommitIndex: the apply worker may apply an
// entry before the HardState committing it is durable; a member restarted
// then must start (raft panics when told it applied past its commit
// index) and not apply the entry twice. Fails (panic) with Applied set to
// the store's index.
func TestRestartWithStoreAheadOfCommitIndex(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m1")
	peers := map[uint64]string{1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: "127.0.0.1:3"}
	cfg := state.Config{Dir: dir, Logger: quiet, TickInterval: -1, ID: 1, Peers: peers}
	svc, err := Open(cfg)
	mustNo(t, err)
	mustNo(t, svc.Close())
	l, err := wal.Open(wal.Config{Dir: filepath.Join(dir, "raft"), MaxRecordBytes: state.MaxRaftRecordBytes, Logger: quiet})
	mustNo(t, err)
	seq, err := l.Append(wal.EntryRecord(raftgroup.WALGroup, 2, 2, 0, nil), wal.EntryRecord(raftgroup.WALGroup, 2, 3, 0, nil),
		wal.HardStateRecord(raftgroup.WALGroup, wal.HardState{Term: 2, Vote: 1, Commit: 1}))
	mustNo(t, err)
	mustNo(t, l.WaitDurable(seq))
	mustNo(t, l.Close())
	db, err := state.OpenStore(vfs.Default, dir, quiet)
	mustNo(t, err)
	mustNo(t, db.Set(raftgroup.AppliedKey, raftgroup.AppliedState{Index: 3}.Encode(), pebble.Sync))
	mustNo(t, db.Close())
	svc, err = Open(cfg)
	mustNo(t, err)
	defer mustClose(t, svc)
	if got := svc.MetaStatus().AppliedIndex; got != 3 {
		t.Fatalf("applied index %d after the restart, want 3", got)
	}
}

// TestReplicatedConcurrentReadsThroughTheOverlay: reads (under the read
// lock, through the leader's overlay) run concurrently with each other and
// with commits; every read sees a key once its commit was acknowledged.
// Meant for -race.
func TestReplicatedConcurrentReadsThroughTheOverlay(t *testing.T) {
	g := newRGroup(t, 3)
	g.dns()
	if _, err := g.cl.CreateBucket(bg, "b01"); err != nil {
		t.Fatal(err)
	}
	const writers, readers, keys = 2, 6, 40
	var wg sync.WaitGroup
	acked := make(chan string, writers*keys)
	errs := make(chan error, writers+readers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range keys {
				k := fmt.Sprintf("w%d-%d", w, j)
				if err := put(bg, g.cl, "b01", k, 5); err != nil {
					errs <- err
					return
				}
				acked <- k
			}
		}()
	}
	var rg sync.WaitGroup
	for range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for k := range acked {
				if _, err := g.cl.GetKey(bg, "b01", k); err != nil {
					errs <- fmt.Errorf("get %s after its commit: %w", k, err)
					return
				}
				if _, err := g.cl.List(bg, "b01", metaapi.ListOptions{Limit: 10}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(acked)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestOverlayRebuildKeepsProposalsIntact: the leader rebuilds its overlay
// from the proposals in flight (here at every proposal) while clients
// write; every member applies every entry (none fails its checksum) and
// every acknowledged key reads back. The rebuild used to hand the
// in-flight proposals' own bytes to Pebble batches it then closed: Pebble
// reused them, and the entries still on their way through raft changed
// under it — a follower (or the leader) failed with "meta log entry: crc
// …, want …" (seen in bench meta --replicas 3).
func TestOverlayRebuildKeepsProposalsIntact(t *testing.T) {
	old := state.MaxOverlayBytes
	state.MaxOverlayBytes = 0
	t.Cleanup(func() { state.MaxOverlayBytes = old })
	g := newRGroup(t, 3)
	g.dns()
	if _, err := g.cl.CreateBucket(bg, "b01"); err != nil {
		t.Fatal(err)
	}
	const writers, keys = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range keys {
				if err := put(bg, g.cl, "b01", fmt.Sprintf("w%d-%d", w, j), 5); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		for j := range keys {
			if _, err := g.cl.GetKey(bg, "b01", fmt.Sprintf("w%d-%d", w, j)); err != nil {
				t.Fatalf("key w%d-%d: %v", w, j, err)
			}
		}
	}
}

// TestReplicatedBatchIsOneEntry: a commit batch on a replicated leader is
// one log entry (one proposal) holding every applied item, applied on
// every member; each item is still answered as if alone (a later commit
// of a key sees the earlier one; a bad CRC32C, a failed condition and an
// unknown bucket are refused and change nothing, the others commit), and
// a batch refused entirely adds no entry.
func TestReplicatedBatchIsOneEntry(t *testing.T) {
	g := newRGroup(t, 3)
	g.dns()
	if _, err := g.cl.CreateBucket(bg, "bkt"); err != nil {
		t.Fatal(err)
	}
	ld := g.srvs[g.leader()].Service()
	// Every member applied everything so far: the batch's entries are
	// the only ones after it (no tick runs: TickInterval -1).
	settled := func() uint64 {
		t.Helper()
		var last uint64
		waitFor(t, "every member applied the leader's log", func() bool {
			last = ld.rep.Last.Load()
			for _, s := range g.srvs {
				if s.Service().rep.Applied.Load() != last {
					return false
				}
			}
			return true
		})
		return last
	}
	before := settled()
	v1, v2 := inlineValue(1, 1000), inlineValue(2, 2000)
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
	res := must[[]metaapi.CommitResult](t)(ld.CommitKeys(items))
	want := []error{nil, metaapi.ErrInvalid, nil, metaapi.ErrPrecondition, metaapi.ErrNotFound, nil}
	for i, r := range res {
		if want[i] == nil {
			if r.Error != nil || r.Key == nil || r.Key.Key != items[i].Key || r.Key.Size != items[i].Size {
				t.Fatalf("commit %d: %+v, %v; want its key", i, r.Key, r.Error)
			}
		} else if !errors.Is(r.Error, want[i]) || r.Key != nil {
			t.Fatalf("commit %d: %+v, %v; want %v", i, r.Key, r.Error, want[i])
		}
	}
	after := settled()
	if after != before+1 {
		t.Fatalf("the batch took log entries %d..%d, want one", before+1, after)
	}
	ents, err := ld.rep.WAL.Entries(raftgroup.WALGroup, after, after+1, 1<<30)
	if err != nil || len(ents) != 1 {
		t.Fatalf("entry %d: %d entries, %v", after, len(ents), err)
	}
	first, last, _, err := state.DecodeEntry(ents[0].Data)
	if err != nil || first != last {
		t.Fatalf("entry %d: proposals %d..%d, %v; want one", after, first, last, err)
	}
	// Every member's store holds the batch's keys (a: the later commit)
	// and not the refused one.
	for i, srv := range g.srvs {
		s := srv.Service()
		for _, k := range []struct {
			key  string
			want []byte
		}{{"a", v2}, {"d", v1}, {"b", nil}} {
			v, c, err := s.rep.DB.Get(state.ObjectKey("bkt", k.key))
			if k.want == nil {
				if !errors.Is(err, pebble.ErrNotFound) {
					t.Fatalf("member %d: refused key %s: %v, want not found", i+1, k.key, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("member %d: key %s: %v", i+1, k.key, err)
			}
			kr, err := state.DecodeKey(v)
			mustClose(t, c)
			if err != nil || !bytes.Equal(kr.Inline, k.want) {
				t.Fatalf("member %d: key %s: %v, %d bytes inline, want %d", i+1, k.key, err, len(kr.Inline), len(k.want))
			}
		}
	}
	// A batch whose every item is refused proposes nothing.
	res = must[[]metaapi.CommitResult](t)(ld.CommitKeys(items[1:2]))
	if !errors.Is(res[0].Error, metaapi.ErrInvalid) {
		t.Fatalf("a lone bad commit: %v, want ErrInvalid", res[0].Error)
	}
	if got := settled(); got != after {
		t.Fatalf("a refused batch took log entries %d..%d", after+1, got)
	}
}

// TestFoldProposals: the proposals queued together become as few entries
// as maxFoldedEntryBytes allows, in order, each with its sequences and
// the Pebble batch of all its proposals' operations; proposals of an
// ended stint are left out.
func TestFoldProposals(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: pebblevfs.NewMem(), Logger: state.PebbleLogger{L: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, db)
	prop := func(stint, seq uint64, valBytes int) state.Proposal {
		b := db.NewBatch()
		state.Set(b, fmt.Appendf(nil, "k%d", seq), make([]byte, valBytes))
		state.Set(b, fmt.Appendf(nil, "k%d-2", seq), nil)
		return state.Proposal{Stint: stint, Seq: seq, Repr: slices.Clone(b.Repr())}
	}
	big := state.MaxFoldedEntryBytes / 2
	props := []state.Proposal{prop(2, 9, 10), prop(3, 1, 10), prop(3, 2, 10), prop(3, 3, big), prop(3, 4, big), prop(3, 5, 10)}
	got := raftgroup.FoldProposals(props, 3)
	want := [][2]uint64{{1, 3}, {4, 5}}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i, f := range got {
		if f.Err != nil || f.First != want[i][0] || f.Last != want[i][1] || len(f.Repr) > state.MaxFoldedEntryBytes+64 {
			t.Fatalf("entry %d: proposals %d..%d (%d bytes), %v; want %d..%d", i, f.First, f.Last, len(f.Repr), f.Err, want[i][0], want[i][1])
		}
		var eb pebble.Batch
		mustNo(t, eb.SetRepr(f.Repr))
		if n := int(eb.Count()); n != 2*int(f.Last-f.First+1) {
			t.Fatalf("entry %d: %d operations, want %d", i, n, 2*(f.Last-f.First+1))
		}
		mustNo(t, db.Apply(&eb, pebble.NoSync))
	}
	for seq := 1; seq <= 5; seq++ {
		v, c, err := db.Get(fmt.Appendf(nil, "k%d", seq))
		if err != nil {
			t.Fatalf("k%d: %v", seq, err)
		}
		mustClose(t, c)
		if want := map[bool]int{true: big, false: 10}[seq == 3 || seq == 4]; len(v) != want {
			t.Fatalf("k%d: %d bytes, want %d", seq, len(v), want)
		}
	}
	if _, c, err := db.Get([]byte("k9")); !errors.Is(err, pebble.ErrNotFound) {
		if c != nil {
			mustClose(t, c)
		}
		t.Fatalf("the ended stint's proposal: %v, want not found", err)
	}
	if got := raftgroup.FoldProposals(props, 0); len(got) != 0 {
		t.Fatalf("not serving: %d entries", len(got))
	}
}

// TestReplicatedAnswersOnceCommitted: a commit is answered once its entry
// is committed, before the leader's store applies it (the apply worker is
// held here: the leader's store lacks the key when the answer comes), and
// the key reads back at once (memory and overlay hold it); the store
// applies it once the worker goes on.
func TestReplicatedAnswersOnceCommitted(t *testing.T) {
	g := newRGroup(t, 3)
	if _, err := g.cl.CreateBucket(bg, "bkt"); err != nil {
		t.Fatal(err)
	}
	ld := g.srvs[g.leader()].Service()
	v := inlineValue(1, 100)
	ld.rep.StoreMu.Lock() // the apply worker waits for it
	held := true
	defer func() {
		if held {
			ld.rep.StoreMu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	if _, err := g.cl.CommitKey(ctx, "bkt", "k", *inlineCommit(v)); err != nil {
		t.Fatalf("commit with the leader's store apply held: %v", err)
	}
	if _, c, err := ld.rep.DB.Get(state.ObjectKey("bkt", "k")); !errors.Is(err, pebble.ErrNotFound) {
		if c != nil {
			mustClose(t, c)
		}
		t.Fatalf("the leader's store holds the key before its apply: %v", err)
	}
	ki, err := g.cl.GetKey(ctx, "bkt", "k")
	if err != nil || !bytes.Equal(ki.Inline, v) {
		t.Fatalf("get after the answer: %v, %d bytes", err, len(ki.Inline))
	}
	ld.rep.StoreMu.Unlock()
	held = false
	waitFor(t, "the leader's store applies the key", func() bool {
		_, c, err := ld.rep.DB.Get(state.ObjectKey("bkt", "k"))
		if err == nil {
			mustClose(t, c)
		}
		return err == nil
	})
}

// TestCommitOnly: a round of appends skips its fdatasync only when it
// carries no entries, no snapshot, and no change of term or vote.
func TestCommitOnly(t *testing.T) {
	durable := wal.HardState{Term: 5, Vote: 2}
	hs := func(term, vote, commit uint64) *pb.Message {
		return &pb.Message{Type: pb.MessageType_MsgStorageAppend.Enum(), Term: &term, Vote: &vote, Commit: &commit}
	}
	withEntry := hs(5, 2, 9)
	withEntry.Entries = []*pb.Entry{{Term: proto.Uint64(5), Index: proto.Uint64(10)}}
	withSnap := &pb.Message{Type: pb.MessageType_MsgStorageAppend.Enum(), Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(8), Term: proto.Uint64(5)}}}
	for _, c := range []struct {
		name string
		jobs []*pb.Message
		want bool
	}{
		{"commit moves", []*pb.Message{hs(5, 2, 7), hs(5, 2, 8)}, true},
		{"responses only", []*pb.Message{{Type: pb.MessageType_MsgStorageAppend.Enum()}}, true},
		{"entries", []*pb.Message{hs(5, 2, 7), withEntry}, false},
		{"snapshot", []*pb.Message{withSnap}, false},
		{"new term", []*pb.Message{hs(6, 0, 8)}, false},
		{"new vote", []*pb.Message{hs(5, 3, 8)}, false},
	} {
		if got := raftgroup.CommitOnly(c.jobs, durable); got != c.want {
			t.Errorf("%s: commitOnly %v, want %v", c.name, got, c.want)
		}
	}
}
