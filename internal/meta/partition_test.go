//go:build spindle_testhooks

// Tests that partition a meta member through raftgroup.Member.Isolate, a
// test hook compiled only with -tags spindle_testhooks (make test sets it).

package meta

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/readlease"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestPartitionedLeaderAcknowledgesNothing: a leader cut off from the
// others answers neither a change nor a read (a read needs a ReadIndex
// round, which a minority cannot confirm; without it the read is answered
// and the test fails): both end UNAVAILABLE once it steps down; the others elect a leader that serves; once the partition
// heals, the old leader's proposal is gone from every store and the
// stores agree.
func TestPartitionedLeaderAcknowledgesNothing(t *testing.T) {
	g := newRGroup(t, 3)
	g.dns()
	if _, err := g.cl.CreateBucket(bg, "b01"); err != nil {
		t.Fatal(err)
	}
	mustNo(t, put(bg, g.cl, "b01", "before", 10))
	old := g.leader()
	oc, err := metaapi.NewClient(g.addrs[old], metaapi.ClientOptions{Attempts: 1, Timeout: 20 * time.Second})
	mustNo(t, err)
	g.srvs[old].Service().rep.Isolate(true)
	// Sent before the leader can notice (CheckQuorum takes an election
	// timeout): it still takes itself for the leader, and answers only
	// within its read lease (no other leader can exist yet), with what it
	// holds.
	if ki, err := oc.GetKey(bg, "b01", "before"); err != nil && !errors.Is(err, metaapi.ErrUnavailable) || err == nil && ki.Size != 10 {
		t.Fatalf("read on the partitioned leader: %+v %v, want the key or UNAVAILABLE", ki, err)
	}
	others := metaapi.SplitAddrs(strings.Join(append(append([]string(nil), g.addrs[:old]...), g.addrs[old+1:]...), ","))
	cl, err := metaapi.NewClient(strings.Join(others, ","), metaapi.ClientOptions{})
	mustNo(t, err)
	mustNo(t, put(bg, cl, "b01", "after", 20))
	// Another leader committed a change: the old one answers no read.
	if ki, err := oc.GetKey(bg, "b01", "after"); !errors.Is(err, metaapi.ErrUnavailable) {
		t.Fatalf("read on the partitioned old leader after a change elsewhere: %+v %v, want UNAVAILABLE", ki, err)
	}
	// The new leader, cut off in turn (with the old one still cut off):
	// its change is not acknowledged.
	second := g.leader()
	sc, err := metaapi.NewClient(g.addrs[second], metaapi.ClientOptions{Attempts: 1, Timeout: 20 * time.Second})
	mustNo(t, err)
	g.srvs[second].Service().rep.Isolate(true)
	if _, err := sc.Allocate(bg, metaapi.AllocateRequest{Bucket: "b01", Key: "cut"}); !errors.Is(err, metaapi.ErrUnavailable) {
		t.Fatalf("allocate on the partitioned leader: %v, want UNAVAILABLE", err)
	}
	g.srvs[second].Service().rep.Isolate(false)
	g.srvs[old].Service().rep.Isolate(false)
	var ld int
	waitFor(t, "the old leader caught up", func() bool {
		ld = -1
		for i, s := range g.srvs {
			if s.Service().Serving() {
				ld = i
			}
		}
		if ld < 0 {
			return false
		}
		want := g.srvs[ld].Service().MetaStatus().CommitIndex
		for _, s := range g.srvs {
			if s.Service().MetaStatus().AppliedIndex < want {
				return false
			}
		}
		return true
	})
	var dumps []string
	for i := range g.srvs {
		var b strings.Builder
		it, err := g.srvs[i].Service().Store.DB.NewIter(&pebble.IterOptions{LowerBound: []byte{'A'}})
		mustNo(t, err)
		for ok := it.First(); ok; ok = it.Next() {
			fmt.Fprintf(&b, "%x=%x\n", it.Key(), it.Value())
		}
		mustNo(t, it.Close())
		dumps = append(dumps, b.String())
	}
	if dumps[0] != dumps[1] || dumps[1] != dumps[2] {
		t.Fatalf("the stores differ after the partition healed")
	}
	if ki, err := cl.GetKey(bg, "b01", "after"); err != nil || ki.Size != 20 {
		t.Fatalf("key after: %+v %v", ki, err)
	}
}

// TestLeaseReadsEndBeforeAnotherLeaderCanExist: a leader cut off from
// the others answers reads from its read lease (readlease) only while no
// other member can have been elected: every read it answered was sent
// less than the lease's duration after the cut (its last round started
// before it). With a lease as long as the election timeout the reads go
// on until the leader notices, and the test fails.
func TestLeaseReadsEndBeforeAnotherLeaderCanExist(t *testing.T) {
	g := newRGroup(t, 3)
	if _, err := g.cl.CreateBucket(bg, "b01"); err != nil {
		t.Fatal(err)
	}
	old := g.leader()
	oc, err := metaapi.NewClient(g.addrs[old], metaapi.ClientOptions{Attempts: 1, Timeout: 20 * time.Second})
	mustNo(t, err)
	for range 20 { // reads: rounds, then a lease
		_, err := oc.GetBucket(bg, "b01")
		mustNo(t, err)
	}
	cfg := g.srvs[old].Service().Cfg
	dur := readlease.Duration(cfg.ElectionTicks, cfg.RaftTickInterval)
	if dur <= 0 || dur > time.Duration(cfg.ElectionTicks-2)*cfg.RaftTickInterval {
		t.Fatalf("lease %s: want more than 0, at most ElectionTicks-2 ticks", dur)
	}
	g.srvs[old].Service().rep.Isolate(true)
	cut := time.Now() // after the cut: every round confirmed started before it
	var answered int
	var last time.Time
	for deadline := cut.Add(30 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("the partitioned leader still answers reads after 30 s")
		}
		sent := time.Now()
		_, err := oc.GetBucket(bg, "b01")
		if errors.Is(err, metaapi.ErrUnavailable) {
			break
		}
		mustNo(t, err)
		answered, last = answered+1, sent
	}
	if answered > 0 && last.Sub(cut) >= dur {
		t.Fatalf("a read sent %s after the cut was answered: the lease is %s", last.Sub(cut), dur)
	}
	t.Logf("%d reads answered from the lease after the cut (lease %s)", answered, dur)
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
		lr.Isolate(true)
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
	if !fired.Load() || ki.Size != 100 || ki.Blocks[0].Container != a.Block.Container || ki.Blocks[0].Local != a.Block.Local { // the allocation's block token is not part of the key
		t.Fatalf("commit answered %+v (hook fired %v), want the version it committed", ki, fired.Load())
	}
	lr.Isolate(false)
	now, err := g.cl.GetKey(bg, "unknown", "k")
	mustNo(t, err)
	if now.Size != 50 {
		t.Fatalf("key is %+v, want the other client's later version (size 50)", now)
	}
}

// TestEmptiedMemberDoesNotVoteBeforeCatchingUp: keys acknowledged by the
// leader A and member C while B was cut off are on A and C only; C then
// loses its directory and A stops. C, restarted empty, must not vote:
// B, which lacks the keys, would be elected by B and C and the keys lost
// when A comes back (today's rejoinTerm gave C a higher term, not a
// missing vote). C refuses B's vote requests until A is back, A is
// elected (its log is the longest), and every key is there; C catches up
// and votes again.
func TestEmptiedMemberDoesNotVoteBeforeCatchingUp(t *testing.T) {
	g := newRGroup(t, 3)
	if _, err := g.cl.CreateBucket(bg, "bkt"); err != nil {
		t.Fatal(err)
	}
	a := g.leader()
	b, c := (a+1)%3, (a+2)%3
	g.srvs[b].Service().rep.Isolate(true)
	keys := putInline(t, g.cl, "acked-by-a-and-c-", 20)
	g.stop(c)
	mustNo(t, os.RemoveAll(g.dirs[c]))
	g.stop(a)
	g.srvs[b].Service().rep.Isolate(false)
	g.restart(c)
	cs := g.srvs[c].Service()
	waitFor(t, "B elected, or three vote requests refused by the emptied C", func() bool {
		return g.srvs[b].Service().Serving() || cs.MetaStatus().VotesRefused >= 3
	})
	if g.srvs[b].Service().Serving() {
		t.Errorf("B, which lacks the keys acknowledged by A and C, was elected with the emptied C's vote")
	}
	if st := cs.MetaStatus(); st.Role != "recovering" {
		t.Errorf("the emptied member's role %q, want recovering", st.Role)
	}
	g.restart(a)
	ld := g.leader()
	for _, k := range keys {
		if _, err := g.srvs[ld].Service().GetKey("bkt", k); err != nil {
			t.Fatalf("acknowledged key %s: %v", k, err)
		}
	}
	waitFor(t, "the emptied member caught up and votes again", func() bool {
		return cs.MetaStatus().Role != "recovering"
	})
}
