package meta

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// setOp records node id's new state in b and memory.
func (s *Ops) setOp(b *pebble.Batch, id uint64, o opState) {
	if o.state == opInService {
		delete(s.repl.ops, id)
		if err := b.Delete(u64key(prefixOps, id), nil); err != nil {
			panic(fmt.Sprintf("meta: pebble batch delete: %v", err)) // a batch in memory does not fail
		}
		return
	}
	s.repl.ops[id] = o
	set(b, u64key(prefixOps, id), o.encode())
}

// closeOpPipelines closes the OPEN pipelines of the nodes not IN_SERVICE.
func (s *Ops) closeOpPipelines(b *pebble.Batch, now time.Time) {
	for _, pid := range s.cl.sortedPipelines() {
		p := s.pipelines[pid]
		if p.rec.State != pipelineOpen {
			continue
		}
		for _, m := range p.rec.Members {
			if !s.cl.inService(m) {
				s.cl.closePipeline(b, p, now, fmt.Sprintf("member %d is %s", m, s.repl.ops[m].name()))
				break
			}
		}
	}
}

// decommissionProgress is how far node id's decommission is.
func (s *Ops) decommissionProgress(id uint64, idx map[uint64][]uint64) *metaapi.DecommissionProgress {
	p := &metaapi.DecommissionProgress{}
	for _, cid := range slices.Sorted(maps.Keys(s.nodes[id].containers)) {
		c := s.containers[cid]
		if c == nil {
			continue
		}
		h := len(idx[cid])
		if c.rec.State == containerClosed && h == 0 && c.rec.Committed == 0 {
			continue // nothing to keep (underReplicated's rule)
		}
		p.Containers++
		if c.rec.State == containerClosed && h >= s.cfg.ReplicationFactor {
			p.Replicated++
		} else if len(p.Waiting) < 16 {
			p.Waiting = append(p.Waiting, cid)
		}
	}
	return p
}

// opsTick is the operations' part of a Tick: pipelines of nodes not IN
// SERVICE closed, maintenances past their deadline ended, decommissions
// complete marked DECOMMISSIONED.
func (s *Ops) opsTick(b *pebble.Batch, now time.Time) {
	if len(s.repl.ops) == 0 {
		return
	}
	s.closeOpPipelines(b, now)
	var idx map[uint64][]uint64
	for _, id := range slices.Sorted(maps.Keys(s.repl.ops)) {
		o := s.repl.ops[id]
		switch o.state {
		case opMaintenance:
			if !now.Before(o.until) {
				s.setOp(b, id, opState{state: opInService, since: now})
				s.log.Warn("maintenance over: the node is IN_SERVICE again; if it is still down its replicas are copied", "node", id,
					"health", s.cl.healthOf(s.nodes[id], now))
			}
		case opDecommissioning:
			if s.repl.safeMode || !s.nodes[id].seen && s.cl.healthOf(s.nodes[id], now) != metaapi.HealthDead {
				continue // its report is not known yet
			}
			if idx == nil {
				idx = s.cl.replicaIndex(now)
			}
			if p := s.decommissionProgress(id, idx); p.Replicated == p.Containers {
				s.setOp(b, id, opState{state: opDecommissioned, since: now})
				s.log.Warn("datanode DECOMMISSIONED: every container it holds has its replicas on other nodes; it can be stopped",
					"node", id, "containers", p.Containers)
			}
		}
	}
}

// volumesFailed records node n's failed volumes (Heartbeat.FailedVolumes).
// When the list grows (not at the first report since the meta service
// started: those failures are old), the node's OPEN pipelines are closed: an OPEN
// container of theirs may have had its replica on the lost volume, and
// would otherwise fail only at its next write there; closed, it is closed
// on the other members and copied like any CLOSED container.
func (s *Ops) volumesFailed(b *pebble.Batch, n *node, failed []metaapi.FailedVolume, now time.Time) {
	id := n.rec.ID
	prev, known := s.repl.damage.volumes[id]
	s.repl.damage.volumes[id] = failed
	if !known || len(failed) <= len(prev) {
		return // (the first report since the start is not news)
	}
	for _, pid := range s.cl.sortedPipelines() {
		p := s.pipelines[pid]
		if p.rec.State == pipelineOpen && slices.Contains(p.rec.Members, id) {
			s.cl.closePipeline(b, p, now, fmt.Sprintf("member %d lost a volume: %s", id, failed[len(failed)-1].Dir))
		}
	}
}

// Ops is the operational state of datanodes: decommission, maintenance.
type Ops struct {
	*State
	cl  *Cluster
	dmg *Damage
}
