package meta

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestRetriedCommitAnswersTheFirstResult: a commit retried with its
// commit ID after another client replaced the key (and after a delete) is
// answered with the version the first try committed, changes nothing, and
// is not refused as INVALID (which it is without the ID: its blocks are
// consumed); it is forgotten after CommitIDRetention.
func TestRetriedCommitAnswersTheFirstResult(t *testing.T) {
	clk := newClock()
	c := newCluster(t, testConfig(t.TempDir(), clk), clk, 3)
	s := c.s
	must[*metaapi.Bucket](t)(s.CreateBucket("bkt"))
	alloc := func(key string) metaapi.KeyBlock {
		a := must[*metaapi.AllocateResponse](t)(s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: key}))
		c.write(a.Pipeline, a.Block.Container, 100)
		return metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 100}
	}
	first := metaapi.CommitKey{Size: 100, CRC32C: 1, Blocks: []metaapi.KeyBlock{alloc("k")}, CommitID: "id-1"}
	ki := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", &first))
	// Another client replaces the key.
	other := must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k", &metaapi.CommitKey{Size: 100, CRC32C: 2, Blocks: []metaapi.KeyBlock{alloc("k")}, CommitID: "id-2"}))
	deletes := s.NDeletes
	retry := first
	again, err := s.CommitKey("bkt", "k", &retry)
	if err != nil {
		t.Fatalf("commit retried after the key was replaced: %v", err)
	}
	if again.CRC32C != 1 || again.Blocks[0].BlockRef != first.Blocks[0].BlockRef || !again.Created.Equal(ki.Created) {
		t.Fatalf("retried commit answered %+v, want the first commit's version %+v", again, ki)
	}
	if now := must[*metaapi.KeyInfo](t)(s.GetKey("bkt", "k")); now.CRC32C != other.CRC32C || s.NDeletes != deletes {
		t.Fatalf("the retry changed the key (%+v) or scheduled deletions (%d, was %d)", now, s.NDeletes, deletes)
	}
	// After a delete too.
	mustNo(t, s.DeleteKey("bkt", "k"))
	if _, err := s.CommitKey("bkt", "k", &retry); err != nil {
		t.Fatalf("commit retried after the key was deleted: %v", err)
	}
	if _, err := s.GetKey("bkt", "k"); err == nil {
		t.Fatal("the retry brought a deleted key back")
	}
	// A first try costs no lookup: a commit whose blocks are claimable
	// commits, whatever its ID (IDs are random: the client's to keep
	// unique).
	must[*metaapi.KeyInfo](t)(s.CommitKey("bkt", "k2", &metaapi.CommitKey{Size: 100, Blocks: []metaapi.KeyBlock{alloc("k2")}, CommitID: "id-3"}))
	// Forgotten after CommitIDRetention: the retry is then refused as
	// any commit of consumed blocks.
	clk.Advance(namespace.CommitIDRetention + time.Second)
	mustNo(t, s.Tick())
	_, err = s.CommitKey("bkt", "k", &retry)
	wantErr(t, err, metaapi.ErrInvalid, "a commit retried after its ID expired")
}

// TestCommitOutcomeUnknownAfterFailover: a commit is applied by the
// followers but not by its leader (its apply worker held), the leader is
// cut off and a new one elected, another client replaces the key there;
// the first client's commit, whose outcome its leader cannot know, is
// retried on the new leader with its commit ID and answered with what it
// committed — once: the key keeps the other client's version. Without the
// commit ID the retry is refused as INVALID (its blocks are consumed).
func TestCommitOutcomeUnknownAfterFailover(t *testing.T) {
	g := newRGroup(t, 3)
	ld := g.leader()
	g.dns()
	_, err := g.cl.CreateBucket(bg, "unknown")
	mustNo(t, err)
	a, err := g.cl.Allocate(bg, metaapi.AllocateRequest{Bucket: "unknown", Key: "k"})
	mustNo(t, err)
	const id = "commit-unknown-1"
	lr := g.srvs[ld].Service().rep
	var fired atomic.Bool
	// The commit is the only request the leader gets from here on (own
	// says a batch to sync: false on a replicated member).
	g.srvs[ld].Service().AwaitHook = func(bool) {
		if !fired.CompareAndSwap(false, true) {
			return
		}
		lr.StoreMu.Lock() // the leader applies nothing more
		defer lr.StoreMu.Unlock()
		waitFor(t, "the followers applied the commit", func() bool {
			for i, s := range g.srvs {
				if i == ld {
					continue
				}
				if _, closer, err := s.Service().rep.DB.Get(namespace.CommitIDKey(id)); err != nil {
					return false
				} else {
					closer.Close()
				}
			}
			return true
		})
		lr.Isolated.Store(true)
		nl := -1
		waitFor(t, "a new leader", func() bool {
			for i, s := range g.srvs {
				if i != ld && s.Service().Serving() {
					nl = i
					return true
				}
			}
			return false
		})
		// The cut-off leader steps down (CheckQuorum) before it may apply
		// the entry: it never learns the outcome.
		waitFor(t, "the old leader stopped serving", func() bool { return !g.srvs[ld].Service().Serving() })
		oc, err := metaapi.NewClient(g.addrs[nl], metaapi.ClientOptions{})
		mustNo(t, err)
		if err := put(bg, oc, "unknown", "k", 50); err != nil {
			t.Errorf("the other client's put: %v", err)
		}
	}
	ki, err := g.cl.CommitKey(bg, "unknown", "k", metaapi.CommitKey{Size: 100, CommitID: id,
		Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: 100}}})
	if err != nil {
		t.Fatalf("commit whose outcome its leader lost: %v", err)
	}
	if !fired.Load() || ki.Size != 100 || ki.Blocks[0].BlockRef != a.Block {
		t.Fatalf("commit answered %+v (hook fired %v), want the version it committed", ki, fired.Load())
	}
	lr.Isolated.Store(false)
	now, err := g.cl.GetKey(bg, "unknown", "k")
	mustNo(t, err)
	if now.Size != 50 {
		t.Fatalf("key is %+v, want the other client's later version (size 50)", now)
	}
}
