package meta

import (
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
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
// An OPEN pipeline nobody serves yet holds its deletions back. A deletion
// delivered the maximum number of times and still not complete
// RedeliverAfter after the last delivery is dropped (logged, counted in
// spindle_meta_deletes_dropped_total): the block stays on disk.

// holders lists the live nodes (members of its pipeline or not: copies
// made by re-replication) whose last report holds container c, by node ID.
func (s *BlockGC) holders(c *containerState, now time.Time) []uint64 {
	var ids []uint64
	for id, n := range s.nodes {
		if _, ok := n.containers[c.rec.ID]; ok && n.seen && s.cl.live(id, now) {
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

func (s *BlockGC) deleteModeOf(c *containerState, now time.Time) deleteMode {
	p := s.pipelines[c.rec.Pipeline]
	m := deleteMode{served: s.cl.served(p, now), ready: true, holders: s.holders(c, now)}
	m.replica = !m.served && p.rec.State == pipelineClosed
	// Any node may hold a copy: until every live one has reported, a
	// holder may be missing from the list.
	for id, n := range s.nodes {
		if !n.seen && s.cl.live(id, now) {
			m.ready = false
			break
		}
	}
	return m
}

// complete: the deletion is done (see the modes above).
func (m deleteMode) complete(pd *pendingDelete) bool {
	switch {
	case m.served:
		return len(pd.acked) > 0
	case !m.replica || !m.ready:
		return false
	}
	for _, h := range m.holders {
		if !pd.acked[h] {
			return false
		}
	}
	return true
}

// exhausted: delivered as often as allowed, not complete, and the last
// delivery is RedeliverAfter old.
func (m deleteMode) exhausted(pd *pendingDelete, maxTries int, redeliver time.Duration, now time.Time) bool {
	tries, last := pd.totals()
	if tries == 0 || now.Sub(last) < redeliver {
		return false
	}
	if m.served {
		return tries >= maxTries
	}
	for _, h := range m.holders {
		if !pd.acked[h] && pd.tries[h] < maxTries {
			return false
		}
	}
	return true
}

// deleteCommands appends the delete_blocks commands due for node id: at
// most MaxDeleteBlocksPerHeartbeat blocks, one command per container.
func (s *BlockGC) deleteCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	budget := MaxDeleteBlocksPerHeartbeat
	for _, cid := range slices.Sorted(maps.Keys(s.deletes)) {
		if budget == 0 || len(cmds) >= MaxCommandsPerHeartbeat {
			break
		}
		c := s.containers[cid]
		p := s.pipelines[c.rec.Pipeline]
		if _, holds := s.nodes[id].containers[cid]; !holds && !slices.Contains(p.rec.Members, id) {
			continue
		}
		mode := s.deleteModeOf(c, now)
		served := mode.served
		switch {
		case served && s.cl.leaderOf(p, now) != id:
			continue
		case !served && (!mode.replica || !slices.Contains(mode.holders, id)):
			continue
		}
		pending := s.deletes[cid]
		var locals []uint64
		for _, local := range slices.Sorted(maps.Keys(pending)) {
			pd := pending[local]
			if pd.acked[id] {
				continue
			}
			if served {
				tries, last := pd.totals()
				if tries >= s.cfg.MaxDeleteAttempts || (tries > 0 && now.Sub(last) < s.cfg.DeleteRedeliverAfter) {
					continue
				}
			} else {
				t, ok := pd.last[id]
				if pd.tries[id] >= s.cfg.MaxDeleteAttempts || (ok && now.Sub(t) < s.cfg.DeleteRedeliverAfter) {
					continue
				}
			}
			if pd.tries == nil {
				pd.tries, pd.last = map[uint64]int{}, map[uint64]time.Time{}
			}
			pd.tries[id]++
			pd.last[id] = now
			locals = append(locals, local)
			if len(locals) == budget {
				break
			}
		}
		if len(locals) == 0 {
			continue
		}
		budget -= len(locals)
		s.metrics.deletesDelivered.Add(float64(len(locals)))
		cmds = append(cmds, metaapi.Command{Kind: metaapi.CmdDeleteBlocks, Pipeline: s.cl.pipelineView(p, now), Container: cid, Blocks: locals})
	}
	return cmds
}

// ackDeletes records node id's acknowledgements and removes the deletions
// they complete.
func (s *BlockGC) ackDeletes(b *pebble.Batch, id uint64, acks []metaapi.BlockRef, now time.Time) {
	for _, r := range acks {
		pd := s.deletes[r.Container][r.Local]
		if pd == nil {
			continue // already complete, or never pending
		}
		c := s.containers[r.Container]
		if _, holds := s.nodes[id].containers[r.Container]; !holds && !slices.Contains(s.pipelines[c.rec.Pipeline].rec.Members, id) {
			continue
		}
		if pd.acked == nil {
			pd.acked = map[uint64]bool{}
		}
		pd.acked[id] = true
		if s.deleteModeOf(c, now).complete(pd) {
			ref := blockRef{r.Container, r.Local}
			del(b, blockKey(prefixDelete, ref.container, ref.local))
			s.removeDelete(ref)
			s.metrics.deletesAcked.Inc()
		}
	}
}

// dropExhaustedDeletes removes the deletions that completed meanwhile (in
// replica mode: a holder died or no live member holds the container) and
// those that ran out of attempts.
func (s *BlockGC) dropExhaustedDeletes(b *pebble.Batch, now time.Time) {
	for _, cid := range slices.Sorted(maps.Keys(s.deletes)) {
		mode := s.deleteModeOf(s.containers[cid], now)
		if !mode.served && !mode.replica {
			continue // held back until the pipeline is served
		}
		for local, pd := range s.deletes[cid] {
			switch {
			case mode.complete(pd):
				s.metrics.deletesAcked.Inc()
			case mode.exhausted(pd, s.cfg.MaxDeleteAttempts, s.cfg.DeleteRedeliverAfter, now):
				tries, _ := pd.totals()
				s.log.Warn("block deletion never acknowledged; giving up (the block stays on disk)",
					"container", cid, "local", local, "deliveries", tries, "reason", reasonName(pd.rec.Reason))
				s.metrics.deletesDropped.Inc()
			default:
				continue
			}
			del(b, blockKey(prefixDelete, cid, local))
			s.removeDelete(blockRef{cid, local})
		}
	}
}

// scheduleDelete adds a pending deletion of block ref to b and memory.
func (s *BlockGC) scheduleDelete(b *pebble.Batch, ref blockRef, reason uint8, now time.Time) {
	rec := deleteRecord{Scheduled: now, Reason: reason}
	set(b, blockKey(prefixDelete, ref.container, ref.local), rec.encode())
	s.addDelete(ref, rec)
	s.metrics.deletesScheduled.WithLabelValues(reasonName(reason)).Inc()
}

// expireAllocations turns allocations older than AllocationGrace (an
// interrupted put) into pending deletions, at most MaxExpiredPerTick.
func (s *BlockGC) expireAllocations(b *pebble.Batch, now time.Time) {
	var expired []blockRef
	for ref, a := range s.allocs {
		if now.Sub(a.Allocated) >= s.cfg.AllocationGrace {
			expired = append(expired, ref)
		}
	}
	slices.SortFunc(expired, func(x, y blockRef) int {
		if x.container != y.container {
			return cmpU64(x.container, y.container)
		}
		return cmpU64(x.local, y.local)
	})
	if len(expired) > MaxExpiredPerTick {
		expired = expired[:MaxExpiredPerTick]
	}
	for _, ref := range expired {
		a := s.allocs[ref]
		del(b, blockKey(prefixAlloc, ref.container, ref.local))
		delete(s.allocs, ref)
		s.scheduleDelete(b, ref, reasonExpired, now)
		s.log.Info("allocated block never committed; scheduled for deletion", "container", ref.container, "local", ref.local,
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
	*State
	cl *Cluster
}
