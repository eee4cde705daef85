package meta

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// full says whether n reported too little space for new data (a node
// that reports no capacity is not judged).
func (s *Cluster) full(n *node) bool {
	return n.capacity > 0 && n.available < s.cfg.MinAvailableBytes
}

// healthOf is n's health at now, from its last heartbeat.
func (s *Cluster) healthOf(n *node, now time.Time) string {
	switch d := now.Sub(n.last); {
	case d >= s.cfg.DeadAfter:
		return metaapi.HealthDead
	case d >= s.cfg.StaleAfter:
		return metaapi.HealthStale
	}
	return metaapi.HealthHealthy
}

// live: not DEAD.
func (s *Cluster) live(id uint64, now time.Time) bool {
	n := s.nodes[id]
	return n != nil && s.healthOf(n, now) != metaapi.HealthDead
}

// reports says whether node id's last heartbeat (since the start) lists
// pipeline pid.
func (s *Cluster) reports(id, pid uint64) bool {
	n := s.nodes[id]
	if n == nil || !n.seen {
		return false
	}
	_, ok := n.pipelines[pid]
	return ok
}

// served: a live member reports the pipeline (its raft group runs).
func (s *Cluster) served(p *pipelineState, now time.Time) bool {
	for _, m := range p.rec.Members {
		if s.live(m, now) && s.reports(m, p.rec.ID) {
			return true
		}
	}
	return false
}

// leaderOf is the pipeline's leader as the live members' reports name it
// (the one of the highest term), or 0. The leader must itself be a live
// member that reports the pipeline.
func (s *Cluster) leaderOf(p *pipelineState, now time.Time) uint64 {
	var leader, term uint64
	for _, m := range p.rec.Members {
		if !s.live(m, now) || !s.reports(m, p.rec.ID) {
			continue
		}
		r := s.nodes[m].pipelines[p.rec.ID]
		if r.LeaderID != 0 && (leader == 0 || r.Term > term) {
			leader, term = r.LeaderID, r.Term
		}
	}
	if leader == 0 || !slices.Contains(p.rec.Members, leader) || !s.live(leader, now) || !s.reports(leader, p.rec.ID) {
		return 0
	}
	return leader
}

// reportedOpen lists the live members of c's pipeline whose last report
// has c OPEN.
func (s *Cluster) reportedOpen(c *containerState, now time.Time) []uint64 {
	var ids []uint64
	for _, m := range s.pipelines[c.rec.Pipeline].rec.Members {
		n := s.nodes[m]
		if !n.seen || !s.live(m, now) {
			continue
		}
		if r, ok := n.containers[c.rec.ID]; ok && r.State == metaapi.ContainerOpen {
			ids = append(ids, m)
		}
	}
	return ids
}

// pipelineView is the API form of a pipeline.
func (s *Cluster) pipelineView(p *pipelineState, now time.Time) *metaapi.Pipeline {
	v := &metaapi.Pipeline{ID: p.rec.ID, State: metaapi.PipelineOpen, Leader: s.leaderOf(p, now)}
	if p.rec.State == pipelineClosed {
		v.State = metaapi.PipelineClosed
	}
	for _, m := range p.rec.Members {
		v.Members = append(v.Members, s.memberOf(m))
	}
	return v
}

// memberOf is node id as a pipeline member: its address and the
// certificate it is bound to (its peers accept raft messages for the
// pipeline only under that certificate).
func (s *Cluster) memberOf(id uint64) metaapi.Member {
	return metaapi.Member{NodeID: id, Addr: s.nodes[id].rec.Addr, CertName: s.nodes[id].rec.CertName}
}

// peersOf lists the current address of every other member of the
// pipelines n reports serving, by node ID.
func (s *Cluster) peersOf(n *node) []metaapi.Member {
	seen := map[uint64]bool{n.rec.ID: true}
	var out []metaapi.Member
	for _, pid := range slices.Sorted(maps.Keys(n.pipelines)) {
		p := s.pipelines[pid]
		if p == nil {
			continue
		}
		for _, m := range p.rec.Members {
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
func (s *Cluster) startClose(b *pebble.Batch, c *containerState, why string) {
	if c.rec.State != containerOpen {
		return
	}
	c.rec.State = containerClosing
	set(b, u64key(prefixContainer, c.rec.ID), c.rec.encode())
	s.log.Info("closing container", "container", c.rec.ID, "pipeline", c.rec.Pipeline, "why", why)
}

// anyOpenReplica: a live member reports a container of p OPEN.
func (s *Cluster) anyOpenReplica(p *pipelineState, now time.Time) bool {
	for _, cid := range p.containers {
		if len(s.reportedOpen(s.containers[cid], now)) > 0 {
			return true
		}
	}
	return false
}

func (s *Cluster) sortedPipelines() []uint64 {
	ids := make([]uint64, 0, len(s.pipelines))
	for id := range s.pipelines {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *Cluster) sortedNodes() []uint64 {
	ids := make([]uint64, 0, len(s.nodes))
	for id := range s.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// openPipelineCounts is the number of OPEN pipelines of every node.
func (s *Cluster) openPipelineCounts() map[uint64]int {
	counts := make(map[uint64]int, len(s.nodes))
	for _, p := range s.pipelines {
		if p.rec.State == pipelineOpen {
			for _, m := range p.rec.Members {
				counts[m]++
			}
		}
	}
	return counts
}

// createPipelines creates pipelines from HEALTHY datanodes heard from since
// the start, PipelineSize each, while PipelineSize of them are in fewer than
// PipelinesPerNode OPEN pipelines; the members are those with the fewest.
func (s *Cluster) createPipelines(b *pebble.Batch, now time.Time) {
	counts := s.openPipelineCounts()
	// Each pass adds a pipeline or stops: bounded by the free slots.
	for range len(s.nodes)*s.cfg.PipelinesPerNode/PipelineSize + 1 {
		var cands []uint64
		for _, id := range s.sortedNodes() {
			n := s.nodes[id]
			if n.seen && s.healthOf(n, now) == metaapi.HealthHealthy && counts[id] < s.cfg.PipelinesPerNode && !s.full(n) && s.inService(id) {
				cands = append(cands, id)
			}
		}
		if len(cands) < PipelineSize {
			return
		}
		slices.SortStableFunc(cands, func(a, b uint64) int { return counts[a] - counts[b] })
		members := slices.Clone(cands[:PipelineSize])
		slices.Sort(members)
		rec := pipelineRecord{ID: s.ctr.NextPipeline, State: pipelineOpen, Created: now, Members: members}
		s.ctr.NextPipeline++
		s.pipelines[rec.ID] = &pipelineState{rec: rec}
		for _, m := range members {
			counts[m]++
		}
		set(b, counterKey(), s.ctr.encode())
		set(b, u64key(prefixPipeline, rec.ID), rec.encode())
		s.log.Info("pipeline created", "pipeline", rec.ID, "members", members)
	}
}

// closePipeline marks p CLOSED and its OPEN containers CLOSING.
func (s *Cluster) closePipeline(b *pebble.Batch, p *pipelineState, now time.Time, why string) {
	p.rec.State, p.rec.Closed = pipelineClosed, now
	set(b, u64key(prefixPipeline, p.rec.ID), p.rec.encode())
	s.log.Warn("pipeline closed", "pipeline", p.rec.ID, "members", p.rec.Members, "why", why)
	for _, cid := range p.containers {
		s.startClose(b, s.containers[cid], fmt.Sprintf("pipeline %d closed", p.rec.ID))
	}
}

// settleContainers marks CLOSED every CLOSING container that no live
// replica reports OPEN, once every live member has reported since the
// start (before that, reports are missing, not empty).
func (s *Cluster) settleContainers(b *pebble.Batch, now time.Time) {
	for _, pid := range s.sortedPipelines() {
		p := s.pipelines[pid]
		ready := true
		for _, m := range p.rec.Members {
			if s.live(m, now) && !s.nodes[m].seen {
				ready = false
			}
		}
		if !ready {
			continue
		}
		for _, cid := range p.containers {
			c := s.containers[cid]
			if c.rec.State == containerClosing && len(s.reportedOpen(c, now)) == 0 {
				c.rec.State = containerClosed
				set(b, u64key(prefixContainer, cid), c.rec.encode())
				s.log.Info("container closed", "container", cid, "pipeline", pid)
			}
		}
	}
}

// closedIndex maps every container some live node (heard from since the
// start, not DEAD, or in maintenance) reports CLOSED to those nodes, by
// node ID — a node in maintenance's OPEN replicas included (ops.go) —,
// and gives the highest BCSID among the CLOSED reports of each (one pass
// over the live nodes' reports).
func (s *Cluster) closedIndex(now time.Time) (idx map[uint64][]uint64, top map[uint64]uint64) {
	idx, top = map[uint64][]uint64{}, map[uint64]uint64{}
	for _, id := range s.sortedNodes() {
		if !s.reportsCount(id, now) {
			continue
		}
		maint := s.inMaintenance(id, now)
		for cid, r := range s.nodes[id].containers {
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
	n := s.nodes[id]
	return n != nil && n.seen && (s.healthOf(n, now) != metaapi.HealthDead || s.inMaintenance(id, now))
}

// behind: node id's replica of container cid has a BCSID below top (the
// highest reported for it).
func (s *Cluster) behind(id, cid, top uint64) bool { return s.nodes[id].containers[cid].BCSID < top }

// replicaIndex maps every container some healthy replica holds to those
// replicas, by node ID: a healthy replica is a live node's CLOSED replica
// with the highest BCSID reported for the container and no damaged block
// that another such replica has intact (dropDamaged). A CLOSED replica
// behind it missed block commits (a member that left its pipeline before
// catching up and closed its replica by itself): it is not counted, not
// read, not copied from, and deleted like an UNHEALTHY one. A damaged
// replica is not counted, not read first, not copied from; it is repaired
// block by block or deleted like an UNHEALTHY one (damage.go).
func (s *Cluster) replicaIndex(now time.Time) map[uint64][]uint64 {
	idx, top := s.closedIndex(now)
	for cid, ids := range idx {
		ids = s.dropDamaged(cid, slices.DeleteFunc(ids, func(id uint64) bool { return s.behind(id, cid, top[cid]) && !s.inMaintenance(id, now) }))
		// Replicas on a decommissioning node are not counted (they are
		// read and copied from: replicasOf).
		idx[cid] = slices.DeleteFunc(ids, s.decommissioned)
	}
	return idx
}

// behindReplicas counts the CLOSED replicas of CLOSED containers on live
// nodes whose BCSID is below the highest reported for their container.
func (s *Cluster) behindReplicas(now time.Time) int {
	idx, top := s.closedIndex(now)
	n := 0
	for cid, ids := range idx {
		if c := s.containers[cid]; c != nil && c.rec.State == containerClosed {
			for _, id := range ids {
				if s.behind(id, cid, top[cid]) {
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
func (s *Cluster) replicasOf(cid uint64, now time.Time) []uint64 {
	var ids []uint64
	var top uint64
	for _, id := range s.sortedNodes() {
		if r, ok := s.nodes[id].containers[cid]; ok && r.State == metaapi.ContainerClosed && s.reportsCount(id, now) {
			ids = append(ids, id)
			top = max(top, r.BCSID)
		}
	}
	return s.dropDamaged(cid, slices.DeleteFunc(ids, func(id uint64) bool { return s.behind(id, cid, top) }))
}

// containerSize is the bytes of container c: the largest any of holders
// reports, else the committed bytes.
func (s *Cluster) containerSize(c *containerState, holders []uint64) uint64 {
	var size uint64
	for _, id := range holders {
		size = max(size, s.nodes[id].containers[c.rec.ID].UsedBytes)
	}
	if size == 0 {
		size = c.rec.Committed
	}
	return size
}

// readMembers lists where the replicas of container cid (of pipeline p)
// are, for reads. OPEN and CLOSING containers: p's members. CLOSED: its
// healthy replicas, p's members first, then the members not heard from
// since the start (their replicas are unknown yet); no healthy replica
// reported at all (as right after a restart): p's members.
func (s *Cluster) readMembers(cid uint64, p *pipelineState, now time.Time) []metaapi.Member {
	all := s.pipelineView(p, now).Members
	c := s.containers[cid]
	if c == nil || c.rec.State != containerClosed {
		return all
	}
	var ms []metaapi.Member
	healthy := s.replicasOf(cid, now)
	for _, m := range all {
		if slices.Contains(healthy, m.NodeID) {
			ms = append(ms, m)
		}
	}
	for _, id := range healthy {
		if !slices.Contains(p.rec.Members, id) {
			ms = append(ms, s.memberOf(id))
		}
	}
	if len(ms) == 0 {
		return all
	}
	for _, m := range all {
		// A member not heard from since the start may still hold it; but
		// not one whose address a replica listed already has (a datanode
		// that lost its disks comes back at its old address as a new node).
		dup := slices.ContainsFunc(ms, func(x metaapi.Member) bool { return x.Addr == m.Addr })
		if !s.nodes[m.NodeID].seen && s.live(m.NodeID, now) && !dup {
			ms = append(ms, m)
		}
	}
	return ms
}

// damagedOn lists node id's damaged blocks of container cid (as its last
// report says).
func (s *Cluster) damagedOn(id, cid uint64) []uint64 {
	return s.nodes[id].containers[cid].DamagedBlocks
}

// dropDamaged removes from ids (CLOSED replicas of cid at the highest
// BCSID on live nodes) those with damage a good replica does not share:
// the blocks damaged on every one of ids are lost (no good copy is
// known; they do not make a replica worse than the others), a replica
// damaged beyond them is not healthy — it is repaired block by block, or
// replaced by a copy.
func (s *Cluster) dropDamaged(cid uint64, ids []uint64) []uint64 {
	if !slices.ContainsFunc(ids, func(id uint64) bool { return len(s.damagedOn(id, cid)) > 0 }) {
		return ids
	}
	lost := s.lostAmong(cid, ids)
	return slices.DeleteFunc(ids, func(id uint64) bool { return len(beyond(s.damagedOn(id, cid), lost)) > 0 })
}

// lostAmong is the blocks of cid damaged on every replica of ids.
func (s *Cluster) lostAmong(cid uint64, ids []uint64) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	lost := slices.Clone(s.damagedOn(ids[0], cid))
	for _, id := range ids[1:] {
		d := s.damagedOn(id, cid)
		lost = slices.DeleteFunc(lost, func(b uint64) bool { _, ok := slices.BinarySearch(d, b); return !ok })
	}
	return lost
}

// beyond lists the blocks of d (ascending) not in lost (ascending).
func beyond(d, lost []uint64) []uint64 {
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
	st := s.repl.ops[id].state
	return st == opDecommissioning || st == opDecommissioned
}

// inMaintenance: node id is IN_MAINTENANCE and its deadline has not come.
func (s *Cluster) inMaintenance(id uint64, now time.Time) bool {
	o := s.repl.ops[id]
	return o.state == opMaintenance && now.Before(o.until)
}

// inService: node id takes new pipelines and copies.
func (s *Cluster) inService(id uint64) bool { return s.repl.ops[id].state == opInService }

// Cluster is the cluster manager: datanodes, pipelines, containers and their replicas.
type Cluster struct{ *State }
