package cluster

import (
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Degraded pipelines: writes through the loss of a datanode when no
// replacement exists (package meta's comment, "Cluster manager").
//
// A pipeline with a DEAD member is closed at a Tick, unless it is kept
// (KeepDegraded): every member not DEAD is HEALTHY, at least
// Config.MinLiveReplicas of them (never fewer than a raft majority, so
// its writes commit, fsynced on each, as raft's quorum has it), and no
// replacement member exists: fewer than PipelineSize datanodes could be
// members of a new pipeline (Placeable). Closing it then would leave no
// pipeline to write to (three datanodes, one dead: "2 healthy datanodes,
// 3 needed"). Once PipelineSize placeable datanodes exist (the dead one
// back under a new identity, or a new one joined) it is closed as before,
// and the same Tick makes its replacement; its containers, CLOSED, are
// re-replicated. When the DEAD member itself comes back, it rejoins the
// raft group, which catches its replicas up from the log (or, past the
// leader's compacted log, reports it behind: the pipeline is closed and
// its containers copied), and the pipeline is whole again.
//
// The decision depends on the pipeline's members' health and on the
// registry only (no history, no order of events): every member, and a
// new leader after a failover, takes the same one.

// MinLive is the fewest HEALTHY members of a pipeline that blocks are
// allocated on: Config.MinLiveReplicas, at least a raft majority.
func (s *Cluster) MinLive() int {
	return max(s.Cfg.MinLiveReplicas, state.PipelineSize/2+1)
}

// placeable: node id could be a member of a new pipeline (CreatePipelines'
// candidates, whatever their count of pipelines).
func (s *Cluster) placeable(id uint64, now time.Time) bool {
	n := s.NodeByID[id]
	return n.Seen && s.HealthOf(n, now) == metaapi.HealthHealthy && !s.Full(n) && s.InService(id)
}

// Placeable counts the datanodes that could be members of a new
// pipeline.
func (s *Cluster) Placeable(now time.Time) int {
	k := 0
	for id := range s.NodeByID {
		if s.placeable(id, now) {
			k++
		}
	}
	return k
}

// DeadMembers lists p's DEAD members (a node in maintenance is not one:
// its replicas count while it is down).
func (s *Cluster) DeadMembers(p *state.PipelineState, now time.Time) []uint64 {
	var dead []uint64
	for _, m := range p.Rec.Members {
		if n := s.NodeByID[m]; s.HealthOf(n, now) == metaapi.HealthDead && !s.inMaintenance(m, now) {
			dead = append(dead, m)
		}
	}
	return dead
}

// KeepDegraded says whether OPEN pipeline p, with a DEAD member, stays
// OPEN (see above); when not, why it is closed.
func (s *Cluster) KeepDegraded(p *state.PipelineState, now time.Time) (bool, string) {
	healthy := 0
	for _, m := range p.Rec.Members {
		switch h := s.HealthOf(s.NodeByID[m], now); h {
		case metaapi.HealthHealthy:
			healthy++
		case metaapi.HealthStale:
			return false, fmt.Sprintf("member %d is STALE too", m)
		}
	}
	if healthy < s.MinLive() {
		return false, fmt.Sprintf("%d HEALTHY members, fewer than the %d live replicas writes need (min live replicas)", healthy, s.MinLive())
	}
	if k := s.Placeable(now); k >= state.PipelineSize {
		return false, fmt.Sprintf("%d datanodes can make a new pipeline: a replacement exists", k)
	}
	return true, ""
}

// CloseDead closes OPEN pipeline p if it has a DEAD member and is not
// kept degraded (KeepDegraded); it says whether p has a DEAD member.
func (s *Cluster) CloseDead(b *pebble.Batch, p *state.PipelineState, now time.Time) bool {
	dead := s.DeadMembers(p, now)
	if len(dead) == 0 {
		if p.Degraded {
			p.Degraded = false
			s.Log.Info("pipeline whole again: no member DEAD", "pipeline", p.Rec.ID, "members", p.Rec.Members)
		}
		return false
	}
	keep, why := s.KeepDegraded(p, now)
	if keep {
		if !p.Degraded {
			p.Degraded = true
			s.Log.Warn("pipeline kept OPEN without its DEAD member: no replacement exists; its containers are under-replicated",
				"pipeline", p.Rec.ID, "members", p.Rec.Members, "dead", dead, "min_live_replicas", s.MinLive())
		}
		return true
	}
	s.ClosePipeline(b, p, now, fmt.Sprintf("member %d is DEAD: %s", dead[0], why))
	return true
}

// UnderReplicatedOpen lists, in ID order, the OPEN and CLOSING containers
// of pipelines with a DEAD member (kept degraded, or closed and not yet
// settled): their writes land on fewer replicas than the pipeline has.
func (s *Cluster) UnderReplicatedOpen(now time.Time) []uint64 {
	var out []uint64
	for _, pid := range s.SortedPipelines() {
		p := s.PipelineByID[pid]
		if len(s.DeadMembers(p, now)) == 0 {
			continue
		}
		for _, cid := range p.Containers {
			if c := s.ContainerByID[cid]; c.Rec.State != state.ContainerClosed {
				out = append(out, cid)
			}
		}
	}
	slices.Sort(out)
	return out
}

// MissingReplicas lists the DEAD members of container c's pipeline while
// c is OPEN or CLOSING (none for a CLOSED container: its replicas are
// counted from the reports).
func (s *Cluster) MissingReplicas(c *state.ContainerState, now time.Time) []uint64 {
	p := s.PipelineByID[c.Rec.Pipeline]
	if p == nil || c.Rec.State == state.ContainerClosed {
		return nil
	}
	return s.DeadMembers(p, now)
}
