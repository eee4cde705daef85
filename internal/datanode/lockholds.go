package datanode

import (
	"fmt"
	"sync/atomic"

	"github.com/spindle-store/spindle/internal/datanode/holds"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
)

// Object lock holds (issue 35 item 2, package holds): the engine refuses
// the deletion of a held block whatever path asks for it (its
// DeleteGuard), the heartbeater keeps the holds the meta service sends
// (hold_blocks) and acknowledges them once durable, and refuses to delete
// a replica holding a held block.

// lockGuard is the engine's DeleteGuard: the holds once loaded (Run opens
// them after the log), every deletion refused before (fail closed).
type lockGuard struct{ s atomic.Pointer[holds.Store] }

func (g *lockGuard) check(b engine.BlockID) error {
	s := g.s.Load()
	if s == nil {
		return fmt.Errorf("%w: the holds are not loaded yet", holds.ErrHeld)
	}
	return s.Check(uint64(b.Container), b.Local)
}

// maxPendingHoldAcks bounds the hold acknowledgements kept between
// heartbeats (beyond: dropped; the meta service sends the hold again).
const maxPendingHoldAcks = 4 * holdapi.MaxAcks

// hold keeps the holds of the hold_blocks among cmds (a heartbeat
// answer's), durably, one file write per container, before any other
// command of the answer runs (a release comes before the deletion it
// allows), and queues their acknowledgements; on a failure nothing of
// that container is acknowledged (sent again).
func (h *heartbeater) hold(cmds []metaapi.Command) {
	var order []uint64
	entries := map[uint64][]holds.Entry{}
	for _, c := range cmds {
		if c.Kind != holdapi.Kind {
			continue
		}
		if h.holds == nil || c.Hold == nil {
			h.log.Warn("hold_blocks not kept: no holds store, or no hold", "container", c.Container)
			continue
		}
		if _, ok := entries[c.Container]; !ok {
			order = append(order, c.Container)
		}
		for _, b := range c.Blocks {
			entries[c.Container] = append(entries[c.Container], holds.Entry{Local: b, Hold: *c.Hold})
		}
	}
	for _, cid := range order {
		if err := h.holds.Apply(cid, entries[cid]); err != nil {
			h.log.Error("keeping object lock holds", "container", cid, "blocks", len(entries[cid]), "err", err)
			continue
		}
		acks := make([]holdapi.Ack, len(entries[cid]))
		for i, e := range entries[cid] {
			acks[i] = holdapi.Ack{Container: cid, Local: e.Local, Hold: e.Hold}
		}
		h.held.add(acks...)
	}
}

// heldReplica refuses (logged) the deletion of a replica of container
// holding a block under a hold in force.
func (h *heartbeater) heldReplica(container uint64) bool {
	if h.holds == nil {
		return false
	}
	err := h.holds.CheckContainer(container)
	if err != nil {
		h.log.Warn("not deleting a replica: an object lock holds one of its blocks", "container", container, "err", err)
	}
	return err != nil
}
