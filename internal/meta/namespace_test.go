package meta

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

func threeNodes(t *testing.T, mod func(*state.Config)) *fakeCluster {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	if mod != nil {
		mod(&cfg)
	}
	c := newCluster(t, cfg, clk, 3)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	return c
}

func TestBuckets(t *testing.T) {
	c := threeNodes(t, nil)
	s := c.s
	_, err := s.CreateBucket("bkt")
	wantErr(t, err, metaapi.ErrExists, "create twice")
	for _, bad := range []string{"", "ab", "Upper", "-lead", "trail-", "has_underscore", strings.Repeat("a", 64)} {
		_, err := s.CreateBucket(bad)
		wantErr(t, err, metaapi.ErrInvalid, "bucket "+bad)
	}
	mustNo(t, ignore(s.CreateBucket("a.b-c")))
	l := must[*metaapi.BucketList](t)(s.ListBuckets())
	if len(l.Buckets) != 2 || l.Buckets[0].Name != "a.b-c" || l.Buckets[1].Name != "bkt" {
		t.Fatalf("buckets %+v", l.Buckets)
	}
	c.put("bkt", "k", 2, 10)
	wantErr(t, s.DeleteBucket("bkt"), metaapi.ErrNotEmpty, "delete a bucket with a key")
	wantErr(t, s.DeleteBucket("nope"), metaapi.ErrNotFound, "delete a missing bucket")
	l = must[*metaapi.BucketList](t)(s.ListBuckets())
	if b := l.Buckets[1]; b.Keys != 1 || b.Bytes != 20 {
		t.Fatalf("bucket counts %+v, want 1 key, 20 bytes", b)
	}
	mustNo(t, s.DeleteKey("bkt", "k"))
	mustNo(t, s.DeleteBucket("bkt"))
	_, err = s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	wantErr(t, err, metaapi.ErrNotFound, "allocate in a deleted bucket")
}

func TestCommitValidation(t *testing.T) {
	c := threeNodes(t, nil)
	s := c.s
	mustNo(t, ignore(s.CreateBucket("other")))
	alloc := func(key string) metaapi.KeyBlock {
		a := must[*metaapi.AllocateResponse](t)(s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: key}))
		return metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 100}
	}
	b1, b2 := alloc("k"), alloc("k")
	forOther := alloc("other-key")
	unknown := metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: b1.Container, Local: 999}, Length: 100}
	noContainer := metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: 12345, Local: 1}, Length: 100}
	wrongPipe := b1
	wrongPipe.Pipeline = 77
	zero := b2
	zero.Length = 0
	tooMany := make([]metaapi.KeyBlock, metaapi.MaxBlocksPerKey+1)
	for i := range tooMany {
		tooMany[i] = metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: 1, Local: uint64(i + 1)}, Length: 1}
	}
	for _, tc := range []struct {
		name, bucket, key string
		ck                metaapi.CommitKey
		want              error
	}{
		{"unknown local ID", "bkt", "k", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{unknown}}, metaapi.ErrInvalid},
		{"unknown container", "bkt", "k", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{noContainer}}, metaapi.ErrInvalid},
		{"allocated for another key", "bkt", "k", metaapi.CommitKey{Size: 200, Blocks: []metaapi.KeyBlock{b1, forOther}}, metaapi.ErrInvalid},
		{"allocated for the key in another bucket", "other", "k", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1}}, metaapi.ErrInvalid},
		{"size larger than the blocks", "bkt", "k", metaapi.CommitKey{Size: 201, Blocks: []metaapi.KeyBlock{b1, b2}}, metaapi.ErrInvalid},
		{"size smaller than the blocks", "bkt", "k", metaapi.CommitKey{Size: 199, Blocks: []metaapi.KeyBlock{b1, b2}}, metaapi.ErrInvalid},
		{"block twice", "bkt", "k", metaapi.CommitKey{Size: 200, Blocks: []metaapi.KeyBlock{b1, b1}}, metaapi.ErrInvalid},
		{"zero-length block", "bkt", "k", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1, zero}}, metaapi.ErrInvalid},
		{"wrong pipeline", "bkt", "k", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{wrongPipe}}, metaapi.ErrInvalid},
		{"too many blocks", "bkt", "k", metaapi.CommitKey{Size: uint64(len(tooMany)), Blocks: tooMany}, metaapi.ErrInvalid},
		{"bad key name", "bkt", "/abs", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1}}, metaapi.ErrInvalid},
		{"dot-dot key", "bkt", "a/../b", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1}}, metaapi.ErrInvalid},
		{"control character", "bkt", "a\nb", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1}}, metaapi.ErrInvalid},
		{"bad bucket name", "B!", "k", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1}}, metaapi.ErrInvalid},
		{"missing bucket", "nobucket", "k", metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1}}, metaapi.ErrNotFound},
	} {
		_, err := s.CommitKey(tc.bucket, tc.key, &tc.ck)
		wantErr(t, err, tc.want, tc.name)
	}
	// Nothing was committed and nothing consumed: the right commit works.
	for _, k := range []string{"k", "a\nb", "/abs"} {
		if _, err := s.GetKey("bkt", k); err == nil {
			t.Fatalf("key %q exists after refused commits", k)
		}
	}
	if l := must[*metaapi.KeyList](t)(s.List("bkt", namespace.ListOptions{})); len(l.Keys) != 0 {
		t.Fatalf("keys after refused commits: %+v", l.Keys)
	}
	ki := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", &metaapi.CommitKey{Size: 200, CRC32C: 42, Blocks: []metaapi.KeyBlock{b1, b2}}))
	if ki.Size != 200 || ki.CRC32C != 42 || len(ki.Blocks) != 2 || len(ki.Blocks[0].Members) != 3 {
		t.Fatalf("committed %+v", ki)
	}
	// Committed blocks cannot be committed again, under any key...
	_, err := s.CommitKey("bkt", "k2", &metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{b1}})
	wantErr(t, err, metaapi.ErrInvalid, "commit of an already committed block")
	// ...but the identical commit (a retry) succeeds and changes nothing.
	again := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", &metaapi.CommitKey{Size: 200, CRC32C: 42, Blocks: []metaapi.KeyBlock{b1, b2}}))
	if !again.Created.Equal(ki.Created) || s.NDeletes != 0 {
		t.Fatalf("retried commit changed the key (%v vs %v) or scheduled deletions (%d)", again.Created, ki.Created, s.NDeletes)
	}
	// An empty key has no blocks.
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "empty", &metaapi.CommitKey{}))
	if ki := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "empty")); ki.Size != 0 || len(ki.Blocks) != 0 {
		t.Fatalf("empty key %+v", ki)
	}
	_, err = s.GetKey("bkt", "missing")
	wantErr(t, err, metaapi.ErrNotFound, "get of a missing key")
}

func TestReplaceAndDeleteScheduleBlocks(t *testing.T) {
	c := threeNodes(t, nil)
	s := c.s
	v1 := c.put("bkt", "k", 3, 10)
	v2 := c.put("bkt", "k", 1, 5)
	if got := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "k")); got.Size != 5 || got.Blocks[0].BlockRef != v2.Blocks[0].BlockRef {
		t.Fatalf("after replace: %+v", got)
	}
	pending := func() map[metaapi.BlockRef]uint8 {
		m := map[metaapi.BlockRef]uint8{}
		for cid, ls := range s.Deletes {
			for l, pd := range ls {
				m[metaapi.BlockRef{Container: cid, Local: l}] = pd.Rec.Reason
			}
		}
		return m
	}
	p := pending()
	if len(p) != 3 {
		t.Fatalf("pending deletions %v, want v1's 3 blocks", p)
	}
	for _, b := range v1.Blocks {
		if p[b.BlockRef] != state.ReasonReplaced {
			t.Fatalf("block %v of the replaced version: %v", b.BlockRef, p)
		}
	}
	mustNo(t, s.DeleteKey("bkt", "k"))
	wantErr(t, s.DeleteKey("bkt", "k"), metaapi.ErrNotFound, "delete twice")
	p = pending()
	if len(p) != 4 || p[v2.Blocks[0].BlockRef] != state.ReasonDeleted {
		t.Fatalf("pending deletions %v after delete", p)
	}
	if b := must[*metaapi.BucketList](t)(s.ListBuckets()).Buckets[0]; b.Keys != 0 || b.Bytes != 0 {
		t.Fatalf("bucket counts after delete: %+v", b)
	}
}

func TestListPagination(t *testing.T) {
	c := threeNodes(t, nil)
	s := c.s
	var all []string
	for i := range 25 {
		all = append(all, fmt.Sprintf("dir/%02d", i))
	}
	all = append(all, "dir0", "dir/", "dir//x", "d", "e f?#%", "zz/ü")
	for _, k := range all {
		must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", k, &metaapi.CommitKey{}))
	}
	mustNo(t, ignore(s.CreateBucket("bkt2")))
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt2", "dir/00", &metaapi.CommitKey{}))

	pages := func(o namespace.ListOptions) ([]string, int) {
		var got []string
		n := 0
		for {
			l := must[*metaapi.KeyList](t)(s.List("bkt", o))
			n++
			if n > 100 {
				t.Fatal("listing does not end")
			}
			if len(l.Keys) > max(o.Limit, 0) && o.Limit > 0 {
				t.Fatalf("page of %d keys, limit %d", len(l.Keys), o.Limit)
			}
			for _, k := range l.Keys {
				if k.Blocks != nil {
					t.Fatalf("listed key %q with blocks", k.Key)
				}
				got = append(got, k.Key)
			}
			if l.Next == "" {
				return got, n
			}
			o.StartAfter = l.Next
		}
	}
	got, n := pages(namespace.ListOptions{Prefix: "dir/", Limit: 10})
	want := []string{"dir/"}
	want = append(want, "dir//x")
	for i := range 25 {
		want = append(want, fmt.Sprintf("dir/%02d", i))
	}
	if strings.Join(got, "|") != strings.Join(want, "|") || n != 3 {
		t.Fatalf("prefix dir/ in pages of 10: %d pages %q, want 3 pages %q", n, got, want)
	}
	got, _ = pages(namespace.ListOptions{Limit: 7})
	if len(got) != len(all) {
		t.Fatalf("whole bucket: %d keys, want %d: %q", len(got), len(all), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("not in byte order: %q", got)
		}
	}
	got, _ = pages(namespace.ListOptions{Prefix: "dir/", StartAfter: "dir/22"})
	if strings.Join(got, "|") != "dir/23|dir/24" {
		t.Fatalf("start_after dir/22: %q", got)
	}
	// A page exactly full: Next is set, the next page is empty.
	l := must[*metaapi.KeyList](t)(s.List("bkt", namespace.ListOptions{Prefix: "zz", Limit: 1}))
	if len(l.Keys) != 1 || l.Next != "" {
		t.Fatalf("the only key under zz with limit 1: %+v", l)
	}
	for _, o := range []namespace.ListOptions{{Limit: -1}, {Limit: metaapi.MaxListLimit + 1}, {Prefix: strings.Repeat("x", 1025)}} {
		_, err := s.List("bkt", o)
		wantErr(t, err, metaapi.ErrInvalid, fmt.Sprintf("list %+v", o))
	}
	_, err := s.List("nobucket", namespace.ListOptions{})
	wantErr(t, err, metaapi.ErrNotFound, "list a missing bucket")
}

func TestAllocationsUniqueAcrossRestart(t *testing.T) {
	c := threeNodes(t, func(cfg *state.Config) { cfg.ContainerSizeBytes = 250 })
	seen := map[metaapi.BlockRef]bool{}
	lastLocal := map[uint64]uint64{}
	allocate := func(n int) {
		for range n {
			a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
			if seen[a.Block] {
				t.Fatalf("block %v handed out twice", a.Block)
			}
			if a.Block.Local <= lastLocal[a.Block.Container] {
				t.Fatalf("local ID %d after %d in container %d", a.Block.Local, lastLocal[a.Block.Container], a.Block.Container)
			}
			seen[a.Block] = true
			lastLocal[a.Block.Container] = a.Block.Local
			// Commit some, so that containers fill and new ones come.
			if a.Block.Local%2 == 0 {
				if _, err := c.s.CommitKey("bkt", "k", &metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Length: 100}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	allocate(20)
	cfg := c.s.Cfg
	mustNo(t, c.s.Close())
	c.s = open(t, cfg)
	allocate(20)
	mustNo(t, c.s.Close())
	c.s = open(t, cfg)
	c.settle()
	allocate(20)
	if len(lastLocal) < 3 {
		t.Fatalf("only %d containers used: the size limit did not open new ones", len(lastLocal))
	}
}

func TestExpiredAllocationsAreDeleted(t *testing.T) {
	c := threeNodes(t, func(cfg *state.Config) { cfg.AllocationGrace = time.Hour })
	a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
	c.clk.Advance(59 * time.Minute)
	c.round(c.nodes...)
	if c.s.NDeletes != 0 || len(c.s.Allocs) != 1 {
		t.Fatalf("before the grace period: %d deletions, %d allocations", c.s.NDeletes, len(c.s.Allocs))
	}
	c.clk.Advance(time.Minute)
	c.round(c.nodes...)
	if pd := c.s.Deletes[a.Block.Container][a.Block.Local]; pd == nil || pd.Rec.Reason != state.ReasonExpired || len(c.s.Allocs) != 0 {
		t.Fatalf("after the grace period: deletion %+v, %d allocations", pd, len(c.s.Allocs))
	}
	_, err := c.s.CommitKey("bkt", "k", &metaapi.CommitKey{Size: 1, Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Length: 1}}})
	wantErr(t, err, metaapi.ErrInvalid, "commit of an expired allocation")
}

func TestDeleteDelivery(t *testing.T) {
	c := threeNodes(t, func(cfg *state.Config) {
		cfg.DeleteRedeliverAfter = 10 * time.Second
		cfg.MaxDeleteAttempts = 3
	})
	ki := c.put("bkt", "k", 3, 10)
	mustNo(t, c.s.DeleteKey("bkt", "k"))
	p := c.pipelines()[0]
	leader := c.node(p.Leader)
	var follower *fakeDN
	for _, n := range c.nodes {
		if n != leader {
			follower = n
		}
	}
	if cmds := follower.beat(); hasCmd(cmds, metaapi.CmdDeleteBlocks, 0) {
		t.Fatalf("a follower got delete_blocks: %+v", cmds)
	}
	cmds := leader.beat()
	if len(cmds) != 1 || cmds[0].Kind != metaapi.CmdDeleteBlocks || len(cmds[0].Blocks) != 3 || cmds[0].Pipeline.ID != p.ID {
		t.Fatalf("leader's commands %+v, want one delete_blocks of 3 blocks", cmds)
	}
	for i, b := range ki.Blocks {
		if cmds[0].Container != b.Container || cmds[0].Blocks[i] != b.Local {
			t.Fatalf("delete_blocks %+v, want the key's blocks %+v", cmds[0], ki.Blocks)
		}
	}
	// Delivered, not acknowledged yet: not sent again before the
	// redelivery time.
	leader.deleted = nil
	if cmds := leader.beat(); len(cmds) != 0 {
		t.Fatalf("resent at once: %+v", cmds)
	}
	c.clk.Advance(10 * time.Second)
	c.round(follower, other(c, leader, follower))
	leader.beat() // redelivered; the fake acknowledges at its next beat
	if c.s.NDeletes != 3 {
		t.Fatalf("%d pending deletions before the acknowledgement", c.s.NDeletes)
	}
	leader.beat()
	if c.s.NDeletes != 0 {
		t.Fatalf("%d pending deletions after the acknowledgement", c.s.NDeletes)
	}

	// Never acknowledged: MaxDeleteAttempts deliveries, then dropped.
	leader.noAck = true
	k2 := c.put("bkt", "k2", 1, 10)
	mustNo(t, c.s.DeleteKey("bkt", "k2"))
	before := len(leader.got)
	for range 10 {
		c.round(c.nodes...)
		c.clk.Advance(10 * time.Second)
	}
	c.round(c.nodes...)
	deliveries := 0
	for _, cmd := range leader.got[before:] {
		if cmd.Kind == metaapi.CmdDeleteBlocks && cmd.Container == k2.Blocks[0].Container && cmd.Blocks[0] == k2.Blocks[0].Local {
			deliveries++
		}
	}
	if deliveries != 3 || c.s.NDeletes != 0 {
		t.Fatalf("%d deliveries (want 3), %d still pending (want 0)", deliveries, c.s.NDeletes)
	}

	// Bounded per heartbeat: 2,500 pending deletions (scheduled directly,
	// as 2,500 allocations would cost as many syncs) take 3 heartbeats.
	leader.noAck = false
	cid := ki.Blocks[0].Container
	_, err := state.Mutate(c.s.State, func() (struct{}, *pebble.Batch, error) {
		b := c.s.Store.NewBatch()
		for l := uint64(1000); l < 3500; l++ {
			c.s.ScheduleDelete(b, state.BlockRef{Container: cid, Local: l}, state.ReasonDeleted, c.clk.Now())
		}
		return struct{}{}, b, nil
	})
	mustNo(t, err)
	for round := 0; c.s.NDeletes > 0; round++ {
		if round > 3 {
			t.Fatalf("%d deletions left after %d heartbeats", c.s.NDeletes, round)
		}
		n := 0
		for _, cmd := range leader.beat() {
			n += len(cmd.Blocks)
		}
		if n > state.MaxDeleteBlocksPerHeartbeat {
			t.Fatalf("%d blocks in one heartbeat response", n)
		}
	}
}

// other is the node of c that is neither a nor b.
func other(c *fakeCluster, a, b *fakeDN) *fakeDN {
	for _, n := range c.nodes {
		if n != a && n != b {
			return n
		}
	}
	return nil
}

func TestDeleteOnClosedPipelinePerReplica(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 4)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	ki := c.put("bkt", "k", 1, 10)
	old := c.pipelines()[0]
	dead := c.node(old.Members[2].NodeID)
	var alive []*fakeDN
	for _, n := range c.nodes {
		if n != dead {
			alive = append(alive, n)
		}
	}
	for range 7 {
		clk.Advance(5 * time.Second)
		c.round(alive...)
	}
	c.settle(alive...)
	// The replication manager copied the container to the fourth node,
	// not a member of the pipeline.
	cid := ki.Blocks[0].Container
	var copyHolder *fakeDN
	for _, n := range alive {
		if !slices.ContainsFunc(old.Members, func(m metaapi.Member) bool { return m.NodeID == n.id }) {
			copyHolder = n
		}
	}
	if r := copyHolder.conts[cid]; r == nil || r.State != metaapi.ContainerClosed {
		t.Fatalf("node %d holds no copy of container %d: %+v", copyHolder.id, cid, copyHolder.conts)
	}
	// Nobody serves the old pipeline now; deleting the key sends the
	// deletion to both surviving replicas and to the copy, each
	// acknowledging.
	mustNo(t, c.s.DeleteKey("bkt", "k"))
	holders := []*fakeDN{c.node(old.Members[0].NodeID), c.node(old.Members[1].NodeID), copyHolder}
	for _, n := range holders {
		if cmds := n.beat(); !hasCmd(cmds, metaapi.CmdDeleteBlocks, cid) {
			t.Fatalf("holder %d got %+v, want delete_blocks", n.id, cmds)
		}
	}
	for i, n := range holders {
		n.beat()
		if want := 1; i < 2 && c.s.NDeletes != want {
			t.Fatalf("deletion complete with %d replicas of 3 acknowledged", i+1)
		}
	}
	if c.s.NDeletes != 0 {
		t.Fatalf("deletion pending after the 3 replicas acknowledged")
	}
}
