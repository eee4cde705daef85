package meta

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// The replication manager and safe mode (see the package comment,
// "Replication manager" and "Safe mode"). All of it is memory only and
// runs under s.mu held for writing (Tick, Heartbeat, ExitSafeMode) or
// reading (Replication, the metrics, reads of keys).

// safeModeMinNodes is the datanodes that must report before safe mode
// ends.
func (s *Rerepl) safeModeMinNodes() int {
	if s.cfg.SafeModeMinNodes > 0 {
		return s.cfg.SafeModeMinNodes
	}
	return min(DefaultSafeModeMinNodes, len(s.nodes))
}

// safeModeReason says which condition to leave safe mode is missing,
// with numbers; "" when both hold.
func (s *Rerepl) safeModeReason(idx map[uint64][]uint64) string {
	var missing []string
	seen, want := 0, s.safeModeMinNodes()
	for _, n := range s.nodes {
		if n.seen {
			seen++
		}
	}
	if seen < want {
		missing = append(missing, fmt.Sprintf("%d/%d datanodes reported", seen, want))
	}
	closed, with := 0, 0
	for cid, c := range s.containers {
		if c.rec.State == containerClosed && (c.rec.Committed > 0 || len(idx[cid]) > 0) {
			// (a container no key used, without replicas, holds
			// nothing to wait for)
			closed++
			if len(idx[cid]) > 0 {
				with++
			}
		}
	}
	if need := int(math.Ceil(s.cfg.SafeModeContainerFraction*float64(closed) - 1e-9)); with < need {
		missing = append(missing, fmt.Sprintf("%d/%d containers have a replica (%d needed)", with, closed, need))
	}
	return strings.Join(missing, "; ")
}

// replicate is the replication manager's round at a Tick: leave safe
// mode when its conditions hold, settle the copies in flight (complete,
// failed, lost), then schedule copies of the under-replicated CLOSED
// containers. Memory only.
func (s *Rerepl) replicate(now time.Time) {
	idx := s.cl.replicaIndex(now)
	if s.repl.safeMode {
		why := s.safeModeReason(idx)
		if why != "" {
			return
		}
		s.repl.safeMode = false
		s.log.Info("safe mode over: enough datanodes and containers reported; replication decisions start",
			"datanodes", len(s.nodes), "containers", len(s.containers))
	}
	s.settleCopies(idx, now)
	s.dmg.settleRepairs(now)
	s.dmg.scheduleRepairs(idx, now)
	for k, t := range s.repl.failed {
		if now.Sub(t) >= s.cfg.CopyRetryAfter {
			delete(s.repl.failed, k)
		}
	}
	s.scheduleCopies(idx, now)
	s.settleTrims(now)
	s.scheduleTrims(idx, now)
}

// overReplicated lists, in ID order, the CLOSED containers with more
// healthy replicas than wanted.
func (s *Rerepl) overReplicated(idx map[uint64][]uint64) []uint64 {
	var over []uint64
	for cid, c := range s.containers {
		if c.rec.State == containerClosed && len(idx[cid]) > s.cfg.ReplicationFactor {
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
// UNHEALTHY replica before a CLOSED one of the same BCSID).
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
	for _, cid := range s.overReplicated(idx) {
		if len(s.repl.trims) >= MaxTrims {
			return
		}
		c := s.containers[cid]
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
		if s.cl.reports(victim, c.rec.Pipeline) {
			continue // the replica to go is served by a raft group: wait
		}
		s.repl.trims[cid] = &trimTask{container: cid, node: victim, decided: now}
		s.log.Info("extra replica to delete", "container", cid, "node", victim, "replicas", holders, "wanted", s.cfg.ReplicationFactor)
	}
}

// trimUncounted decides the deletions of UNHEALTHY and behind replicas
// (see scheduleTrims).
func (s *Rerepl) trimUncounted(idx map[uint64][]uint64, now time.Time) {
	type replica struct {
		container, node, bcsid uint64
		unhealthy              bool
	}
	_, top := s.cl.closedIndex(now)
	var uncounted []replica
	for _, id := range s.cl.sortedNodes() {
		n := s.nodes[id]
		if !n.seen || s.cl.healthOf(n, now) != metaapi.HealthHealthy {
			continue
		}
		for cid, r := range n.containers {
			if r.State == metaapi.ContainerUnhealthy || (r.State == metaapi.ContainerClosed && r.BCSID < top[cid]) {
				uncounted = append(uncounted, replica{cid, id, r.BCSID, r.State == metaapi.ContainerUnhealthy})
			}
		}
	}
	// A damaged replica not repaired block by block goes like an
	// UNHEALTHY one (damage.go).
	for _, d := range s.dmg.damagedReplicas(now) {
		if !s.dmg.underRepair(d.container, d.node) && !s.dmg.byBlock(d) && s.cl.healthOf(s.nodes[d.node], now) == metaapi.HealthHealthy {
			uncounted = append(uncounted, replica{d.container, d.node, top[d.container], true})
		}
	}
	slices.SortFunc(uncounted, func(a, b replica) int {
		return cmp.Or(cmp.Compare(a.container, b.container), cmp.Compare(a.bcsid, b.bcsid),
			-cmp.Compare(btoi(a.unhealthy), btoi(b.unhealthy)), cmp.Compare(a.node, b.node))
	})
	nodes := s.cl.sortedNodes()
	for _, u := range uncounted {
		if len(s.repl.trims) >= MaxTrims {
			return
		}
		c := s.containers[u.container]
		if c == nil || c.rec.State != containerClosed || !s.trimmable(c, idx[u.container], now) || s.cl.reports(u.node, c.rec.Pipeline) {
			continue
		}
		healthy := len(idx[u.container])
		makeRoom := healthy > 0 && healthy < s.cfg.ReplicationFactor && s.chooseTarget(u.container, nodes, nil, now) == 0
		if healthy < s.cfg.ReplicationFactor && !makeRoom {
			continue
		}
		s.repl.trims[u.container] = &trimTask{container: u.container, node: u.node, decided: now}
		what := "behind"
		if u.unhealthy {
			what = "UNHEALTHY"
		}
		s.log.Info("replica to delete", "container", u.container, "node", u.node, "replica", what, "bcsid", u.bcsid,
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
func (s *Rerepl) trimOrder(c *containerState, a, b uint64) int {
	na, nb := s.nodes[a], s.nodes[b]
	ra, rb := na.containers[c.rec.ID], nb.containers[c.rec.ID]
	serves := func(id uint64) int {
		if s.cl.reports(id, c.rec.Pipeline) {
			return 1
		}
		return 0
	}
	return cmp.Or(cmp.Compare(ra.UsedBytes, rb.UsedBytes), cmp.Compare(ra.Blocks, rb.Blocks),
		cmp.Compare(serves(a), serves(b)), cmp.Compare(nb.used, na.used), cmp.Compare(b, a))
}

// trimmable says whether a replica of container c, whose healthy replicas
// are holders, may be deleted now, as far as the container goes: no copy
// and no deletion of it in flight, no member of its pipeline undecided,
// and every holder HEALTHY (reported within StaleAfter: a STALE holder's
// report may be old).
func (s *Rerepl) trimmable(c *containerState, holders []uint64, now time.Time) bool {
	cid := c.rec.ID
	if s.repl.tasks[cid] != nil || s.repl.trims[cid] != nil || s.undecided(c, now) {
		return false
	}
	for _, id := range holders {
		if s.cl.healthOf(s.nodes[id], now) != metaapi.HealthHealthy {
			return false
		}
	}
	return true
}

// settleTrims ends the deletions whose node's report lacks the container
// (done), whose node is DEAD, or that timed out (decided again later).
func (s *Rerepl) settleTrims(now time.Time) {
	for _, cid := range slices.Sorted(maps.Keys(s.repl.trims)) {
		t := s.repl.trims[cid]
		n := s.nodes[t.node]
		_, holds := n.containers[cid]
		since := t.decided
		if !t.delivered.IsZero() {
			since = t.delivered
		}
		switch {
		case !holds && !t.delivered.IsZero():
			delete(s.repl.trims, cid)
			s.repl.trimmed++
			s.log.Info("extra replica deleted", "container", cid, "node", t.node)
		case s.cl.healthOf(n, now) == metaapi.HealthDead:
			delete(s.repl.trims, cid)
		case now.Sub(since) >= s.cfg.CopyStartTimeout:
			delete(s.repl.trims, cid)
			s.log.Warn("extra replica not deleted in time; deciding again", "container", cid, "node", t.node,
				"waited", now.Sub(since).Round(time.Millisecond))
		}
	}
}

// trimCommands appends a delete_container for each deletion decided for
// node id and not sent yet.
func (s *Rerepl) trimCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	for _, cid := range slices.Sorted(maps.Keys(s.repl.trims)) {
		t := s.repl.trims[cid]
		if t.node != id || !t.delivered.IsZero() || len(cmds) >= MaxCommandsPerHeartbeat {
			continue
		}
		cmd := metaapi.Command{Kind: metaapi.CmdDeleteContainer, Container: cid}
		if p := s.pipelines[s.containers[cid].rec.Pipeline]; p != nil {
			cmd.Pipeline = s.cl.pipelineView(p, now)
		}
		t.delivered = now
		cmds = append(cmds, cmd)
	}
	return cmds
}

// settleCopies ends the copies in flight that completed, whose target is
// DEAD or reports the container in another state, that have no healthy
// source left, or that timed out.
func (s *Rerepl) settleCopies(idx map[uint64][]uint64, now time.Time) {
	for _, cid := range slices.Sorted(maps.Keys(s.repl.tasks)) {
		t := s.repl.tasks[cid]
		n := s.nodes[t.target]
		r, holds := n.containers[cid]
		limit := max(s.cfg.CopyTimeoutMin, time.Duration(float64(t.sizeBytes)/MinCopyBytesPerS*float64(time.Second)))
		switch {
		case holds && r.State == metaapi.ContainerClosed && s.cl.healthOf(n, now) != metaapi.HealthDead:
			s.copyDone(t, now)
		case s.cl.healthOf(n, now) == metaapi.HealthDead:
			s.copyFailed(t, "the target is DEAD")
		case holds:
			s.copyFailed(t, fmt.Sprintf("the target reports the container %s", r.State))
		case len(s.cl.replicasOf(cid, now)) == 0:
			s.copyFailed(t, "no healthy replica is left to copy from")
		case now.Sub(t.alive) >= s.cfg.CopyStartTimeout:
			s.copyFailed(t, fmt.Sprintf("the target has not reported the copy under way for %s", now.Sub(t.alive).Round(time.Millisecond)))
		case now.Sub(t.started) >= limit:
			s.copyFailed(t, fmt.Sprintf("not complete after %s (limit %s)", now.Sub(t.started).Round(time.Millisecond), limit))
		}
	}
}

// copyDone records a completed copy.
func (s *Rerepl) copyDone(t *copyTask, now time.Time) {
	delete(s.repl.tasks, t.container)
	delete(s.repl.attempts, t.container)
	s.repl.copiedContainers++
	s.repl.copiedBytes += t.sizeBytes
	s.repl.lastCompleted = now
	d := now.Sub(t.started)
	mbps := 0.0
	if d > 0 {
		mbps = float64(t.sizeBytes) / 1e6 / d.Seconds()
	}
	s.log.Info("container copied", "container", t.container, "source", t.source, "target", t.target,
		"bytes", t.sizeBytes, "took", d.Round(time.Millisecond), "mb_per_s", math.Round(mbps*10)/10, "attempt", t.attempt)
}

// copyFailed drops a copy in flight; the next Tick schedules it again.
func (s *Rerepl) copyFailed(t *copyTask, why string) {
	delete(s.repl.tasks, t.container)
	s.repl.failedCopies++
	s.log.Warn("container copy failed; it will be scheduled again", "container", t.container, "source", t.source,
		"target", t.target, "attempt", t.attempt, "why", why)
}

// scheduleCopies schedules one copy for each CLOSED container with fewer
// healthy replicas than wanted (and at least one), in container ID
// order, within the limits.
func (s *Rerepl) scheduleCopies(idx map[uint64][]uint64, now time.Time) {
	if len(s.repl.tasks) >= s.cfg.MaxInflightCopies {
		return
	}
	var under []uint64
	for cid, c := range s.containers {
		if h := len(idx[cid]); c.rec.State == containerClosed && h+s.dmg.repairing(cid) < s.cfg.ReplicationFactor && s.repl.tasks[cid] == nil &&
			(h > 0 || len(s.cl.replicasOf(cid, now)) > 0) && !s.undecided(c, now) {
			under = append(under, cid)
		}
	}
	if len(under) == 0 {
		return
	}
	slices.Sort(under)
	asSource, asTarget := map[uint64]int{}, map[uint64]int{}
	for _, t := range s.repl.tasks {
		asSource[t.source]++
		asTarget[t.target]++
	}
	nodes := s.cl.sortedNodes()
	for _, cid := range under {
		if len(s.repl.tasks) >= s.cfg.MaxInflightCopies {
			return
		}
		target := s.chooseTarget(cid, nodes, asTarget, now)
		if target == 0 {
			continue
		}
		source := s.chooseSource(cid, s.cl.replicasOf(cid, now), asSource, now)
		if source == 0 {
			continue
		}
		c := s.containers[cid]
		s.repl.attempts[cid]++
		t := &copyTask{container: cid, source: source, target: target, sizeBytes: s.cl.containerSize(c, idx[cid]),
			started: now, alive: now, attempt: s.repl.attempts[cid]}
		s.repl.tasks[cid] = t
		asSource[source]++
		asTarget[target]++
		if s.repl.firstScheduled.IsZero() {
			s.repl.firstScheduled = now
		}
		s.log.Info("container copy scheduled", "container", cid, "source", source, "target", target,
			"bytes", t.sizeBytes, "replicas", idx[cid], "attempt", t.attempt)
	}
}

// undecided says whether a member of c's pipeline has not been heard from
// since the start and is not DEAD yet: it may well hold c (it held it when
// the pipeline wrote it), so no copy is decided before its first report or
// its death (unless an operator forced safe mode off). Without this, a cold start copies every container of the
// datanodes that report last (safe mode ends on a fraction of them).
func (s *Rerepl) undecided(c *containerState, now time.Time) bool {
	p := s.pipelines[c.rec.Pipeline]
	if p == nil || s.repl.forced {
		return false
	}
	for _, m := range p.rec.Members {
		if n := s.nodes[m]; n != nil && !n.seen && s.cl.live(m, now) {
			return true
		}
	}
	return false
}

// chooseTarget picks the node to copy container cid to: HEALTHY, heard
// from since the start, not holding the container in any state, under
// MaxCopiesPerTarget; the fewest copies in flight to it, then the fewest
// containers, then the lowest ID. 0: none. A node still copying the
// container (a copy timed out here but going on there) may be chosen
// again: it ignores the repeated command and its copy counts when done.
func (s *Rerepl) chooseTarget(cid uint64, nodes []uint64, asTarget map[uint64]int, now time.Time) uint64 {
	var best uint64
	for _, id := range nodes {
		n := s.nodes[id]
		if !n.seen || s.cl.healthOf(n, now) != metaapi.HealthHealthy || asTarget[id] >= s.cfg.MaxCopiesPerTarget || !s.cl.inService(id) {
			continue
		}
		if _, holds := n.containers[cid]; holds {
			continue
		}
		if best == 0 || cmp.Or(cmp.Compare(asTarget[id], asTarget[best]), cmp.Compare(len(n.containers), len(s.nodes[best].containers))) < 0 {
			best = id
		}
	}
	return best
}

// recentlyFailed: a copy of cid from source failed within CopyRetryAfter.
func (s *Rerepl) recentlyFailed(cid, source uint64, now time.Time) bool {
	t, ok := s.repl.failed[sourceFailure{cid, source}]
	return ok && now.Sub(t) < s.cfg.CopyRetryAfter
}

// chooseSource picks the replica to copy container cid from, among its
// healthy replicas: HEALTHY, under MaxCopiesPerSource, the fewest copies
// in flight from it, then the lowest ID. Replicas a copy of cid failed
// from within CopyRetryAfter are skipped while another HEALTHY replica
// exists (even a busy one: the copy then waits for it). 0: none.
func (s *Rerepl) chooseSource(cid uint64, replicas []uint64, asSource map[uint64]int, now time.Time) uint64 {
	var fresh, failed []uint64
	for _, id := range replicas {
		if s.cl.healthOf(s.nodes[id], now) != metaapi.HealthHealthy {
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
		if asSource[id] >= s.cfg.MaxCopiesPerSource {
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
func (s *Rerepl) copyReports(n *node, hb *metaapi.Heartbeat, now time.Time) {
	id := n.rec.ID
	before := s.repl.copiedContainers + s.repl.failedCopies
	defer func() {
		if s.repl.copiedContainers+s.repl.failedCopies != before && !s.repl.safeMode {
			s.scheduleCopies(s.cl.replicaIndex(now), now)
		}
	}()
	for _, cid := range hb.Copying {
		if t := s.repl.tasks[cid]; t != nil && t.target == id {
			t.alive = now
		}
	}
	for _, f := range hb.CopyFailures {
		if f.Source != 0 {
			s.repl.failed[sourceFailure{f.Container, f.Source}] = now
		}
		if t := s.repl.tasks[f.Container]; t != nil && t.target == id && !n.copying[f.Container] {
			s.copyFailed(t, fmt.Sprintf("the target reports: from node %d: %s", f.Source, f.Error))
		}
	}
	for _, cid := range slices.Sorted(maps.Keys(s.repl.tasks)) {
		t := s.repl.tasks[cid]
		if r, ok := n.containers[cid]; ok && t.target == id && r.State == metaapi.ContainerClosed {
			s.copyDone(t, now)
		}
	}
}

// replicateCommands appends a replicate_container for every copy in
// flight to node id: Sources are the chosen source, then the other
// healthy replicas (those a copy recently failed from last). A copy with
// no healthy source left is not sent (the next Tick drops it).
func (s *Rerepl) replicateCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	for _, cid := range slices.Sorted(maps.Keys(s.repl.tasks)) {
		t := s.repl.tasks[cid]
		if t.target != id || len(cmds) >= MaxCommandsPerHeartbeat {
			continue
		}
		replicas := s.cl.replicasOf(cid, now)
		slices.SortStableFunc(replicas, func(a, b uint64) int {
			ka, kb := sourceRank(a, t.source, s.recentlyFailed(cid, a, now)), sourceRank(b, t.source, s.recentlyFailed(cid, b, now))
			return ka - kb
		})
		if len(replicas) == 0 {
			continue
		}
		cmd := metaapi.Command{Kind: metaapi.CmdReplicateContainer, Container: cid, SizeBytes: s.cl.containerSize(s.containers[cid], replicas)}
		if p := s.pipelines[s.containers[cid].rec.Pipeline]; p != nil {
			cmd.Pipeline = s.cl.pipelineView(p, now)
		}
		for _, r := range replicas {
			cmd.Sources = append(cmd.Sources, metaapi.Member{NodeID: r, Addr: s.nodes[r].rec.Addr})
		}
		if s.repl.firstDelivered.IsZero() {
			s.repl.firstDelivered = now
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
	idx := s.cl.replicaIndex(now)
	st := &metaapi.ReplicationStatus{SafeMode: s.repl.safeMode, ReplicationFactor: s.cfg.ReplicationFactor,
		Inflight: []metaapi.CopyTask{}, CopiedContainers: s.repl.copiedContainers, CopiedBytes: s.repl.copiedBytes,
		FailedCopies: s.repl.failedCopies, FirstScheduled: s.repl.firstScheduled, LastCompleted: s.repl.lastCompleted,
		FirstDelivered: s.repl.firstDelivered,
		Limits: metaapi.ReplicationLimits{MaxCopiesPerSource: s.cfg.MaxCopiesPerSource, MaxCopiesPerTarget: s.cfg.MaxCopiesPerTarget,
			MaxInflightCopies: s.cfg.MaxInflightCopies, CopyRetryAfterMs: s.cfg.CopyRetryAfter.Milliseconds(),
			CopyTimeoutMinMs: s.cfg.CopyTimeoutMin.Milliseconds(), SafeModeMinNodes: s.cfg.SafeModeMinNodes,
			SafeModeContainerFraction: s.cfg.SafeModeContainerFraction}}
	if st.SafeMode {
		st.SafeModeReason = s.safeModeReason(idx)
		if st.SafeModeReason == "" {
			st.SafeModeReason = "conditions met; leaving at the next tick"
		}
	}
	st.UnderReplicated, st.Unrecoverable, st.PendingBytes = s.underReplicated(idx)
	st.AtRisk = s.atRisk(idx, now)
	st.OverReplicated, st.Trimming, st.TrimmedReplicas = len(s.overReplicated(idx)), len(s.repl.trims), s.repl.trimmed
	st.BehindReplicas = s.cl.behindReplicas(now)
	for _, cid := range slices.Sorted(maps.Keys(s.repl.tasks)) {
		t := s.repl.tasks[cid]
		st.Inflight = append(st.Inflight, metaapi.CopyTask{Container: cid, Source: t.source, Target: t.target,
			SizeBytes: t.sizeBytes, Started: t.started, Attempt: t.attempt})
	}
	if d := st.LastCompleted.Sub(st.FirstScheduled); d > 0 && !st.FirstScheduled.IsZero() {
		st.RateBytesPerS = float64(st.CopiedBytes) / d.Seconds()
	}
	return st
}

// underReplicated counts the CLOSED containers with fewer healthy
// replicas than wanted, those with none, and the bytes still to copy.
func (s *Rerepl) underReplicated(idx map[uint64][]uint64) (under, unrecoverable int, pending uint64) {
	for cid, c := range s.containers {
		h := len(idx[cid])
		if c.rec.State != containerClosed || h >= s.cfg.ReplicationFactor || (h == 0 && c.rec.Committed == 0) {
			// (no replica of a container no key ever used: nothing
			// to lose — its pipeline closed before a write reached it)
			continue
		}
		under++
		if h == 0 && len(s.cl.replicasOf(cid, s.cfg.Now())) == 0 {
			unrecoverable++ // (a decommissioning node's replica is one)
		}
		pending += s.cl.containerSize(c, idx[cid]) * uint64(s.cfg.ReplicationFactor-h)
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
		n := s.nodes[id]
		return n != nil && s.cl.healthOf(n, now) == metaapi.HealthStale
	}
	risk := 0
	for cid, c := range s.containers {
		var replicas []uint64
		switch c.rec.State {
		case containerClosed:
			replicas = idx[cid]
		case containerOpen, containerClosing:
			if p := s.pipelines[c.rec.Pipeline]; p != nil {
				replicas = p.rec.Members
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
	return read(s.State, func() (*metaapi.ReplicationStatus, error) { return s.replicationStatus(s.cfg.Now()), nil })
}

// ExitSafeMode leaves safe mode now, whatever the reports (an operator's
// decision, logged); replication decisions start at the next Tick. Once
// out of safe mode the service stays out until it restarts.
func (s *Rerepl) ExitSafeMode() (*metaapi.ReplicationStatus, error) {
	return mutate(s.State, func() (*metaapi.ReplicationStatus, *pebble.Batch, error) {
		now := s.cfg.Now()
		if s.repl.safeMode {
			why := s.safeModeReason(s.cl.replicaIndex(now))
			s.repl.safeMode, s.repl.forced = false, true
			s.log.Warn("safe mode exited by the operator; replication decisions start", "was_waiting_for", why)
		}
		return s.replicationStatus(now), nil, nil
	})
}

// Rerepl is the re-replication manager of closed containers.
type Rerepl struct {
	*State
	cl  *Cluster
	dmg *Damage
	ops *Ops
}
