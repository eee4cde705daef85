package meta

import (
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

func (c *fakeCluster) nodeView(id uint64) metaapi.NodeInfo {
	c.t.Helper()
	l := must[*metaapi.NodeList](c.t)(c.s.Nodes())
	for _, n := range l.Nodes {
		if n.NodeID == id {
			return n
		}
	}
	c.t.Fatalf("node %d not listed", id)
	return metaapi.NodeInfo{}
}

// A decommissioning node's replicas stop counting: its container is
// copied to the only other node, then it is DECOMMISSIONED; the state is
// in the store (it survives a restart of the meta service) and
// recommission undoes it (the extra replica is then trimmed).
func TestDecommission(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	cid := cids[0]
	n1, n4 := c.node(1), c.node(4)
	ni := must[*metaapi.NodeInfo](t)(c.s.NodeOp(1, metaapi.OpDecommission, 0))
	if ni.OpState != metaapi.NodeDecommissioning || ni.Decommission == nil || ni.Decommission.Containers != 1 || ni.Decommission.Replicated != 0 {
		t.Fatalf("after decommission: %+v", ni)
	}
	if st := c.repl(); st.UnderReplicated != 1 || st.Unrecoverable != 0 {
		t.Fatalf("status %+v: want the container under-replicated (node 1 not counted), not unrecoverable", st)
	}
	// The state survives a restart (it is in the store).
	c.restart(func(cfg *state.Config) { cfg.DisableSafeMode = true })
	if got := c.nodeView(1).OpState; got != metaapi.NodeDecommissioning {
		t.Fatalf("after a restart: %s, want DECOMMISSIONING", got)
	}
	c.round(c.nodes...)
	c.round(c.nodes...)
	if r := n4.conts[cid]; r == nil || r.State != metaapi.ContainerClosed {
		t.Fatalf("node 4 has no copy of container %d: %+v", cid, n4.conts)
	}
	c.round(c.nodes...)
	if got := c.nodeView(1); got.OpState != metaapi.NodeDecommissioned || got.Decommission.Replicated != 1 {
		t.Fatalf("after the copy: %+v, want DECOMMISSIONED 1/1", got)
	}
	if st := c.repl(); st.UnderReplicated != 0 || st.OverReplicated != 0 {
		t.Fatalf("status %+v: want 3 counted replicas, nothing to trim", st)
	}
	if slices.Contains(deleteCmds(n1), cid) {
		t.Fatal("the decommissioned node's replica was trimmed")
	}
	// No pipeline on it any more.
	for _, p := range c.pipelines() {
		if p.State == metaapi.PipelineOpen && slices.Contains(memberIDs(p.Members), 1) {
			t.Fatalf("OPEN pipeline %d with the decommissioned node", p.ID)
		}
	}
	must[*metaapi.NodeInfo](t)(c.s.NodeOp(1, metaapi.OpRecommission, 0))
	if got := c.nodeView(1).OpState; got != metaapi.NodeInService {
		t.Fatalf("after recommission: %s", got)
	}
	if st := c.repl(); st.OverReplicated != 1 {
		t.Fatalf("status %+v: want 4 counted replicas after recommission", st)
	}
}

// A node in maintenance that goes down has its replicas counted until
// the deadline: nothing is copied; after it, they are copied as usual.
func TestMaintenance(t *testing.T) {
	c, cids := replCluster(t, 4, 1, func(cfg *state.Config) { cfg.DisableSafeMode = true })
	cid := cids[0]
	if _, err := c.s.NodeOp(2, metaapi.OpMaintenance, 0); err == nil {
		t.Fatal("maintenance without a duration accepted")
	}
	must[*metaapi.NodeInfo](t)(c.s.NodeOp(2, metaapi.OpMaintenance, time.Hour))
	up := c.except(c.node(2))
	c.clk.Advance(c.s.Cfg.DeadAfter + time.Second)
	c.round(up...)
	if h := c.health()[2]; h != metaapi.HealthDead {
		t.Fatalf("node 2 is %s, want DEAD", h)
	}
	if st := c.repl(); st.UnderReplicated != 0 || len(st.Inflight) != 0 {
		t.Fatalf("status %+v: a DEAD node in maintenance: want nothing under-replicated or copied", st)
	}
	c.clk.Advance(time.Hour)
	c.round(up...)
	if got := c.nodeView(2).OpState; got != metaapi.NodeInService {
		t.Fatalf("after the deadline: %s", got)
	}
	c.round(up...)
	if got := c.tasks(); len(got) == 0 && c.node(4).conts[cid] == nil {
		t.Fatalf("after the deadline, node 2 still DEAD: no copy of container %d", cid)
	}
}

// TestOpStateSurvivesMetaFailover: with a replicated meta service, a
// decommission and a maintenance decided on the leader are in the new
// leader's view after the old one stops (they went through raft).
func TestOpStateSurvivesMetaFailover(t *testing.T) {
	g := newRGroup(t, 3)
	dns := g.dns()
	ctx := bg
	if _, err := g.cl.NodeOp(ctx, dns[0].id, metaapi.OpDecommission, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := g.cl.NodeOp(ctx, dns[1].id, metaapi.OpMaintenance, time.Hour); err != nil {
		t.Fatal(err)
	}
	old := g.leader()
	g.stop(old)
	if g.leader() == old {
		t.Fatal("no new leader")
	}
	ns, err := g.cl.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{dns[0].id: metaapi.NodeDecommissioning, dns[1].id: metaapi.NodeInMaintenance, dns[2].id: metaapi.NodeInService}
	for _, n := range ns {
		if n.OpState != want[n.NodeID] {
			t.Errorf("node %d after the failover: %s, want %s", n.NodeID, n.OpState, want[n.NodeID])
		}
		if n.NodeID == dns[1].id && n.MaintenanceUntil.IsZero() {
			t.Errorf("node %d: the maintenance's deadline is lost", n.NodeID)
		}
	}
}
