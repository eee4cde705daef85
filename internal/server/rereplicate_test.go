package server

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/gen"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

const (
	rrDatanodes = 4
	rrBucket    = "gen"
	rrSeed      = 42
)

// rrConfig is the cluster of the re-replication tests: fast heartbeats, a
// node DEAD 5 s after its last one, one copy at a time per target (so that
// the paused copies hold their target's only slot), the pause hook armed by
// the file arm.
func rrConfig(dir, arm string) Config {
	cfg := testConfig(dir)
	cfg.Datanodes = rrDatanodes
	cfg.Meta = meta.Config{HeartbeatInterval: 100 * time.Millisecond, StaleAfter: time.Second, DeadAfter: 5 * time.Second,
		CopyRetryAfter: 200 * time.Millisecond}
	cfg.DatanodeArgs = append(cfg.DatanodeArgs, "--max-copies", "1")
	cfg.DatanodeEnv = []string{"SPINDLE_TEST_COPY_PAUSE=" + arm}
	return cfg
}

// waitFor polls cond every 50 ms until it holds or the deadline passes.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the deadline", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// markers lists the paused copies: pid → container.
func markers(t *testing.T, arm string) map[int]uint64 {
	t.Helper()
	m, err := filepath.Glob(arm + ".paused.*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]uint64{}
	for _, p := range m {
		f := strings.Split(strings.TrimPrefix(p, arm+".paused."), ".")
		pid, _ := strconv.Atoi(f[0])
		c, _ := strconv.ParseUint(f[1], 10, 64)
		out[pid] = c
	}
	return out
}

// TestRereplicationAfterLosingADatanode is the acceptance as a
// test: an offline-generated cluster of 4 datanodes loses one datanode's
// data; every container it held is copied again by streaming; a source
// killed (-9) in the middle of a copy and a target killed in the middle of
// another do not stop it; no half copy is ever reported; every key then
// reads back byte for byte from the new replicas with the old replicas
// stopped.
func TestRereplicationAfterLosingADatanode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := t.TempDir()
	dir := filepath.Join(root, "cluster")
	arm := filepath.Join(root, "arm")
	gcfg := gen.Config{Dir: dir, Datanodes: rrDatanodes, SizeBytes: 40 << 20, ContainerSizeBytes: 4 << 20,
		KeySizeBytes: 3 << 20, BlockSizeBytes: 1 << 20, Bucket: rrBucket, Seed: rrSeed}
	g, err := gen.Run(ctx, gcfg)
	if err != nil {
		t.Fatal(err)
	}

	// Lose datanode 4 (data and log) before the cluster ever starts: it
	// comes back empty, as a new node.
	for _, d := range []string{filepath.Join(dir, "datanodes", "dn4"), filepath.Join(dir, "datanodes", "log", "dn4")} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(arm, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, rrConfig(dir, arm))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { testutil.CloseT(t, s) }() // s is the last server started
	mc, cl := s.Meta(), s.Cluster()
	idxByNode := func() map[uint64]int { // meta node ID → localcluster member
		nodes, err := mc.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]int{}
		for _, n := range nodes {
			if m := cl.Node(n.Addr); m != nil {
				out[n.NodeID] = m.ID
			}
		}
		return out
	}
	idxByPID := func(pid int) int {
		for _, n := range cl.Nodes() {
			if cl.PID(n.ID) == pid {
				return n.ID
			}
		}
		return 0
	}

	// 1. A copy pauses after its first block: kill -9 its source. The
	// target then fails on the broken stream and the copy is retried from
	// another source.
	var paused map[int]uint64
	waitFor(t, ctx, "a paused copy", func() (bool, error) { paused = markers(t, arm); return len(paused) > 0, nil })
	var tgtPID int
	var c1 uint64
	for pid, c := range paused {
		tgtPID, c1 = pid, c
		break
	}
	st, err := mc.Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var task *metaapi.CopyTask
	for i := range st.Inflight {
		if st.Inflight[i].Container == c1 {
			task = &st.Inflight[i]
		}
	}
	if task == nil {
		t.Fatalf("container %d is paused mid-copy but not in flight: %+v", c1, st.Inflight)
	}
	srcIdx := idxByNode()[task.Source]
	if srcIdx == 0 || cl.PID(srcIdx) == tgtPID {
		t.Fatalf("source %d of container %d not found", task.Source, c1)
	}
	t.Logf("killing source node %d (member %d) of container %d, copying to pid %d", task.Source, srcIdx, c1, tgtPID)
	if err := cl.Kill(srcIdx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(fmt.Sprintf("%s.paused.%d.%d", arm, tgtPID, c1)); err != nil {
		t.Fatal(err)
	}
	target := task.Target
	waitFor(t, ctx, "the copy retried from another source", func() (bool, error) {
		cs, err := mc.Containers(ctx)
		if err != nil {
			return false, err
		}
		for _, c := range cs {
			if c.ID == c1 {
				return slices.Contains(c.Replicas, target), nil
			}
		}
		return false, fmt.Errorf("container %d not listed", c1)
	})
	if err := cl.Restart(ctx, srcIdx); err != nil {
		t.Fatal(err)
	}

	// 2. Another copy pauses: kill -9 its target. The half copy must never
	// be reported; the target, restarted, gets the copy again.
	waitFor(t, ctx, "a second paused copy", func() (bool, error) {
		paused = markers(t, arm)
		for pid := range paused {
			if idxByPID(pid) != 0 {
				return true, nil
			}
		}
		return false, nil
	})
	var c2 uint64
	var victim int
	for pid, c := range paused {
		if i := idxByPID(pid); i != 0 {
			victim, c2 = i, c
			break
		}
	}
	victimNode := uint64(0)
	for id, i := range idxByNode() {
		if i == victim {
			victimNode = id
		}
	}
	t.Logf("killing target member %d (node %d) in the middle of container %d", victim, victimNode, c2)
	if err := cl.Kill(victim); err != nil {
		t.Fatal(err)
	}
	// Restarted still armed, its copies pause again after their first
	// block: while they are paused, its reports (heard after the restart)
	// must not list c2 nor the paused container: the killed process's half
	// copy was removed when the engine opened, the new one is not done.
	restarted := time.Now()
	if err := cl.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	newPID := cl.PID(victim)
	var c3 uint64
	waitFor(t, ctx, "the restarted target pausing its copy again", func() (bool, error) {
		for pid, c := range markers(t, arm) {
			if pid == newPID {
				c3 = c
				return true, nil
			}
		}
		return false, nil
	})
	waitFor(t, ctx, "a heartbeat of the restarted target", func() (bool, error) {
		nodes, err := mc.Nodes(ctx)
		for _, n := range nodes {
			if n.NodeID == victimNode {
				return n.LastHeartbeat.After(restarted), err
			}
		}
		return false, err
	})
	cs, err := mc.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if (c.ID == c2 || c.ID == c3) && slices.Contains(c.Replicas, victimNode) {
			t.Fatalf("container %d is reported by node %d while its copy is unfinished (replicas %v)", c.ID, victimNode, c.Replicas)
		}
	}
	if err := os.Remove(arm); err != nil { // no more pauses: every paused copy resumes
		t.Fatal(err)
	}

	// 3. Replication restored.
	var final *metaapi.ReplicationStatus
	waitFor(t, ctx, "replication restored", func() (bool, error) {
		st, err := mc.Replication(ctx)
		if err != nil {
			return false, err
		}
		final = st
		return !st.SafeMode && st.UnderReplicated == 0 && len(st.Inflight) == 0 && st.OverReplicated == 0 && st.Trimming == 0, nil
	})
	if final.CopiedContainers == 0 {
		t.Fatalf("status %+v: no copy done", final)
	}
	cs, err = mc.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := mc.Pipelines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members := map[uint64][]uint64{}
	for _, p := range ps {
		for _, m := range p.Members {
			members[p.ID] = append(members[p.ID], m.NodeID)
		}
	}
	copiedTo := map[uint64]map[uint64]bool{} // node → containers it got by copy
	copies := 0
	for _, c := range cs {
		if len(c.Replicas) != 3 {
			t.Fatalf("container %d (pipeline %d %v) has replicas %v, want 3", c.ID, c.Pipeline, members[c.Pipeline], c.Replicas)
		}
		if slices.Contains(c.Replicas, rrDatanodes) {
			t.Fatalf("container %d still lists the lost node %d", c.ID, rrDatanodes)
		}
		for _, r := range c.Replicas {
			if !slices.Contains(members[c.Pipeline], r) {
				if copiedTo[r] == nil {
					copiedTo[r] = map[uint64]bool{}
				}
				copiedTo[r][c.ID] = true
				copies++
			}
		}
	}
	if copies == 0 || uint64(copies) < final.CopiedContainers {
		t.Fatalf("%d copied replicas found, the meta service counted %d", copies, final.CopiedContainers)
	}

	// 4. Every block of every key in a copied container reads back byte for
	// byte from its new replica alone: for each node that received copies,
	// every other datanode stopped.
	kc, err := keyclient.New(mc, keyclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	keys := make([]metaapi.KeyInfo, g.Keys)
	for k := range keys {
		if keys[k], err = mc.GetKey(ctx, rrBucket, gen.KeyName(k)); err != nil {
			t.Fatal(err)
		}
	}
	read := 0
	for node, onNode := range copiedTo {
		idx := idxByNode()
		for id, i := range idx {
			if id != node && cl.Running(i) {
				if err := cl.Kill(i); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k, ki := range keys {
			var off uint64
			for _, b := range ki.Blocks {
				if onNode[b.Container] {
					var buf bytes.Buffer
					if err := kc.ReadKey(ctx, ki, int64(off), int64(b.Length), &buf, keyclient.GetOptions{}); err != nil {
						t.Fatalf("key %d block %d/%d from node %d alone: %v", k, b.Container, b.Local, node, err)
					}
					want := make([]byte, b.Length)
					gen.Content(rrSeed, k, off, want)
					if !bytes.Equal(buf.Bytes(), want) {
						t.Fatalf("key %d block %d/%d from node %d: bytes differ", k, b.Container, b.Local, node)
					}
					read++
				}
				off += b.Length
			}
		}
		for id, i := range idx {
			if id != node && !cl.Running(i) {
				if err := cl.Restart(ctx, i); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if read == 0 {
		t.Fatal("no block read from the new replicas")
	}
	t.Logf("%d containers copied (%d failed copies, %d extra replicas deleted) to nodes %v; %d blocks read back from their new replicas alone",
		final.CopiedContainers, final.FailedCopies, final.TrimmedReplicas, slices.Collect(maps.Keys(copiedTo)), read)

	// 5. A datanode stops until it is DEAD: its containers are copied
	// elsewhere. It comes back with its replicas: the extra ones are
	// deleted, every container has exactly 3 again, every key reads back.
	idx := idxByNode()
	gone := cs[0].Replicas[0]
	if idx[gone] == 0 {
		t.Fatalf("node %d (a replica of container %d) is not a running datanode", gone, cs[0].ID)
	}
	held := 0
	for _, c := range cs {
		if slices.Contains(c.Replicas, gone) {
			held++
		}
	}
	if err := cl.Kill(idx[gone]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, fmt.Sprintf("node %d DEAD and its %d containers copied", gone, held), func() (bool, error) {
		nodes, err := mc.Nodes(ctx)
		if err != nil {
			return false, err
		}
		dead := false
		for _, n := range nodes {
			dead = dead || n.NodeID == gone && n.Health == metaapi.HealthDead
		}
		st, err := mc.Replication(ctx)
		return dead && st.UnderReplicated == 0 && len(st.Inflight) == 0 && st.CopiedContainers >= final.CopiedContainers+uint64(held), err
	})
	if err := cl.Restart(ctx, idx[gone]); err != nil {
		t.Fatal(err)
	}
	var trimmed *metaapi.ReplicationStatus
	waitFor(t, ctx, fmt.Sprintf("node %d back and the extra replicas deleted", gone), func() (bool, error) {
		st, err := mc.Replication(ctx)
		trimmed = st
		return err == nil && st.TrimmedReplicas >= final.TrimmedReplicas+uint64(held) && st.OverReplicated == 0 && st.Trimming == 0 &&
			st.UnderReplicated == 0, err
	})
	if cs, err = mc.Containers(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if len(c.Replicas) != 3 {
			t.Fatalf("container %d has replicas %v after node %d came back, want 3", c.ID, c.Replicas, gone)
		}
	}
	for k, ki := range keys {
		var buf bytes.Buffer
		if err := kc.ReadKey(ctx, ki, 0, int64(ki.Size), &buf, keyclient.GetOptions{}); err != nil {
			t.Fatalf("key %d after trimming: %v", k, err)
		}
		want := make([]byte, ki.Size)
		gen.Content(rrSeed, k, 0, want)
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("key %d after trimming: bytes differ", k)
		}
	}
	t.Logf("node %d (%d containers) DEAD, copied, back: %d extra replicas deleted; every key reads back", gone, held,
		trimmed.TrimmedReplicas-final.TrimmedReplicas)
}
