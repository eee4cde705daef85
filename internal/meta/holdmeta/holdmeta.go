// Package holdmeta is the meta service's side of object lock holds on the
// datanodes (issue 35 item 2, defence in depth; the wire form is
// metaapi/holdapi, the datanode's side internal/datanode/holds): it keeps,
// per block of a locked version, the hold the datanodes holding the
// block's container must keep, and delivers it to them in heartbeat
// answers (hold_blocks commands, before the deletions) until each has
// acknowledged it as durable.
//
// Storage (docs/FORMAT.md §13.3): 'H' | container u64 BE | local u64 BE →
// a hold record, written by the namespace (objlock.go) in the batch that
// commits a locked version (Put), changes its lock (Put, with Bypass when
// a GOVERNANCE retention was shortened or removed with the override) or
// drops the version (Forget: the records deleted, or, for a version still
// locked whose GOVERNANCE retention was bypassed, a release with Bypass);
// raft-replicated with the rest of the store. Sweep deletes a record
// whose hold ended (no legal hold, retain-until passed) SweepAfter ago.
//
// Invariants:
//
//   - Every block of a version whose lock is in force has a record from
//     the batch that commits the version or the lock on (a version is
//     never locked in meta without its record).
//   - A hold counts as delivered to a node only once that node
//     acknowledged it (Heartbeat.HeldBlocks), which it does after its
//     holds file is fsynced; until then it is sent again, at most once
//     every RedeliverAfter. The delivered set is memory only: a new leader
//     sends every hold again (idempotent on the datanodes).
//   - A deletion the datanodes refuse because of a hold is the GC's
//     ordinary unacknowledged deletion: delivered again RedeliverAfter
//     apart, dropped after MaxDeleteAttempts (the block stays on disk,
//     its record stays here): no retry storm.
//
// Concurrency: a Holds is used under the meta state's mutex (s.Mu), from
// the heartbeat and the Tick, like the rest of the cluster's memory.
package holdmeta

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
)

// Prefix is the first byte of a hold record's key.
const Prefix = 'H'

// Bounds of the work per heartbeat and per Tick.
const (
	// MaxScan: hold records one heartbeat answer or one Sweep reads.
	MaxScan = 4096
	// MaxBlocks: blocks one heartbeat answer carries holds for.
	MaxBlocks = 1024
)

// SweepAfter: a record whose hold ended is deleted this long after (time
// for a release or an expiry to reach a datanode that was away).
const SweepAfter = 7 * 24 * time.Hour

const (
	recordVersion = 1
	recordBytes   = 14 // version u8, flags u8, until i64 LE, CRC32C u32 LE
	flagComp      = 1
	flagLegal     = 2
	flagBypass    = 4
)

// Key is the key of block (container, local)'s hold record.
func Key(container, local uint64) []byte { return state.BlockKey(Prefix, container, local) }

// Encode is a hold record.
func Encode(h holdapi.Hold) []byte {
	var f byte
	if h.Compliance {
		f |= flagComp
	}
	if h.Legal {
		f |= flagLegal
	}
	if h.Bypass {
		f |= flagBypass
	}
	b := binary.LittleEndian.AppendUint64([]byte{recordVersion, f}, uint64(h.Until))
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

// Decode reads a hold record (state.ErrCorrupt when it does not decode).
func Decode(v []byte) (holdapi.Hold, error) {
	switch {
	case len(v) != recordBytes:
		return holdapi.Hold{}, fmt.Errorf("%w: hold record of %d bytes", state.ErrCorrupt, len(v))
	case crc32c.Checksum(v[:10]) != binary.LittleEndian.Uint32(v[10:]):
		return holdapi.Hold{}, fmt.Errorf("%w: hold record checksum", state.ErrCorrupt)
	case v[0] != recordVersion || v[1]&^(flagComp|flagLegal|flagBypass) != 0:
		return holdapi.Hold{}, fmt.Errorf("%w: hold record version %d flags %#x", state.ErrCorrupt, v[0], v[1])
	}
	return holdapi.Hold{Until: int64(binary.LittleEndian.Uint64(v[2:])), Compliance: v[1]&flagComp != 0,
		Legal: v[1]&flagLegal != 0, Bypass: v[1]&flagBypass != 0}, nil
}

// Of is the hold of a version whose lock is l.
func Of(l lockmeta.Lock) holdapi.Hold {
	h := holdapi.Hold{Legal: l.Hold}
	if l.Mode != "" {
		h.Until, h.Compliance = holdapi.UntilOf(l.Until), l.Mode == lockmeta.Compliance
	}
	return h
}

// Put writes h as the hold of every block of a version, in b.
func Put(b *pebble.Batch, blocks []state.StoredBlock, h holdapi.Hold) {
	for _, sb := range blocks {
		state.Set(b, Key(sb.Container, sb.Local), Encode(h))
	}
}

// OnLock writes, in b, the holds of a version's blocks when its lock
// goes from old to next at now (a new version: old zero): nothing when
// neither is in force; with Bypass when a retention in force was
// shortened or removed (lockmeta allowed it: a GOVERNANCE one, with the
// override).
func OnLock(b *pebble.Batch, blocks []state.StoredBlock, old, next lockmeta.Lock, now time.Time) {
	if !old.Locked(now) && !next.Locked(now) && !old.HoldSet {
		return
	}
	h := Of(next)
	h.Bypass = old.Retained(now) && (next.Mode != old.Mode || next.Until.Before(old.Until))
	Put(b, blocks, h)
}

// Forget handles, in b, the holds of a version being dropped at now whose
// lock is l: a lock still in force (lockmeta let a GOVERNANCE retention
// be bypassed) becomes a release (Bypass, retention ended now), and the
// blocks' deletions wait for it (Releasing); else the records go.
func (h *Holds) Forget(b *pebble.Batch, blocks []state.StoredBlock, l lockmeta.Lock, now time.Time) {
	switch {
	case l.Mode == "" && !l.HoldSet:
		return // never locked: no records
	case l.Locked(now):
		rel := holdapi.Hold{Until: now.Unix(), Bypass: true}
		Put(b, blocks, rel)
		for _, sb := range blocks {
			h.releases[state.BlockRef{Container: sb.Container, Local: sb.Local}] = rel
		}
		return
	}
	for _, sb := range blocks {
		state.Del(b, Key(sb.Container, sb.Local))
	}
}

// Holds delivers the hold records to the datanodes (memory only).
type Holds struct {
	st *state.State
	// acked: node → block → the hold it acknowledged; sent: node → block
	// → when it was last sent unacknowledged; cursor: node → the key its
	// next scan starts at (nil: the start); sweep: Sweep's.
	acked  map[uint64]map[state.BlockRef]holdapi.Hold
	sent   map[uint64]map[state.BlockRef]time.Time
	cursor map[uint64][]byte
	sweep  []byte
	// releases: blocks whose deletion waits until every holder
	// acknowledged their release (memory only: after a leader change the
	// deletion may come first, be refused, and be delivered again).
	releases map[state.BlockRef]holdapi.Hold
}

// New is st's hold delivery.
func New(st *state.State) *Holds {
	return &Holds{st: st, acked: map[uint64]map[state.BlockRef]holdapi.Hold{},
		sent: map[uint64]map[state.BlockRef]time.Time{}, cursor: map[uint64][]byte{}, releases: map[state.BlockRef]holdapi.Hold{}}
}

// scan calls fn with the records from key from on, at most MaxScan or
// until fn says stop; it returns the key to start the next scan at (nil:
// the end was reached).
func (h *Holds) scan(from []byte, fn func(ref state.BlockRef, hold holdapi.Hold) (stop bool)) (next []byte, err error) {
	lo := []byte{Prefix}
	if from != nil {
		lo = from
	}
	it, err := h.st.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{Prefix + 1}})
	if err != nil {
		return nil, err
	}
	defer state.CloseInto(it, &err, "scan of the hold records")
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n == MaxScan {
			return slices.Clone(it.Key()), nil
		}
		n++
		k := it.Key()
		if len(k) != 17 {
			return nil, fmt.Errorf("%w: hold record key of %d bytes", state.ErrCorrupt, len(k))
		}
		hold, err := Decode(it.Value())
		if err != nil {
			return nil, err
		}
		if fn(state.BlockRef{Container: binary.BigEndian.Uint64(k[1:]), Local: binary.BigEndian.Uint64(k[9:])}, hold) {
			return slices.Concat(k, []byte{0}), nil
		}
	}
	return nil, it.Error()
}

// Commands appends to cmds the hold_blocks due for node n (its report
// just applied) at now: the holds (releases too: a legal hold off, a
// Bypass) of blocks in the containers its report holds, not acknowledged by it and not
// sent within redeliver; at most MaxBlocks blocks, one command per
// container and hold, within maxCmds commands in all.
func (h *Holds) Commands(cmds []metaapi.Command, n *state.Node, now time.Time, redeliver time.Duration, maxCmds int) ([]metaapi.Command, error) {
	id := n.Rec.ID
	type group struct {
		c    uint64
		hold holdapi.Hold
	}
	var order []group
	byGroup := map[group][]uint64{}
	blocks := 0
	next, err := h.scan(h.cursor[id], func(ref state.BlockRef, hold holdapi.Hold) bool {
		if _, holds := n.Containers[ref.Container]; !holds {
			return false
		}
		if a, ok := h.acked[id][ref]; ok && a == hold {
			return false
		}
		if t, ok := h.sent[id][ref]; ok && now.Sub(t) < redeliver {
			return false
		}
		g := group{ref.Container, hold}
		if _, ok := byGroup[g]; !ok {
			if len(cmds)+len(order) >= maxCmds {
				return false // not sent: the next pass over the records
			}
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], ref.Local)
		if h.sent[id] == nil {
			h.sent[id] = map[state.BlockRef]time.Time{}
		}
		h.sent[id][ref] = now
		blocks++
		return blocks == MaxBlocks
	})
	if err != nil {
		return cmds, err
	}
	h.cursor[id] = next
	for _, g := range order {
		hold := g.hold
		cmds = append(cmds, metaapi.Command{Kind: holdapi.Kind, Container: g.c, Blocks: byGroup[g], Hold: &hold})
	}
	return cmds, nil
}

// Ack records node id's acknowledgements.
func (h *Holds) Ack(id uint64, acks []holdapi.Ack) {
	acks = acks[:min(len(acks), holdapi.MaxAcks)]
	for _, a := range acks {
		ref := state.BlockRef{Container: a.Container, Local: a.Local}
		if h.acked[id] == nil {
			h.acked[id] = map[state.BlockRef]holdapi.Hold{}
		}
		h.acked[id][ref] = a.Hold
		delete(h.sent[id], ref)
	}
}

// Sweep deletes, in b, the records whose hold ended SweepAfter before now
// (at most MaxScan read a call, resuming where the last one stopped).
func (h *Holds) Sweep(b *pebble.Batch, now time.Time) error {
	var gone []state.BlockRef
	next, err := h.scan(h.sweep, func(ref state.BlockRef, hold holdapi.Hold) bool {
		if !hold.Legal && hold.Until+int64(SweepAfter/time.Second) < now.Unix() {
			gone = append(gone, ref)
		}
		return false
	})
	if err != nil {
		return err
	}
	h.sweep = next
	for _, ref := range gone {
		state.Del(b, Key(ref.Container, ref.Local))
		delete(h.releases, ref)
		for id := range h.acked {
			delete(h.acked[id], ref)
			delete(h.sent[id], ref)
		}
	}
	return nil
}

// Releasing says the deletion of ref waits: its release (Forget) is not
// acknowledged yet by every one of holders, the nodes holding its
// container (a replica that applied the deletion before its release
// would refuse it and keep the block).
func (h *Holds) Releasing(ref state.BlockRef, holders []uint64) bool {
	rel, ok := h.releases[ref]
	if !ok {
		return false
	}
	for _, id := range holders {
		if h.acked[id][ref] != rel {
			return true
		}
	}
	delete(h.releases, ref)
	return false
}

// Acked counts the holds acknowledged by node id (tests, status).
func (h *Holds) Acked(id uint64) int { return len(h.acked[id]) }
