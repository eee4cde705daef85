package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// full says whether n reported too little space for new data (a node
// that reports no capacity is not judged).
func (s *Cluster) Full(n *state.Node) bool {
	return n.Capacity > 0 && n.Available < s.Cfg.MinAvailableBytes
}

// healthOf is n's health at now, from its last heartbeat.
func (s *Cluster) HealthOf(n *state.Node, now time.Time) string {
	switch d := now.Sub(n.Last); {
	case d >= s.Cfg.DeadAfter:
		return metaapi.HealthDead
	case d >= s.Cfg.StaleAfter:
		return metaapi.HealthStale
	}
	return metaapi.HealthHealthy
}

// live: not DEAD.
func (s *Cluster) Live(id uint64, now time.Time) bool {
	n := s.NodeByID[id]
	return n != nil && s.HealthOf(n, now) != metaapi.HealthDead
}

// reports says whether node id's last heartbeat (since the start) lists
// pipeline pid.
func (s *Cluster) Reports(id, pid uint64) bool {
	n := s.NodeByID[id]
	if n == nil || !n.Seen {
		return false
	}
	_, ok := n.Pipelines[pid]
	return ok
}

// served: a live member reports the pipeline (its raft group runs).
func (s *Cluster) served(p *state.PipelineState, now time.Time) bool {
	for _, m := range p.Rec.Members {
		if s.Live(m, now) && s.Reports(m, p.Rec.ID) {
			return true
		}
	}
	return false
}

// leaderOf is the pipeline's leader as the live members' reports name it
// (the one of the highest term), or 0. The leader must itself be a live
// member that reports the pipeline.
func (s *Cluster) LeaderOf(p *state.PipelineState, now time.Time) uint64 {
	var leader, term uint64
	for _, m := range p.Rec.Members {
		if !s.Live(m, now) || !s.Reports(m, p.Rec.ID) {
			continue
		}
		r := s.NodeByID[m].Pipelines[p.Rec.ID]
		if r.LeaderID != 0 && (leader == 0 || r.Term > term) {
			leader, term = r.LeaderID, r.Term
		}
	}
	if leader == 0 || !slices.Contains(p.Rec.Members, leader) || !s.Live(leader, now) || !s.Reports(leader, p.Rec.ID) {
		return 0
	}
	return leader
}

// reportedOpen lists the live members of c's pipeline whose last report
// has c OPEN.
func (s *Cluster) ReportedOpen(c *state.ContainerState, now time.Time) []uint64 {
	var ids []uint64
	for _, m := range s.PipelineByID[c.Rec.Pipeline].Rec.Members {
		n := s.NodeByID[m]
		if !n.Seen || !s.Live(m, now) {
			continue
		}
		if r, ok := n.Containers[c.Rec.ID]; ok && r.State == metaapi.ContainerOpen {
			ids = append(ids, m)
		}
	}
	return ids
}

// pipelineView is the API form of a pipeline.
func (s *Cluster) PipelineView(p *state.PipelineState, now time.Time) *metaapi.Pipeline {
	v := &metaapi.Pipeline{ID: p.Rec.ID, State: metaapi.PipelineOpen, Leader: s.LeaderOf(p, now)}
	if p.Rec.State == state.PipelineClosed {
		v.State = metaapi.PipelineClosed
	}
	for _, m := range p.Rec.Members {
		v.Members = append(v.Members, s.memberOf(m))
	}
	return v
}

// memberOf is node id as a pipeline member: its address and the
// certificate it is bound to (its peers accept raft messages for the
// pipeline only under that certificate).
func (s *Cluster) memberOf(id uint64) metaapi.Member {
	return metaapi.Member{NodeID: id, Addr: s.NodeByID[id].Rec.Addr, CertName: s.NodeByID[id].Rec.CertName}
}

// peersOf lists the current address of every other member of the
// pipelines n reports serving, by node ID.
func (s *Cluster) PeersOf(n *state.Node) []metaapi.Member {
	seen := map[uint64]bool{n.Rec.ID: true}
	var out []metaapi.Member
	for _, pid := range slices.Sorted(maps.Keys(n.Pipelines)) {
		p := s.PipelineByID[pid]
		if p == nil {
			continue
		}
		for _, m := range p.Rec.Members {
			if !seen[m] {
				seen[m] = true
				out = append(out, s.memberOf(m))
			}
		}
	}
	slices.SortFunc(out, func(a, b metaapi.Member) int { return cmp.Compare(a.NodeID, b.NodeID) })
	return out
}

// startClose moves an OPEN container to CLOSING (no more allocations;
// close commands until its replicas are closed).
func (s *Cluster) StartClose(b *pebble.Batch, c *state.ContainerState, why string) {
	if c.Rec.State != state.ContainerOpen {
		return
	}
	c.Rec.State = state.ContainerClosing
	state.Set(b, state.U64Key(state.PrefixContainer, c.Rec.ID), c.Rec.Encode())
	s.Log.Info("closing container", "container", c.Rec.ID, "pipeline", c.Rec.Pipeline, "why", why)
}

// anyOpenReplica: a live member reports a container of p OPEN.
func (s *Cluster) AnyOpenReplica(p *state.PipelineState, now time.Time) bool {
	for _, cid := range p.Containers {
		if len(s.ReportedOpen(s.ContainerByID[cid], now)) > 0 {
			return true
		}
	}
	return false
}

func (s *Cluster) SortedPipelines() []uint64 {
	ids := make([]uint64, 0, len(s.PipelineByID))
	for id := range s.PipelineByID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *Cluster) SortedNodes() []uint64 {
	ids := make([]uint64, 0, len(s.NodeByID))
	for id := range s.NodeByID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// openPipelineCounts is the number of OPEN pipelines of every node.
func (s *Cluster) openPipelineCounts() map[uint64]int {
	counts := make(map[uint64]int, len(s.NodeByID))
	for _, p := range s.PipelineByID {
		if p.Rec.State == state.PipelineOpen {
			for _, m := range p.Rec.Members {
				counts[m]++
			}
		}
	}
	return counts
}

// createPipelines creates pipelines from HEALTHY datanodes heard from since
// the start, PipelineSize each, while PipelineSize of them are in fewer than
// PipelinesPerNode OPEN pipelines; the members are those with the fewest.
func (s *Cluster) CreatePipelines(b *pebble.Batch, now time.Time) {
	counts := s.openPipelineCounts()
	// Each pass adds a pipeline or stops: bounded by the free slots.
	for range len(s.NodeByID)*s.Cfg.PipelinesPerNode/state.PipelineSize + 1 {
		var cands []uint64
		for _, id := range s.SortedNodes() {
			n := s.NodeByID[id]
			if n.Seen && s.HealthOf(n, now) == metaapi.HealthHealthy && counts[id] < s.Cfg.PipelinesPerNode && !s.Full(n) && s.InService(id) {
				cands = append(cands, id)
			}
		}
		if len(cands) < state.PipelineSize {
			return
		}
		slices.SortStableFunc(cands, func(a, b uint64) int { return counts[a] - counts[b] })
		members := slices.Clone(cands[:state.PipelineSize])
		slices.Sort(members)
		rec := state.PipelineRecord{ID: s.Ctr.NextPipeline, State: state.PipelineOpen, Created: now, Members: members}
		s.Ctr.NextPipeline++
		s.PipelineByID[rec.ID] = &state.PipelineState{Rec: rec}
		for _, m := range members {
			counts[m]++
		}
		state.Set(b, state.CounterKey(), s.Ctr.Encode())
		state.Set(b, state.U64Key(state.PrefixPipeline, rec.ID), rec.Encode())
		s.Log.Info("pipeline created", "pipeline", rec.ID, "members", members)
	}
}

// closePipeline marks p CLOSED and its OPEN containers CLOSING.
func (s *Cluster) ClosePipeline(b *pebble.Batch, p *state.PipelineState, now time.Time, why string) {
	p.Rec.State, p.Rec.Closed = state.PipelineClosed, now
	state.Set(b, state.U64Key(state.PrefixPipeline, p.Rec.ID), p.Rec.Encode())
	s.Log.Warn("pipeline closed", "pipeline", p.Rec.ID, "members", p.Rec.Members, "why", why)
	for _, cid := range p.Containers {
		s.StartClose(b, s.ContainerByID[cid], fmt.Sprintf("pipeline %d closed", p.Rec.ID))
	}
}

// settleContainers marks CLOSED every CLOSING container that no live
// replica reports OPEN, once every live member has reported since the
// start (before that, reports are missing, not empty).
func (s *Cluster) SettleContainers(b *pebble.Batch, now time.Time) {
	for _, pid := range s.SortedPipelines() {
		p := s.PipelineByID[pid]
		ready := true
		for _, m := range p.Rec.Members {
			if s.Live(m, now) && !s.NodeByID[m].Seen {
				ready = false
			}
		}
		if !ready {
			continue
		}
		for _, cid := range p.Containers {
			c := s.ContainerByID[cid]
			if c.Rec.State == state.ContainerClosing && len(s.ReportedOpen(c, now)) == 0 {
				c.Rec.State = state.ContainerClosed
				state.Set(b, state.U64Key(state.PrefixContainer, cid), c.Rec.Encode())
				s.Log.Info("container closed", "container", cid, "pipeline", pid)
			}
		}
	}
}

// closedIndex maps every container some live node (heard from since the
// start, not DEAD, or in maintenance) reports CLOSED to those nodes, by
// node ID — a node in maintenance's OPEN replicas included (ops.go) —,
// and gives the highest BCSID among the CLOSED reports of each (one pass
// over the live nodes' reports).
func (s *Cluster) ClosedIndex(now time.Time) (idx map[uint64][]uint64, top map[uint64]uint64) {
	idx, top = map[uint64][]uint64{}, map[uint64]uint64{}
	for _, id := range s.SortedNodes() {
		if !s.reportsCount(id, now) {
			continue
		}
		maint := s.inMaintenance(id, now)
		for cid, r := range s.NodeByID[id].Containers {
			switch {
			case r.State == metaapi.ContainerClosed:
				idx[cid] = append(idx[cid], id)
				top[cid] = max(top[cid], r.BCSID)
			case r.State == metaapi.ContainerOpen && maint:
				// A node in maintenance went down with the replica
				// OPEN (its pipeline closed meanwhile): it counts
				// until the node is back and closes it (ops.go).
				idx[cid] = append(idx[cid], id)
			}
		}
	}
	return idx, top
}

// reportsCount: node id has heartbeated since the start and is not DEAD
// (or is IN_MAINTENANCE: ops.go), so its last report says where replicas
// are.
func (s *Cluster) reportsCount(id uint64, now time.Time) bool {
	n := s.NodeByID[id]
	return n != nil && n.Seen && (s.HealthOf(n, now) != metaapi.HealthDead || s.inMaintenance(id, now))
}

// behind: node id's replica of container cid has a BCSID below top (the
// highest reported for it).
func (s *Cluster) Behind(id, cid, top uint64) bool { return s.NodeByID[id].Containers[cid].BCSID < top }

// replicaIndex maps every container some healthy replica holds to those
// replicas, by node ID: a healthy replica is a live node's CLOSED replica
// with the highest BCSID reported for the container and no damaged block
// that another such replica has intact (dropDamaged). A CLOSED replica
// behind it missed block commits (a member that left its pipeline before
// catching up and closed its replica by itself): it is not counted, not
// read, not copied from, and deleted like an UNHEALTHY one. A damaged
// replica is not counted, not read first, not copied from; it is repaired
// block by block or deleted like an UNHEALTHY one (damage.go).
func (s *Cluster) ReplicaIndex(now time.Time) map[uint64][]uint64 {
	idx, top := s.ClosedIndex(now)
	for cid, ids := range idx {
		ids = s.dropDamaged(cid, slices.DeleteFunc(ids, func(id uint64) bool { return s.Behind(id, cid, top[cid]) && !s.inMaintenance(id, now) }))
		// Replicas on a decommissioning node are not counted (they are
		// read and copied from: replicasOf).
		idx[cid] = slices.DeleteFunc(ids, s.decommissioned)
	}
	return idx
}

// behindReplicas counts the CLOSED replicas of CLOSED containers on live
// nodes whose BCSID is below the highest reported for their container.
func (s *Cluster) BehindReplicas(now time.Time) int {
	idx, top := s.ClosedIndex(now)
	n := 0
	for cid, ids := range idx {
		if c := s.ContainerByID[cid]; c != nil && c.Rec.State == state.ContainerClosed {
			for _, id := range ids {
				if s.Behind(id, cid, top[cid]) {
					n++
				}
			}
		}
	}
	return n
}

// replicasOf lists the healthy replicas of container cid (see
// replicaIndex), by node ID, those on decommissioning nodes included
// (sources of copies, read).
func (s *Cluster) ReplicasOf(cid uint64, now time.Time) []uint64 {
	var ids []uint64
	var top uint64
	for _, id := range s.SortedNodes() {
		if r, ok := s.NodeByID[id].Containers[cid]; ok && r.State == metaapi.ContainerClosed && s.reportsCount(id, now) {
			ids = append(ids, id)
			top = max(top, r.BCSID)
		}
	}
	return s.dropDamaged(cid, slices.DeleteFunc(ids, func(id uint64) bool { return s.Behind(id, cid, top) }))
}

// containerSize is the bytes of container c: the largest any of holders
// reports, else the committed bytes.
func (s *Cluster) ContainerSize(c *state.ContainerState, holders []uint64) uint64 {
	var size uint64
	for _, id := range holders {
		size = max(size, s.NodeByID[id].Containers[c.Rec.ID].UsedBytes)
	}
	if size == 0 {
		size = c.Rec.Committed
	}
	return size
}

// readMembers lists where the replicas of container cid (of pipeline p)
// are, for reads. OPEN and CLOSING containers: p's members. CLOSED: its
// healthy replicas, p's members first, then the members not heard from
// since the start (their replicas are unknown yet); no healthy replica
// reported at all (as right after a restart): p's members. Last, for a
// CLOSED container, every other live replica reported in a state that
// does not count (UNHEALTHY, behind, damaged), highest BCSID first: a
// reader goes on to them only when every replica before failed, and the
// datanode verifies what it serves (CHAOS_FINDINGS §10: the complete
// replicas UNHEALTHY on full disks, the one counted behind).
func (s *Cluster) ReadMembers(cid uint64, p *state.PipelineState, now time.Time) []metaapi.Member {
	all := s.PipelineView(p, now).Members
	c := s.ContainerByID[cid]
	if c == nil || c.Rec.State != state.ContainerClosed {
		return all
	}
	var ms []metaapi.Member
	healthy := s.ReplicasOf(cid, now)
	for _, m := range all {
		if slices.Contains(healthy, m.NodeID) {
			ms = append(ms, m)
		}
	}
	for _, id := range healthy {
		if !slices.Contains(p.Rec.Members, id) {
			ms = append(ms, s.memberOf(id))
		}
	}
	if len(ms) == 0 {
		return withUncounted(s, all, cid, now)
	}
	for _, m := range all {
		// A member not heard from since the start may still hold it; but
		// not one whose address a replica listed already has (a datanode
		// that lost its disks comes back at its old address as a new node).
		dup := slices.ContainsFunc(ms, func(x metaapi.Member) bool { return x.Addr == m.Addr })
		if !s.NodeByID[m.NodeID].Seen && s.Live(m.NodeID, now) && !dup {
			ms = append(ms, m)
		}
	}
	return withUncounted(s, ms, cid, now)
}

// withUncounted appends to ms the live nodes whose reports list container
// cid in a state other than DELETING and that ms does not list (by
// address), highest BCSID first (see readMembers).
func withUncounted(s *Cluster, ms []metaapi.Member, cid uint64, now time.Time) []metaapi.Member {
	var rest []uint64
	for _, id := range s.SortedNodes() {
		r, ok := s.NodeByID[id].Containers[cid]
		addr := s.NodeByID[id].Rec.Addr
		if ok && r.State != metaapi.ContainerDeleting && s.reportsCount(id, now) && !slices.ContainsFunc(ms, func(x metaapi.Member) bool { return x.Addr == addr }) {
			rest = append(rest, id)
		}
	}
	slices.SortStableFunc(rest, func(a, b uint64) int {
		return cmp.Compare(s.NodeByID[b].Containers[cid].BCSID, s.NodeByID[a].Containers[cid].BCSID)
	})
	for _, id := range rest {
		ms = append(ms, s.memberOf(id))
	}
	return ms
}

// damagedOn lists node id's damaged blocks of container cid (as its last
// report says).
func (s *Cluster) DamagedOn(id, cid uint64) []uint64 {
	return s.NodeByID[id].Containers[cid].DamagedBlocks
}

// dropDamaged removes from ids (CLOSED replicas of cid at the highest
// BCSID on live nodes) those with damage a good replica does not share:
// the blocks damaged on every one of ids are lost (no good copy is
// known; they do not make a replica worse than the others), a replica
// damaged beyond them is not healthy — it is repaired block by block, or
// replaced by a copy.
func (s *Cluster) dropDamaged(cid uint64, ids []uint64) []uint64 {
	if !slices.ContainsFunc(ids, func(id uint64) bool { return len(s.DamagedOn(id, cid)) > 0 }) {
		return ids
	}
	lost := s.LostAmong(cid, ids)
	return slices.DeleteFunc(ids, func(id uint64) bool { return len(Beyond(s.DamagedOn(id, cid), lost)) > 0 })
}

// lostAmong is the blocks of cid damaged on every replica of ids.
func (s *Cluster) LostAmong(cid uint64, ids []uint64) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	lost := slices.Clone(s.DamagedOn(ids[0], cid))
	for _, id := range ids[1:] {
		d := s.DamagedOn(id, cid)
		lost = slices.DeleteFunc(lost, func(b uint64) bool { _, ok := slices.BinarySearch(d, b); return !ok })
	}
	return lost
}

// beyond lists the blocks of d (ascending) not in lost (ascending).
func Beyond(d, lost []uint64) []uint64 {
	var out []uint64
	for _, b := range d {
		if _, ok := slices.BinarySearch(lost, b); !ok {
			out = append(out, b)
		}
	}
	return out
}

// decommissioned: node id is DECOMMISSIONING or DECOMMISSIONED; its
// replicas are not counted.
func (s *Cluster) decommissioned(id uint64) bool {
	st := s.Repair.Ops[id].State
	return st == state.OpDecommissioning || st == state.OpDecommissioned
}

// inMaintenance: node id is IN_MAINTENANCE and its deadline has not come.
func (s *Cluster) inMaintenance(id uint64, now time.Time) bool {
	o := s.Repair.Ops[id]
	return o.State == state.OpMaintenance && now.Before(o.Until)
}

// inService: node id takes new pipelines and copies.
func (s *Cluster) InService(id uint64) bool { return s.Repair.Ops[id].State == state.OpInService }

// Cluster is the cluster manager: datanodes, pipelines, containers and their replicas.
type Cluster struct{ *state.State }

// New is the cluster manager over st.
func New(st *state.State) *Cluster { return &Cluster{st} }
