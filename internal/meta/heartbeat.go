package meta

import (
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Heartbeat registers a datanode (NodeID 0) or records its heartbeat, and
// returns its node ID and the commands for it. A malformed heartbeat is
// refused (ErrInvalid) and changes nothing.
func (s *Service) Heartbeat(hb *metaapi.Heartbeat) (*metaapi.HeartbeatResponse, error) {
	return s.HeartbeatFrom(tlsconf.Peer{}, hb)
}

// HeartbeatFrom is Heartbeat from caller, the verified certificate of the
// connection it came on (the zero Peer: plaintext or in-process, trusted).
// An authenticated caller speaks for the datanode whose UUID its
// certificate registered or first heartbeat under (nodeRecord.CertName);
// a heartbeat for that UUID under another certificate is refused
// (ErrForbidden) and changes nothing: a stolen UUID does not let another
// datanode take over the node's identity or address.
func (s *Service) HeartbeatFrom(caller tlsconf.Peer, hb *metaapi.Heartbeat) (*metaapi.HeartbeatResponse, error) {
	if err := hb.Validate(); err != nil {
		return nil, err
	}
	return mutate(s.State, func() (*metaapi.HeartbeatResponse, *pebble.Batch, error) { return s.heartbeatLocked(caller, hb) })
}

// heartbeatLocked is Heartbeat, validated, under s.mu.
func (s *Service) heartbeatLocked(caller tlsconf.Peer, hb *metaapi.Heartbeat) (*metaapi.HeartbeatResponse, *pebble.Batch, error) {
	now := s.cfg.Now()
	id, known := s.byUUID[hb.UUID]
	if known && caller.Authenticated() {
		if bound := s.nodes[id].rec.CertName; bound != "" && bound != caller.Name {
			s.log.Warn("heartbeat refused: the datanode is bound to another certificate", "node", id, "uuid", hb.UUID,
				"bound_to", bound, "caller", caller.String(), "claimed_addr", hb.Addr)
			return nil, nil, fmt.Errorf("%w: datanode %s (node %d) is bound to certificate %q, not %q", metaapi.ErrForbidden, hb.UUID, id, bound, caller.Name)
		}
	}
	switch {
	case hb.NodeID == 0 && !known:
		if s.ctr.NextNode > MaxNodeID {
			return nil, nil, fmt.Errorf("meta: cannot register datanode %s: all %d node IDs are taken", hb.UUID, MaxNodeID)
		}
	case hb.NodeID == 0:
		// A known UUID always gets its ID back.
	case !known:
		return nil, nil, fmt.Errorf("%w: datanode %s claims node ID %d, but no datanode with that UUID is registered here (a different meta service, or its directory was lost)", metaapi.ErrInvalid, hb.UUID, hb.NodeID)
	case id != hb.NodeID:
		return nil, nil, fmt.Errorf("%w: datanode %s claims node ID %d, but it is registered as node %d", metaapi.ErrInvalid, hb.UUID, hb.NodeID, id)
	}
	// Valid: from here on the heartbeat is applied.
	b := s.db.NewBatch()
	if !known {
		id = s.ctr.NextNode
		s.ctr.NextNode++
		rec := nodeRecord{ID: id, Registered: now, UUID: hb.UUID, Addr: hb.Addr, MetricsURL: hb.MetricsURL, CertName: caller.Name}
		s.nodes[id] = &node{rec: rec, health: metaapi.HealthHealthy}
		s.byUUID[hb.UUID] = id
		set(b, counterKey(), s.ctr.encode())
		set(b, u64key(prefixNode, id), rec.encode())
		s.metrics.registrations.Inc()
		s.log.Info("datanode registered", "node", id, "uuid", hb.UUID, "addr", hb.Addr, "certificate", caller.String())
	}
	n := s.nodes[id]
	if known && caller.Authenticated() && n.rec.CertName == "" {
		// Registered before its certificate was known (plaintext, or a
		// version without bindings): bound by its first heartbeat over TLS.
		s.log.Info("datanode bound to its certificate", "node", id, "uuid", hb.UUID, "certificate", caller.String())
		n.rec.CertName = caller.Name
		set(b, u64key(prefixNode, id), n.rec.encode())
	}
	if n.rec.Addr != hb.Addr || n.rec.MetricsURL != hb.MetricsURL {
		if n.rec.Addr != hb.Addr && known {
			s.log.Warn("datanode address changed; its peers learn the new one from their next heartbeat", "node", id, "old", n.rec.Addr, "new", hb.Addr)
		}
		n.rec.Addr, n.rec.MetricsURL = hb.Addr, hb.MetricsURL
		set(b, u64key(prefixNode, id), n.rec.encode())
	}
	if n.health != metaapi.HealthHealthy {
		s.log.Info("datanode healthy again", "node", id, "was", n.health)
	}
	n.last, n.seen, n.health = now, true, metaapi.HealthHealthy
	n.capacity, n.used, n.available = hb.Capacity, hb.Used, hb.Available
	n.containers = make(map[uint64]metaapi.ContainerReport, len(hb.Containers))
	for _, c := range hb.Containers {
		n.containers[c.ID] = c
	}
	n.pipelines = make(map[uint64]metaapi.PipelineReport, len(hb.Pipelines))
	for _, p := range hb.Pipelines {
		n.pipelines[p.ID] = p
	}
	n.copying = make(map[uint64]bool, len(hb.Copying))
	for _, cid := range hb.Copying {
		n.copying[cid] = true
	}
	s.copyReports(n, hb, now)
	if hb.Scrub != nil {
		s.repl.damage.scrub[id] = *hb.Scrub
	}
	s.volumesFailed(b, n, hb.FailedVolumes, now) // ops.go
	// A leader that can no longer catch a member up from its log (it is
	// behind the compacted log): the pipeline cannot give that replica
	// what it misses, so it is closed; the member leaves at once, closes
	// its replica by itself, and the replica (behind by its BCSID) is
	// replaced by a copy of a complete one.
	for _, pr := range hb.Pipelines {
		p := s.pipelines[pr.ID]
		if p == nil || len(pr.Behind) == 0 || pr.LeaderID != id {
			continue
		}
		for _, m := range pr.Behind {
			if !slices.Contains(p.rec.Members, m) || m == id || p.behind[m] {
				continue
			}
			if p.behind == nil {
				p.behind = map[uint64]bool{}
			}
			p.behind[m] = true
			s.metrics.membersBehind.Inc()
			if p.rec.State == pipelineOpen {
				s.closePipeline(b, p, now, fmt.Sprintf("member %d is behind leader %d's compacted log: it needs a container copy", m, id))
			}
		}
	}
	// A member whose replica failed left its pipeline without
	// acknowledging: the pipeline goes on with fewer replicas than it
	// claims, so it is closed (its containers are copied once CLOSED).
	for _, f := range hb.FailedPipelines {
		p := s.pipelines[f.ID]
		if p == nil || p.rec.State != pipelineOpen || !slices.Contains(p.rec.Members, id) {
			continue
		}
		s.metrics.replicaFailures.Inc()
		s.closePipeline(b, p, now, fmt.Sprintf("member %d's replica failed (container %d): %s", id, f.Container, f.Reason))
	}
	s.metrics.heartbeats.Inc()
	// Containers the reports say are full, closed or damaged stop taking
	// blocks.
	for _, r := range hb.Containers {
		c := s.containers[r.ID]
		if c == nil || c.rec.State != containerOpen {
			continue
		}
		switch {
		case r.State != metaapi.ContainerOpen:
			s.startClose(b, c, fmt.Sprintf("node %d reports it %s", id, r.State))
		case r.UsedBytes >= s.fullBytes():
			s.startClose(b, c, fmt.Sprintf("node %d reports %d bytes used", id, r.UsedBytes))
		}
	}
	s.ackDeletes(b, id, hb.DeletedBlocks, now)
	return &metaapi.HeartbeatResponse{NodeID: id, Commands: s.commandsFor(n, now), Peers: s.peersOf(n)}, b, nil
}

// commandsFor builds the commands for node n (its heartbeat was just
// applied): joins, closes, copies, deletes, leaves, at most
// MaxCommandsPerHeartbeat.
func (s *Service) commandsFor(n *node, now time.Time) []metaapi.Command {
	id := n.rec.ID
	var cmds []metaapi.Command
	full := func() bool { return len(cmds) >= MaxCommandsPerHeartbeat }
	pids := s.sortedPipelines()
	// Join the OPEN pipelines it is a member of and does not serve.
	for _, pid := range pids {
		p := s.pipelines[pid]
		if p.rec.State == pipelineOpen && slices.Contains(p.rec.Members, id) && !s.reports(id, pid) && !full() {
			cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdJoinPipeline, Pipeline: s.pipelineView(p, now)})
		}
	}
	// Close containers that are CLOSING or CLOSED in the meta service and
	// still OPEN on a live replica: through the leader, or every such
	// replica when no leader is known.
	for _, pid := range pids {
		p := s.pipelines[pid]
		if !slices.Contains(p.rec.Members, id) {
			continue
		}
		// A member that no longer serves the pipeline (it left, or was
		// behind) cannot get the close through raft: it closes its own
		// replica.
		leader, serving := s.leaderOf(p, now), s.reports(id, pid)
		if leader != 0 && leader != id && serving {
			continue
		}
		for _, cid := range p.containers {
			c := s.containers[cid]
			if c.rec.State == containerOpen || full() {
				continue
			}
			open := s.reportedOpen(c, now)
			if len(open) == 0 || ((leader == 0 || !serving) && !slices.Contains(open, id)) {
				continue
			}
			if t, ok := c.lastClose[id]; ok && now.Sub(t) < s.cfg.CloseResendAfter {
				continue
			}
			if c.lastClose == nil {
				c.lastClose = map[uint64]time.Time{}
			}
			c.lastClose[id] = now
			cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdCloseContainer, Pipeline: s.pipelineView(p, now), Container: cid})
		}
	}
	cmds = s.replicateCommands(cmds, id, now)
	cmds = s.repairCommands(cmds, id, now)
	cmds = s.trimCommands(cmds, id, now)
	cmds = s.deleteCommands(cmds, id, now)
	// Leave the CLOSED pipelines it still serves, once none of their
	// containers is OPEN on a live replica (or after LeaveTimeout).
	for _, pid := range pids {
		p := s.pipelines[pid]
		if p.rec.State != pipelineClosed || !s.reports(id, pid) || full() {
			continue
		}
		if now.Sub(p.rec.Closed) < s.cfg.LeaveTimeout && s.anyOpenReplica(p, now) && !p.behind[id] {
			continue
		}
		cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdLeavePipeline, Pipeline: s.pipelineView(p, now)})
	}
	s.metrics.commands.Add(float64(len(cmds)))
	return cmds
}

// Tick runs one round of the cluster manager at the clock's time: health
// from the last heartbeats, pipelines with a DEAD member, or a majority of
// members STALE, closed (their
// OPEN containers closing), new pipelines where possible, CLOSING
// containers no live replica reports OPEN marked CLOSED, allocations
// older than AllocationGrace scheduled for deletion, deletions that ran
// out of attempts dropped, then the replication manager's round (safe
// mode, copies settled and scheduled). Start runs it every TickInterval;
// tests call it.
func (s *Service) Tick() error {
	_, err := mutate(s.State, func() (struct{}, *pebble.Batch, error) { return struct{}{}, s.tickLocked(), nil })
	return err
}

// tickLocked is Tick under s.mu; it returns the batch of its changes.
func (s *Service) tickLocked() *pebble.Batch {
	now := s.cfg.Now()
	b := s.db.NewBatch()
	for _, id := range s.sortedNodes() {
		n := s.nodes[id]
		if h := s.healthOf(n, now); h != n.health {
			s.log.Info("datanode health changed", "node", id, "from", n.health, "to", h, "last_heartbeat", n.last)
			n.health = h
		}
	}
	for _, pid := range s.sortedPipelines() {
		p := s.pipelines[pid]
		if p.rec.State != pipelineOpen {
			continue
		}
		var silent []uint64 // STALE or DEAD members
		for _, m := range p.rec.Members {
			if s.healthOf(s.nodes[m], now) != metaapi.HealthHealthy {
				silent = append(silent, m)
			}
		}
		if len(silent) > len(p.rec.Members)/2 {
			// A raft majority silent: nothing commits on it until they
			// return. Closing it now, not when they are DEAD, frees the
			// live members' slots for a pipeline that can write (with two
			// of five datanodes killed, the three others make one within
			// StaleAfter instead of DeadAfter). Its containers close as
			// for a DEAD member's.
			s.closePipeline(b, p, now, fmt.Sprintf("members %v of %v silent (STALE or DEAD): a raft majority lost", silent, p.rec.Members))
			continue
		}
		for _, m := range p.rec.Members {
			n := s.nodes[m]
			if s.healthOf(n, now) == metaapi.HealthDead {
				s.closePipeline(b, p, now, fmt.Sprintf("member %d is DEAD", m))
				break
			}
			if s.full(n) {
				s.closePipeline(b, p, now, fmt.Sprintf("member %d is full: %d bytes available, below %d", m, n.available, s.cfg.MinAvailableBytes))
				break
			}
		}
	}
	s.opsTick(b, now) // ops.go
	s.createPipelines(b, now)
	s.settleContainers(b, now)
	s.expireAllocations(b, now)
	s.dropExhaustedDeletes(b, now)
	if err := s.expireCommitIDs(b, now); err != nil { // commitid.go
		s.log.Error("forgetting old commit IDs", "err", err)
	}
	s.replicate(now)
	return b
}
