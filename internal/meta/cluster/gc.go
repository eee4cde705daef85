package cluster

import (
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/holdmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Block deletion (see the package comment, "Deleting blocks"): a pending
// deletion is delivered in two modes.
//
//   - served: some live member still runs the pipeline's raft group. The
//     deletion goes to the leader the reports name (none known: wait);
//     one acknowledgement from any member completes it (the DeleteBlock
//     went through raft). At most MaxDeleteAttempts deliveries in all,
//     RedeliverAfter apart.
//   - replica: the pipeline is CLOSED and nobody serves it. Every live
//     node whose report holds the container (a member, or the target of a
//     re-replication) gets the deletion and deletes its own replica; it
//     completes once each of them has acknowledged, and every live node
//     has reported since the start. At most MaxDeleteAttempts deliveries
//     per node.
//
// An OPEN pipeline nobody serves yet holds its deletions back. The
// deletions of an erasure-coded container (Coded) are neither delivered
// nor completed here (nor those of a container being converted): its
// blocks are in its shards, and its compaction (package ecmeta) completes
// them when it rewrites the container without them. A deletion
// delivered the maximum number of times and still not complete
// RedeliverAfter after the last delivery is dropped (logged, counted in
// spindle_meta_deletes_dropped_total): the block stays on disk.

// holders lists the live nodes (members of its pipeline or not: copies
// made by re-replication) whose last report holds container c, by node ID.
func (s *BlockGC) holders(c *state.ContainerState, now time.Time) []uint64 {
	var ids []uint64
	for id, n := range s.NodeByID {
		if _, ok := n.Containers[c.Rec.ID]; ok && n.Seen && s.cl.Live(id, now) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// deleteMode is how the deletions of one container are delivered now.
type deleteMode struct {
	served  bool     // the pipeline's raft group runs: through its leader
	replica bool     // CLOSED and served by nobody: per replica
	ready   bool     // every live node has reported since the start
	holders []uint64 // live nodes whose report holds the container
}

func (s *BlockGC) deleteModeOf(c *state.ContainerState, now time.Time) deleteMode {
	p := s.PipelineByID[c.Rec.Pipeline]
	m := deleteMode{served: s.cl.served(p, now), ready: true, holders: s.holders(c, now)}
	m.replica = !m.served && p.Rec.State == state.PipelineClosed
	// Any node may hold a copy: until every live one has reported, a
	// holder may be missing from the list.
	for id, n := range s.NodeByID {
		if !n.Seen && s.cl.Live(id, now) {
			m.ready = false
			break
		}
	}
	return m
}

// complete: the deletion is done (see the modes above).
func (m deleteMode) complete(pd *state.PendingDelete) bool {
	switch {
	case m.served:
		return len(pd.Acked) > 0
	case !m.replica || !m.ready:
		return false
	}
	for _, h := range m.holders {
		if !pd.Acked[h] {
			return false
		}
	}
	return true
}

// exhausted: delivered as often as allowed, not complete, and the last
// delivery is RedeliverAfter old.
func (m deleteMode) exhausted(pd *state.PendingDelete, maxTries int, redeliver time.Duration, now time.Time) bool {
	tries, last := pd.Totals()
	if tries == 0 || now.Sub(last) < redeliver {
		return false
	}
	if m.served {
		return tries >= maxTries
	}
	for _, h := range m.holders {
		if !pd.Acked[h] && pd.Tries[h] < maxTries {
			return false
		}
	}
	return true
}

// deleteCommands appends the hold_blocks commands due for node id
// (object lock holds, package holdmeta: before the deletions, so that a
// release lands first), then its delete_blocks: at most
// MaxDeleteBlocksPerHeartbeat blocks, one command per container.
func (s *BlockGC) DeleteCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	// (at most half the slots left: deletions and leaves are not starved)
	cmds, err := s.Holds.Commands(cmds, s.NodeByID[id], now, s.Cfg.DeleteRedeliverAfter, len(cmds)+(state.MaxCommandsPerHeartbeat-len(cmds))/2)
	if err != nil {
		s.Log.Error("object lock holds for a datanode", "node", id, "err", err)
	}
	budget := state.MaxDeleteBlocksPerHeartbeat
	for _, cid := range slices.Sorted(maps.Keys(s.Deletes)) {
		if budget == 0 || len(cmds) >= state.MaxCommandsPerHeartbeat {
			break
		}
		c := s.ContainerByID[cid]
		p := s.PipelineByID[c.Rec.Pipeline]
		if _, holds := s.NodeByID[id].Containers[cid]; !holds && !slices.Contains(p.Rec.Members, id) || s.coded(cid) {
			continue
		}
		mode := s.deleteModeOf(c, now)
		served := mode.served
		switch {
		case served && s.cl.LeaderOf(p, now) != id:
			continue
		case !served && (!mode.replica || !slices.Contains(mode.holders, id)):
			continue
		}
		pending := s.Deletes[cid]
		var locals []uint64
		for _, local := range slices.Sorted(maps.Keys(pending)) {
			pd := pending[local]
			if pd.Acked[id] || s.Holds.Releasing(state.BlockRef{Container: cid, Local: local}, mode.holders) {
				continue
			}
			if served {
				tries, last := pd.Totals()
				if tries >= s.Cfg.MaxDeleteAttempts || (tries > 0 && now.Sub(last) < s.Cfg.DeleteRedeliverAfter) {
					continue
				}
			} else {
				t, ok := pd.Last[id]
				if pd.Tries[id] >= s.Cfg.MaxDeleteAttempts || (ok && now.Sub(t) < s.Cfg.DeleteRedeliverAfter) {
					continue
				}
			}
			if pd.Tries == nil {
				pd.Tries, pd.Last = map[uint64]int{}, map[uint64]time.Time{}
			}
			pd.Tries[id]++
			pd.Last[id] = now
			locals = append(locals, local)
			if len(locals) == budget {
				break
			}
		}
		if len(locals) == 0 {
			continue
		}
		budget -= len(locals)
		s.Metrics.DeletesDelivered.Add(float64(len(locals)))
		cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdDeleteBlocks, Pipeline: s.cl.PipelineView(p, now), Container: cid, Blocks: locals})
	}
	return cmds
}

// ackDeletes records node id's acknowledgements of hb: of holds
// (holdmeta), and of deletions, removing those they complete.
func (s *BlockGC) AckDeletes(b *pebble.Batch, id uint64, hb *metaapi.Heartbeat, now time.Time) {
	s.Holds.Ack(id, hb.HeldBlocks)
	for _, r := range hb.DeletedBlocks {
		pd := s.Deletes[r.Container][r.Local]
		if pd == nil || s.coded(r.Container) {
			continue // already complete, or never pending; or its compaction's
		}
		c := s.ContainerByID[r.Container]
		if _, holds := s.NodeByID[id].Containers[r.Container]; !holds && !slices.Contains(s.PipelineByID[c.Rec.Pipeline].Rec.Members, id) {
			continue
		}
		if pd.Acked == nil {
			pd.Acked = map[uint64]bool{}
		}
		pd.Acked[id] = true
		if s.deleteModeOf(c, now).complete(pd) {
			ref := state.BlockRef{Container: r.Container, Local: r.Local}
			state.Del(b, state.BlockKey(state.PrefixDelete, ref.Container, ref.Local))
			s.RemoveDelete(ref)
			s.Metrics.DeletesAcked.Inc()
		}
	}
}

// dropExhaustedDeletes removes the deletions that completed meanwhile (in
// replica mode: a holder died or no live member holds the container) and
// those that ran out of attempts.
func (s *BlockGC) DropExhaustedDeletes(b *pebble.Batch, now time.Time) {
	if err := s.Holds.Sweep(b, now); err != nil { // object lock holds ended long ago
		s.Log.Error("sweeping object lock holds", "err", err)
	}
	for _, cid := range slices.Sorted(maps.Keys(s.Deletes)) {
		mode := s.deleteModeOf(s.ContainerByID[cid], now)
		if !mode.served && !mode.replica || s.coded(cid) {
			continue // held back until the pipeline is served; or its compaction's
		}
		for local, pd := range s.Deletes[cid] {
			switch {
			case mode.complete(pd):
				s.Metrics.DeletesAcked.Inc()
			case mode.exhausted(pd, s.Cfg.MaxDeleteAttempts, s.Cfg.DeleteRedeliverAfter, now):
				tries, _ := pd.Totals()
				s.Log.Warn("block deletion never acknowledged; giving up (the block stays on disk)",
					"container", cid, "local", local, "deliveries", tries, "reason", state.ReasonName(pd.Rec.Reason))
				s.Metrics.DeletesDropped.Inc()
			default:
				continue
			}
			state.Del(b, state.BlockKey(state.PrefixDelete, cid, local))
			s.RemoveDelete(state.BlockRef{Container: cid, Local: local})
		}
	}
}

// scheduleDelete adds a pending deletion of block ref to b and memory.
func (s *BlockGC) ScheduleDelete(b *pebble.Batch, ref state.BlockRef, reason uint8, now time.Time) {
	rec := state.DeleteRecord{Scheduled: now, Reason: reason}
	state.Set(b, state.BlockKey(state.PrefixDelete, ref.Container, ref.Local), rec.Encode())
	s.AddDelete(ref, rec)
	s.Metrics.DeletesScheduled.WithLabelValues(state.ReasonName(reason)).Inc()
}

// expireAllocations turns allocations older than AllocationGrace (an
// interrupted put) into pending deletions, at most MaxExpiredPerTick.
func (s *BlockGC) ExpireAllocations(b *pebble.Batch, now time.Time) {
	var expired []state.BlockRef
	for ref, a := range s.Allocs {
		if now.Sub(a.Allocated) >= s.Cfg.AllocationGrace {
			expired = append(expired, ref)
		}
	}
	slices.SortFunc(expired, func(x, y state.BlockRef) int {
		if x.Container != y.Container {
			return cmpU64(x.Container, y.Container)
		}
		return cmpU64(x.Local, y.Local)
	})
	if len(expired) > state.MaxExpiredPerTick {
		expired = expired[:state.MaxExpiredPerTick]
	}
	for _, ref := range expired {
		a := s.Allocs[ref]
		state.Del(b, state.BlockKey(state.PrefixAlloc, ref.Container, ref.Local))
		delete(s.Allocs, ref)
		s.ScheduleDelete(b, ref, state.ReasonExpired, now)
		s.Log.Info("allocated block never committed; scheduled for deletion", "container", ref.Container, "local", ref.Local,
			"bucket", a.Bucket, "key", a.Key, "allocated", a.Allocated)
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// BlockGC schedules and delivers block deletions.
type BlockGC struct {
	*state.State
	cl *Cluster
	// Holds delivers the object lock holds to the datanodes (holdmeta).
	Holds *holdmeta.Holds
	// Coded, when set (before the first heartbeat), says a container is
	// erasure-coded or being converted: its deletions are its
	// compaction's (under State.Mu).
	Coded func(cid uint64) bool
}

func (s *BlockGC) coded(cid uint64) bool { return s.Coded != nil && s.Coded(cid) }

// NewBlockGC is the block deletions of cl's cluster.
func NewBlockGC(st *state.State, cl *Cluster) *BlockGC {
	return &BlockGC{State: st, cl: cl, Holds: holdmeta.New(st)}
}
