package meta

import (
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/state"
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
	return state.MutateControl(s.State, func() (*metaapi.HeartbeatResponse, *pebble.Batch, error) { return s.heartbeatLocked(caller, hb) })
}

// heartbeatLocked is Heartbeat, validated, under s.mu.
func (s *Service) heartbeatLocked(caller tlsconf.Peer, hb *metaapi.Heartbeat) (*metaapi.HeartbeatResponse, *pebble.Batch, error) {
	now := s.Cfg.Now()
	if err := s.removedHeartbeat(hb); err != nil { // remove_api.go
		return nil, nil, err
	}
	id, known := s.NodeByUUID[hb.UUID]
	if known && caller.Authenticated() {
		if bound := s.NodeByID[id].Rec.CertName; bound != "" && bound != caller.Name {
			s.Log.Warn("heartbeat refused: the datanode is bound to another certificate", "node", id, "uuid", hb.UUID,
				"bound_to", bound, "caller", caller.String(), "claimed_addr", hb.Addr)
			return nil, nil, fmt.Errorf("%w: datanode %s (node %d) is bound to certificate %q, not %q", metaapi.ErrForbidden, hb.UUID, id, bound, caller.Name)
		}
	}
	switch {
	case hb.NodeID == 0 && !known:
		if s.Ctr.NextNode > state.MaxNodeID {
			return nil, nil, fmt.Errorf("meta: cannot register datanode %s: all %d node IDs are taken", hb.UUID, state.MaxNodeID)
		}
	case hb.NodeID == 0:
		// A known UUID always gets its ID back.
	case !known:
		return nil, nil, fmt.Errorf("%w: datanode %s claims node ID %d, but no datanode with that UUID is registered here (a different meta service, or its directory was lost)", metaapi.ErrInvalid, hb.UUID, hb.NodeID)
	case id != hb.NodeID:
		return nil, nil, fmt.Errorf("%w: datanode %s claims node ID %d, but it is registered as node %d", metaapi.ErrInvalid, hb.UUID, hb.NodeID, id)
	}
	// Valid: from here on the heartbeat is applied.
	b := s.Store.NewBatch()
	if !known {
		id = s.Ctr.NextNode
		s.Ctr.NextNode++
		rec := state.NodeRecord{ID: id, Registered: now, UUID: hb.UUID, Addr: hb.Addr, MetricsURL: hb.MetricsURL, CertName: caller.Name}
		s.NodeByID[id] = &state.Node{Rec: rec, Health: metaapi.HealthHealthy}
		s.NodeByUUID[hb.UUID] = id
		state.Set(b, state.CounterKey(), s.Ctr.Encode())
		state.Set(b, state.U64Key(state.PrefixNode, id), rec.Encode())
		s.Metrics.Registrations.Inc()
		s.Log.Info("datanode registered", "node", id, "uuid", hb.UUID, "addr", hb.Addr, "certificate", caller.String())
	}
	n := s.NodeByID[id]
	if known && caller.Authenticated() && n.Rec.CertName == "" {
		// Registered before its certificate was known (plaintext, or a
		// version without bindings): bound by its first heartbeat over TLS.
		s.Log.Info("datanode bound to its certificate", "node", id, "uuid", hb.UUID, "certificate", caller.String())
		n.Rec.CertName = caller.Name
		state.Set(b, state.U64Key(state.PrefixNode, id), n.Rec.Encode())
	}
	if n.Rec.Addr != hb.Addr || n.Rec.MetricsURL != hb.MetricsURL {
		if n.Rec.Addr != hb.Addr && known {
			s.Log.Warn("datanode address changed; its peers learn the new one from their next heartbeat", "node", id, "old", n.Rec.Addr, "new", hb.Addr)
		}
		n.Rec.Addr, n.Rec.MetricsURL = hb.Addr, hb.MetricsURL
		state.Set(b, state.U64Key(state.PrefixNode, id), n.Rec.Encode())
	}
	if n.Health != metaapi.HealthHealthy {
		s.Log.Info("datanode healthy again", "node", id, "was", n.Health)
	}
	n.Last, n.Seen, n.Health = now, true, metaapi.HealthHealthy
	n.Capacity, n.Used, n.Available, n.ReadOnly = hb.Capacity, hb.Used, hb.Available, hb.ReadOnlyVolumes
	n.Containers = make(map[uint64]metaapi.ContainerReport, len(hb.Containers))
	for _, c := range hb.Containers {
		n.Containers[c.ID] = c
	}
	n.Pipelines = make(map[uint64]metaapi.PipelineReport, len(hb.Pipelines))
	for _, p := range hb.Pipelines {
		n.Pipelines[p.ID] = p
	}
	n.Copying = make(map[uint64]bool, len(hb.Copying))
	for _, cid := range hb.Copying {
		n.Copying[cid] = true
	}
	s.CopyReports(n, hb, now)
	if hb.Scrub != nil {
		s.Repair.Damage.Scrub[id] = *hb.Scrub
	}
	s.VolumesFailed(b, n, hb.FailedVolumes, now) // ops.go
	// A leader that can no longer catch a member up from its log (it is
	// behind the compacted log): the pipeline cannot give that replica
	// what it misses, so it is closed; the member leaves at once, closes
	// its replica by itself, and the replica (behind by its BCSID) is
	// replaced by a copy of a complete one.
	for _, pr := range hb.Pipelines {
		p := s.PipelineByID[pr.ID]
		if p == nil || len(pr.Behind) == 0 || pr.LeaderID != id {
			continue
		}
		for _, m := range pr.Behind {
			if !slices.Contains(p.Rec.Members, m) || m == id || p.Behind[m] {
				continue
			}
			if p.Behind == nil {
				p.Behind = map[uint64]bool{}
			}
			p.Behind[m] = true
			s.Metrics.MembersBehind.Inc()
			if p.Rec.State == state.PipelineOpen {
				s.ClosePipeline(b, p, now, fmt.Sprintf("member %d is behind leader %d's compacted log: it needs a container copy", m, id))
			}
		}
	}
	// A member whose replica failed left its pipeline without
	// acknowledging: the pipeline goes on with fewer replicas than it
	// claims, so it is closed (its containers are copied once CLOSED).
	for _, f := range hb.FailedPipelines {
		p := s.PipelineByID[f.ID]
		if p == nil || p.Rec.State != state.PipelineOpen || !slices.Contains(p.Rec.Members, id) {
			continue
		}
		s.Metrics.ReplicaFailures.Inc()
		s.ClosePipeline(b, p, now, fmt.Sprintf("member %d's replica failed (container %d): %s", id, f.Container, f.Reason))
	}
	s.Metrics.Heartbeats.Inc()
	// Containers the reports say are full, closed or damaged stop taking
	// blocks.
	for _, r := range hb.Containers {
		c := s.ContainerByID[r.ID]
		if c == nil || c.Rec.State != state.ContainerOpen {
			continue
		}
		switch {
		case r.State != metaapi.ContainerOpen:
			s.StartClose(b, c, fmt.Sprintf("node %d reports it %s", id, r.State))
		case r.UsedBytes >= s.FullBytes():
			s.StartClose(b, c, fmt.Sprintf("node %d reports %d bytes used", id, r.UsedBytes))
		}
	}
	s.AckDeletes(b, id, hb, now) // and holds (holdmeta)
	resp := &metaapi.HeartbeatResponse{NodeID: id, Commands: s.commandsFor(n, now), Peers: s.PeersOf(n)}
	s.tokens.HeartbeatLocked(b, now, caller, resp) // block tokens (tokenkeys)
	return resp, b, nil
}

// commandsFor builds the commands for node n (its heartbeat was just
// applied): joins, closes, copies, deletes, leaves, at most
// MaxCommandsPerHeartbeat.
func (s *Service) commandsFor(n *state.Node, now time.Time) []metaapi.Command {
	id := n.Rec.ID
	var cmds []metaapi.Command
	full := func() bool { return len(cmds) >= state.MaxCommandsPerHeartbeat }
	pids := s.SortedPipelines()
	// Join the OPEN pipelines it is a member of and does not serve.
	for _, pid := range pids {
		p := s.PipelineByID[pid]
		if p.Rec.State == state.PipelineOpen && slices.Contains(p.Rec.Members, id) && !s.Reports(id, pid) && !full() {
			cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdJoinPipeline, Pipeline: s.PipelineView(p, now)})
		}
	}
	// Close containers that are CLOSING or CLOSED in the meta service and
	// still OPEN on a live replica: through the leader, or every such
	// replica when no leader is known.
	for _, pid := range pids {
		p := s.PipelineByID[pid]
		if !slices.Contains(p.Rec.Members, id) {
			continue
		}
		// A member that no longer serves the pipeline (it left, or was
		// behind) cannot get the close through raft: it closes its own
		// replica.
		leader, serving := s.LeaderOf(p, now), s.Reports(id, pid)
		if leader != 0 && leader != id && serving {
			continue
		}
		for _, cid := range p.Containers {
			c := s.ContainerByID[cid]
			if c.Rec.State == state.ContainerOpen || full() {
				continue
			}
			open := s.ReportedOpen(c, now)
			if len(open) == 0 || ((leader == 0 || !serving) && !slices.Contains(open, id)) {
				continue
			}
			if t, ok := c.LastClose[id]; ok && now.Sub(t) < s.Cfg.CloseResendAfter {
				continue
			}
			if c.LastClose == nil {
				c.LastClose = map[uint64]time.Time{}
			}
			c.LastClose[id] = now
			cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdCloseContainer, Pipeline: s.PipelineView(p, now), Container: cid})
		}
	}
	cmds = s.ReplicateCommands(cmds, id, now)
	cmds = s.RepairCommands(cmds, id, now)
	cmds = s.TrimCommands(cmds, id, now)
	cmds = s.DeleteCommands(cmds, id, now)
	// Leave the CLOSED pipelines it still serves, once none of their
	// containers is OPEN on a live replica (or after LeaveTimeout).
	for _, pid := range pids {
		p := s.PipelineByID[pid]
		if p.Rec.State != state.PipelineClosed || !s.Reports(id, pid) || full() {
			continue
		}
		if now.Sub(p.Rec.Closed) < s.Cfg.LeaveTimeout && s.AnyOpenReplica(p, now) && !p.Behind[id] {
			continue
		}
		cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdLeavePipeline, Pipeline: s.PipelineView(p, now)})
	}
	s.Metrics.Commands.Add(float64(len(cmds)))
	return cmds
}

// Tick runs one round of the cluster manager at the clock's time: health
// from the last heartbeats, pipelines with a DEAD member (unless kept
// degraded: cluster/degraded.go), or a majority of members STALE, closed
// (their OPEN containers closing), new pipelines where possible, CLOSING
// containers no live replica reports OPEN marked CLOSED, allocations
// older than AllocationGrace scheduled for deletion, deletions that ran
// out of attempts dropped, then the replication manager's round (safe
// mode, copies settled and scheduled). Start runs it every TickInterval;
// tests call it.
func (s *Service) Tick() error {
	_, err := state.MutateControl(s.State, func() (struct{}, *pebble.Batch, error) { return struct{}{}, s.tickLocked(), nil })
	return err
}

// tickLocked is Tick under s.mu; it returns the batch of its changes.
func (s *Service) tickLocked() *pebble.Batch {
	now := s.Cfg.Now()
	b := s.Store.NewBatch()
	for _, id := range s.SortedNodes() {
		n := s.NodeByID[id]
		if h := s.HealthOf(n, now); h != n.Health {
			s.Log.Info("datanode health changed", "node", id, "from", n.Health, "to", h, "last_heartbeat", n.Last)
			n.Health = h
		}
	}
	for _, pid := range s.SortedPipelines() {
		p := s.PipelineByID[pid]
		if p.Rec.State != state.PipelineOpen {
			continue
		}
		var silent []uint64 // STALE or DEAD members
		for _, m := range p.Rec.Members {
			if s.HealthOf(s.NodeByID[m], now) != metaapi.HealthHealthy {
				silent = append(silent, m)
			}
		}
		if len(silent) > len(p.Rec.Members)/2 {
			// A raft majority silent: nothing commits on it until they
			// return. Closing it now, not when they are DEAD, frees the
			// live members' slots for a pipeline that can write (with two
			// of five datanodes killed, the three others make one within
			// StaleAfter instead of DeadAfter). Its containers close as
			// for a DEAD member's.
			s.ClosePipeline(b, p, now, fmt.Sprintf("members %v of %v silent (STALE or DEAD): a raft majority lost", silent, p.Rec.Members))
			continue
		}
		// A DEAD member: closed, unless no replacement exists and
		// enough members live (cluster/degraded.go).
		if s.CloseDead(b, p, now) && p.Rec.State != state.PipelineOpen {
			continue
		}
		for _, m := range p.Rec.Members {
			n := s.NodeByID[m]
			if s.Full(n) && s.HealthOf(n, now) != metaapi.HealthDead { // (a DEAD one's report is old)
				s.ClosePipeline(b, p, now, fmt.Sprintf("member %d is full: %d bytes available, below %d", m, n.Available, s.Cfg.MinAvailableBytes))
				break
			}
		}
	}
	s.OpsTick(b, now) // ops.go
	s.CreatePipelines(b, now)
	s.SettleContainers(b, now)
	s.ExpireAllocations(b, now)
	s.DropExhaustedDeletes(b, now)
	if err := s.ExpireCommitIDs(b, now); err != nil { // commitid.go
		s.Log.Error("forgetting old commit IDs", "err", err)
	}
	s.Replicate(now)
	return b
}
