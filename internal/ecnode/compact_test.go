package ecnode_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/ecnode"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta/ecmeta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// testCompaction is the compaction policy of the tests' meta services:
// under half live, any byte freed (the test containers are 2 MiB).
var testCompaction = ecmeta.CompactPolicy{Below: 0.5, MinBytes: 1}

// compactionOn makes the meta services started from now on compact with
// testCompaction.
func compactionOn(t *testing.T) {
	old := ecmeta.Compaction
	ecmeta.Compaction = testCompaction
	t.Cleanup(func() { ecmeta.Compaction = old })
}

// deleteAllBut deletes every key of vals but those kept and returns the
// kept ones' values; at least one container is then one the policy
// wants compacted.
func (c *testCluster) deleteAllBut(kc *keyclient.Client, vals map[string][]byte, keep ...string) map[string][]byte {
	c.t.Helper()
	ctx := context.Background()
	kept := map[string][]byte{}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		if slices.Contains(keep, k) {
			kept[k] = vals[k]
			continue
		}
		if err := kc.Delete(ctx, "cold", k); err != nil {
			c.t.Fatal(err)
		}
	}
	wanted := 0
	for _, cs := range c.status().Containers {
		if testCompaction.Wants(cs.Logical, cs.Logical-cs.DeadBytes) {
			wanted++
		}
	}
	if wanted == 0 {
		c.t.Fatalf("no container to compact after the deletions: %+v", c.status().Containers)
	}
	return kept
}

// compactionSettled: no compaction in flight and no EC container the
// policy wants compacted.
func (c *testCluster) compactionSettled() bool {
	st := c.status()
	if len(st.Compactions) > 0 {
		return false
	}
	for _, cs := range st.Containers {
		if testCompaction.Wants(cs.Logical, cs.Logical-cs.DeadBytes) {
			return false
		}
	}
	return true
}

// checkBlocksGone: every compacted container's layout holds the blocks
// of the kept keys in it and otherwise only blocks deleted after its
// compaction was scheduled (still pending: the next one's); no pending
// deletion of it names a block it does not hold (the compaction
// completed those).
func (c *testCluster) checkBlocksGone(kc *keyclient.Client, kept map[string][]byte) (compacted int) {
	c.t.Helper()
	ctx := context.Background()
	live := map[uint64][]uint64{} // container → the kept keys' blocks
	for k := range kept {
		info, err := kc.Stat(ctx, "cold", k)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, b := range info.Blocks {
			live[b.Container] = append(live[b.Container], b.Local)
		}
	}
	for _, cs := range c.status().Containers {
		if cs.Generation == 0 {
			continue
		}
		compacted++
		l, err := ecapi.GetLayout(ctx, c.mc, cs.Container)
		if err != nil {
			c.t.Fatal(err)
		}
		var got []uint64
		for _, b := range l.Blocks {
			got = append(got, b.Local)
		}
		c.svc.Mu.RLock()
		pending := slices.Sorted(maps.Keys(c.svc.Deletes[cs.Container]))
		c.svc.Mu.RUnlock()
		want := slices.Sorted(slices.Values(append(slices.Clone(live[cs.Container]), pending...)))
		if !slices.Equal(got, want) {
			c.t.Fatalf("container %d generation %d holds blocks %v; the kept keys' are %v, those deleted since its compaction started %v",
				cs.Container, cs.Generation, got, live[cs.Container], pending)
		}
	}
	return compacted
}

// readWithPairsDown reads the kept keys back with datanodes 0 and 1, 2
// and 3, 4 and 5 stopped (m = 2), each pair in turn, with a fresh client.
func (c *testCluster) readWithPairsDown(kept map[string][]byte, where string) {
	c.t.Helper()
	for a := 0; a+1 < len(c.dns); a += 2 {
		c.stop(a)
		c.stop(a + 1)
		readAll(c.t, c.keyClient(), "cold", kept, fmt.Sprintf("%s, datanodes %d and %d stopped", where, a, a+1))
		c.start(a)
		c.start(a + 1)
	}
}

// TestCompactionFreesSpace is issue 37 item 5's acceptance at test scale:
// keys in an rs-3-2 bucket converted, most of them deleted; the
// containers under half live are compacted (a new generation of their
// shards holding only the kept keys' blocks, the deleted blocks'
// pending deletions completed), the old generations' shards dropped, so
// the raw shard bytes drop by what the status says was freed; every kept
// key reads back byte for byte, also with two datanodes stopped; the
// deleted ones are gone.
func TestCompactionFreesSpace(t *testing.T) {
	compactionOn(t)
	c, kc, vals := converted(t, nil, nil)
	ctx := context.Background()
	_, before := c.rawBytes()
	kept := c.deleteAllBut(kc, vals, "key-000", "key-007", "key-015")
	waitFor(t, 2*time.Minute, "every container the policy wants compacted", c.compactionSettled)
	waitFor(t, time.Minute, "the old generations' shards dropped", func() bool { return len(c.leftovers()) == 0 })
	c.checkInvariant("after the compactions")
	if n := c.checkBlocksGone(kc, kept); n == 0 {
		t.Fatal("no container compacted")
	}
	st := c.status()
	_, after := c.rawBytes()
	t.Logf("raw shard bytes %d → %d; status: %d compacted, %d failed, %d bytes freed, %d dead bytes left", before, after,
		st.CompactionsDone, st.CompactionsFailed, st.ReclaimedBytes, st.DeadBytes)
	if after >= before || st.ReclaimedBytes != uint64(before-after) || st.CompactionsDone == 0 {
		t.Fatalf("raw shard bytes %d → %d, status says %d freed by %d compactions", before, after, st.ReclaimedBytes, st.CompactionsDone)
	}
	if got := c.metric("spindle_meta_ec_reclaimed_bytes_total"); got != float64(st.ReclaimedBytes) || c.metric("spindle_meta_ec_compactions_done_total") != float64(st.CompactionsDone) {
		t.Fatalf("metrics: %v bytes freed, %v compactions", got, c.metric("spindle_meta_ec_compactions_done_total"))
	}
	var out bytes.Buffer
	if err := cli.PrintECStatus(ctx, c.mc, &out); err != nil || !strings.Contains(out.String(), fmt.Sprintf("EC compaction:  0 in flight; %d done", st.CompactionsDone)) {
		t.Fatalf("admin replication:\n%s%v", out.String(), err)
	}
	t.Logf("%s", strings.TrimSpace(out.String()))
	readAll(t, kc, "cold", kept, "after the compactions")
	for k := range vals {
		if kept[k] == nil {
			if _, err := kc.Stat(ctx, "cold", k); !errors.Is(err, metaapi.ErrNoSuchKey) {
				t.Fatalf("deleted key %s: %v", k, err)
			}
		}
	}
	c.readWithPairsDown(kept, "after the compactions")
}

// TestCompactionCrashAtEachStep crashes a compaction after each of its
// steps (its datanode stops there as a kill -9 would, and is restarted):
// after the staging read, the encoding, one shard stored (the others
// held back, then dying with it), every shard stored before the report,
// and the report answered before the old generation's shards are
// dropped. After every crash each container is a complete generation,
// the old or the new one (checkInvariant: every shard of the recorded
// generation present and verified), and every kept key reads; in the
// end the containers are compacted, no shard file is left that no
// layout names, and the kept keys read with two datanodes stopped. The
// test fails if the report is sent before every shard is stored (the
// crash after one shard leaves a record naming shards never stored).
func TestCompactionCrashAtEachStep(t *testing.T) {
	compactionOn(t)
	c, kc, vals := converted(t, nil, nil)
	type hit struct {
		node      int
		container uint64
	}
	var mu sync.Mutex
	var victim *hit
	kept := map[string][]byte{}
	steps := []string{ecnode.StepCompactRead, ecnode.StepCompactEncode, ecnode.StepCompactStored, ecnode.StepCompactReport, ecnode.StepCompacted}
	for n, step := range steps {
		crashed := make(chan hit, 1)
		dead := make(chan struct{})
		stores := 0
		mu.Lock()
		victim = nil
		mu.Unlock()
		c.setHook(func(i int, container uint64, s string) error {
			mu.Lock()
			first := s == step || step == ecnode.StepCompactStored && s == ecnode.StepCompactStoring
			if victim == nil && first {
				victim = &hit{i, container}
			}
			mine := victim != nil && *victim == hit{i, container}
			if mine && step == ecnode.StepCompactStored && s == ecnode.StepCompactStoring {
				// One shard goes; the others wait for the crash and die
				// with their datanode.
				stores++
				if stores > 1 {
					mu.Unlock()
					<-dead
					return ecnode.ErrCrash
				}
			}
			if !mine || s != step {
				mu.Unlock()
				return nil
			}
			select {
			case <-dead:
				mu.Unlock()
				return ecnode.ErrCrash
			default:
			}
			close(dead)
			mu.Unlock()
			crashed <- hit{i, container}
			return ecnode.ErrCrash
		})
		if n == 0 {
			kept = c.deleteAllBut(kc, vals, "key-000", "key-007", "key-015")
		}
		var h hit
		select {
		case h = <-crashed:
		case <-time.After(2 * time.Minute):
			t.Fatalf("no compaction reached step %s", step)
		}
		c.setHook(nil)
		where := fmt.Sprintf("compaction of container %d crashed on datanode %d after %s", h.container, h.node, step)
		c.checkInvariant(where)
		c.stop(h.node)
		c.checkInvariant(where + ", its datanode down")
		readAll(t, c.keyClient(), "cold", kept, where+", its datanode down")
		c.start(h.node)
		t.Logf("%s: every container a complete generation, every kept key read", where)
	}
	waitFor(t, 3*time.Minute, "every container the policy wants compacted", c.compactionSettled)
	waitFor(t, time.Minute, "no shard file no layout names", func() bool { return len(c.leftovers()) == 0 })
	c.checkInvariant("after the compactions")
	if n := c.checkBlocksGone(kc, kept); n == 0 {
		t.Fatal("no container compacted")
	}
	if st := c.status(); st.CompactionsFailed < 4 {
		t.Fatalf("%d compactions failed, want at least the 4 crashed before their report", st.CompactionsFailed)
	}
	c.readWithPairsDown(kept, "after the crashes and the compactions")
}

// TestDeleteWhileConverting: keys deleted while their container is being
// converted (its blocks staged, the shards not yet stored) keep their
// pending deletions through the switch — the block GC holds them while
// the conversion is in flight instead of completing them on the replicas
// — so the container, every one of its keys deleted, is compacted down
// to no block at all and its deletions completed; the other keys read.
func TestDeleteWhileConverting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six datanodes")
	}
	compactionOn(t)
	c := startCluster(t, 6)
	ctx := context.Background()
	kc := c.keyClient()
	if _, err := kc.CreateBucket(ctx, "cold"); err != nil {
		t.Fatal(err)
	}
	vals := putKeys(t, kc, "cold", 16)
	c.closeAll()
	held := make(chan uint64, 1)
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	polls := map[int]int{}
	c.setHook(func(i int, container uint64, s string) error {
		if s == ecnode.StepPolled {
			mu.Lock()
			polls[i]++
			mu.Unlock()
		}
		if s != ecnode.StepRead {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if first {
			held <- container
			<-release
		}
		return nil
	})
	if err := ecapi.SetBucket(ctx, c.mc, "cold", "rs-3-2,cell=16KiB"); err != nil {
		t.Fatal(err)
	}
	var cid uint64
	select {
	case cid = <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("no conversion staged")
	}
	kept := map[string][]byte{}
	deleted := 0
	for k, v := range vals {
		info, err := kc.Stat(ctx, "cold", k)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(info.Blocks, func(b metaapi.KeyBlock) bool { return b.Container == cid }) {
			kept[k] = v
			continue
		}
		if err := kc.Delete(ctx, "cold", k); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	// Heartbeats go on meanwhile (the block GC would deliver the
	// deletions to the replicas and complete them within a few): wait for
	// 20 more polls of every datanode (a heartbeat interval apart).
	mu.Lock()
	since := maps.Clone(polls)
	mu.Unlock()
	waitFor(t, time.Minute, "20 polls of every datanode with the conversion held", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range c.dns {
			if polls[i] < since[i]+20 {
				return false
			}
		}
		return true
	})
	c.svc.Mu.RLock()
	pending := len(c.svc.Deletes[cid])
	c.svc.Mu.RUnlock()
	close(release)
	c.setHook(nil)
	if pending == 0 {
		t.Fatalf("container %d's deletions completed while its conversion was in flight (its staged blocks would stay in its shards for good)", cid)
	}
	t.Logf("container %d held after its staging; %d keys with blocks in it deleted (%d deletions pending at the release), %d kept", cid, deleted, pending, len(kept))
	waitFor(t, 2*time.Minute, "every container converted and its replicas dropped", c.convertedAndDropped)
	waitFor(t, 2*time.Minute, fmt.Sprintf("container %d compacted to no block", cid), func() bool {
		l, err := ecapi.GetLayout(ctx, c.mc, cid)
		return err == nil && l.Generation > 0 && len(l.Blocks) == 0 && l.Logical == 0
	})
	waitFor(t, 2*time.Minute, "every container the policy wants compacted", c.compactionSettled)
	waitFor(t, time.Minute, "the old generations' shards dropped", func() bool { return len(c.leftovers()) == 0 })
	c.checkInvariant("after the conversions and compactions")
	c.checkBlocksGone(kc, kept)
	readAll(t, kc, "cold", kept, "after the compactions")
}
