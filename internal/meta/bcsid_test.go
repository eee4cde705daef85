package meta

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// setBCSID sets the BCSID the given nodes report for container cid.
func setBCSID(cid, bcsid uint64, nodes ...*fakeDN) {
	for _, n := range nodes {
		n.conts[cid].BCSID = bcsid
	}
}

// replicaDetail is node id's replica in the admin view of container cid.
func (c *fakeCluster) replicaDetail(cid, id uint64) metaapi.ReplicaInfo {
	c.t.Helper()
	for _, r := range c.containers()[cid].ReplicaDetails {
		if r.Node == id {
			return r
		}
	}
	c.t.Fatalf("admin view of container %d lists no replica on node %d", cid, id)
	return metaapi.ReplicaInfo{}
}

// A CLOSED replica behind the highest BCSID is not healthy: the container
// is under-replicated although 3 replicas are CLOSED, reads skip it, and
// the copy is made from a replica with the highest BCSID (never from it).
func TestBehindReplicaIsReplacedFromTheHighest(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	cid := cids[0]
	n1, n2, n3, n4 := c.node(1), c.node(2), c.node(3), c.node(4)
	// Node 1 (the lowest ID, the source chosen otherwise) missed commits.
	setBCSID(cid, 10, n2, n3)
	setBCSID(cid, 7, n1)
	c.round(c.nodes...) // reports in; decided at the tick
	if st := c.repl(); st.UnderReplicated != 1 || st.BehindReplicas != 1 {
		t.Fatalf("status %+v: want the container under-replicated, node 1's replica behind", st)
	}
	rec := httptest.NewRecorder()
	c.s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "spindle_meta_replication_behind_replicas 1\n") {
		t.Error("metrics lack spindle_meta_replication_behind_replicas 1")
	}
	if got, want := c.tasks(), []string{fmt.Sprintf("%d:2->4", cid)}; !slices.Equal(got, want) {
		t.Fatalf("copies in flight %v, want %v (from node 2: node 1 is behind)", got, want)
	}
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{2, 3, 1}) {
		t.Fatalf("read members %v, want [2 3 1] (node 1 behind: last, a last resort)", got)
	}
	ci := c.containers()[cid]
	if ci.BCSID != 10 || !c.replicaDetail(cid, 1).Behind || c.replicaDetail(cid, 1).BCSID != 7 || c.replicaDetail(cid, 2).Behind {
		t.Fatalf("admin view %+v: want BCSID 10, node 1 behind at 7", ci)
	}
	cmds := n4.beat() // the command; copied at once (from the first source)
	cmd := replicateCmd(cmds, cid)
	if cmd == nil || !slices.Equal(memberIDs(cmd.Sources), []uint64{2, 3}) {
		t.Fatalf("replicate_container %+v: want sources [2 3], never node 1", cmd)
	}
	c.round(c.nodes...)
	if r := n4.conts[cid]; r == nil || r.State != metaapi.ContainerClosed || r.BCSID != 10 {
		t.Fatalf("node 4's copy %+v: want CLOSED at BCSID 10", r)
	}
	st := c.repl()
	if st.CopiedContainers != 1 || st.UnderReplicated != 0 || st.OverReplicated != 0 {
		t.Fatalf("status %+v: want the copy done, 3 healthy replicas", st)
	}
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{2, 3, 4, 1}) {
		t.Fatalf("read members %v, want [2 3 4 1]", got)
	}
	// Node 1 serves the container's pipeline: it keeps its replica (its
	// raft group may still write to it), as an UNHEALTHY one is kept.
	if got := deleteCmds(n1); len(got) != 0 {
		t.Fatalf("node 1, serving the pipeline, told to delete %v", got)
	}
}

// A replica behind the highest BCSID is deleted before any healthy extra
// one, and is never the one kept: here the behind replica is the largest
// and on the emptiest node, which the old order (smallest first) would
// have kept while deleting a complete one.
func TestBehindReplicaTrimmedFirst(t *testing.T) {
	c, cids := replCluster(t, 5, 1, nil)
	cid := cids[0]
	n1, n2, n3, n4, n5 := c.node(1), c.node(2), c.node(3), c.node(4), c.node(5)
	setBCSID(cid, 10, n1, n2, n3)
	// Nodes 4 and 5 (not members of the pipeline) hold it too: 4 a
	// complete copy, 5 one that missed commits but holds more bytes (it
	// missed block deletions too) on an emptier node.
	n4.conts[cid] = &metaapi.ContainerReport{ID: cid, State: metaapi.ContainerClosed, UsedBytes: replBlockBytes, Blocks: 1, BCSID: 10}
	n5.conts[cid] = &metaapi.ContainerReport{ID: cid, State: metaapi.ContainerClosed, UsedBytes: 3 * replBlockBytes, Blocks: 3, BCSID: 9}
	n4.used, n5.used = 5e9, 1e9
	c.round(c.nodes...) // reports in; decided at the tick
	if st := c.repl(); st.OverReplicated != 1 || st.Trimming != 1 {
		t.Fatalf("status %+v: want 4 healthy replicas (over-replicated), one deletion decided", st)
	}
	c.round(c.nodes...) // sent and carried out
	if got, got4 := deleteCmds(n5), deleteCmds(n4); !slices.Equal(got, []uint64{cid}) || len(got4) != 0 {
		t.Fatalf("deletes: node 5 %v, node 4 %v: want node 5's replica (behind) first", got, got4)
	}
	for range 4 {
		c.round(c.nodes...) // reported; node 4's extra replica decided, sent, reported
	}
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("holders %v, want [1 2 3]", got)
	}
	if st := c.repl(); st.TrimmedReplicas != 2 || st.OverReplicated != 0 || st.UnderReplicated != 0 || st.Trimming != 0 {
		t.Fatalf("status %+v: want 2 replicas trimmed, 3 healthy left", st)
	}
}

// A node that died, missed writes and comes back with its replica closed
// behind: when every other node already holds the container (one of them
// UNHEALTHY), no node could take a copy, so the behind replica — the
// lowest BCSID — is deleted to make room, and its node gets a whole copy
// from a replica with the highest BCSID; the UNHEALTHY one goes after.
func TestBehindReplicaDeletedToMakeRoom(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	cid := cids[0]
	n3, n4 := c.node(3), c.node(4)
	setBCSID(cid, 10, c.node(1), c.node(2), n3)
	c.kill(n3) // the pipeline is closed; the container copied to node 4
	c.settle(c.except(n3)...)
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3, 4}) || n4.conts[cid].BCSID != 10 {
		t.Fatalf("holders %v, node 4 %+v: want the copy on node 4 at BCSID 10", got, n4.conts[cid])
	}
	// Node 3 comes back having missed the last commits; node 4's copy has
	// turned UNHEALTHY meanwhile. 2 healthy replicas, no node free.
	setBCSID(cid, 7, n3)
	n4.conts[cid].State = metaapi.ContainerUnhealthy
	n3.copy = copyHold
	n3.beat() // told to leave the CLOSED pipeline, which it does
	n3.beat()
	if len(n3.pipelines) != 0 {
		t.Fatalf("node 3 still serves %v", n3.pipelines)
	}
	for range 4 {
		c.round(c.nodes...) // node 3's replica deleted; the copy to it starts
	}
	if got3, got4 := deleteCmds(n3), deleteCmds(n4); !slices.Equal(got3, []uint64{cid}) || len(got4) != 0 || n3.copying[cid] == 0 {
		t.Fatalf("deletes: node 3 %v, node 4 %v; node 3 copying %v: want node 3's (behind) deleted and a copy to it under way, node 4's kept", got3, got4, n3.copying)
	}
	if src := n3.copying[cid]; src != 1 && src != 2 {
		t.Fatalf("copy to node 3 from node %d, want node 1 or 2 (BCSID 10)", src)
	}
	n3.finishCopies()
	for range 4 {
		c.round(c.nodes...) // reported; node 4's UNHEALTHY replica decided, sent, reported
	}
	if got := deleteCmds(n4); !slices.Equal(got, []uint64{cid}) {
		t.Fatalf("deletes to node 4 %v: want its UNHEALTHY replica deleted once 3 are healthy", got)
	}
	if r := n3.conts[cid]; r == nil || r.State != metaapi.ContainerClosed || r.BCSID != 10 {
		t.Fatalf("node 3 %+v (sources %v): want a fresh copy at BCSID 10", r, n3.copied[cid])
	}
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("holders %v, want [1 2 3]", got)
	}
	if st := c.repl(); st.UnderReplicated != 0 || st.TrimmedReplicas != 2 || st.CopiedContainers != 2 {
		t.Fatalf("status %+v: want 3 healthy replicas after 2 copies and 2 deletions", st)
	}
}

// An UNHEALTHY replica that holds block commits no counted replica holds
// (its BCSID above the highest CLOSED one) is never deleted, not even to
// make room: here every complete replica turned UNHEALTHY (a write
// refused on a full disk fails a replica after it acknowledged what it
// holds) and the only CLOSED one, counted healthy, missed the last
// commits (its node was paused). Deleting the UNHEALTHY ones to make
// room for copies of the CLOSED one lost acknowledged blocks in a chaos
// run whose disks all filled (CHAOS_FINDINGS §10).
func TestUnhealthyReplicaAheadIsKept(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	cid := cids[0]
	n1, n2, n3, n4 := c.node(1), c.node(2), c.node(3), c.node(4)
	setBCSID(cid, 10, n1, n2, n3)
	c.kill(n3) // the pipeline is closed; the container copied to node 4
	c.settle(c.except(n3)...)
	if got := c.holders(cid); !slices.Equal(got, []uint64{1, 2, 3, 4}) || n4.conts[cid].BCSID != 10 {
		t.Fatalf("holders %v, node 4 %+v: want the copy on node 4 at BCSID 10", got, n4.conts[cid])
	}
	setBCSID(cid, 7, n3)
	for _, n := range []*fakeDN{n1, n2, n4} {
		n.conts[cid].State = metaapi.ContainerUnhealthy
	}
	n3.beat() // told to leave the CLOSED pipeline, which it does
	n3.beat()
	for range 6 {
		c.round(c.nodes...)
	}
	for _, n := range []*fakeDN{n1, n2, n4} {
		if got := deleteCmds(n); len(got) != 0 {
			t.Fatalf("node %d told to delete %v: an UNHEALTHY replica at BCSID 10 above the only CLOSED one (7)", n.id, got)
		}
	}
}

// With every complete replica UNHEALTHY and the only CLOSED one behind
// (TestUnhealthyReplicaAheadIsKept's cluster), a read lists the CLOSED
// one, then the UNHEALTHY ones: a block the CLOSED one missed is read
// from them (before, they were not listed and the block was unreadable:
// CHAOS_FINDINGS §10).
func TestReadsFallBackToUncountedReplicas(t *testing.T) {
	c, cids := replCluster(t, 4, 1, nil)
	cid := cids[0]
	n1, n2, n3, n4 := c.node(1), c.node(2), c.node(3), c.node(4)
	setBCSID(cid, 10, n1, n2, n3)
	c.kill(n3)
	c.settle(c.except(n3)...)
	setBCSID(cid, 7, n3)
	setBCSID(cid, 9, n4)
	for _, n := range []*fakeDN{n1, n2, n4} {
		n.conts[cid].State = metaapi.ContainerUnhealthy
	}
	n3.beat()
	n3.beat()
	c.round(c.nodes...)
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{3, 1, 2, 4}) {
		t.Fatalf("read members %v, want [3 1 2 4]: the counted replica, then the others, highest BCSID first", got)
	}
}
