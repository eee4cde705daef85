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

// Writes through the loss of a datanode when no replacement exists
// (cluster/degraded.go; issue 31 item 4).

// degradedCluster is three fake datanodes, one pipeline per node (so one
// pipeline, of all three), a bucket, and a key written.
func degradedCluster(t *testing.T, minLive int) (*fakeCluster, *clock) {
	t.Helper()
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.StaleAfter, cfg.DeadAfter = 5*time.Second, 30*time.Second
	cfg.MinLiveReplicas = minLive
	c := newCluster(t, cfg, clk, 3)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	c.put("bkt", "before", 1, 100)
	return c, clk
}

// runWithout runs every node's heartbeats but dead's for d, a round
// every 5 s, and returns the others.
func (c *fakeCluster) runWithout(clk *clock, dead *fakeDN, d time.Duration) []*fakeDN {
	var alive []*fakeDN
	for _, n := range c.nodes {
		if n != dead {
			alive = append(alive, n)
		}
	}
	for range int(d / (5 * time.Second)) {
		clk.Advance(5 * time.Second)
		c.round(alive...)
	}
	return alive
}

// putOn allocates n blocks for bucket/key, "writes" each on the live
// members of its pipeline (not on DEAD ones) and commits the key.
func (c *fakeCluster) putOn(alive []*fakeDN, bucket, key string, n int, size uint64) (*metaapi.KeyInfo, []metaapi.AllocateResponse) {
	c.t.Helper()
	ck := &metaapi.CommitKey{CRC32C: 7}
	var as []metaapi.AllocateResponse
	for range n {
		a := must[*metaapi.AllocateResponse](c.t)(c.s.Allocate(&metaapi.AllocateRequest{Bucket: bucket, Key: key}))
		p := a.Pipeline
		p.Members = slices.DeleteFunc(slices.Clone(p.Members), func(m metaapi.Member) bool {
			return !slices.ContainsFunc(alive, func(n *fakeDN) bool { return n.id == m.NodeID })
		})
		c.write(p, a.Block.Container, size)
		ck.Blocks = append(ck.Blocks, metaapi.KeyBlock{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: size})
		ck.Size += size
		as = append(as, *a)
	}
	return must[*metaapi.KeyInfo](c.t)(c.s.CommitKey(bucket, key, ck)), as
}

func (c *fakeCluster) replication() *metaapi.ReplicationStatus {
	return must[*metaapi.ReplicationStatus](c.t)(c.s.Replication())
}

// TestDeadMemberPipelineKeptWithoutReplacement: three datanodes, one
// killed. Once it is DEAD, the pipeline (of all three) stays OPEN and
// blocks are still allocated on it, acknowledged by its two HEALTHY
// members; its OPEN container is reported under-replicated (the status,
// the container view with the DEAD member missing, the metric). When the
// datanode comes back and serves the pipeline again, the pipeline is
// whole: allocatable, nothing under-replicated. Without the change the
// pipeline is closed at DeadAfter and the allocation is refused
// NO_PIPELINE ("2 healthy datanodes, 3 needed").
func TestDeadMemberPipelineKeptWithoutReplacement(t *testing.T) {
	c, clk := degradedCluster(t, 0)
	ps := c.pipelines()
	var pids []uint64
	for _, p := range ps {
		if !p.Allocatable {
			t.Fatalf("pipeline %+v not allocatable", p)
		}
		pids = append(pids, p.ID)
	}
	if len(pids) != metaapi.DefaultPipelinesPerNode {
		t.Fatalf("pipelines %+v, want %d of the three nodes", ps, metaapi.DefaultPipelinesPerNode)
	}
	dead := c.node(ps[0].Members[2].NodeID) // the fake's leader is the lowest member
	alive := c.runWithout(clk, dead, 35*time.Second)
	if h := c.health()[dead.id]; h != metaapi.HealthDead {
		t.Fatalf("killed node is %s, want DEAD", h)
	}
	for _, p := range c.pipelines() {
		if !slices.Contains(pids, p.ID) || p.State != metaapi.PipelineOpen || p.Allocatable {
			t.Fatalf("pipeline %+v: want every pipeline %v kept OPEN (degraded: not fully allocatable)", p, pids)
		}
	}
	_, as := c.putOn(alive, "bkt", "during", 4, 100)
	for _, a := range as {
		if !slices.Contains(pids, a.Pipeline.ID) {
			t.Fatalf("allocated on pipeline %d, want one of %v", a.Pipeline.ID, pids)
		}
	}
	open := 0
	for _, ci := range c.containers() {
		if ci.State != metaapi.ContainerOpen || !ci.UnderReplicated || !slices.Equal(ci.Missing, []uint64{dead.id}) {
			t.Fatalf("container view %+v: want OPEN, under-replicated, node %d missing", ci, dead.id)
		}
		open++
	}
	st := c.replication()
	if open == 0 || st.UnderReplicated != open || st.UnderReplicatedOpen != open || st.MinLiveReplicas != 2 {
		t.Fatalf("replication status: under-replicated %d (open %d), min live %d; want %d, %d, 2", st.UnderReplicated, st.UnderReplicatedOpen, st.MinLiveReplicas, open, open)
	}
	if m := metricsText(t, c.s); !strings.Contains(m, fmt.Sprintf("spindle_meta_replication_under_replicated_open %d\n", open)) ||
		!strings.Contains(m, fmt.Sprintf("spindle_meta_replication_under_replicated %d\n", open)) {
		t.Fatalf("metrics lack the under-replicated OPEN containers:\n%s", grepLines(m, "under_replicated"))
	}
	// Later Ticks keep it so (no replacement appears).
	c.runWithout(clk, dead, 60*time.Second)
	c.putOn(alive, "bkt", "later", 1, 100)

	// The datanode comes back: it still serves the pipelines, whose raft
	// groups catch its replicas up (the fake: it holds the blocks).
	for cid, r := range alive[0].conts {
		cp := *r
		dead.conts[cid] = &cp
	}
	clk.Advance(time.Second)
	c.settle()
	for _, p := range c.pipelines() {
		if p.State != metaapi.PipelineOpen || !p.Allocatable {
			t.Fatalf("pipeline %+v: want it whole again (OPEN, allocatable)", p)
		}
	}
	if st := c.replication(); st.UnderReplicated != 0 || st.UnderReplicatedOpen != 0 {
		t.Fatalf("after the node's return: under-replicated %d (open %d), want 0", st.UnderReplicated, st.UnderReplicatedOpen)
	}
	for _, ci := range c.containers() {
		if ci.UnderReplicated || len(ci.Missing) > 0 {
			t.Fatalf("container view %+v after the node's return", ci)
		}
	}
}

// TestMinLiveReplicasRefusesDegradedWrites: with MinLiveReplicas 3 a
// pipeline missing a member takes no block — neither while the member is
// STALE nor once it is DEAD (the pipeline is then closed, as before) — and
// the allocation is refused NO_PIPELINE. Without the setting, the STALE
// window hands blocks out on two members (degradedAllocatable).
func TestMinLiveReplicasRefusesDegradedWrites(t *testing.T) {
	c, clk := degradedCluster(t, 3)
	dead := c.node(c.pipelines()[0].Members[2].NodeID)
	c.runWithout(clk, dead, 10*time.Second) // STALE
	if h := c.health()[dead.id]; h != metaapi.HealthStale {
		t.Fatalf("killed node is %s, want STALE", h)
	}
	_, err := c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	wantErr(t, err, metaapi.ErrNoPipeline, "allocate with a member STALE and min live replicas 3")
	c.runWithout(clk, dead, 25*time.Second) // DEAD
	for _, p := range c.pipelines() {
		if p.State != metaapi.PipelineClosed {
			t.Fatalf("pipeline %+v: want it CLOSED (2 live members, 3 needed)", p)
		}
	}
	_, err = c.s.Allocate(&metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	wantErr(t, err, metaapi.ErrNoPipeline, "allocate with a member DEAD and min live replicas 3")
	if st := c.replication(); st.MinLiveReplicas != 3 {
		t.Fatalf("status min live replicas %d, want 3", st.MinLiveReplicas)
	}
}

// TestMinLiveReplicasValidated: below a raft majority or above a
// pipeline's size, the service does not open.
func TestMinLiveReplicasValidated(t *testing.T) {
	for _, v := range []int{-1, 1, 4} {
		cfg := testConfig(t.TempDir(), newClock())
		cfg.MinLiveReplicas = v
		if s, err := Open(cfg); err == nil {
			mustClose(t, s)
			t.Fatalf("min live replicas %d accepted", v)
		}
	}
}

// TestDegradedPipelineReplacedWhenNodeJoins: three datanodes, one DEAD,
// its pipeline kept OPEN; a fourth datanode joins. The degraded pipeline is
// closed (a replacement exists), a new one of the three HEALTHY nodes
// takes the blocks, and the closed container, CLOSED on the two survivors,
// is copied to the new node: nothing is under-replicated at the end.
// Without the change the pipeline is closed at DeadAfter already and the
// put while DEAD is refused.
func TestDegradedPipelineReplacedWhenNodeJoins(t *testing.T) {
	c, clk := degradedCluster(t, 0)
	var olds []uint64
	for _, p := range c.pipelines() {
		olds = append(olds, p.ID)
	}
	dead := c.node(c.pipelines()[0].Members[2].NodeID)
	alive := c.runWithout(clk, dead, 35*time.Second)
	_, as := c.putOn(alive, "bkt", "during", 1, 100)
	cid := as[0].Block.Container
	if !slices.Contains(olds, as[0].Pipeline.ID) {
		t.Fatalf("allocated on pipeline %d, want a degraded one of %v", as[0].Pipeline.ID, olds)
	}
	joined := c.add()
	alive = append(alive, joined)
	clk.Advance(time.Second)
	c.round(alive...) // the degraded pipelines closed, new ones made
	c.settle(alive...)
	var open []metaapi.Pipeline
	for _, p := range c.pipelines() {
		switch {
		case slices.Contains(olds, p.ID) && p.State != metaapi.PipelineClosed:
			t.Fatalf("degraded pipeline %+v not closed once a replacement exists", p)
		case p.State == metaapi.PipelineOpen:
			open = append(open, p)
		}
	}
	if len(open) == 0 || !open[0].Allocatable || slices.ContainsFunc(open[0].Members, func(m metaapi.Member) bool { return m.NodeID == dead.id }) {
		t.Fatalf("open pipelines %+v: want an allocatable one without node %d", open, dead.id)
	}
	_, as = c.putOn(alive, "bkt", "after", 1, 100)
	if slices.Contains(olds, as[0].Pipeline.ID) {
		t.Fatalf("allocated on the closed pipeline %d", as[0].Pipeline.ID)
	}
	c.settle(alive...)
	ci := c.containers()[cid]
	if ci.State != metaapi.ContainerClosed || ci.UnderReplicated || !slices.Contains(ci.Replicas, joined.id) {
		t.Fatalf("container %d: %+v; want CLOSED, copied to node %d, not under-replicated", cid, ci, joined.id)
	}
	if st := c.replication(); st.UnderReplicated != 0 || st.UnderReplicatedOpen != 0 {
		t.Fatalf("under-replicated %d (open %d), want 0", st.UnderReplicated, st.UnderReplicatedOpen)
	}
}

// TestReturningMemberGetsClosedContainersFromItsPipeline: three
// datanodes, one DEAD; a container fills and closes on the two others
// (CLOSED, two replicas) while its pipeline is kept OPEN. The node comes
// back serving the pipeline: no copy of the container is sent to it —
// its raft group replays the writes and the close it missed, and a copy
// would race that replay on the same container (the real datanode's
// replay then failed the replica, and the pipeline was closed). Once its
// replica is reported CLOSED at the others' BCSID the container has three
// healthy replicas. A node that does not serve the pipeline is a target
// as before (TestDegradedPipelineReplacedWhenNodeJoins). Without
// servesOpen (repair/rerepl.go) the returning node is sent
// replicate_container at its first heartbeat.
func TestReturningMemberGetsClosedContainersFromItsPipeline(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.StaleAfter, cfg.DeadAfter = 5*time.Second, 30*time.Second
	cfg.ContainerSizeBytes = 1000
	c := newCluster(t, cfg, clk, 3)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	dead := c.node(c.pipelines()[0].Members[2].NodeID) // the fake's leader is the lowest member
	alive := c.runWithout(clk, dead, 35*time.Second)
	_, as := c.putOn(alive, "bkt", "fills", 1, 950) // past 90 % of 1000: closed
	cid, pid := as[0].Block.Container, as[0].Pipeline.ID
	c.settle(alive...)
	if ci := c.containers()[cid]; ci.State != metaapi.ContainerClosed || !ci.UnderReplicated || len(ci.Replicas) != 2 {
		t.Fatalf("container %d with node %d DEAD: %+v; want CLOSED on two replicas, under-replicated", cid, dead.id, ci)
	}
	if p := c.s.PipelineByID[pid]; p.Rec.State != state.PipelineOpen {
		t.Fatalf("pipeline %d: %+v, want it kept OPEN", pid, p.Rec)
	}

	clk.Advance(time.Second)
	c.settle() // the node back, serving the pipeline
	c.round(c.nodes...)
	if st := c.replication(); hasCmd(dead.got, metaapi.CmdReplicateContainer, cid) || len(st.Inflight) != 0 {
		t.Fatalf("node %d, back and serving pipeline %d, was told to copy its container %d: copies %+v", dead.id, pid, cid, st.Inflight)
	}
	if ci := c.containers()[cid]; !ci.UnderReplicated {
		t.Fatalf("container %d before the replay reached node %d: %+v, want it under-replicated", cid, dead.id, ci)
	}
	// The replay: its replica as the others have it.
	cp := *alive[0].conts[cid]
	dead.conts[cid] = &cp
	c.settle()
	if ci := c.containers()[cid]; ci.UnderReplicated || len(ci.Replicas) != 3 {
		t.Fatalf("container %d after node %d caught up: %+v, want 3 healthy replicas", cid, dead.id, ci)
	}
	if st := c.replication(); st.UnderReplicated != 0 || len(st.Inflight) != 0 {
		t.Fatalf("replication after the catch-up: %+v", st)
	}
}

// TestDegradedWhenFreeDatanodesRunOut: four datanodes. One DEAD: the
// three others make a new pipeline, so the dead one's pipelines are
// closed as before. A second DEAD: two HEALTHY datanodes are left, no
// pipeline can be made, and the pipelines of those two with one DEAD
// member stay OPEN and take the blocks.
func TestDegradedWhenFreeDatanodesRunOut(t *testing.T) {
	clk := newClock()
	cfg := testConfig(t.TempDir(), clk)
	cfg.StaleAfter, cfg.DeadAfter = 5*time.Second, 30*time.Second
	c := newCluster(t, cfg, clk, 4)
	mustNo(t, ignore(c.s.CreateBucket("bkt")))
	first := c.nodes[3]
	alive := c.runWithout(clk, first, 35*time.Second)
	c.settle(alive...)
	for _, p := range c.pipelines() {
		if p.State == metaapi.PipelineOpen && slices.ContainsFunc(p.Members, func(m metaapi.Member) bool { return m.NodeID == first.id }) {
			t.Fatalf("pipeline %+v with DEAD node %d kept OPEN though 3 HEALTHY datanodes can replace it", p, first.id)
		}
	}
	c.putOn(alive, "bkt", "one-dead", 1, 100)
	second := alive[2]
	alive = alive[:2]
	var still []*fakeDN
	for _, n := range c.nodes {
		if n != first && n != second {
			still = append(still, n)
		}
	}
	for range 7 {
		clk.Advance(5 * time.Second)
		c.round(still...)
	}
	_, as := c.putOn(alive, "bkt", "two-dead", 2, 100)
	p := c.s.PipelineByID[as[0].Pipeline.ID]
	if p.Rec.State != state.PipelineOpen || !slices.Contains(p.Rec.Members, second.id) {
		t.Fatalf("allocated on %+v; want an OPEN pipeline holding the DEAD node %d", p.Rec, second.id)
	}
	if st := c.replication(); st.UnderReplicatedOpen == 0 {
		t.Fatal("no OPEN container reported under-replicated")
	}
}

// metricsText is the service's /metrics.
func metricsText(t *testing.T, s *Service) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", rec.Code)
	}
	return rec.Body.String()
}

// grepLines keeps the lines of text holding sub.
func grepLines(text, sub string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
