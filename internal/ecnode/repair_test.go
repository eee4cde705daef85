package ecnode_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/ecnode"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// fastDeath: a stopped datanode is DEAD in seconds.
func fastDeath(cfg *state.Config) { cfg.StaleAfter, cfg.DeadAfter = 2*time.Second, 4*time.Second }

// converted starts a cluster of 6, writes keys to an rs-3-2 bucket and
// waits for every container converted and its replicas dropped.
func converted(t *testing.T, metaCfg func(*state.Config), dnCfg func(*datanode.Config)) (*testCluster, *keyclient.Client, map[string][]byte) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts six datanodes")
	}
	c := startClusterWith(t, 6, metaCfg, dnCfg)
	kc := c.keyClient()
	ctx := context.Background()
	if _, err := kc.CreateBucket(ctx, "cold"); err != nil {
		t.Fatal(err)
	}
	if err := ecapi.SetBucket(ctx, c.mc, "cold", "rs-3-2,cell=16KiB"); err != nil {
		t.Fatal(err)
	}
	vals := putKeys(t, kc, "cold", 16)
	c.closeAll()
	waitFor(t, 2*time.Minute, "every container converted and its replicas dropped", c.convertedAndDropped)
	c.checkInvariant("after the conversions")
	// admin nodes' raw and logical bytes: shards only, ≤ 1.8× logical (5/3 and
	// the last stripe's padding of each small container; the 1.7× acceptance
	// is TestConvertAndReadWithTwoDown's, with bigger containers).
	var sp bytes.Buffer
	tw := tabwriter.NewWriter(&sp, 0, 8, 2, ' ', 0)
	nodes := cli.ECNodeSpace(ctx, c.mc, tw)
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	st := c.status()
	if st.ShardBytes == 0 || st.ReplicaBytes != 0 || float64(st.ShardBytes) > 1.8*float64(st.LogicalBytes) || st.LogicalBytes != st.ECLogicalBytes ||
		!strings.Contains(sp.String(), "raw/logical") || len(nodes) == 0 {
		t.Fatalf("space after the conversions: %+v\n%s%v", st, sp.String(), nodes)
	}
	t.Logf("%s", strings.TrimSpace(sp.String()))
	return c, kc, vals
}

func (c *testCluster) status() ecapi.Status {
	c.t.Helper()
	st, err := ecapi.GetStatus(context.Background(), c.mc)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

func (c *testCluster) shardPath(i int, cid uint64, idx int) string {
	return c.shardPathGen(i, cid, 0, idx)
}

func (c *testCluster) shardPathGen(i int, cid uint64, gen uint32, idx int) string {
	data, _ := datanode.DefaultDirs(c.dns[i].dir)
	return filepath.Join(data, "ec", ecnode.ShardFileName(ecapi.ShardRef{Container: cid, Generation: gen, Index: idx}))
}

// leftovers lists the shard files on running datanodes no EC layout
// names there (a crashed conversion's or rebuild's, a moved shard's old
// copy).
func (c *testCluster) leftovers() []string {
	c.t.Helper()
	named := map[string]bool{}
	for _, cs := range c.status().Containers {
		for idx, n := range cs.Nodes {
			if i := c.indexOf(n); i >= 0 {
				named[c.shardPathGen(i, cs.Container, cs.Generation, idx)] = true
			}
		}
	}
	var out []string
	for i, d := range c.dns {
		if d.cancel == nil {
			continue
		}
		data, _ := datanode.DefaultDirs(d.dir)
		files, _ := filepath.Glob(filepath.Join(data, "ec", "*.shard"))
		for _, f := range files {
			if !named[f] {
				out = append(out, fmt.Sprintf("datanode %d: %s", i, filepath.Base(f)))
			}
		}
	}
	return out
}

// readWithEachDown reads every key back with each running datanode but
// except stopped in turn.
func (c *testCluster) readWithEachDown(vals map[string][]byte, except int, where string) {
	for j, d := range c.dns {
		if j == except || d.cancel == nil {
			continue
		}
		c.stop(j)
		readAll(c.t, c.keyClient(), "cold", vals, fmt.Sprintf("%s, datanode %d stopped too", where, j))
		c.start(j)
	}
}

// metric is the value of a meta service metric without labels (0: none).
func (c *testCluster) metric(name string) float64 {
	c.t.Helper()
	mfs, err := c.svc.Metrics.Reg.Gather()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return 0
}

func holds(st ecapi.Status, node uint64) bool {
	for _, cs := range st.Containers {
		if slices.Contains(cs.Nodes, node) {
			return true
		}
	}
	return false
}

// TestRebuildLostDatanode: a datanode holding shards is lost for good;
// its shards are rebuilt from k survivors on other datanodes (each
// container's shards still on distinct datanodes), the new locations
// recorded, the replication manager counts the missing shards meanwhile;
// then every key reads back byte for byte with a further m-1 = 1 datanode
// down (each in turn). A rebuild held after its shard is stored, before
// its report, leaves the old layout in force and its shard kept through
// the target's polls (it is dropped without the check that a rebuild in
// flight names it: the recorded shard is then missing and
// checkInvariant fails).
func TestRebuildLostDatanode(t *testing.T) {
	c, _, vals := converted(t, fastDeath, nil)
	victim := 0
	victimID := c.nodeID(victim)
	had := 0
	for _, cs := range c.status().Containers {
		if slices.Contains(cs.Nodes, victimID) {
			had++
		}
	}
	if had == 0 {
		t.Fatalf("datanode %d holds no shard", victim)
	}
	type held struct {
		node      int
		container uint64
	}
	var mu sync.Mutex
	var hold *held
	polls := map[int]int{}
	release := make(chan struct{})
	c.setHook(func(i int, container uint64, step string) error {
		mu.Lock()
		switch step {
		case ecnode.StepPolled:
			polls[i]++
		case ecnode.StepRebuilt:
			if hold == nil {
				hold = &held{i, container}
				mu.Unlock()
				<-release
				return nil
			}
		}
		mu.Unlock()
		return nil
	})
	c.stop(victim)
	waitFor(t, time.Minute, "a rebuild stored its shard", func() bool { mu.Lock(); defer mu.Unlock(); return hold != nil })
	mu.Lock()
	h, start := *hold, polls[hold.node]
	mu.Unlock()
	st := c.status()
	for _, cs := range st.Containers {
		if cs.Container == h.container && (!slices.Contains(cs.Nodes, victimID) || len(cs.Missing) == 0) {
			t.Fatalf("before the report the old layout must stand (the lost datanode named, its shard missing): %+v", cs)
		}
	}
	if rs, err := c.mc.Replication(context.Background()); err != nil || rs.UnderReplicated == 0 {
		t.Fatalf("the replication manager does not count the containers missing shards: %+v %v", rs, err)
	}
	var out bytes.Buffer
	if err := cli.PrintECStatus(context.Background(), c.mc, &out); err != nil || !strings.Contains(out.String(), "shard rebuilds in flight") || !strings.Contains(out.String(), "FROM → DATANODE") {
		t.Fatalf("admin replication's EC part: %v\n%s", err, out.String())
	}
	if notes := cli.ECNotes(context.Background(), c.mc)[h.container]; !strings.Contains(notes, "MISSING") || !strings.Contains(notes, "rebuilding") {
		t.Fatalf("admin containers' EC note of container %d: %q", h.container, notes)
	}
	if col := cli.ECOrReplicas(cli.ECNotes(context.Background(), c.mc)[h.container], "UNDER-REPLICATED"); !strings.HasPrefix(col, "EC rs-3-2") {
		t.Fatalf("admin containers' REPLICAS column of an EC container: %q", col)
	}
	if v := c.metric("spindle_meta_ec_shards_missing"); v == 0 {
		t.Fatal("spindle_meta_ec_shards_missing is 0 with a datanode lost")
	}
	t.Logf("while rebuilding:\n%s", out.String())
	waitFor(t, time.Minute, "3 polls of the rebuild's target", func() bool { mu.Lock(); defer mu.Unlock(); return polls[h.node] >= start+3 })
	close(release)
	waitFor(t, 3*time.Minute, "every shard of the lost datanode rebuilt elsewhere", func() bool {
		st := c.status()
		return !holds(st, victimID) && st.ShardsMissing == 0 && len(st.Repairs) == 0
	})
	c.setHook(nil)
	c.checkInvariant("after the rebuilds")
	st = c.status()
	t.Logf("datanode %d lost with %d shards: %d rebuilt (%d bytes), %d failed", victim, had, st.RepairsDone, st.RepairedBytes, st.RepairsFailed)
	if st.RepairsDone < uint64(had) || st.Unrecoverable != 0 {
		t.Fatalf("status after the rebuilds: %+v", st)
	}
	if v := c.metric("spindle_meta_ec_repairs_done_total"); v < float64(had) || c.metric("spindle_meta_ec_shards_missing") != 0 {
		t.Fatalf("spindle_meta_ec_repairs_done_total %g, want ≥ %d, and no shard missing", v, had)
	}
	for _, cs := range st.Containers {
		seen := map[uint64]bool{}
		for _, n := range cs.Nodes {
			if seen[n] {
				t.Fatalf("container %d: two shards on datanode %d: %v", cs.Container, n, cs.Nodes)
			}
			seen[n] = true
		}
	}
	if rs, err := c.mc.Replication(context.Background()); err != nil || rs.UnderReplicated != 0 || rs.Unrecoverable != 0 {
		t.Fatalf("replication status after the rebuilds: %+v %v", rs, err)
	}
	waitFor(t, time.Minute, "no shard file no layout names", func() bool { return len(c.leftovers()) == 0 })
	c.readWithEachDown(vals, victim, fmt.Sprintf("datanode %d lost", victim))
}

// TestScrubRepairsCorruptShard: a shard file rotten in one byte is found
// by its datanode's scrubber, quarantined (never served) and rebuilt from
// k others in place; every key then reads back with m = 2 other datanodes
// down (the rebuilt shard is needed). Without the scrubber's check the
// shard is never rebuilt and the test fails.
func TestScrubRepairsCorruptShard(t *testing.T) {
	c, _, vals := converted(t, nil, func(cfg *datanode.Config) {
		cfg.ScrubRateBytesPerS, cfg.ScrubInterval = 1<<30, 200*time.Millisecond
	})
	cs := c.status().Containers[0]
	i := c.indexOf(cs.Nodes[0])
	p := c.shardPath(i, cs.Container, 0)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 64+20000); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, 64+20000); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the corrupt shard rebuilt", func() bool {
		st := c.status()
		if st.RepairsDone == 0 || st.ShardsMissing != 0 {
			return false
		}
		f, err := os.Open(p)
		if err != nil {
			return false
		}
		defer func() { _ = f.Close() }()
		info, err := f.Stat()
		if err != nil {
			return false
		}
		_, err = ec.VerifyShard(f, info.Size())
		return err == nil
	})
	if _, err := os.Stat(p + ".corrupt"); err == nil {
		t.Fatal("the quarantined copy is left after the rebuild")
	}
	c.checkInvariant("after the scrubber's repair")
	// Two datanodes down, neither the repaired one: its shard is one of
	// the k read.
	var down []int
	for _, n := range cs.Nodes[1:] {
		if j := c.indexOf(n); len(down) < 2 {
			down = append(down, j)
		}
	}
	for _, j := range down {
		c.stop(j)
	}
	readAll(t, c.keyClient(), "cold", vals, fmt.Sprintf("datanodes %v down after the repair of shard 0 of container %d", down, cs.Container))
	for _, j := range down {
		c.start(j)
	}
}

// TestDecommissionMovesShards: a datanode holding shards, decommissioned,
// is reported DECOMMISSIONED only once no EC layout names it (its shards
// rebuilt elsewhere, its copies then dropped); every key then reads back
// with it and m-1 = 1 other datanode stopped. Without the wait for its
// shards (Ops.Holds) it is DECOMMISSIONED at once and the test fails.
func TestDecommissionMovesShards(t *testing.T) {
	c, _, vals := converted(t, nil, nil)
	victim := 1
	id := c.nodeID(victim)
	if !holds(c.status(), id) {
		t.Fatalf("datanode %d holds no shard", victim)
	}
	ctx := context.Background()
	if _, err := c.mc.NodeOp(ctx, id, metaapi.OpDecommission, 0); err != nil {
		t.Fatal(err)
	}
	sawMoving := false
	waitFor(t, 3*time.Minute, "the datanode DECOMMISSIONED", func() bool {
		st := c.status()
		sawMoving = sawMoving || st.ShardsMoving > 0
		ns, err := c.mc.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.NodeID == id && n.OpState == metaapi.NodeDecommissioned {
				if holds(c.status(), id) {
					t.Fatalf("DECOMMISSIONED while EC layouts still name it: %+v", c.status())
				}
				return true
			}
		}
		return false
	})
	t.Logf("decommissioned; shards seen moving: %v; shards rebuilt: %d", sawMoving, c.status().RepairsDone)
	c.checkInvariant("after the decommission")
	waitFor(t, time.Minute, "the decommissioned datanode's shard copies dropped", func() bool {
		data, _ := datanode.DefaultDirs(c.dns[victim].dir)
		files, _ := filepath.Glob(filepath.Join(data, "ec", "*.shard"))
		return len(files) == 0 && len(c.leftovers()) == 0
	})
	c.stop(victim)
	c.readWithEachDown(vals, victim, "the decommissioned datanode stopped")
}

// TestRebuildCrash: a rebuild crashes after its shard is stored, before
// its report (as a kill -9 would); the old layout stands (the lost
// datanode still named), the crashed node restarts, the shard is rebuilt
// and recorded in the end, no shard file is left that no layout names,
// and every key reads back with one more datanode down.
func TestRebuildCrash(t *testing.T) {
	c, _, vals := converted(t, fastDeath, nil)
	victim := 2
	victimID := c.nodeID(victim)
	type hit struct {
		node      int
		container uint64
	}
	crashed := make(chan hit, 1)
	var once sync.Once
	c.setHook(func(i int, container uint64, step string) error {
		if step != ecnode.StepRebuilt {
			return nil
		}
		err := error(nil)
		once.Do(func() {
			crashed <- hit{i, container}
			err = ecnode.ErrCrash
		})
		return err
	})
	c.stop(victim)
	var h hit
	select {
	case h = <-crashed:
	case <-time.After(2 * time.Minute):
		t.Fatal("no rebuild reached its report")
	}
	c.setHook(nil)
	for _, cs := range c.status().Containers {
		if cs.Container == h.container && !slices.Contains(cs.Nodes, victimID) {
			t.Fatalf("container %d's layout changed without a report: %+v", h.container, cs)
		}
	}
	c.checkInvariant("a rebuild crashed before its report")
	c.stop(h.node)
	c.start(h.node)
	waitFor(t, 3*time.Minute, "every shard of the lost datanode rebuilt elsewhere", func() bool {
		st := c.status()
		return !holds(st, victimID) && st.ShardsMissing == 0 && len(st.Repairs) == 0
	})
	c.checkInvariant("after the rebuilds")
	waitFor(t, time.Minute, "no shard file no layout names", func() bool { return len(c.leftovers()) == 0 })
	other := (victim + 1) % len(c.dns)
	c.stop(other)
	readAll(t, c.keyClient(), "cold", vals, fmt.Sprintf("datanode %d lost, %d stopped", victim, other))
	c.start(other)
}

// TestDatanodeLostDuringConversions: a converter is lost for good in the
// middle of a conversion (a shard stored, the others not). In the end
// every container is erasure-coded with every shard on a live datanode
// (the conversion scheduled again elsewhere once its converter is DEAD,
// shards it held rebuilt), no shard file is left that no layout names
// (the half conversion's shards dropped), and every key reads back with
// one more datanode down. Without the end of a conversion whose converter
// is DEAD, it waits for the 10-minute task timeout and the test fails.
func TestDatanodeLostDuringConversions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six datanodes")
	}
	c := startClusterWith(t, 6, fastDeath, nil)
	kc := c.keyClient()
	ctx := context.Background()
	if _, err := kc.CreateBucket(ctx, "cold"); err != nil {
		t.Fatal(err)
	}
	vals := putKeys(t, kc, "cold", 16)
	c.closeAll()
	type hit struct {
		node      int
		container uint64
	}
	hits := make(chan hit, 1)
	var first atomic.Bool
	c.setHook(func(i int, container uint64, step string) error {
		if step == ecnode.StepStored && first.CompareAndSwap(false, true) {
			hits <- hit{i, container}
			return ecnode.ErrCrash // the converter stops here, as if killed
		}
		return nil
	})
	if err := ecapi.SetBucket(ctx, c.mc, "cold", "rs-3-2,cell=16KiB"); err != nil {
		t.Fatal(err)
	}
	var h hit
	select {
	case h = <-hits:
	case <-time.After(2 * time.Minute):
		t.Fatal("no conversion stored a shard")
	}
	c.setHook(nil)
	victim := h.node // the converter, lost for good with its conversion half done
	victimID := c.nodeID(victim)
	c.stop(victim)
	t.Logf("datanode %d lost while converting container %d", victim, h.container)
	why := ""
	deadline := time.Now().Add(4 * time.Minute)
	for {
		st := c.status()
		why = fmt.Sprintf("status %+v", st)
		if !holds(st, victimID) && st.ShardsMissing == 0 && len(st.Repairs) == 0 && st.Coded == len(c.usedContainers()) {
			why = ""
			c.svc.Mu.RLock()
			for id, n := range c.svc.NodeByID {
				for _, cid := range c.usedContainers() {
					if r, ok := n.Containers[cid]; ok && id != victimID {
						why += fmt.Sprintf("node %d holds a replica of %d (%s); ", id, cid, r.State)
					}
				}
			}
			c.svc.Mu.RUnlock()
			if why == "" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every container erasure-coded on live datanodes with no shard missing and no replica left on a live one: %s", why)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.checkInvariant("after the conversions without the lost datanode")
	waitFor(t, time.Minute, "no shard file no layout names", func() bool { return len(c.leftovers()) == 0 })
	st := c.status()
	t.Logf("%d containers coded; %d shards rebuilt, %d rebuilds failed", st.Coded, st.RepairsDone, st.RepairsFailed)
	other := (victim + 2) % len(c.dns)
	c.stop(other)
	readAll(t, c.keyClient(), "cold", vals, fmt.Sprintf("datanode %d lost, %d stopped", victim, other))
	c.start(other)
}
