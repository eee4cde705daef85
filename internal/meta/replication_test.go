package meta

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// replBlockBytes is the size of every test key (one block), which fills
// its container (replContainerBytes): each key has a container of its own.
const (
	replBlockBytes     = 1000
	replContainerBytes = 1000
)

// replCluster is n fake datanodes (one pipeline, of nodes 1, 2, 3) and k
// keys k0..k(k-1), each in a CLOSED container of its own; it returns the
// containers in key order.
func replCluster(t *testing.T, n, k int, mod func(*state.Config)) (*fakeCluster, []uint64) {
	t.Helper()
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	cfg.ContainerSizeBytes = replContainerBytes
	if mod != nil {
		mod(&cfg)
	}
	c := newCluster(t, cfg, clk, n)
	if ps := c.pipelines(); len(ps) != 1 || !slices.Equal(memberIDs(ps[0].Members), []uint64{1, 2, 3}) {
		t.Fatalf("test setup: pipelines %+v, want one of nodes 1, 2, 3", ps)
	}
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	var cids []uint64
	for i := range k {
		ki := c.put("bkt", fmt.Sprintf("k%d", i), 1, replBlockBytes)
		c.settle()
		cids = append(cids, ki.Blocks[0].Container)
	}
	for _, cid := range cids {
		if st := c.containers()[cid].State; st != metaapi.ContainerClosed {
			t.Fatalf("test setup: container %d is %s, want CLOSED", cid, st)
		}
	}
	if len(slices.Compact(slices.Clone(cids))) != k {
		t.Fatalf("test setup: keys share containers: %v", cids)
	}
	return c, cids
}

func memberIDs(ms []metaapi.Member) []uint64 {
	var ids []uint64
	for _, m := range ms {
		ids = append(ids, m.NodeID)
	}
	return ids
}

// except is every node of c but those given.
func (c *fakeCluster) except(gone ...*fakeDN) []*fakeDN {
	var ns []*fakeDN
	for _, n := range c.nodes {
		if !slices.Contains(gone, n) {
			ns = append(ns, n)
		}
	}
	return ns
}

// kill makes the given nodes DEAD: the others beat through DeadAfter.
func (c *fakeCluster) kill(gone ...*fakeDN) {
	c.t.Helper()
	alive := c.except(gone...)
	for range 7 {
		c.clk.Advance(5 * time.Second)
		c.round(alive...)
	}
	for _, n := range gone {
		if h := c.health()[n.id]; h != metaapi.HealthDead {
			c.t.Fatalf("node %d is %s, want DEAD", n.id, h)
		}
	}
}

func (c *fakeCluster) repl() *metaapi.ReplicationStatus {
	return must[*metaapi.ReplicationStatus](c.t)(c.s.Replication())
}

// tasks is the copies in flight as "container:source->target".
func (c *fakeCluster) tasks() []string {
	var ts []string
	for _, t := range c.repl().Inflight {
		ts = append(ts, fmt.Sprintf("%d:%d->%d", t.Container, t.Source, t.Target))
	}
	return ts
}

func (c *fakeCluster) readMembers(key string) []uint64 {
	ki := must[*metaapi.KeyInfo](c.t)(c.s.GetKey("bkt", key))
	return memberIDs(ki.Blocks[0].Members)
}

// replicateCmd is the replicate_container for container cid in cmds.
func replicateCmd(cmds []metaapi.Command, cid uint64) *metaapi.Command {
	for i := range cmds {
		if cmds[i].Kind == metaapi.CmdReplicateContainer && cmds[i].Container == cid {
			return &cmds[i]
		}
	}
	return nil
}

func TestDeadNodeContainersCopiedToTheRightTarget(t *testing.T) {
	c, cids := replCluster(t, 4, 3, func(cfg *state.Config) { cfg.MaxCopiesPerTarget = 2 })
	n1, n3, n4 := c.node(1), c.node(3), c.node(4)
	n4.copy = copyHold
	if st := c.repl(); st.SafeMode || st.UnderReplicated != 0 || len(st.Inflight) != 0 {
		t.Fatalf("healthy cluster: %+v", st)
	}
	c.kill(n3)
	// Nodes 1 and 2 hold every container: the only target is node 4, two
	// copies at most; sources alternate.
	want := []string{fmt.Sprintf("%d:1->4", cids[0]), fmt.Sprintf("%d:2->4", cids[1])}
	if got := c.tasks(); !slices.Equal(got, want) {
		t.Fatalf("copies in flight %v, want %v", got, want)
	}
	st := c.repl()
	scheduled := st.Inflight[0].Started
	if st.UnderReplicated != 3 || st.Unrecoverable != 0 || st.PendingBytes != 3*replBlockBytes {
		t.Fatalf("status %+v: want 3 under-replicated, %d bytes pending", st, 3*replBlockBytes)
	}
	cmds := n4.beat()
	for i, wantSrc := range [][]uint64{{1, 2}, {2, 1}} {
		cmd := replicateCmd(cmds, cids[i])
		if cmd == nil || !slices.Equal(memberIDs(cmd.Sources), wantSrc) || cmd.SizeBytes != replBlockBytes ||
			cmd.Sources[0].Addr != c.node(wantSrc[0]).addr {
			t.Fatalf("command for container %d: %+v, want sources %v and %d bytes", cids[i], cmd, wantSrc, replBlockBytes)
		}
	}
	if replicateCmd(cmds, cids[2]) != nil || replicateCmd(n1.beat(), cids[0]) != nil {
		t.Fatal("a copy over the target's limit, or sent to a node that is not its target")
	}
	// Reads go to the healthy replicas only.
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("read members %v before the copy, want [1 2]", got)
	}
	// The target finishes both copies two seconds later: done when its
	// report lists them CLOSED, and the freed slot carries the third copy
	// in the same response.
	c.clk.Advance(2 * time.Second)
	n4.finishCopies()
	cmds = n4.beat()
	st = c.repl()
	if st.CopiedContainers != 2 || st.CopiedBytes != 2*replBlockBytes || st.FailedCopies != 0 {
		t.Fatalf("after 2 copies: %+v", st)
	}
	if cmd := replicateCmd(cmds, cids[2]); cmd == nil || !slices.Equal(memberIDs(cmd.Sources), []uint64{1, 2}) {
		t.Fatalf("the freed slot did not carry container %d at once: %+v", cids[2], cmds)
	}
	c.clk.Advance(time.Second)
	n4.finishCopies()
	n4.beat()
	c.round(c.except(n3)...)
	st = c.repl()
	if st.CopiedContainers != 3 || st.UnderReplicated != 0 || st.PendingBytes != 0 || len(st.Inflight) != 0 {
		t.Fatalf("after every copy: %+v", st)
	}
	d := st.LastCompleted.Sub(st.FirstScheduled)
	if !st.FirstScheduled.Equal(scheduled) || !st.LastCompleted.Equal(c.clk.Now()) || d <= 0 || st.RateBytesPerS != 3*replBlockBytes/d.Seconds() {
		t.Fatalf("copies from %s to %s at %.1f B/s, want from %s to %s at %d bytes over that", st.FirstScheduled, st.LastCompleted,
			st.RateBytesPerS, scheduled, c.clk.Now(), 3*replBlockBytes)
	}
	// Reads list the new replica after the pipeline's members.
	for i := range cids {
		if got := c.readMembers(fmt.Sprintf("k%d", i)); !slices.Equal(got, []uint64{1, 2, 4}) {
			t.Fatalf("read members of k%d %v, want [1 2 4]", i, got)
		}
	}
	if got := c.containers()[cids[0]].Replicas; !slices.Equal(got, []uint64{1, 2, 4}) {
		t.Fatalf("admin view of container %d: replicas %v", cids[0], got)
	}
	// Nodes 1 and 2 die too: the copy is the one replica left, and reads
	// go there alone.
	c.kill(c.node(1), c.node(2), n3)
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("read members %v with only node 4 alive, want [4]", got)
	}
	if st := c.repl(); st.UnderReplicated != 3 || st.Unrecoverable != 0 || len(st.Inflight) != 0 {
		t.Fatalf("no target left: %+v", st)
	}
}

func TestCopiesSpreadWithinSourceAndClusterLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*state.Config)
		want string // copies in flight, containers numbered 0..3
	}{
		{"defaults: spread over sources and targets", nil, "0:1->4 1:2->5 2:1->4 3:2->5"},
		{"one copy per source", func(cfg *state.Config) { cfg.MaxCopiesPerSource = 1 }, "0:1->4 1:2->5"},
		{"one copy per target", func(cfg *state.Config) { cfg.MaxCopiesPerTarget = 1 }, "0:1->4 1:2->5"},
		{"two copies in the cluster", func(cfg *state.Config) { cfg.MaxInflightCopies = 2 }, "0:1->4 1:2->5"},
		{"one copy in the cluster", func(cfg *state.Config) { cfg.MaxInflightCopies = 1 }, "0:1->4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cids := replCluster(t, 5, 4, tc.mod)
			c.node(4).copy, c.node(5).copy = copyHold, copyHold
			c.kill(c.node(3))
			want := tc.want
			for i := len(cids) - 1; i >= 0; i-- {
				want = strings.ReplaceAll(want, fmt.Sprintf("%d:", i), fmt.Sprintf("%d:", cids[i]))
			}
			if got := strings.Join(c.tasks(), " "); got != want {
				t.Fatalf("copies in flight %q, want %q", got, want)
			}
			// Every copy completes in the end, within the limits.
			for range 10 {
				c.node(4).finishCopies()
				c.node(5).finishCopies()
				c.round(c.except(c.node(3))...)
			}
			if st := c.repl(); st.CopiedContainers != 4 || st.UnderReplicated != 0 {
				t.Fatalf("in the end: %+v", st)
			}
		})
	}
}

func TestCopyFailureTriesAnotherSource(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	n3, n4 := c.node(3), c.node(4)
	n4.copy = copyIgnore
	c.kill(n3)
	cid := cids[0]
	if got := c.tasks(); !slices.Equal(got, []string{fmt.Sprintf("%d:1->4", cid)}) {
		t.Fatalf("copies %v", got)
	}
	// The copy from node 1 fails: it is dropped and scheduled again at
	// once, from node 2, node 1 last in the sources.
	n4.copy = copyFail
	n4.beat() // gets the command again, fails
	cmds := n4.beat()
	st := c.repl()
	if st.FailedCopies != 1 || len(st.Inflight) != 1 || st.Inflight[0].Source != 2 || st.Inflight[0].Attempt != 2 {
		t.Fatalf("after a failure from node 1: %+v", st)
	}
	if cmd := replicateCmd(cmds, cid); cmd == nil || !slices.Equal(memberIDs(cmd.Sources), []uint64{2, 1}) {
		t.Fatalf("second command %+v, want sources [2 1]", cmd)
	}
	// It fails from node 2 too: both failed lately, so node 1 again (the
	// fewest copies, then the lowest ID), and this time it works.
	n4.copy = copyNow
	cmds = n4.beat()
	if cmd := replicateCmd(cmds, cid); cmd == nil || cmd.Sources[0].NodeID != 1 {
		t.Fatalf("third command %+v, want node 1 first", cmd)
	}
	n4.beat()
	st = c.repl()
	if st.FailedCopies != 2 || st.CopiedContainers != 1 || len(st.Inflight) != 0 || st.UnderReplicated != 0 {
		t.Fatalf("in the end: %+v", st)
	}
	// Failures are forgotten after CopyRetryAfter.
	for range 7 {
		c.clk.Advance(5 * time.Second)
		c.round(c.except(n3)...)
	}
	c.s.Mu.RLock()
	left := len(c.s.Repair.Failed)
	c.s.Mu.RUnlock()
	if left != 0 {
		t.Fatalf("%d source failures remembered after CopyRetryAfter", left)
	}
}

func TestCopyTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     copyMode
		size     uint64
		mod      func(*state.Config)
		dropped  time.Duration // after scheduling (the target's last heartbeat when it dies), within a second
		deadNode bool
	}{
		{name: "never reported under way", mode: copyIgnore, size: replBlockBytes, dropped: 3*time.Second + state.CopyStartSlack},
		{name: "under way too long", mode: copyHold, size: replBlockBytes, mod: func(cfg *state.Config) { cfg.CopyTimeoutMin = 20 * time.Second },
			dropped: 20 * time.Second},
		{name: "large, under way too long", mode: copyHold, size: 1e9, mod: func(cfg *state.Config) { cfg.CopyTimeoutMin = 20 * time.Second },
			dropped: 50 * time.Second}, // 1 GB at MinCopyBytesPerS
		{name: "target DEAD", mode: copyHold, size: replBlockBytes, mod: func(cfg *state.Config) { cfg.CopyStartTimeout = time.Hour },
			dropped: metaapi.DefaultDeadAfter, deadNode: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cids := replCluster(t, 4, 1, tc.mod)
			n3, n4 := c.node(3), c.node(4)
			for _, n := range c.nodes {
				if r := n.conts[cids[0]]; r != nil {
					r.UsedBytes = tc.size
				}
			}
			n4.copy = tc.mode
			c.kill(n3)
			st := c.repl()
			if len(st.Inflight) != 1 || st.Inflight[0].SizeBytes != tc.size {
				t.Fatalf("copies in flight %+v, want one of %d bytes", st.Inflight, tc.size)
			}
			from := st.Inflight[0].Started
			alive := c.except(n3)
			if tc.deadNode {
				alive, from = c.except(n3, n4), c.clk.Now()
			}
			for range 120 {
				c.clk.Advance(time.Second)
				c.round(alive...)
				if c.repl().FailedCopies > 0 {
					break
				}
			}
			st = c.repl()
			age := c.clk.Now().Sub(from)
			if st.FailedCopies != 1 || age < tc.dropped || age >= tc.dropped+time.Second {
				t.Fatalf("copy dropped after %s (%d failures), want after %s", age, st.FailedCopies, tc.dropped)
			}
			if tc.deadNode {
				if len(st.Inflight) != 0 {
					t.Fatalf("a copy to a DEAD node or with no target: %+v", st.Inflight)
				}
				return
			}
			// Scheduled again (the same target: the only one).
			if len(st.Inflight) != 1 || st.Inflight[0].Attempt != 2 || st.Inflight[0].Target != 4 {
				t.Fatalf("after the timeout: %+v", st.Inflight)
			}
		})
	}
}

func TestUnhealthyReplicaIsReplaced(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	c.node(2).conts[cids[0]].State = metaapi.ContainerUnhealthy
	c.round(c.nodes...) // scheduled
	c.round(c.nodes...) // node 4 gets the command and copies
	c.round(c.nodes...) // and reports it
	st := c.repl()
	if st.CopiedContainers != 1 || st.UnderReplicated != 0 {
		t.Fatalf("status %+v: want the UNHEALTHY replica replaced", st)
	}
	if r := c.node(4).conts[cids[0]]; r == nil || r.State != metaapi.ContainerClosed || c.node(4).copied[cids[0]][0] != 1 {
		t.Fatalf("node 4: %+v, sources %v", r, c.node(4).copied)
	}
	// Reads go to the UNHEALTHY replica last (a last resort).
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{1, 3, 4, 2}) {
		t.Fatalf("read members %v, want [1 3 4 2]", got)
	}
}

func TestReadsSkipANodeReplacedAtItsAddress(t *testing.T) {
	c, cids := replCluster(t, 3, 1, nil)
	c.restart(nil)
	// Node 3 lost its disks and comes back at its address as a new node,
	// 4; node 3 is not heard from, and is not DEAD yet.
	n3 := c.node(3)
	fresh := c.add()
	fresh.addr = n3.addr
	c.round(c.except(n3)...)
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("read members %v, want [1 2 3] (node 3 not heard from yet)", got)
	}
	// Node 3 may still hold it: no copy until it reports or is DEAD.
	c.round(c.except(n3)...)
	if st := c.repl(); len(st.Inflight) != 0 || st.CopiedContainers != 0 {
		t.Fatalf("status %+v: a copy decided before node 3 reported or died", st)
	}
	c.clk.Advance(c.s.Cfg.DeadAfter)
	for range 3 {
		c.round(c.except(n3)...)
	}
	if st := c.repl(); st.CopiedContainers != 1 || c.node(4) != fresh || fresh.conts[cids[0]] == nil {
		t.Fatalf("status %+v: want one copy, to node 4", st)
	}
	// The copy on node 4 is at node 3's address: listed once.
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{1, 2, 4}) {
		t.Fatalf("read members %v, want [1 2 4]", got)
	}
}

// restart closes c's service and opens it again on the same store (the
// fake datanodes keep their state).
func (c *fakeCluster) restart(mod func(*state.Config)) {
	c.t.Helper()
	cfg := c.s.Cfg
	mustNo(c.t, c.s.Close())
	if mod != nil {
		mod(&cfg)
	}
	c.s = open(c.t, cfg)
}

func TestSafeMode(t *testing.T) {
	t.Run("until enough datanodes reported, or an operator exits", func(t *testing.T) {
		c, cids := replCluster(t, 4, 2, nil)
		c.restart(nil)
		// Before any report, reads go to the pipeline's members.
		if got := c.readMembers("k0"); !slices.Equal(got, []uint64{1, 2, 3}) {
			t.Fatalf("read members %v right after a restart, want the pipeline's [1 2 3]", got)
		}
		// Nodes 2 and 4 report: every container has one healthy replica of
		// three, but only 2 datanodes of 3 reported.
		for range 3 {
			c.clk.Advance(time.Second)
			c.round(c.node(2), c.node(4))
		}
		st := c.repl()
		if !st.SafeMode || st.SafeModeReason != "2/3 datanodes reported" || len(st.Inflight) != 0 || st.UnderReplicated != 2 {
			t.Fatalf("status %+v: want safe mode for 2/3 datanodes, no copies", st)
		}
		for _, cmd := range c.node(4).got {
			if cmd.Kind == metaapi.CmdReplicateContainer {
				t.Fatalf("a copy in safe mode: %+v", cmd)
			}
		}
		// Reads: the replica reported, then the members not heard from.
		if got := c.readMembers("k0"); !slices.Equal(got, []uint64{2, 1, 3}) {
			t.Fatalf("read members %v, want [2 1 3]", got)
		}
		st = must[*metaapi.ReplicationStatus](t)(c.s.ExitSafeMode())
		if st.SafeMode || st.SafeModeReason != "" {
			t.Fatalf("after exit: %+v", st)
		}
		c.round(c.node(2), c.node(4))
		if got := c.tasks(); !slices.Equal(got, []string{fmt.Sprintf("%d:2->4", cids[0]), fmt.Sprintf("%d:2->4", cids[1])}) {
			t.Fatalf("copies after the exit: %v", got)
		}
		// Out for good: a node reporting nothing does not bring it back.
		c.node(1).conts = map[uint64]*metaapi.ContainerReport{}
		c.round(c.nodes...)
		if c.repl().SafeMode {
			t.Fatal("back in safe mode")
		}
	})
	t.Run("until enough containers have a replica", func(t *testing.T) {
		c, cids := replCluster(t, 4, 3, nil)
		c.restart(nil)
		// Node 1 lost its data, node 2 holds one container of three.
		c.node(1).conts = map[uint64]*metaapi.ContainerReport{}
		for _, cid := range cids[1:] {
			delete(c.node(2).conts, cid)
		}
		c.round(c.node(1), c.node(2), c.node(4))
		st := c.repl()
		if !st.SafeMode || st.SafeModeReason != "1/3 containers have a replica (3 needed)" || len(st.Inflight) != 0 {
			t.Fatalf("status %+v: want safe mode for 1/3 containers", st)
		}
		c.round(c.nodes...)
		st = c.repl()
		if st.SafeMode || len(st.Inflight) == 0 {
			t.Fatalf("every node reported: %+v, want copies", st)
		}
	})
	t.Run("a store without containers", func(t *testing.T) {
		clk := newClock()
		s := open(t, testConfig(t.TempDir(), clk))
		if st := must[*metaapi.ReplicationStatus](t)(s.Replication()); !st.SafeMode {
			t.Fatalf("a new service is not in safe mode: %+v", st)
		}
		mustNo(t, s.Tick())
		if st := must[*metaapi.ReplicationStatus](t)(s.Replication()); st.SafeMode {
			t.Fatalf("no datanode registered, no container: %+v", st)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		cfg := testConfig(t.TempDir(), newClock())
		cfg.DisableSafeMode = true
		if st := must[*metaapi.ReplicationStatus](t)(open(t, cfg).Replication()); st.SafeMode {
			t.Fatalf("safe mode disabled: %+v", st)
		}
	})
	t.Run("explicit minimum and fraction", func(t *testing.T) {
		c, cids := replCluster(t, 4, 3, nil)
		c.restart(func(cfg *state.Config) { cfg.SafeModeMinNodes, cfg.SafeModeContainerFraction = 4, 0.5 })
		delete(c.node(1).conts, cids[0])
		delete(c.node(1).conts, cids[1])
		c.round(c.node(1), c.node(4))
		if st := c.repl(); st.SafeModeReason != "2/4 datanodes reported; 1/3 containers have a replica (2 needed)" {
			t.Fatalf("reason %q", st.SafeModeReason)
		}
		c.round(c.node(2), c.node(3))
		if st := c.repl(); st.SafeMode {
			t.Fatalf("4 datanodes reported: %+v", st)
		}
	})
}

func TestReplicationMetrics(t *testing.T) {
	c, _ := replCluster(t, 4, 2, nil)
	c.kill(c.node(3))
	c.round(c.except(c.node(3))...)
	rec := httptest.NewRecorder()
	c.s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"spindle_meta_safe_mode 0",
		"spindle_meta_replication_under_replicated 0",
		"spindle_meta_replication_unrecoverable 0",
		"spindle_meta_replication_pending_bytes 0",
		"spindle_meta_replication_inflight 0",
		"spindle_meta_replication_copied_containers_total 2",
		fmt.Sprintf("spindle_meta_replication_copied_bytes_total %d", 2*replBlockBytes),
		"spindle_meta_replication_failed_copies_total 0",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	c.restart(nil)
	rec = httptest.NewRecorder()
	c.s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "spindle_meta_safe_mode 1\n") {
		t.Error("safe mode after a restart not in the metrics")
	}
}

func TestReplicationOverHTTP(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	srv, cl := serve(t, cfg)
	c := &fakeCluster{t: t, s: srv.Service(), clk: clk}
	c.add()
	st := must[*metaapi.ReplicationStatus](t)(cl.Replication(bg))
	if !st.SafeMode || st.ReplicationFactor != state.DefaultReplicationFactor || st.Inflight == nil {
		t.Fatalf("GET /v1/replication: %+v", st)
	}
	st = must[*metaapi.ReplicationStatus](t)(cl.ExitSafeMode(bg))
	if st.SafeMode {
		t.Fatalf("POST /v1/safemode/exit: %+v", st)
	}
	if st := must[*metaapi.ReplicationStatus](t)(cl.ExitSafeMode(bg)); st.SafeMode {
		t.Fatalf("a second exit: %+v", st)
	}
	if st := must[*metaapi.ReplicationStatus](t)(cl.Replication(bg)); st.SafeMode {
		t.Fatalf("after the exit: %+v", st)
	}
	resp := mustDo(t, must[*http.Request](t)(http.NewRequest(http.MethodGet, "http://"+srv.Addr()+"/v1/safemode/exit", nil)))
	mustClose(t, resp.Body)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/safemode/exit: HTTP %d", resp.StatusCode)
	}
}

func TestHeartbeatAddressUpdated(t *testing.T) {
	dir, clk := t.TempDir(), newClock()
	s := open(t, testConfig(dir, clk))
	hb := &metaapi.Heartbeat{UUID: "gen-1", Addr: "127.0.0.1:1"}
	hb.NodeID = must[*metaapi.HeartbeatResponse](t)(s.Heartbeat(hb)).NodeID
	hb.Addr = "127.0.0.1:4567"
	must[*metaapi.HeartbeatResponse](t)(s.Heartbeat(hb))
	mustNo(t, s.Close())
	s = open(t, testConfig(dir, clk))
	if ns := must[*metaapi.NodeList](t)(s.Nodes()).Nodes; len(ns) != 1 || ns[0].Addr != "127.0.0.1:4567" {
		t.Fatalf("nodes after a restart: %+v, want the reported address", ns)
	}
}

// deleteCmds lists the delete_container commands n received, as
// "container" strings, in order.
func deleteCmds(n *fakeDN) []uint64 {
	var cids []uint64
	for _, cmd := range n.got {
		if cmd.Kind == metaapi.CmdDeleteContainer {
			cids = append(cids, cmd.Container)
		}
	}
	return cids
}

// holders lists the nodes of c whose reports hold container cid.
func (c *fakeCluster) holders(cid uint64) []uint64 {
	var ids []uint64
	for _, n := range c.nodes {
		if n.conts[cid] != nil {
			ids = append(ids, n.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// A DEAD node's containers are copied; when it comes back with its
// replicas, each container has one too many, and one replica of each is
// deleted — on a node that does not serve the container's pipeline —
// leaving exactly the replication factor.
func TestOverReplicationTrimmedAfterADeadNodeReturns(t *testing.T) {
	c, cids := replCluster(t, 4, 2, nil)
	n3 := c.node(3)
	c.kill(n3)
	c.settle(c.except(n3)...)
	for _, cid := range cids {
		if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
			t.Fatalf("container %d held by %v after the copies, want [1 2 3 4] (node 3 DEAD but keeping its replica)", cid, got)
		}
	}
	if st := c.repl(); st.CopiedContainers != 2 || st.OverReplicated != 0 {
		t.Fatalf("status %+v: want 2 copies, nothing over-replicated while node 3 is DEAD", st)
	}
	// Node 3 comes back: 4 healthy replicas each. Node 2 is the fullest
	// node, and serves no pipeline any more (closed with node 3's death):
	// its replica of the second container goes. Node 3's replica of the
	// first is short (it closed it having missed writes): that one goes,
	// once node 3 has left the pipeline, never a complete one meanwhile.
	c.node(2).used = 5e9
	n3.conts[cids[0]].UsedBytes = replBlockBytes / 2
	n3.beat()
	if st := c.repl(); st.OverReplicated != 2 {
		t.Fatalf("status %+v: want 2 containers over-replicated", st)
	}
	for range 3 {
		c.round(c.nodes...) // decided, sent and carried out, reported
	}
	for _, cid := range cids {
		if got := c.holders(cid); len(got) != 3 {
			t.Fatalf("container %d held by %v after trimming, want 3 replicas; %+v; health %v", cid, got, c.repl(), c.health())
		}
	}
	st := c.repl()
	if st.OverReplicated != 0 || st.Trimming != 0 || st.TrimmedReplicas != 2 || st.UnderReplicated != 0 {
		t.Fatalf("status %+v: want 2 replicas trimmed, none over- or under-replicated", st)
	}
	want := map[uint64][]uint64{2: {cids[1]}, 3: {cids[0]}}
	for _, n := range c.nodes {
		if got := deleteCmds(n); !slices.Equal(got, want[n.id]) {
			t.Fatalf("node %d told to delete %v; want %v", n.id, got, want[n.id])
		}
	}
}

// Only a replica on a node that does not serve the container's pipeline
// is deleted (a member of an OPEN pipeline keeps its replica whatever the
// count); none is deleted while a holder is STALE or while the meta
// service is in safe mode; a node that does not carry out the deletion is
// told again after CopyStartTimeout.
func TestOverReplicationTrimRules(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	cid := cids[0]
	n2, n4 := c.node(2), c.node(4)
	// Node 2's replica turns UNHEALTHY: copied to node 4 (not a member).
	n2.conts[cid].State = metaapi.ContainerUnhealthy
	for range 3 {
		c.round(c.nodes...) // scheduled, sent and copied, reported
	}
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3, 4}) || c.repl().CopiedContainers != 1 {
		t.Fatalf("holders %v, status %+v: want the copy on node 4", got, c.repl())
	}
	// Node 2's replica is CLOSED again: 4 healthy replicas, three of them
	// on members of the OPEN pipeline (node 3 the fullest, node 4 the
	// emptiest: the fullest not serving the pipeline is node 4). But node
	// 4 is STALE: nothing yet.
	n2.conts[cid].State = metaapi.ContainerClosed
	c.node(3).used, n4.used = 9e9, 1e9
	c.clk.Advance(c.s.Cfg.StaleAfter)
	c.round(c.except(n4)...)
	c.round(c.except(n4)...)
	if st := c.repl(); st.OverReplicated != 1 || st.Trimming != 0 || len(deleteCmds(n4)) != 0 {
		t.Fatalf("status %+v, deletes to node 4 %v: want none decided while node 4 is STALE", st, deleteCmds(n4))
	}
	// Node 4 ignores the first delete_container.
	n4.noTrim = true
	c.round(c.nodes...) // node 4 HEALTHY again; decided at the tick
	c.round(c.nodes...) // sent
	if got := deleteCmds(n4); !slices.Equal(got, []uint64{cid}) {
		t.Fatalf("deletes to node 4: %v, want [%d]", got, cid)
	}
	c.round(c.nodes...)
	if got := deleteCmds(n4); len(got) != 1 || c.repl().Trimming != 1 {
		t.Fatalf("deletes to node 4: %v, status %+v: want the deletion pending, not sent again yet", got, c.repl())
	}
	n4.noTrim = false
	c.clk.Advance(c.s.Cfg.CopyStartTimeout)
	for range 4 {
		c.round(c.nodes...) // timed out, decided again, sent, reported
	}
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("holders %v, want [1 2 3]: only node 4 does not serve the pipeline", got)
	}
	if st := c.repl(); st.TrimmedReplicas != 1 || st.OverReplicated != 0 || len(deleteCmds(n4)) != 2 {
		t.Fatalf("status %+v, deletes to node 4 %v: want the deletion sent again and done", st, deleteCmds(n4))
	}
	for _, n := range c.except(n4) {
		if got := deleteCmds(n); len(got) != 0 {
			t.Fatalf("node %d (a member of the OPEN pipeline) told to delete %v", n.id, got)
		}
	}

	// Safe mode: 4 replicas again, the service restarted in safe mode
	// (which the 4 reports end): nothing is deleted before it ends.
	n4.conts[cid] = &metaapi.ContainerReport{ID: cid, State: metaapi.ContainerClosed, UsedBytes: replBlockBytes, Blocks: 1}
	c.restart(func(cfg *state.Config) { cfg.SafeModeMinNodes = 5 })
	c.round(c.nodes...)
	c.round(c.nodes...)
	if st := c.repl(); !st.SafeMode || st.Trimming != 0 || len(deleteCmds(n4)) != 2 {
		t.Fatalf("status %+v: want safe mode on (5 nodes wanted) and no deletion decided", st)
	}
	mustNo(t, ignore(c.s.ExitSafeMode()))
	for range 3 {
		c.round(c.nodes...)
	}
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3}) || c.repl().TrimmedReplicas != 1 {
		t.Fatalf("holders %v, status %+v: want node 4's replica deleted after safe mode", got, c.repl())
	}
}

// An UNHEALTHY replica is deleted once the container has its healthy
// replicas again, on a node that does not serve the container's pipeline;
// a member serving it keeps its UNHEALTHY replica.
func TestUnhealthyReplicaDeletedOnceReplaced(t *testing.T) {
	c, cids := replCluster(t, 5, 1, nil)
	cid := cids[0]
	n2, n4, n5 := c.node(2), c.node(4), c.node(5)
	n2.conts[cid].State = metaapi.ContainerUnhealthy
	for range 3 {
		c.round(c.nodes...)
	}
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("holders %v: want the copy on node 4", got)
	}
	// The copy on node 4 turns UNHEALTHY too: copied to node 5; node 4's
	// replica is deleted only once node 5 has its copy.
	n4.conts[cid].State = metaapi.ContainerUnhealthy
	n5.copy = copyHold
	for range 3 {
		c.round(c.nodes...)
	}
	if len(deleteCmds(n4)) != 0 || c.repl().UnderReplicated != 1 {
		t.Fatalf("deletes to node 4 %v, status %+v: want none while the container is under-replicated", deleteCmds(n4), c.repl())
	}
	n5.finishCopies()
	for range 3 {
		c.round(c.nodes...)
	}
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3, 5}) {
		t.Fatalf("holders %v: want node 4's UNHEALTHY replica deleted, node 2's kept (it serves the pipeline)", got)
	}
	if st := c.repl(); st.TrimmedReplicas != 1 || st.UnderReplicated != 0 || st.Trimming != 0 || len(deleteCmds(n2)) != 0 {
		t.Fatalf("status %+v, deletes to node 2 %v", st, deleteCmds(n2))
	}
}

// TestStaleReplicaIsAtRisk: a CLOSED container with a replica on a node
// that stopped heartbeating is not under-replicated while the node is only
// STALE (it may be paused; nothing is copied yet) but is reported at risk;
// once the node is DEAD it is under-replicated and no longer "at risk" for
// that node. Before, the status showed nothing for the whole STALE time.
func TestStaleReplicaIsAtRisk(t *testing.T) {
	c, _ := replCluster(t, 4, 1, nil)
	if st := c.repl(); st.AtRisk != 0 || st.UnderReplicated != 0 {
		t.Fatalf("status %+v: want nothing at risk with every node heard", st)
	}
	n2 := c.node(2)
	c.clk.Advance(c.s.Cfg.StaleAfter)
	c.round(c.except(n2)...)
	if st := c.repl(); st.AtRisk != 1 || st.UnderReplicated != 0 {
		t.Fatalf("status %+v with node 2 STALE: want 1 container at risk, none under-replicated", st)
	}
	c.clk.Advance(c.s.Cfg.DeadAfter)
	c.round(c.except(n2)...)
	if st := c.repl(); st.AtRisk != 0 || st.UnderReplicated+len(st.Inflight) == 0 {
		t.Fatalf("status %+v with node 2 DEAD: want it under-replicated (or being copied), not at risk", st)
	}
}

// TestUnusedClosedContainerIsNotUnrecoverable: a container allocated on a
// pipeline that closed before any write reached it has no replica and no
// key: nothing is lost, so it is neither under-replicated nor
// unrecoverable (nor does it hold safe mode). Before, it counted as
// unrecoverable for ever and the cluster never reached full replication
// (bench chaos, CHAOS_FINDINGS §3).
func TestUnusedClosedContainerIsNotUnrecoverable(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 4)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
	// A member dies before the block is written anywhere.
	dead := c.node(a.Pipeline.Members[0].NodeID)
	c.kill(dead)
	c.settle(c.except(dead)...)
	if st := c.containers()[a.Block.Container].State; st != metaapi.ContainerClosed {
		t.Fatalf("container %d is %s, want CLOSED (its pipeline closed)", a.Block.Container, st)
	}
	if st := c.repl(); st.UnderReplicated != 0 || st.Unrecoverable != 0 {
		t.Fatalf("status %+v: an unused container counted as under-replicated or unrecoverable", st)
	}
}
