package meta

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// refusedRemoval: removing node id is refused (PRECONDITION_FAILED) with a
// message holding want, and the node is still listed.
func (c *fakeCluster) refusedRemoval(id uint64, want string) {
	c.t.Helper()
	_, err := c.s.RemoveNode(id)
	wantErr(c.t, err, metaapi.ErrPrecondition, fmt.Sprintf("remove node %d", id))
	if !strings.Contains(err.Error(), want) {
		c.t.Fatalf("remove node %d: %v, want it to say %q", id, err, want)
	}
	c.nodeView(id)
}

// untilOp runs rounds of nodes until node id is in op state st (bounded).
func (c *fakeCluster) untilOp(id uint64, st string, nodes ...*fakeDN) {
	c.t.Helper()
	for range 10 {
		if c.nodeView(id).OpState == st {
			return
		}
		c.round(nodes...)
	}
	c.t.Fatalf("node %d: %+v, want %s", id, c.nodeView(id), st)
}

func pipelineByID(ps []metaapi.Pipeline, id uint64) metaapi.Pipeline {
	for _, p := range ps {
		if p.ID == id {
			return p
		}
	}
	return metaapi.Pipeline{}
}

// TestRemoveNodeRefused: every refusal of a removal names what is in the
// way and changes nothing: an unknown node; a HEALTHY node IN_SERVICE, IN_MAINTENANCE or
// DECOMMISSIONING; a DEAD node still a member of an OPEN pipeline (before
// the Tick that closes it), then of a pipeline still closing, then not
// emptied (its containers below the replication factor elsewhere) —
// removed once they are copied, and a new node then gets a new ID; a
// DECOMMISSIONED node still serving a CLOSED pipeline, then holding the
// last replica once every other holder is DEAD.
func TestRemoveNodeRefused(t *testing.T) {
	c, cids := replCluster(t, 4, 1, func(cfg *state.Config) { cfg.DisableSafeMode = true })
	_, err := c.s.RemoveNode(99)
	wantErr(t, err, metaapi.ErrNotFound, "remove an unknown node")
	c.refusedRemoval(1, "HEALTHY and IN_SERVICE: decommission it first")
	must[*metaapi.NodeInfo](t)(c.s.NodeOp(2, metaapi.OpMaintenance, time.Hour))
	c.refusedRemoval(2, "IN_MAINTENANCE")
	must[*metaapi.NodeInfo](t)(c.s.NodeOp(2, metaapi.OpRecommission, 0))
	c.settle() // (the maintenance closed pipeline 1: a new one)
	var p uint64
	for _, pl := range c.pipelines() {
		if pl.State == metaapi.PipelineOpen && slices.Contains(memberIDs(pl.Members), 3) {
			p = pl.ID
		}
	}
	if p == 0 {
		t.Fatalf("test setup: no OPEN pipeline with node 3: %+v", c.pipelines())
	}

	// Node 3 dies with an OPEN container on its pipeline.
	open := c.put("bkt", "open", 1, 1)
	if st := c.containers()[open.Blocks[0].Container].State; st != metaapi.ContainerOpen {
		t.Fatalf("test setup: container %d is %s, want OPEN", open.Blocks[0].Container, st)
	}
	n4 := c.node(4)
	n4.copy = copyIgnore
	up := c.except(c.node(3))
	c.clk.Advance(c.s.Cfg.DeadAfter + time.Second)
	for _, n := range up {
		n.beat()
	}
	c.refusedRemoval(3, fmt.Sprintf("member of OPEN pipeline(s) %d", p))
	mustNo(t, c.s.Tick())
	c.refusedRemoval(3, fmt.Sprintf("pipeline(s) %d it is a member of are still closing", p))
	for range 3 {
		c.round(up...)
	}
	c.refusedRemoval(3, fmt.Sprintf("not emptied: container(s) %d, %d have fewer than 3", cids[0], open.Blocks[0].Container))
	// Copied: removed (DEAD, emptied).
	n4.copy = copyNow
	c.clk.Advance(c.s.Cfg.CopyStartTimeout + time.Second)
	for range 4 {
		c.round(up...)
	}
	nr := must[*metaapi.NodeRemoval](t)(c.s.RemoveNode(3))
	if nr.Health != metaapi.HealthDead || nr.OpState != metaapi.NodeInService || !slices.Contains(nr.Pipelines, p) {
		t.Fatalf("removal of node 3: %+v", nr)
	}
	if got := memberIDs(pipelineByID(c.pipelines(), p).Members); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("pipeline %d's members after the removal: %v, want [1 2]", p, got)
	}
	// A new datanode gets a new ID, never 3's.
	n5 := c.add()
	if n5.id != 5 {
		t.Fatalf("a datanode registered after node 3's removal got ID %d, want 5", n5.id)
	}
	up = c.except(c.node(3))

	// Node 1, decommissioned, still serving the CLOSED pipeline.
	must[*metaapi.NodeInfo](t)(c.s.NodeOp(1, metaapi.OpDecommission, 0))
	c.refusedRemoval(1, "HEALTHY and DECOMMISSIONING")
	c.untilOp(1, metaapi.NodeDecommissioned, up...)
	n1 := c.node(1)
	hb := n1.report()
	hb.Pipelines = append(hb.Pipelines, metaapi.PipelineReport{ID: p, LeaderID: 1, Term: 1})
	must[*metaapi.HeartbeatResponse](t)(c.s.Heartbeat(hb))
	c.refusedRemoval(1, fmt.Sprintf("still serves CLOSED pipeline(s) %d", p))
	n1.beat()
	// Every other holder DEAD: node 1 has the last replicas.
	c.clk.Advance(c.s.Cfg.DeadAfter + time.Second)
	c.round(n1)
	c.refusedRemoval(1, fmt.Sprintf("last healthy replica of container(s) %d, %d", cids[0], open.Blocks[0].Container))
}

// TestRemoveNode: a DECOMMISSIONED datanode, still up, is removed: it
// leaves the node list, the pipelines' member lists, the containers'
// replicas, the reads' members and the metrics; a pending deletion it
// never acknowledged completes without it (before: it waited for it);
// its heartbeat is refused (INVALID, under its node ID or as a
// registration), a second removal answers it again, operations on it are
// NOT_FOUND; all of it after a restart too (the removal is in the store),
// and the next datanode gets a new ID.
func TestRemoveNode(t *testing.T) {
	c, _ := replCluster(t, 4, 2, func(cfg *state.Config) { cfg.DisableSafeMode = true })
	p := c.pipelines()[0].ID
	n1 := c.node(1)
	must[*metaapi.NodeInfo](t)(c.s.NodeOp(1, metaapi.OpDecommission, 0))
	c.untilOp(1, metaapi.NodeDecommissioned, c.nodes...)
	c.settle()
	if !slices.Contains(c.readMembers("k1"), 1) {
		t.Fatalf("test setup: reads of k1 go to %v, want node 1 among them", c.readMembers("k1"))
	}
	// A deletion node 1 never acknowledges waits for it.
	n1.noAck = true
	mustNo(t, c.s.DeleteKey("bkt", "k0"))
	c.settle()
	if c.s.NDeletes != 1 {
		t.Fatalf("test setup: %d pending deletions, want k0's block waiting for node 1", c.s.NDeletes)
	}

	nr := must[*metaapi.NodeRemoval](t)(c.s.RemoveNode(1))
	if nr.NodeID != 1 || nr.UUID != n1.uuid || nr.OpState != metaapi.NodeDecommissioned || nr.Health != metaapi.HealthHealthy ||
		!slices.Contains(nr.Pipelines, p) || nr.AlreadyRemoved {
		t.Fatalf("removal: %+v", nr)
	}
	up := c.except(n1)
	c.settle(up...)
	if c.s.NDeletes != 0 {
		t.Fatalf("%d pending deletions after node 1's removal, want k0's complete (acknowledged by the other holders)", c.s.NDeletes)
	}
	check := func(when string) {
		t.Helper()
		for _, n := range must[*metaapi.NodeList](t)(c.s.Nodes()).Nodes {
			if n.NodeID == 1 {
				t.Fatalf("%s: node 1 listed: %+v", when, n)
			}
		}
		for _, pl := range c.pipelines() {
			if slices.Contains(memberIDs(pl.Members), 1) {
				t.Fatalf("%s: pipeline %d lists node 1: %+v", when, pl.ID, pl)
			}
		}
		for _, ci := range c.containers() {
			if slices.Contains(ci.Replicas, 1) {
				t.Fatalf("%s: container %d lists node 1: %+v", when, ci.ID, ci)
			}
		}
		if ms := c.readMembers("k1"); slices.Contains(ms, 1) {
			t.Fatalf("%s: reads of k1 go to %v", when, ms)
		}
		if got := gauges(t, c.s, "spindle_meta_datanodes"); got != 3 {
			t.Fatalf("%s: spindle_meta_datanodes sums to %v, want 3", when, got)
		}
		if got := gauges(t, c.s, "spindle_meta_datanodes_op_state"); got != 3 {
			t.Fatalf("%s: spindle_meta_datanodes_op_state sums to %v, want 3", when, got)
		}
		_, err := c.s.Heartbeat(n1.report())
		wantErr(t, err, metaapi.ErrInvalid, when+": heartbeat of the removed node")
		if !strings.Contains(err.Error(), "removed") {
			t.Fatalf("%s: heartbeat of the removed node: %v", when, err)
		}
		_, err = c.s.Heartbeat(&metaapi.Heartbeat{UUID: n1.uuid, Addr: n1.addr})
		wantErr(t, err, metaapi.ErrInvalid, when+": registration under the removed node's UUID")
		again := must[*metaapi.NodeRemoval](t)(c.s.RemoveNode(1))
		if !again.AlreadyRemoved || !again.RemovedAt.Equal(nr.RemovedAt) || again.UUID != n1.uuid {
			t.Fatalf("%s: second removal: %+v", when, again)
		}
		_, err = c.s.NodeOp(1, metaapi.OpRecommission, 0)
		wantErr(t, err, metaapi.ErrNotFound, when+": recommission of the removed node")
	}
	check("after the removal")
	// The refused heartbeats of a removed node still running: one log
	// line a minute, not one a heartbeat (check's was logged: none
	// more in the same minute, one in the next).
	var logBuf bytes.Buffer
	c.s.Log = slog.New(slog.NewTextHandler(&logBuf, nil))
	for range 3 {
		_, err := c.s.Heartbeat(n1.report())
		wantErr(t, err, metaapi.ErrInvalid, "heartbeat of the removed node")
	}
	if logBuf.Len() != 0 {
		t.Fatalf("refused heartbeats logged again within the minute:\n%s", logBuf.String())
	}
	c.clk.Advance(time.Minute)
	for range 2 {
		_, err := c.s.Heartbeat(n1.report())
		wantErr(t, err, metaapi.ErrInvalid, "heartbeat of the removed node")
	}
	if got := strings.Count(logBuf.String(), "heartbeat refused: the datanode was removed"); got != 1 {
		t.Fatalf("%d log lines of refused heartbeats in the next minute, want 1:\n%s", got, logBuf.String())
	}
	c.s.Log = quiet
	if got := memberIDs(pipelineByID(c.pipelines(), p).Members); !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("pipeline %d's members: %v, want [2 3]", p, got)
	}
	c.restart(nil)
	c.settle(up...)
	check("after a restart")
	if n := c.add(); n.id != 5 {
		t.Fatalf("a new datanode got ID %d, want 5", n.id)
	}
}

// gauges sums the samples of the metric family name in s's registry.
func gauges(t *testing.T, s *Service, name string) float64 {
	t.Helper()
	mfs, err := s.Metrics.Reg.Gather()
	mustNo(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue()
		}
		return sum
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRemovalSurvivesMetaFailover: with a replicated meta service, a
// removal decided on the leader (a DEAD datanode that holds nothing) is
// the new leader's after the old one stops: the node is not listed, its
// heartbeat is refused, a second removal answers the first (it went
// through raft, and the new leader's load takes it out of the registry).
func TestRemovalSurvivesMetaFailover(t *testing.T) {
	g := newRGroupWith(t, 3, func(cfg *state.Config) {
		cfg.StaleAfter, cfg.DeadAfter = 100*time.Millisecond, 300*time.Millisecond
	})
	hb := &metaapi.Heartbeat{UUID: "0123456789abcdef0123456789abcdef", Addr: "127.0.0.1:7001"}
	resp, err := g.cl.Heartbeat(bg, hb)
	mustNo(t, err)
	hb.NodeID = resp.NodeID
	time.Sleep(400 * time.Millisecond) // DEAD
	nr, err := g.cl.RemoveNode(bg, hb.NodeID)
	mustNo(t, err)
	old := g.leader()
	g.stop(old)
	if g.leader() == old {
		t.Fatal("no new leader")
	}
	ns, err := g.cl.Nodes(bg)
	mustNo(t, err)
	if len(ns) != 0 {
		t.Fatalf("nodes after the failover: %+v, want none", ns)
	}
	_, err = g.cl.Heartbeat(bg, hb)
	wantErr(t, err, metaapi.ErrInvalid, "heartbeat of the removed node on the new leader")
	again, err := g.cl.RemoveNode(bg, hb.NodeID)
	if err != nil || !again.AlreadyRemoved || !again.RemovedAt.Equal(nr.RemovedAt) {
		t.Fatalf("second removal on the new leader: %+v, %v", again, err)
	}
}
