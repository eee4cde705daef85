package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Removal of a datanode for good (`spindle admin datanode remove`; see
// "Datanode operations" in package meta's comment and state/removed.go).
//
// A node may be removed when it is DECOMMISSIONED (alive or not), or DEAD
// (and not IN_MAINTENANCE) and emptied. Refused (ErrPrecondition, naming
// what is in the way), changing nothing, while:
//
//   - it is alive and not DECOMMISSIONED, or IN_MAINTENANCE, or alive and
//     not heard from since the meta service started (its report, which
//     says what it holds, is not known yet);
//   - it is a member of an OPEN pipeline, or of a CLOSED one some of whose
//     containers are not CLOSED yet (still closing), or, alive, still
//     serves (reports) a CLOSED pipeline (it is told to leave it);
//   - one of the containers it may hold (its last report's, and every
//     container of the pipelines it was a member of) has no counted
//     replica on another node (ReplicaIndex: it may hold the last one),
//     or — DEAD and not DECOMMISSIONED — fewer than ReplicationFactor
//     (not emptied: re-replication is under way). A container CLOSED
//     with no replica and nothing committed has nothing to keep.
//
// A removal writes, in one batch, the node's 'O' record (OpRemoved) and
// the CLOSED pipelines it was a member of without it; in memory it leaves
// the registry for Repair.Removed, and every trace of it in the
// replication manager's and the deletions' bookkeeping goes (copies to
// it fail, its trims and repairs end, its delete deliveries and
// acknowledgements are forgotten: a deletion in replica mode waits for
// the live holders only, and the removed node is none).

// maxNamed bounds the IDs an error names.
const maxNamed = 16

// Removal removes datanodes for good.
type Removal struct {
	*state.State
	cl *Cluster
}

// NewRemoval is the removal of cl's datanodes.
func NewRemoval(st *state.State, cl *Cluster) *Removal { return &Removal{st, cl} }

// CheckRemove says why node id cannot be removed now (nil: it can).
func (s *Removal) CheckRemove(id uint64, now time.Time) error {
	n := s.NodeByID[id]
	if n == nil {
		return fmt.Errorf("%w: datanode %d", metaapi.ErrNotFound, id)
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: datanode %d cannot be removed: %s", metaapi.ErrPrecondition, id, fmt.Sprintf(format, args...))
	}
	o, health := s.Repair.Ops[id], s.cl.HealthOf(n, now)
	dead, decommissioned := health == metaapi.HealthDead, o.State == state.OpDecommissioned
	switch {
	case o.State == state.OpMaintenance:
		return refuse("it is IN_MAINTENANCE (recommission or decommission it first)")
	case !dead && !decommissioned:
		return refuse("it is %s and %s: decommission it first (spindle admin datanode decommission %d) and wait until DECOMMISSIONED, or, if it is gone, wait until it is DEAD and its containers are copied elsewhere",
			health, o.Name(), id)
	case !dead && !n.Seen:
		return refuse("it has not heartbeated since the meta service started: what it holds is not known yet (wait for its heartbeat, or until it is DEAD)")
	}
	var open, closing, serving []uint64
	cands := map[uint64]bool{}
	for cid := range n.Containers {
		cands[cid] = true
	}
	for _, pid := range s.cl.SortedPipelines() {
		p := s.PipelineByID[pid]
		if !slices.Contains(p.Rec.Members, id) {
			continue
		}
		for _, cid := range p.Containers {
			cands[cid] = true
		}
		switch {
		case p.Rec.State == state.PipelineOpen:
			open = append(open, pid)
		case slices.ContainsFunc(p.Containers, func(cid uint64) bool { return s.ContainerByID[cid].Rec.State != state.ContainerClosed }):
			closing = append(closing, pid)
		case !dead && s.cl.Reports(id, pid):
			serving = append(serving, pid)
		}
	}
	switch {
	case len(open) > 0:
		return refuse("it is a member of OPEN pipeline(s) %s (they close at the next Tick once it is DEAD or not IN_SERVICE)", named(open))
	case len(closing) > 0:
		return refuse("pipeline(s) %s it is a member of are still closing (a container not CLOSED yet)", named(closing))
	case len(serving) > 0:
		return refuse("it still serves CLOSED pipeline(s) %s (it is told to leave them; try again once it has)", named(serving))
	}
	idx := s.cl.ReplicaIndex(now)
	var last, short []uint64
	for _, cid := range slices.Sorted(maps.Keys(cands)) {
		c := s.ContainerByID[cid]
		if c == nil {
			continue // (a report of a container this service does not know)
		}
		h := len(idx[cid])
		if c.Rec.State == state.ContainerClosed && h == 0 && c.Rec.Committed == 0 {
			continue // nothing to keep (underReplicated's rule)
		}
		switch {
		case h == 0:
			last = append(last, cid)
		case !decommissioned && h < s.Cfg.ReplicationFactor:
			short = append(short, cid)
		}
	}
	switch {
	case len(last) > 0:
		return refuse("it may hold the last healthy replica of container(s) %s: no other node has a counted replica (spindle admin replication)", named(last))
	case len(short) > 0:
		return refuse("it is not emptied: container(s) %s have fewer than %d counted replicas elsewhere yet (being copied: spindle admin replication)",
			named(short), s.Cfg.ReplicationFactor)
	}
	return nil
}

// named lists ids for an error: the first maxNamed, and how many more.
func named(ids []uint64) string {
	var b strings.Builder
	for i, id := range ids {
		if i == maxNamed {
			fmt.Fprintf(&b, " and %d more", len(ids)-maxNamed)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, id)
	}
	return b.String()
}

// Remove removes node id for good (CheckRemove passed, under the same
// lock): its records in b, memory changed; the answer describes it.
func (s *Removal) Remove(b *pebble.Batch, id uint64, now time.Time) *metaapi.NodeRemoval {
	n := s.NodeByID[id]
	now = time.UnixMilli(now.UnixMilli()) // as stored: a second removal answers the same time
	o := state.OpState{State: state.OpRemoved, Since: now}
	out := &metaapi.NodeRemoval{NodeID: id, UUID: n.Rec.UUID, Addr: n.Rec.Addr, Health: s.cl.HealthOf(n, now),
		OpState: s.Repair.Ops[id].Name(), RemovedAt: now}
	state.Set(b, state.U64Key(state.PrefixOps, id), o.Encode())
	for _, pid := range s.cl.SortedPipelines() {
		p := s.PipelineByID[pid]
		if !slices.Contains(p.Rec.Members, id) {
			continue
		}
		p.Rec.Members = slices.DeleteFunc(slices.Clone(p.Rec.Members), func(m uint64) bool { return m == id })
		state.Set(b, state.U64Key(state.PrefixPipeline, pid), p.Rec.Encode())
		delete(p.Behind, id)
		out.Pipelines = append(out.Pipelines, pid)
	}
	delete(s.NodeByID, id)
	delete(s.NodeByUUID, n.Rec.UUID)
	delete(s.Repair.Ops, id)
	s.Repair.Removed[n.Rec.UUID] = state.RemovedNode{Rec: n.Rec, Removed: o}
	s.forget(id)
	s.Log.Warn("datanode REMOVED for good: its ID is never reused, its UUID may not register again", "node", id, "uuid", n.Rec.UUID,
		"addr", n.Rec.Addr, "was", out.OpState, "health", out.Health, "closed_pipelines", out.Pipelines)
	return out
}

// forget drops node id from the memory-only bookkeeping that names nodes.
func (s *Removal) forget(id uint64) {
	r := &s.Repair
	for cid, t := range r.Tasks {
		if t.Target == id {
			delete(r.Tasks, cid)
			r.FailedCopies++
			s.Log.Warn("container copy failed; it will be scheduled again", "container", cid, "source", t.Source,
				"target", id, "attempt", t.Attempt, "why", "the target was removed")
		}
	}
	maps.DeleteFunc(r.Failed, func(f state.SourceFailure, _ time.Time) bool { return f.Source == id })
	maps.DeleteFunc(r.Trims, func(_ uint64, t *state.TrimTask) bool { return t.Node == id })
	maps.DeleteFunc(r.Damage.Repairs, func(k state.RepairKey, _ *state.RepairTask) bool { return k.Node == id })
	maps.DeleteFunc(r.Damage.Attempts, func(k state.RepairKey, _ int) bool { return k.Node == id })
	delete(r.Damage.Scrub, id)
	delete(r.Damage.Volumes, id)
	for _, c := range s.ContainerByID {
		delete(c.LastClose, id)
	}
	for _, pending := range s.Deletes {
		for _, pd := range pending {
			delete(pd.Tries, id)
			delete(pd.Last, id)
			delete(pd.Acked, id)
		}
	}
}
