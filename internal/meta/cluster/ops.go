package cluster

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// setOp records node id's new state in b and memory.
func (s *Ops) SetOp(b *pebble.Batch, id uint64, o state.OpState) {
	if o.State == state.OpInService {
		delete(s.Repair.Ops, id)
		if err := b.Delete(state.U64Key(state.PrefixOps, id), nil); err != nil {
			panic(fmt.Sprintf("meta: pebble batch delete: %v", err)) // a batch in memory does not fail
		}
		return
	}
	s.Repair.Ops[id] = o
	state.Set(b, state.U64Key(state.PrefixOps, id), o.Encode())
}

// closeOpPipelines closes the OPEN pipelines of the nodes not IN_SERVICE.
func (s *Ops) CloseOpPipelines(b *pebble.Batch, now time.Time) {
	for _, pid := range s.cl.SortedPipelines() {
		p := s.PipelineByID[pid]
		if p.Rec.State != state.PipelineOpen {
			continue
		}
		for _, m := range p.Rec.Members {
			if !s.cl.InService(m) {
				s.cl.ClosePipeline(b, p, now, fmt.Sprintf("member %d is %s", m, s.Repair.Ops[m].Name()))
				break
			}
		}
	}
}

// decommissionProgress is how far node id's decommission is.
func (s *Ops) DecommissionProgress(id uint64, idx map[uint64][]uint64) *metaapi.DecommissionProgress {
	p := &metaapi.DecommissionProgress{}
	for _, cid := range slices.Sorted(maps.Keys(s.NodeByID[id].Containers)) {
		c := s.ContainerByID[cid]
		if c == nil {
			continue
		}
		h := len(idx[cid])
		if c.Rec.State == state.ContainerClosed && h == 0 && c.Rec.Committed == 0 {
			continue // nothing to keep (underReplicated's rule)
		}
		p.Containers++
		if c.Rec.State == state.ContainerClosed && h >= s.Cfg.ReplicationFactor {
			p.Replicated++
		} else if len(p.Waiting) < 16 {
			p.Waiting = append(p.Waiting, cid)
		}
	}
	if s.Holds != nil {
		p.Containers += s.Holds(id) // EC shards still recorded on it: not moved yet
	}
	return p
}

// opsTick is the operations' part of a Tick: pipelines of nodes not IN
// SERVICE closed, maintenances past their deadline ended, decommissions
// complete marked DECOMMISSIONED.
func (s *Ops) OpsTick(b *pebble.Batch, now time.Time) {
	if len(s.Repair.Ops) == 0 {
		return
	}
	s.CloseOpPipelines(b, now)
	var idx map[uint64][]uint64
	for _, id := range slices.Sorted(maps.Keys(s.Repair.Ops)) {
		o := s.Repair.Ops[id]
		switch o.State {
		case state.OpMaintenance:
			if !now.Before(o.Until) {
				s.SetOp(b, id, state.OpState{State: state.OpInService, Since: now})
				s.Log.Warn("maintenance over: the node is IN_SERVICE again; if it is still down its replicas are copied", "node", id,
					"health", s.cl.HealthOf(s.NodeByID[id], now))
			}
		case state.OpDecommissioning:
			if s.Repair.SafeMode || !s.NodeByID[id].Seen && s.cl.HealthOf(s.NodeByID[id], now) != metaapi.HealthDead {
				continue // its report is not known yet
			}
			if idx == nil {
				idx = s.cl.ReplicaIndex(now)
			}
			if p := s.DecommissionProgress(id, idx); p.Replicated == p.Containers {
				s.SetOp(b, id, state.OpState{State: state.OpDecommissioned, Since: now})
				s.Log.Warn("datanode DECOMMISSIONED: every container it holds has its replicas on other nodes; it can be stopped",
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
func (s *Ops) VolumesFailed(b *pebble.Batch, n *state.Node, failed []metaapi.FailedVolume, now time.Time) {
	id := n.Rec.ID
	prev, known := s.Repair.Damage.Volumes[id]
	s.Repair.Damage.Volumes[id] = failed
	if !known || len(failed) <= len(prev) {
		return // (the first report since the start is not news)
	}
	for _, pid := range s.cl.SortedPipelines() {
		p := s.PipelineByID[pid]
		if p.Rec.State == state.PipelineOpen && slices.Contains(p.Rec.Members, id) {
			s.cl.ClosePipeline(b, p, now, fmt.Sprintf("member %d lost a volume: %s", id, failed[len(failed)-1].Dir))
		}
	}
}

// Ops is the operational state of datanodes: decommission, maintenance.
type Ops struct {
	*state.State
	cl *Cluster
	// Holds, when set (package ecmeta), counts the erasure-coded shards
	// recorded on a datanode: its decommission is done only when none
	// is left. Under State.Mu.
	Holds func(node uint64) int
}

// NewOps is the operational state of cl's datanodes.
func NewOps(st *state.State, cl *Cluster) *Ops { return &Ops{State: st, cl: cl} }
