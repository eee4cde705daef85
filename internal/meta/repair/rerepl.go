package repair

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// The replication manager and safe mode (see the package comment,
// "Replication manager" and "Safe mode"). All of it is memory only and
// runs under s.mu held for writing (Tick, Heartbeat, ExitSafeMode) or
// reading (Replication, the metrics, reads of keys).

// safeModeMinNodes is the datanodes that must report before safe mode
// ends.
func (s *Rerepl) safeModeMinNodes() int {
	if s.Cfg.SafeModeMinNodes > 0 {
		return s.Cfg.SafeModeMinNodes
	}
	return min(state.DefaultSafeModeMinNodes, len(s.NodeByID))
}

// safeModeReason says which condition to leave safe mode is missing,
// with numbers; "" when both hold.
func (s *Rerepl) safeModeReason(idx map[uint64][]uint64) string {
	var missing []string
	seen, want := 0, s.safeModeMinNodes()
	for _, n := range s.NodeByID {
		if n.Seen {
			seen++
		}
	}
	if seen < want {
		missing = append(missing, fmt.Sprintf("%d/%d datanodes reported", seen, want))
	}
	closed, with := 0, 0
	for cid, c := range s.ContainerByID {
		if c.Rec.State == state.ContainerClosed && (c.Rec.Committed > 0 || len(idx[cid]) > 0) && !s.coded(cid) {
			// (a container no key used, without replicas, holds
			// nothing to wait for)
			closed++
			if len(idx[cid]) > 0 {
				with++
			}
		}
	}
	if need := int(math.Ceil(s.Cfg.SafeModeContainerFraction*float64(closed) - 1e-9)); with < need {
		missing = append(missing, fmt.Sprintf("%d/%d containers have a replica (%d needed)", with, closed, need))
	}
	return strings.Join(missing, "; ")
}

// replicate is the replication manager's round at a Tick: leave safe
// mode when its conditions hold, settle the copies in flight (complete,
// failed, lost), then schedule copies of the under-replicated CLOSED
// containers. Memory only.
func (s *Rerepl) Replicate(now time.Time) {
	idx := s.cl.ReplicaIndex(now)
	if s.Repair.SafeMode {
		why := s.safeModeReason(idx)
		if why != "" {
			return
		}
		s.Repair.SafeMode = false
		s.Log.Info("safe mode over: enough datanodes and containers reported; replication decisions start",
			"datanodes", len(s.NodeByID), "containers", len(s.ContainerByID))
	}
	s.settleCopies(idx, now)
	s.dmg.settleRepairs(now)
	s.dmg.scheduleRepairs(idx, now)
	for k, t := range s.Repair.Failed {
		if now.Sub(t) >= s.Cfg.CopyRetryAfter {
			delete(s.Repair.Failed, k)
		}
	}
	s.scheduleCopies(idx, now)
	s.settleTrims(now)
	s.scheduleTrims(idx, now)
}

// overReplicated lists, in ID order, the CLOSED containers with more
// healthy replicas than wanted.
func (s *Rerepl) OverReplicated(idx map[uint64][]uint64) []uint64 {
	var over []uint64
	for cid, c := range s.ContainerByID {
		if c.Rec.State == state.ContainerClosed && len(idx[cid]) > s.Cfg.ReplicationFactor {
			over = append(over, cid)
		}
	}
	slices.Sort(over)
	return over
}

// scheduleTrims decides replica deletions, one per container at a time,
// within MaxTrims, first of the replicas that do not count, then of the
// extra healthy ones.
//
// A replica that does not count — UNHEALTHY, or CLOSED behind the highest
// BCSID reported for the container (it missed block commits) — on a
// HEALTHY node not serving the container's pipeline is deleted once the
// CLOSED container has ReplicationFactor healthy replicas, or, to make
// room, when it has fewer and no node could take a copy
// (chooseTarget finds none: every HEALTHY node holds the container in
// some state; the deletion frees that node to receive a whole copy), when
// it is safe to count (trimmable). The lowest BCSID goes first (an
// UNHEALTHY replica before a CLOSED one of the same BCSID). An UNHEALTHY
// replica above the highest CLOSED BCSID is never deleted: it holds block
// commits no counted replica holds.
//
// An over-replicated CLOSED container (more healthy replicas than wanted)
// loses one when it is safe to count: no copy of it in flight, no
// deletion of it in flight, no member of its pipeline undecided, and
// every holder HEALTHY (a STALE holder's report may be old). The replica
// deleted is one on a node whose reports do not list the container's
// pipeline (no raft group there writes to it), first in trimOrder: the
// smallest replica, then one not served by the pipeline, then the fullest
// node. When the replica first in that order is on a node serving the
// pipeline, nothing is deleted (yet). After the deletion the container
// still has ReplicationFactor healthy replicas.
func (s *Rerepl) scheduleTrims(idx map[uint64][]uint64, now time.Time) {
	s.trimUncounted(idx, now)
	for _, cid := range s.OverReplicated(idx) {
		if len(s.Repair.Trims) >= state.MaxTrims {
			return
		}
		c := s.ContainerByID[cid]
		holders := idx[cid]
		if !s.trimmable(c, holders, now) {
			continue
		}
		victim := holders[0]
		for _, id := range holders[1:] {
			if s.trimOrder(c, id, victim) < 0 {
				victim = id
			}
		}
		if s.cl.Reports(victim, c.Rec.Pipeline) {
			continue // the replica to go is served by a raft group: wait
		}
		s.Repair.Trims[cid] = &state.TrimTask{Container: cid, Node: victim, Decided: now}
		s.Log.Info("extra replica to delete", "container", cid, "node", victim, "replicas", holders, "wanted", s.Cfg.ReplicationFactor)
	}
}

// trimUncounted decides the deletions of UNHEALTHY and behind replicas
// (see scheduleTrims).
func (s *Rerepl) trimUncounted(idx map[uint64][]uint64, now time.Time) {
	type replica struct {
		container, node, bcsid uint64
		unhealthy              bool
	}
	_, top := s.cl.ClosedIndex(now)
	var uncounted []replica
	for _, id := range s.cl.SortedNodes() {
		n := s.NodeByID[id]
		if !n.Seen || s.cl.HealthOf(n, now) != metaapi.HealthHealthy {
			continue
		}
		for cid, r := range n.Containers {
			if r.State == metaapi.ContainerUnhealthy || (r.State == metaapi.ContainerClosed && r.BCSID < top[cid]) {
				uncounted = append(uncounted, replica{cid, id, r.BCSID, r.State == metaapi.ContainerUnhealthy})
			}
		}
	}
	// A damaged replica not repaired block by block goes like an
	// UNHEALTHY one (damage.go).
	for _, d := range s.dmg.DamagedReplicas(now) {
		if !s.dmg.underRepair(d.container, d.node) && !s.dmg.byBlock(d) && s.cl.HealthOf(s.NodeByID[d.node], now) == metaapi.HealthHealthy {
			uncounted = append(uncounted, replica{d.container, d.node, top[d.container], true})
		}
	}
	slices.SortFunc(uncounted, func(a, b replica) int {
		return cmp.Or(cmp.Compare(a.container, b.container), cmp.Compare(a.bcsid, b.bcsid),
			-cmp.Compare(btoi(a.unhealthy), btoi(b.unhealthy)), cmp.Compare(a.node, b.node))
	})
	nodes := s.cl.SortedNodes()
	for _, u := range uncounted {
		if len(s.Repair.Trims) >= state.MaxTrims {
			return
		}
		c := s.ContainerByID[u.container]
		if c == nil || c.Rec.State != state.ContainerClosed || !s.trimmable(c, idx[u.container], now) || s.cl.Reports(u.node, c.Rec.Pipeline) {
			continue
		}
		if u.unhealthy && u.bcsid > top[u.container] {
			// It holds block commits no counted replica holds (every
			// complete one turned UNHEALTHY, the CLOSED ones missed
			// them): never deleted, even to make room (CHAOS_FINDINGS §10).
			continue
		}
		healthy := len(idx[u.container])
		makeRoom := healthy > 0 && healthy < s.Cfg.ReplicationFactor && s.chooseTarget(u.container, nodes, nil, now) == 0
		if healthy < s.Cfg.ReplicationFactor && !makeRoom {
			continue
		}
		s.Repair.Trims[u.container] = &state.TrimTask{Container: u.container, Node: u.node, Decided: now}
		what := "behind"
		if u.unhealthy {
			what = "UNHEALTHY"
		}
		s.Log.Info("replica to delete", "container", u.container, "node", u.node, "replica", what, "bcsid", u.bcsid,
			"highest_bcsid", top[u.container], "healthy replicas", idx[u.container], "to make room", makeRoom)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// trimOrder orders the healthy replicas of container c on nodes a and b
// for deletion (negative: a goes first). They all have the highest BCSID
// (a replica behind it is not healthy, and goes first: trimUncounted).
// Then the replica reporting the fewest bytes of the container, then the
// fewest blocks — a replica short for another reason (a chunk refused
// after a leader change, ARCHITECTURE §12) must never be kept while a
// complete one goes; replicas only lagging on block deletions differ the
// same way and lose nothing by going first —, then one on a node not
// serving c's pipeline, then the fullest node, then the highest ID.
func (s *Rerepl) trimOrder(c *state.ContainerState, a, b uint64) int {
	na, nb := s.NodeByID[a], s.NodeByID[b]
	ra, rb := na.Containers[c.Rec.ID], nb.Containers[c.Rec.ID]
	serves := func(id uint64) int {
		if s.cl.Reports(id, c.Rec.Pipeline) {
			return 1
		}
		return 0
	}
	return cmp.Or(cmp.Compare(ra.UsedBytes, rb.UsedBytes), cmp.Compare(ra.Blocks, rb.Blocks),
		cmp.Compare(serves(a), serves(b)), cmp.Compare(nb.Used, na.Used), cmp.Compare(b, a))
}

// trimmable says whether a replica of container c, whose healthy replicas
// are holders, may be deleted now, as far as the container goes: no copy
// and no deletion of it in flight, no member of its pipeline undecided,
// and every holder HEALTHY (reported within StaleAfter: a STALE holder's
// report may be old).
func (s *Rerepl) trimmable(c *state.ContainerState, holders []uint64, now time.Time) bool {
	cid := c.Rec.ID
	if s.Repair.Tasks[cid] != nil || s.Repair.Trims[cid] != nil || s.undecided(c, now) {
		return false
	}
	for _, id := range holders {
		if s.cl.HealthOf(s.NodeByID[id], now) != metaapi.HealthHealthy {
			return false
		}
	}
	return true
}

// settleTrims ends the deletions whose node's report lacks the container
// (done), whose node is DEAD, or that timed out (decided again later).
func (s *Rerepl) settleTrims(now time.Time) {
	for _, cid := range slices.Sorted(maps.Keys(s.Repair.Trims)) {
		t := s.Repair.Trims[cid]
		n := s.NodeByID[t.Node]
		_, holds := n.Containers[cid]
		since := t.Decided
		if !t.Delivered.IsZero() {
			since = t.Delivered
		}
		switch {
		case !holds && !t.Delivered.IsZero():
			delete(s.Repair.Trims, cid)
			s.Repair.Trimmed++
			s.Log.Info("extra replica deleted", "container", cid, "node", t.Node)
		case s.cl.HealthOf(n, now) == metaapi.HealthDead:
			delete(s.Repair.Trims, cid)
		case now.Sub(since) >= s.Cfg.CopyStartTimeout:
			delete(s.Repair.Trims, cid)
			s.Log.Warn("extra replica not deleted in time; deciding again", "container", cid, "node", t.Node,
				"waited", now.Sub(since).Round(time.Millisecond))
		}
	}
}

// trimCommands appends a delete_container for each deletion decided for
// node id and not sent yet.
func (s *Rerepl) TrimCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	for _, cid := range slices.Sorted(maps.Keys(s.Repair.Trims)) {
		t := s.Repair.Trims[cid]
		if t.Node != id || !t.Delivered.IsZero() || len(cmds) >= state.MaxCommandsPerHeartbeat {
			continue
		}
		cmd := metaapi.Command{Kind: metaapi.CmdDeleteContainer, Container: cid}
		if p := s.PipelineByID[s.ContainerByID[cid].Rec.Pipeline]; p != nil {
			cmd.Pipeline = s.cl.PipelineView(p, now)
		}
		t.Delivered = now
		cmds = append(cmds, cmd)
	}
	return cmds
}

// settleCopies ends the copies in flight that completed, whose target is
// DEAD or reports the container in another state, that have no healthy
// source left, or that timed out.
func (s *Rerepl) settleCopies(idx map[uint64][]uint64, now time.Time) {
	for _, cid := range slices.Sorted(maps.Keys(s.Repair.Tasks)) {
		t := s.Repair.Tasks[cid]
		n := s.NodeByID[t.Target]
		r, holds := n.Containers[cid]
		limit := max(s.Cfg.CopyTimeoutMin, time.Duration(float64(t.SizeBytes)/state.MinCopyBytesPerS*float64(time.Second)))
		switch {
		case holds && r.State == metaapi.ContainerClosed && s.cl.HealthOf(n, now) != metaapi.HealthDead:
			s.copyDone(t, now)
		case s.cl.HealthOf(n, now) == metaapi.HealthDead:
			s.copyFailed(t, "the target is DEAD")
		case holds:
			s.copyFailed(t, fmt.Sprintf("the target reports the container %s", r.State))
		case len(s.cl.ReplicasOf(cid, now)) == 0:
			s.copyFailed(t, "no healthy replica is left to copy from")
		case now.Sub(t.Alive) >= s.Cfg.CopyStartTimeout:
			s.copyFailed(t, fmt.Sprintf("the target has not reported the copy under way for %s", now.Sub(t.Alive).Round(time.Millisecond)))
		case now.Sub(t.Started) >= limit:
			s.copyFailed(t, fmt.Sprintf("not complete after %s (limit %s)", now.Sub(t.Started).Round(time.Millisecond), limit))
		}
	}
}

// copyDone records a completed copy.
func (s *Rerepl) copyDone(t *state.CopyTask, now time.Time) {
	delete(s.Repair.Tasks, t.Container)
	delete(s.Repair.Attempts, t.Container)
	s.Repair.CopiedContainers++
	s.Repair.CopiedBytes += t.SizeBytes
	s.Repair.LastCompleted = now
	d := now.Sub(t.Started)
	mbps := 0.0
	if d > 0 {
		mbps = float64(t.SizeBytes) / 1e6 / d.Seconds()
	}
	s.Log.Info("container copied", "container", t.Container, "source", t.Source, "target", t.Target,
		"bytes", t.SizeBytes, "took", d.Round(time.Millisecond), "mb_per_s", math.Round(mbps*10)/10, "attempt", t.Attempt)
}

// copyFailed drops a copy in flight; the next Tick schedules it again.
func (s *Rerepl) copyFailed(t *state.CopyTask, why string) {
	delete(s.Repair.Tasks, t.Container)
	s.Repair.FailedCopies++
	s.Log.Warn("container copy failed; it will be scheduled again", "container", t.Container, "source", t.Source,
		"target", t.Target, "attempt", t.Attempt, "why", why)
}

// scheduleCopies schedules one copy for each CLOSED container with fewer
// healthy replicas than wanted (and at least one), in container ID
// order, within the limits.
func (s *Rerepl) scheduleCopies(idx map[uint64][]uint64, now time.Time) {
	if len(s.Repair.Tasks) >= s.Cfg.MaxInflightCopies {
		return
	}
	var under []uint64
	for cid, c := range s.ContainerByID {
		if h := len(idx[cid]); c.Rec.State == state.ContainerClosed && h+s.dmg.repairing(cid) < s.Cfg.ReplicationFactor && s.Repair.Tasks[cid] == nil && !s.coded(cid) &&
			(h > 0 || len(s.cl.ReplicasOf(cid, now)) > 0) && !s.undecided(c, now) {
			under = append(under, cid)
		}
	}
	if len(under) == 0 {
		return
	}
	slices.Sort(under)
	asSource, asTarget := map[uint64]int{}, map[uint64]int{}
	for _, t := range s.Repair.Tasks {
		asSource[t.Source]++
		asTarget[t.Target]++
	}
	nodes := s.cl.SortedNodes()
	for _, cid := range under {
		if len(s.Repair.Tasks) >= s.Cfg.MaxInflightCopies {
			return
		}
		target := s.chooseTarget(cid, nodes, asTarget, now)
		if target == 0 {
			continue
		}
		source := s.chooseSource(cid, s.cl.ReplicasOf(cid, now), asSource, now)
		if source == 0 {
			continue
		}
		c := s.ContainerByID[cid]
		s.Repair.Attempts[cid]++
		t := &state.CopyTask{Container: cid, Source: source, Target: target, SizeBytes: s.cl.ContainerSize(c, idx[cid]),
			Started: now, Alive: now, Attempt: s.Repair.Attempts[cid]}
		s.Repair.Tasks[cid] = t
		asSource[source]++
		asTarget[target]++
		if s.Repair.FirstScheduled.IsZero() {
			s.Repair.FirstScheduled = now
		}
		s.Log.Info("container copy scheduled", "container", cid, "source", source, "target", target,
			"bytes", t.SizeBytes, "replicas", idx[cid], "attempt", t.Attempt)
	}
}

// undecided says whether a member of c's pipeline has not been heard from
// since the start and is not DEAD yet: it may well hold c (it held it when
// the pipeline wrote it), so no copy is decided before its first report or
// its death (unless an operator forced safe mode off). Without this, a cold start copies every container of the
// datanodes that report last (safe mode ends on a fraction of them).
func (s *Rerepl) undecided(c *state.ContainerState, now time.Time) bool {
	p := s.PipelineByID[c.Rec.Pipeline]
	if p == nil || s.Repair.Forced {
		return false
	}
	for _, m := range p.Rec.Members {
		if n := s.NodeByID[m]; n != nil && !n.Seen && s.cl.Live(m, now) {
			return true
		}
	}
	return false
}

// chooseTarget picks the node to copy container cid to: HEALTHY, heard
// from since the start, not holding the container in any state, not
// serving its pipeline while that is OPEN (servesOpen), under
// MaxCopiesPerTarget; the fewest copies in flight to it, then the fewest
// containers, then the lowest ID. 0: none. A node still copying the
// container (a copy timed out here but going on there) may be chosen
// again: it ignores the repeated command and its copy counts when done.
func (s *Rerepl) chooseTarget(cid uint64, nodes []uint64, asTarget map[uint64]int, now time.Time) uint64 {
	var best uint64
	for _, id := range nodes {
		n := s.NodeByID[id]
		if !n.Seen || s.cl.HealthOf(n, now) != metaapi.HealthHealthy || asTarget[id] >= s.Cfg.MaxCopiesPerTarget || !s.cl.InService(id) {
			continue
		}
		if _, holds := n.Containers[cid]; holds || s.servesOpen(id, cid) {
			continue
		}
		if best == 0 || cmp.Or(cmp.Compare(asTarget[id], asTarget[best]), cmp.Compare(len(n.Containers), len(s.NodeByID[best].Containers))) < 0 {
			best = id
		}
	}
	return best
}

// servesOpen: node id serves container cid's pipeline, OPEN. Its raft
// group gives it the container: a member back from the dead replays the
// log it missed, the writes and the close of a container closed without
// it included, and ends with the replica its peers have. A copy as well
// would race that replay on the same container (the replay's first write
// finds the copy's import under way and fails the replica: the member
// leaves the pipeline, which is closed, and a copy of every container is
// needed after all). A member that cannot catch up (behind the compacted
// log, a failed replica, a lost volume) gets its pipeline closed, and is
// then a target like any node.
func (s *Rerepl) servesOpen(id, cid uint64) bool {
	c := s.ContainerByID[cid]
	if c == nil {
		return false
	}
	p := s.PipelineByID[c.Rec.Pipeline]
	return p != nil && p.Rec.State == state.PipelineOpen && slices.Contains(p.Rec.Members, id) && s.cl.Reports(id, p.Rec.ID)
}

// recentlyFailed: a copy of cid from source failed within CopyRetryAfter.
func (s *Rerepl) recentlyFailed(cid, source uint64, now time.Time) bool {
	t, ok := s.Repair.Failed[state.SourceFailure{Container: cid, Source: source}]
	return ok && now.Sub(t) < s.Cfg.CopyRetryAfter
}

// chooseSource picks the replica to copy container cid from, among its
// healthy replicas: HEALTHY, under MaxCopiesPerSource, the fewest copies
// in flight from it, then the lowest ID. Replicas a copy of cid failed
// from within CopyRetryAfter are skipped while another HEALTHY replica
// exists (even a busy one: the copy then waits for it). 0: none.
func (s *Rerepl) chooseSource(cid uint64, replicas []uint64, asSource map[uint64]int, now time.Time) uint64 {
	var fresh, failed []uint64
	for _, id := range replicas {
		if s.cl.HealthOf(s.NodeByID[id], now) != metaapi.HealthHealthy {
			continue
		}
		if s.recentlyFailed(cid, id, now) {
			failed = append(failed, id)
		} else {
			fresh = append(fresh, id)
		}
	}
	cands := fresh
	if len(cands) == 0 {
		cands = failed
	}
	var best uint64
	for _, id := range cands {
		if asSource[id] >= s.Cfg.MaxCopiesPerSource {
			continue
		}
		if best == 0 || asSource[id] < asSource[best] {
			best = id
		}
	}
	return best
}

// copyReports applies what node id's heartbeat (just recorded in n) says
// of the copies to it: a container now reported CLOSED completes its
// copy; one listed in Copying is under way; a failure drops the copy
// (unless the same heartbeat still lists it in Copying: the target went
// on with another source) and keeps the source from being chosen again
// for that container for CopyRetryAfter. When a copy ended, the slots it
// held are given out at once (outside safe mode), so that this
// heartbeat's response can carry the next copy instead of waiting for a
// Tick.
func (s *Rerepl) CopyReports(n *state.Node, hb *metaapi.Heartbeat, now time.Time) {
	id := n.Rec.ID
	before := s.Repair.CopiedContainers + s.Repair.FailedCopies
	defer func() {
		if s.Repair.CopiedContainers+s.Repair.FailedCopies != before && !s.Repair.SafeMode {
			s.scheduleCopies(s.cl.ReplicaIndex(now), now)
		}
	}()
	for _, cid := range hb.Copying {
		if t := s.Repair.Tasks[cid]; t != nil && t.Target == id {
			t.Alive = now
		}
	}
	for _, f := range hb.CopyFailures {
		if f.Source != 0 {
			s.Repair.Failed[state.SourceFailure{Container: f.Container, Source: f.Source}] = now
		}
		if t := s.Repair.Tasks[f.Container]; t != nil && t.Target == id && !n.Copying[f.Container] {
			s.copyFailed(t, fmt.Sprintf("the target reports: from node %d: %s", f.Source, f.Error))
		}
	}
	for _, cid := range slices.Sorted(maps.Keys(s.Repair.Tasks)) {
		t := s.Repair.Tasks[cid]
		if r, ok := n.Containers[cid]; ok && t.Target == id && r.State == metaapi.ContainerClosed {
			s.copyDone(t, now)
		}
	}
}

// replicateCommands appends a replicate_container for every copy in
// flight to node id: Sources are the chosen source, then the other
// healthy replicas (those a copy recently failed from last). A copy with
// no healthy source left is not sent (the next Tick drops it).
func (s *Rerepl) ReplicateCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	for _, cid := range slices.Sorted(maps.Keys(s.Repair.Tasks)) {
		t := s.Repair.Tasks[cid]
		if t.Target != id || len(cmds) >= state.MaxCommandsPerHeartbeat {
			continue
		}
		replicas := s.cl.ReplicasOf(cid, now)
		slices.SortStableFunc(replicas, func(a, b uint64) int {
			ka, kb := sourceRank(a, t.Source, s.recentlyFailed(cid, a, now)), sourceRank(b, t.Source, s.recentlyFailed(cid, b, now))
			return ka - kb
		})
		if len(replicas) == 0 {
			continue
		}
		cmd := metaapi.Command{Kind: metaapi.CmdReplicateContainer, Container: cid, SizeBytes: s.cl.ContainerSize(s.ContainerByID[cid], replicas)}
		if p := s.PipelineByID[s.ContainerByID[cid].Rec.Pipeline]; p != nil {
			cmd.Pipeline = s.cl.PipelineView(p, now)
		}
		for _, r := range replicas {
			cmd.Sources = append(cmd.Sources, metaapi.Member{NodeID: r, Addr: s.NodeByID[r].Rec.Addr})
		}
		if s.Repair.FirstDelivered.IsZero() {
			s.Repair.FirstDelivered = now
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}

// sourceRank orders a copy's sources: the chosen one, the others, those a
// copy recently failed from.
func sourceRank(id, chosen uint64, failed bool) int {
	switch {
	case id == chosen:
		return 0
	case failed:
		return 2
	}
	return 1
}

// replicationStatus is the API form of the replication manager's state.
// Callers hold s.mu.
func (s *Rerepl) replicationStatus(now time.Time) *metaapi.ReplicationStatus {
	idx := s.cl.ReplicaIndex(now)
	st := &metaapi.ReplicationStatus{SafeMode: s.Repair.SafeMode, ReplicationFactor: s.Cfg.ReplicationFactor,
		Inflight: []metaapi.CopyTask{}, CopiedContainers: s.Repair.CopiedContainers, CopiedBytes: s.Repair.CopiedBytes,
		FailedCopies: s.Repair.FailedCopies, FirstScheduled: s.Repair.FirstScheduled, LastCompleted: s.Repair.LastCompleted,
		FirstDelivered: s.Repair.FirstDelivered,
		Limits: metaapi.ReplicationLimits{MaxCopiesPerSource: s.Cfg.MaxCopiesPerSource, MaxCopiesPerTarget: s.Cfg.MaxCopiesPerTarget,
			MaxInflightCopies: s.Cfg.MaxInflightCopies, CopyRetryAfterMs: s.Cfg.CopyRetryAfter.Milliseconds(),
			CopyTimeoutMinMs: s.Cfg.CopyTimeoutMin.Milliseconds(), SafeModeMinNodes: s.Cfg.SafeModeMinNodes,
			SafeModeContainerFraction: s.Cfg.SafeModeContainerFraction}}
	if st.SafeMode {
		st.SafeModeReason = s.safeModeReason(idx)
		if st.SafeModeReason == "" {
			st.SafeModeReason = "conditions met; leaving at the next tick"
		}
	}
	st.UnderReplicated, st.Unrecoverable, st.PendingBytes = s.UnderReplicated(idx)
	st.UnderReplicatedOpen = len(s.cl.UnderReplicatedOpen(now))
	st.MinLiveReplicas = s.cl.MinLive()
	st.AtRisk = s.atRisk(idx, now)
	st.OverReplicated, st.Trimming, st.TrimmedReplicas = len(s.OverReplicated(idx)), len(s.Repair.Trims), s.Repair.Trimmed
	st.BehindReplicas = s.cl.BehindReplicas(now)
	for _, cid := range slices.Sorted(maps.Keys(s.Repair.Tasks)) {
		t := s.Repair.Tasks[cid]
		st.Inflight = append(st.Inflight, metaapi.CopyTask{Container: cid, Source: t.Source, Target: t.Target,
			SizeBytes: t.SizeBytes, Started: t.Started, Attempt: t.Attempt})
	}
	if d := st.LastCompleted.Sub(st.FirstScheduled); d > 0 && !st.FirstScheduled.IsZero() {
		st.RateBytesPerS = float64(st.CopiedBytes) / d.Seconds()
	}
	return st
}

// underReplicated counts the CLOSED containers with fewer healthy
// replicas than wanted and the OPEN or CLOSING ones of a pipeline with a
// DEAD member (cluster.UnderReplicatedOpen: taking or having taken writes
// without it), those with none, and the bytes still to copy (of CLOSED
// containers).
func (s *Rerepl) UnderReplicated(idx map[uint64][]uint64) (under, unrecoverable int, pending uint64) {
	under = len(s.cl.UnderReplicatedOpen(s.Cfg.Now()))
	for cid, c := range s.ContainerByID {
		h := len(idx[cid])
		if s.coded(cid) && s.ShardHealth != nil {
			if missing, lost := s.ShardHealth(cid); missing > 0 {
				under, unrecoverable = under+1, unrecoverable+btoi(lost)
			}
			continue
		}
		if c.Rec.State != state.ContainerClosed || h >= s.Cfg.ReplicationFactor || (h == 0 && c.Rec.Committed == 0) || s.coded(cid) {
			// (no replica of a container no key ever used: nothing
			// to lose — its pipeline closed before a write reached it)
			continue
		}
		under++
		if h == 0 && len(s.cl.ReplicasOf(cid, s.Cfg.Now())) == 0 {
			unrecoverable++ // (a decommissioning node's replica is one)
		}
		pending += s.cl.ContainerSize(c, idx[cid]) * uint64(s.Cfg.ReplicationFactor-h)
	}
	return under, unrecoverable, pending
}

// atRisk counts the containers with a replica on a STALE node: a CLOSED
// container's healthy replicas (idx), an OPEN or CLOSING one's pipeline
// members. A STALE node still counts as holding its replicas (it may be
// paused or slow), so nothing is copied until it is DEAD; meanwhile the
// status says those containers are one failure closer to loss.
func (s *Rerepl) atRisk(idx map[uint64][]uint64, now time.Time) int {
	stale := func(id uint64) bool {
		n := s.NodeByID[id]
		return n != nil && s.cl.HealthOf(n, now) == metaapi.HealthStale
	}
	risk := 0
	for cid, c := range s.ContainerByID {
		var replicas []uint64
		switch c.Rec.State {
		case state.ContainerClosed:
			replicas = idx[cid]
		case state.ContainerOpen, state.ContainerClosing:
			if p := s.PipelineByID[c.Rec.Pipeline]; p != nil {
				replicas = p.Rec.Members
			}
		}
		if slices.ContainsFunc(replicas, stale) {
			risk++
		}
	}
	return risk
}

// Replication is the replication manager's state (GET /v1/replication).
func (s *Rerepl) Replication() (*metaapi.ReplicationStatus, error) {
	return state.Read(s.State, func() (*metaapi.ReplicationStatus, error) { return s.replicationStatus(s.Cfg.Now()), nil })
}

// ExitSafeMode leaves safe mode now, whatever the reports (an operator's
// decision, logged); replication decisions start at the next Tick. Once
// out of safe mode the service stays out until it restarts.
func (s *Rerepl) ExitSafeMode() (*metaapi.ReplicationStatus, error) {
	return state.Mutate(s.State, func() (*metaapi.ReplicationStatus, *pebble.Batch, error) {
		now := s.Cfg.Now()
		if s.Repair.SafeMode {
			why := s.safeModeReason(s.cl.ReplicaIndex(now))
			s.Repair.SafeMode, s.Repair.Forced = false, true
			s.Log.Warn("safe mode exited by the operator; replication decisions start", "was_waiting_for", why)
		}
		return s.replicationStatus(now), nil, nil
	})
}

// Rerepl is the re-replication manager of closed containers.
type Rerepl struct {
	*state.State
	cl  *cluster.Cluster
	dmg *Damage
	ops *cluster.Ops
	// Coded, when set (before the first Tick), says a container is
	// erasure-coded (package ecmeta): its replicas are neither counted,
	// copied nor waited for by safe mode.
	Coded func(cid uint64) bool
	// ShardHealth, when set, is an EC container's shards missing and
	// whether fewer than k are left: counted as its replicas would be.
	ShardHealth func(cid uint64) (missing int, unrecoverable bool)
}

// NewRerepl is the re-replication manager of cl's closed containers.
func NewRerepl(st *state.State, cl *cluster.Cluster, dmg *Damage, ops *cluster.Ops) *Rerepl {
	return &Rerepl{State: st, cl: cl, dmg: dmg, ops: ops}
}

// coded says whether cid is erasure-coded (Coded).
func (s *Rerepl) coded(cid uint64) bool { return s.Coded != nil && s.Coded(cid) }
