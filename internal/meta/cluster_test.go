package meta

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metacluster "github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

func TestRegistrationAndIDStability(t *testing.T) {
	dir, clk := t.TempDir(), newClock()
	s := open(t, testConfig(dir, clk))
	reg := func(uuid string, id uint64) (*metaapi.HeartbeatResponse, error) {
		return s.Heartbeat(&metaapi.Heartbeat{UUID: uuid, NodeID: id, Addr: "127.0.0.1:7001"})
	}
	r1 := must[*metaapi.HeartbeatResponse](t)(reg("aaaa", 0))
	r2 := must[*metaapi.HeartbeatResponse](t)(reg("bbbb", 0))
	if r1.NodeID != 1 || r2.NodeID != 2 {
		t.Fatalf("node IDs %d, %d; want 1, 2", r1.NodeID, r2.NodeID)
	}
	// A known UUID registering again (lost its identity file's ID) gets
	// its ID back; with its ID it is accepted.
	if r := must[*metaapi.HeartbeatResponse](t)(reg("aaaa", 0)); r.NodeID != 1 {
		t.Fatalf("re-registration got %d, want 1", r.NodeID)
	}
	must[*metaapi.HeartbeatResponse](t)(reg("bbbb", 2))
	// Mismatches are refused.
	_, err := reg("aaaa", 2)
	wantErr(t, err, metaapi.ErrInvalid, "UUID of node 1 claiming ID 2")
	_, err = reg("cccc", 1)
	wantErr(t, err, metaapi.ErrInvalid, "unknown UUID claiming ID 1")
	_, err = reg("dddd", 9)
	wantErr(t, err, metaapi.ErrInvalid, "unknown UUID claiming unknown ID 9")
	if n := len(must[*metaapi.NodeList](t)(s.Nodes()).Nodes); n != 2 {
		t.Fatalf("%d nodes after refused heartbeats, want 2", n)
	}
	// Across a restart: same IDs, and the counter goes on.
	mustNo(t, s.Close())
	s = open(t, testConfig(dir, clk))
	if r := must[*metaapi.HeartbeatResponse](t)(reg("bbbb", 0)); r.NodeID != 2 {
		t.Fatalf("after restart bbbb got %d, want 2", r.NodeID)
	}
	if r := must[*metaapi.HeartbeatResponse](t)(reg("eeee", 0)); r.NodeID != 3 {
		t.Fatalf("after restart a new node got %d, want 3", r.NodeID)
	}
	_, err = reg("aaaa", 3)
	wantErr(t, err, metaapi.ErrInvalid, "mismatch after restart")
}

func TestHealthTransitions(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.StaleAfter, cfg.DeadAfter = 5*time.Second, 30*time.Second
	c := &fakeCluster{t: t, s: open(t, cfg), clk: clk}
	a, b := c.add(), c.add()
	check := func(wa, wb string) {
		t.Helper()
		mustNo(t, c.s.Tick())
		h := c.health()
		if h[a.id] != wa || h[b.id] != wb {
			t.Fatalf("at +%s: health %v, want %d:%s %d:%s", clk.Now().Sub(newClock().Now()), h, a.id, wa, b.id, wb)
		}
	}
	check(metaapi.HealthHealthy, metaapi.HealthHealthy)
	clk.Advance(4999 * time.Millisecond)
	check(metaapi.HealthHealthy, metaapi.HealthHealthy)
	clk.Advance(time.Millisecond)
	b.beat()
	check(metaapi.HealthStale, metaapi.HealthHealthy)
	clk.Advance(25 * time.Second)
	b.beat()
	check(metaapi.HealthDead, metaapi.HealthHealthy)
	a.beat()
	check(metaapi.HealthHealthy, metaapi.HealthHealthy)
}

func TestPipelineCreationAndSpread(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nodes, perNode int
		wantPipelines  int
	}{
		{"3 nodes, 2 per node", 3, 2, 2},
		{"4 nodes, 2 per node", 4, 2, 2},
		{"6 nodes, 1 per node", 6, 1, 2},
		{"7 nodes, 3 per node", 7, 3, 7},
		{"2 nodes", 2, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			cfg := testConfig(t.TempDir(), clk)
			cfg.PipelinesPerNode = tc.perNode
			c := newCluster(t, cfg, clk, tc.nodes)
			ps := c.pipelines()
			if len(ps) != tc.wantPipelines {
				t.Fatalf("%d pipelines, want %d: %+v", len(ps), tc.wantPipelines, ps)
			}
			per := map[uint64]int{}
			for _, p := range ps {
				if len(p.Members) != state.PipelineSize || p.State != metaapi.PipelineOpen {
					t.Fatalf("pipeline %+v", p)
				}
				ids := map[uint64]bool{}
				for _, m := range p.Members {
					ids[m.NodeID] = true
					per[m.NodeID]++
					if m.Addr != c.node(m.NodeID).addr {
						t.Fatalf("member %d address %q", m.NodeID, m.Addr)
					}
				}
				if len(ids) != state.PipelineSize {
					t.Fatalf("pipeline %d has a node twice: %+v", p.ID, p.Members)
				}
			}
			lo, hi := tc.perNode, 0
			for _, n := range c.nodes {
				lo, hi = min(lo, per[n.id]), max(hi, per[n.id])
				if len(n.pipelines) != per[n.id] {
					t.Fatalf("node %d serves %d pipelines, member of %d", n.id, len(n.pipelines), per[n.id])
				}
			}
			if hi > tc.perNode {
				t.Fatalf("a node is in %d pipelines, limit %d", hi, tc.perNode)
			}
			// Spread: with enough pipelines, nobody is left out or
			// loaded two more than another.
			if tc.wantPipelines > 0 && hi-lo > 1 {
				t.Fatalf("pipelines per node %v: not spread", per)
			}
		})
	}
}

func TestJoinRepeatedUntilReported(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := &fakeCluster{t: t, s: open(t, cfg), clk: clk}
	for range 3 {
		c.add()
	}
	mustNo(t, c.s.Tick())
	// A node that ignores its join gets it again, with the members.
	n := c.nodes[0]
	for i := range 3 {
		resp := must[*metaapi.HeartbeatResponse](t)(c.s.Heartbeat(n.report()))
		if len(resp.Commands) != 1 || resp.Commands[0].Kind != metaapi.CmdJoinPipeline || len(resp.Commands[0].Pipeline.Members) != 3 {
			t.Fatalf("heartbeat %d: commands %+v, want one join with 3 members", i, resp.Commands)
		}
	}
	n.beat() // joins
	if cmds := n.beat(); len(cmds) != 0 {
		t.Fatalf("after joining: %+v", cmds)
	}
	// Not allocatable until every member serves it.
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	_, err := c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	wantErr(t, err, metaapi.ErrNoPipeline, "allocate before members joined")
	c.settle()
	must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
}

func ignore[T any](_ T, err error) error { return err }

func TestPipelineClosedAndReplacedWhenMemberDies(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 4)
	ps := c.pipelines()
	if len(ps) != 1 || !ps[0].Allocatable {
		t.Fatalf("pipelines %+v, want 1, allocatable", ps)
	}
	old := ps[0]
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	ki := c.put("bkt", "k", 1, 100)
	cid := ki.Blocks[0].Container
	// The leader of the fake pipeline is its lowest member; kill the
	// highest, so the survivors keep their leader.
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
	if h := c.health()[dead.id]; h != metaapi.HealthDead {
		t.Fatalf("dead node health %s", h)
	}
	ps = c.pipelines()
	if len(ps) != 2 || ps[0].State != metaapi.PipelineClosed || ps[1].State != metaapi.PipelineOpen || ps[0].Allocatable || !ps[1].Allocatable {
		t.Fatalf("pipelines %+v: want the old CLOSED (not allocatable) and a new OPEN one (allocatable)", ps)
	}
	for _, m := range ps[1].Members {
		if m.NodeID == dead.id {
			t.Fatalf("new pipeline %+v has the dead node", ps[1])
		}
	}
	// The container was closed through the survivors' leader, then they
	// left the pipeline.
	leader := c.node(old.Members[0].NodeID)
	if !hasCmd(leader.got, metaapi.CmdCloseContainer, cid) {
		t.Fatalf("leader %d got no close_container %d: %+v", leader.id, cid, leader.got)
	}
	for i := range 2 {
		n := c.node(old.Members[i].NodeID)
		if _, ok := n.pipelines[old.ID]; ok {
			t.Fatalf("survivor %d still serves closed pipeline %d", n.id, old.ID)
		}
		if !hasCmd(n.got, metaapi.CmdLeavePipeline, 0) {
			t.Fatalf("survivor %d got no leave_pipeline", n.id)
		}
	}
	if st := c.containers()[cid].State; st != metaapi.ContainerClosed {
		t.Fatalf("container %d is %s, want CLOSED", cid, st)
	}
	// New blocks go to the new pipeline, in a new container.
	a := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k2"}))
	if a.Pipeline.ID != ps[1].ID || a.Block.Container == cid {
		t.Fatalf("allocation %+v after the failure", a)
	}
	// The dead node comes back: it is healthy again and leaves the closed
	// pipeline it still runs.
	dead.beat()
	clk.Advance(time.Second)
	c.settle()
	if _, ok := dead.pipelines[old.ID]; ok || c.health()[dead.id] != metaapi.HealthHealthy {
		t.Fatalf("returning node: pipelines %v, health %s", dead.pipelines, c.health()[dead.id])
	}
}

func TestLeaveWaitsForContainersToClose(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	cfg.LeaveTimeout = time.Minute
	c := newCluster(t, cfg, clk, 4)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	ki := c.put("bkt", "k", 1, 100)
	old := c.pipelines()[0]
	dead := c.node(old.Members[2].NodeID)
	leader := c.node(old.Members[0].NodeID)
	leader.noClose = true // the close does not happen (yet)
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
	if c.pipelines()[0].State != metaapi.PipelineClosed {
		t.Fatal("pipeline with a DEAD member not closed")
	}
	// While the container is OPEN on the survivors: close commands to the
	// leader (repeated, at most every CloseResendAfter), no leave.
	before := len(leader.got)
	for range 5 {
		clk.Advance(5 * time.Second)
		c.round(alive...)
	}
	closes := 0
	for _, cmd := range leader.got[before:] {
		if cmd.Kind == metaapi.CmdCloseContainer && cmd.Container == ki.Blocks[0].Container {
			closes++
		}
	}
	if closes != 5 {
		t.Fatalf("%d close_container in 5 heartbeats 5 s apart, want 5", closes)
	}
	for _, n := range alive {
		if hasCmd(n.got, metaapi.CmdLeavePipeline, 0) {
			t.Fatalf("node %d told to leave while the container is OPEN on it", n.id)
		}
	}
	// After LeaveTimeout they leave anyway; the container stays CLOSING.
	clk.Advance(cfg.LeaveTimeout)
	c.round(alive...)
	c.round(alive...)
	for i := range 2 {
		if n := c.node(old.Members[i].NodeID); !hasCmd(n.got, metaapi.CmdLeavePipeline, 0) {
			t.Fatalf("survivor %d not told to leave after the timeout", n.id)
		}
	}
	if st := c.containers()[ki.Blocks[0].Container].State; st != metaapi.ContainerClosing {
		t.Fatalf("container never closed on its replicas is %s, want CLOSING", st)
	}
}

func hasCmd(cmds []metaapi.Command, kind string, container uint64) bool {
	return slices.ContainsFunc(cmds, func(c metaapi.Command) bool {
		return c.Kind == kind && (container == 0 || c.Container == container)
	})
}

// TestStaleNodeGetsBlocksOnlyWithoutAHealthyPipeline: a pipeline with a
// STALE member (a datanode just killed) takes blocks only when no pipeline
// has every member HEALTHY, and only while a raft majority of its members
// is HEALTHY; two STALE members of three: no pipeline. (Before, a put on
// 3 datanodes failed at its next block once the killed one turned STALE,
// although the pipeline's raft quorum could still carry it.)
func TestStaleNodeGetsBlocksOnlyWithoutAHealthyPipeline(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 3)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	clk.Advance(6 * time.Second)
	c.nodes[0].beat()
	c.nodes[1].beat()
	must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
	clk.Advance(6 * time.Second)
	c.nodes[0].beat()
	_, err := c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	wantErr(t, err, metaapi.ErrNoPipeline, "allocate with two STALE members of three")
	c.nodes[1].beat()
	c.nodes[2].beat()
	must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
	// Excluded pipelines are skipped.
	p := c.pipelines()[0].ID
	_, err = c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k", ExcludePipelines: []uint64{p}})
	wantErr(t, err, metaapi.ErrNoPipeline, "allocate excluding the only pipeline")
}

func TestContainerClosedWhenFull(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	cfg.ContainerSizeBytes = 1000
	c := newCluster(t, cfg, clk, 3)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	k1 := c.put("bkt", "a", 2, 400) // 800 bytes committed: still open
	cid := k1.Blocks[0].Container
	if st := c.containers()[cid].State; st != metaapi.ContainerOpen {
		t.Fatalf("container at 800/1000 bytes is %s", st)
	}
	k2 := c.put("bkt", "b", 1, 300) // 1100: full
	if k2.Blocks[0].Container != cid {
		t.Fatalf("second key in container %d, want %d", k2.Blocks[0].Container, cid)
	}
	if st := c.containers()[cid].State; st != metaapi.ContainerClosing {
		t.Fatalf("full container is %s, want CLOSING", st)
	}
	k3 := c.put("bkt", "c", 1, 10)
	if k3.Blocks[0].Container == cid {
		t.Fatal("a block was allocated in a closing container")
	}
	c.settle()
	leader := c.node(c.pipelines()[0].Members[0].NodeID)
	if !hasCmd(leader.got, metaapi.CmdCloseContainer, cid) {
		t.Fatalf("leader got no close_container: %+v", leader.got)
	}
	if st := c.containers()[cid].State; st != metaapi.ContainerClosed {
		t.Fatalf("container is %s after its replicas closed, want CLOSED", st)
	}

	// A replica reporting a size over the limit closes a container too.
	cid3 := k3.Blocks[0].Container
	for _, n := range c.nodes {
		n.conts[cid3].UsedBytes = 5000
	}
	c.settle()
	if st := c.containers()[cid3].State; st != metaapi.ContainerClosed {
		t.Fatalf("container reported over the size is %s, want CLOSED", st)
	}
}

func TestRestartKeepsNodesPresumedHealthy(t *testing.T) {
	dir, clk := t.TempDir(), newClock()
	cfg := testConfig(dir, clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 3)
	mustNo(t, c.s.Close())
	// A long outage of the meta service: nobody is dead at restart.
	clk.Advance(time.Hour)
	c.s = open(t, cfg)
	mustNo(t, c.s.Tick())
	for id, h := range c.health() {
		if h != metaapi.HealthHealthy {
			t.Fatalf("node %d %s right after a restart", id, h)
		}
	}
	if ps := c.pipelines(); len(ps) != 1 || ps[0].State != metaapi.PipelineOpen {
		t.Fatalf("pipelines after restart: %+v", ps)
	}
	// Allocation works before any heartbeat arrives.
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
	// Nodes that never come back are DEAD after DeadAfter.
	clk.Advance(metaapi.DefaultDeadAfter)
	mustNo(t, c.s.Tick())
	if ps := c.pipelines(); ps[0].State != metaapi.PipelineClosed {
		t.Fatalf("pipeline of silent nodes: %+v", ps)
	}
}

// A pipeline is allocatable only once every member reports it: right after
// the Tick that made it, its members have not joined yet.
func TestPipelineAllocatableOnceItsMembersReportIt(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	c := &fakeCluster{t: t, s: open(t, cfg), clk: clk}
	for range 3 {
		c.add()
	}
	c.round(c.nodes...)
	mustNo(t, c.s.Tick())
	ps := c.pipelines()
	if len(ps) == 0 || ps[0].State != metaapi.PipelineOpen || ps[0].Allocatable {
		t.Fatalf("pipelines %+v: want an OPEN one, not yet allocatable", ps)
	}
	c.settle()
	if ps = c.pipelines(); !ps[0].Allocatable {
		t.Fatalf("pipelines %+v: want it allocatable once its members serve it", ps)
	}
}

// TestFailedReplicaClosesPipelineAndIsReplaced: a member reports that its
// replica failed (a chunk write failed there alone: it did not acknowledge
// and left the pipeline, its container replica UNHEALTHY). The pipeline is
// closed, its container closed on the two good replicas, copied to a third
// node, and the UNHEALTHY replica deleted.
func TestFailedReplicaClosesPipelineAndIsReplaced(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 4)
	ps := c.pipelines()
	if len(ps) != 1 {
		t.Fatalf("pipelines %+v, want 1", ps)
	}
	old := ps[0]
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	ki := c.put("bkt", "k", 1, 100)
	cid := ki.Blocks[0].Container
	c.write(old, cid, 100)
	f := c.node(old.Members[2].NodeID)
	f.conts[cid].State = metaapi.ContainerUnhealthy
	delete(f.pipelines, old.ID)
	f.failedPipelines = []metaapi.PipelineFailure{{ID: old.ID, Container: cid, Reason: "write_chunk at index 7 failed on this replica: EIO"}}
	c.round(c.nodes...)
	if p := c.pipelines()[0]; p.ID != old.ID || p.State != metaapi.PipelineClosed {
		t.Fatalf("pipeline %+v, want %d CLOSED", p, old.ID)
	}
	for range 5 {
		clk.Advance(5 * time.Second)
		c.settle()
	}
	var third *fakeDN
	for _, n := range c.nodes {
		if !slices.ContainsFunc(old.Members, func(m metaapi.Member) bool { return m.NodeID == n.id }) {
			third = n
		}
	}
	if r := third.conts[cid]; r == nil || r.State != metaapi.ContainerClosed {
		t.Fatalf("node %d (outside the pipeline) holds %+v of container %d, want a CLOSED copy", third.id, r, cid)
	}
	if r := f.conts[cid]; r != nil {
		t.Fatalf("the failed replica (node %d) still holds %+v", f.id, r)
	}
	if got := c.containers()[cid].State; got != metaapi.ContainerClosed {
		t.Fatalf("container %d %s, want CLOSED", cid, got)
	}
}

// TestPeersFollowAnAddressChange: a datanode heard from at a new address
// (restarted on another port) is named there in its peers' next heartbeat
// responses, so that their pipelines reach it without a restart.
func TestPeersFollowAnAddressChange(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 3)
	p := c.pipelines()[0]
	moved := c.node(p.Members[1].NodeID)
	moved.addr = "127.0.0.1:29999"
	moved.beat()
	other := c.node(p.Members[0].NodeID)
	resp, err := c.s.Heartbeat(other.report())
	mustNo(t, err)
	found := false
	for _, m := range resp.Peers {
		if m.NodeID == other.id {
			t.Fatalf("peers %+v list the node itself", resp.Peers)
		}
		if m.NodeID == moved.id {
			found = m.Addr == moved.addr
		}
	}
	if !found {
		t.Fatalf("peers %+v: want node %d at %s", resp.Peers, moved.id, moved.addr)
	}
}

// TestFullNodeGetsNoPipeline: a datanode reporting less available space
// than MinAvailableBytes has its OPEN pipelines closed and gets no new
// one; puts go to pipelines of the nodes with room.
func TestFullNodeGetsNoPipeline(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 4)
	old := c.pipelines()[0]
	f := c.node(old.Members[0].NodeID)
	f.used = 1 << 20
	f.full = 1e12 - f.used - (state.DefaultMinAvailableBytes - 1)
	for _, n := range c.nodes {
		if n != f {
			n.used = 1 << 20
		}
	}
	for range 3 {
		clk.Advance(time.Second)
		c.settle()
	}
	ps := c.pipelines()
	open := 0
	for _, p := range ps {
		if p.ID == old.ID && p.State != metaapi.PipelineClosed {
			t.Fatalf("pipeline %d with the full node %d is %s, want CLOSED", p.ID, f.id, p.State)
		}
		if p.State == metaapi.PipelineOpen {
			open++
			for _, m := range p.Members {
				if m.NodeID == f.id {
					t.Fatalf("new pipeline %+v has the full node %d", p, f.id)
				}
			}
		}
	}
	if open != 1 {
		t.Fatalf("pipelines %+v: want one OPEN pipeline of the three nodes with room", ps)
	}
}

// TestNoPipelineNamesTheFullNodes: with three datanodes, one of them
// full, no pipeline can be made, and the allocation's error says why —
// it named three healthy datanodes with three needed, which read as if a
// pipeline could be made.
func TestNoPipelineNamesTheFullNodes(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	c := newCluster(t, cfg, clk, 3)
	f := c.nodes[1]
	for _, n := range c.nodes {
		n.used = 1 << 20
	}
	f.full = 1e12 - f.used - (state.DefaultMinAvailableBytes - 1)
	for range 3 {
		clk.Advance(time.Second)
		c.settle()
	}
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	_, err := c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	if !errors.Is(err, metaapi.ErrNoPipeline) {
		t.Fatalf("allocate: %v, want NO_PIPELINE", err)
	}
	if want := fmt.Sprintf("1 of them full, below 64 MiB available: node %d has", f.id); !strings.Contains(err.Error(), want) {
		t.Fatalf("allocate: %q does not say %q", err, want)
	}
	// spindle admin nodes shows which one, with its space.
	for _, ni := range must[*metaapi.NodeList](t)(c.s.Nodes()).Nodes {
		if full := ni.NodeID == f.id; ni.Full != full || ni.CapacityBytes != 1e12 || (full && ni.AvailableBytes >= state.DefaultMinAvailableBytes) {
			t.Fatalf("node %d listed as %+v: want capacity 1 TB, full %v", ni.NodeID, ni, full)
		}
	}
}

// TestMemberBehindTheCompactedLogIsReplaced: a pipeline's leader reports a
// member it can no longer catch up from its log. The pipeline is closed,
// the member leaves at once (not after LeaveTimeout), closes its own
// replica, which is behind by its BCSID, and the container is copied from
// a complete replica and the short one deleted: no operator action.
func TestMemberBehindTheCompactedLogIsReplaced(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 4)
	old := c.pipelines()[0]
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	ki := c.put("bkt", "k", 1, 100)
	cid := ki.Blocks[0].Container
	c.write(old, cid, 100)
	leader, lag := c.node(old.Members[0].NodeID), c.node(old.Members[2].NodeID)
	for _, n := range []*fakeDN{leader, c.node(old.Members[1].NodeID)} {
		n.conts[cid].BCSID = 900
	}
	lag.conts[cid].BCSID = 12
	leader.behind = map[uint64][]uint64{old.ID: {lag.id}}
	c.round(c.nodes...)
	if p := c.pipelines()[0]; p.State != metaapi.PipelineClosed {
		t.Fatalf("pipeline %+v, want CLOSED", p)
	}
	c.round(c.nodes...)
	if !hasCmd(lag.got, metaapi.CmdLeavePipeline, 0) {
		t.Fatalf("the member behind got no leave_pipeline at once: %+v", lag.got)
	}
	for range 5 {
		clk.Advance(5 * time.Second)
		c.settle()
	}
	if got := c.containers()[cid].State; got != metaapi.ContainerClosed {
		t.Fatalf("container %d %s, want CLOSED", cid, got)
	}
	holders := 0
	for _, n := range c.nodes {
		if r := n.conts[cid]; r != nil {
			if r.BCSID != 900 || r.State != metaapi.ContainerClosed {
				t.Fatalf("node %d holds %+v: want only complete CLOSED replicas left", n.id, r)
			}
			holders++
		}
	}
	if holders != 3 {
		t.Fatalf("%d complete replicas, want 3", holders)
	}
}

// TestHealthyPipelinePreferredOverDegraded: with a pipeline whose members
// are all HEALTHY and one with a STALE member, every block goes to the
// healthy one (a degraded pipeline is only the fallback).
func TestHealthyPipelinePreferredOverDegraded(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 6)
	ps := c.pipelines()
	if len(ps) != 2 {
		t.Fatalf("pipelines %+v, want 2", ps)
	}
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	stale := ps[1].Members[0].NodeID
	clk.Advance(6 * time.Second)
	for _, n := range c.nodes {
		if n.id != stale {
			n.beat()
		}
	}
	for range 8 {
		r := must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
		if r.Pipeline.ID != ps[0].ID {
			t.Fatalf("block allocated on pipeline %d (a member STALE), want the healthy %d", r.Pipeline.ID, ps[0].ID)
		}
	}
}

// TestMajoritySilentPipelineClosedWhenStale: two of five datanodes stop
// (kill -9 of two at once), both members of the one pipeline (one
// pipeline per node: the other two nodes are free). That pipeline cannot
// commit anything; it is closed as soon as they are STALE, not DEAD, so
// that the live member, whose slot it held, and the two free nodes make a
// new pipeline and allocations succeed before DeadAfter. Without the
// rule, no allocation succeeds until the silent nodes are DEAD (bench
// chaos, kill2: 10.67 s without a put with --dead-after 10s).
func TestMajoritySilentPipelineClosedWhenStale(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.StaleAfter, cfg.DeadAfter = 5*time.Second, 30*time.Second
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 5)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	ps := c.pipelines()
	if len(ps) != 1 {
		t.Fatalf("%d pipelines, want 1: %+v", len(ps), ps)
	}
	gone := []*fakeDN{c.node(ps[0].Members[0].NodeID), c.node(ps[0].Members[1].NodeID)}
	alive := c.except(gone...)
	clk.Advance(6 * time.Second) // past StaleAfter, far from DeadAfter
	c.round(alive...)
	for _, n := range gone {
		if h := c.health()[n.id]; h != metaapi.HealthStale {
			t.Fatalf("node %d is %s, want STALE", n.id, h)
		}
	}
	c.settle(alive...)
	a, err := c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	if err != nil {
		t.Fatalf("allocate with two of five datanodes STALE: %v (pipelines %+v)", err, c.pipelines())
	}
	for _, m := range a.Pipeline.Members {
		if m.NodeID == gone[0].id || m.NodeID == gone[1].id {
			t.Fatalf("allocated on pipeline %+v with a silent member", a.Pipeline)
		}
	}
	if st := c.pipelines()[0].State; st != "CLOSED" {
		t.Fatalf("the pipeline of the silent majority is %s, want CLOSED", st)
	}
}

// TestLeaderlessPipelineNotHandedOut: a pipeline whose newest report names
// no leader (its members lost their leader and elect none: a majority of
// it killed, not yet STALE) takes no blocks, healthy or degraded, until a
// report names a leader again. Without the rule, after two datanodes of
// five were killed every put went to their pipelines and waited there
// until they were STALE (bench chaos, kill2: 9.4-10.7 s without a put).
func TestLeaderlessPipelineNotHandedOut(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.StaleAfter, cfg.DeadAfter = 5*time.Second, 30*time.Second
	cfg.PipelinesPerNode = 1
	c := newCluster(t, cfg, clk, 3)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	ps := c.pipelines()
	if len(ps) != 1 {
		t.Fatalf("%d pipelines, want 1: %+v", len(ps), ps)
	}
	// A new pipeline's members report it before its first election:
	// not leaderless yet.
	last := c.node(ps[0].Members[2].NodeID)
	last.leaderless = true
	c.round(c.nodes...)
	must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
	clk.Advance(metacluster.LeaderGrace)
	c.round(c.nodes...)
	clk.Advance(time.Millisecond)
	last.beat() // the newest report names no leader
	_, err := c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	wantErr(t, err, metaapi.ErrNoPipeline, "allocate on a pipeline whose newest report names no leader")
	last.leaderless = false
	clk.Advance(time.Millisecond)
	last.beat()
	must[*metaapi.AllocateResponse](t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"}))
}
