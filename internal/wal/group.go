package wal

import (
	"fmt"
	"math"
)

// HardState is a raft group's persistent vote state (raftpb.HardState).
type HardState struct {
	Term, Vote, Commit uint64
}

// SnapshotMeta describes a group's latest snapshot, as recorded by a
// TypeSnapshot or TypeSnapshotMeta record: its index and term, and the
// caller's opaque metadata (for example an encoded ConfState).
type SnapshotMeta struct {
	Index, Term uint64
	Meta        []byte
}

// Entry is one raft log entry as stored: term, index, raft entry type and
// data.
type Entry struct {
	Term, Index uint64
	Type        uint8
	Data        []byte
}

// maxIndex is the largest index (and term) a record may carry, so that
// index arithmetic (last index + 1) never overflows.
const maxIndex = math.MaxInt64

// entryOverheadBytes is what Entries counts per entry on top of its data
// when it applies maxBytes: about raft's protobuf framing of an entry, so
// that a limit meant for raft.Storage.Entries means the same here.
const entryOverheadBytes = 16

// cacheOverheadBytes is what the entry cache counts per cached entry on top
// of its data, so that empty entries are not free.
const cacheOverheadBytes = 64

// entryMeta is the in-memory index entry of one live log entry.
type entryMeta struct {
	seq   uint64 // sequence number of its record
	term  uint64
	off   int64  // offset of its record in its segment (the segment is found by seq)
	size  uint32 // encoded record size, header included
	etype uint8
	// data is the cached payload (never modified once set; a non-nil empty
	// slice for an empty payload), or nil when evicted: then it is read
	// from the segment. A record not yet written is always cached.
	data []byte
}

// group is the in-memory state of one raft group, rebuilt by Open from
// the records and kept up to date by Append and Compact.
//
// Invariants (outside replay): len(ents) == 0 or ents[0] has index
// markIndex+1 (first == markIndex+1); ents are the live entries in index
// order, and also in sequence order (a later append that conflicts
// replaces every entry from its index on). Entries at or below markIndex
// are compacted: Term(markIndex) == markTerm.
type group struct {
	id    uint64
	first uint64 // index of ents[0], when there are entries
	ents  []entryMeta

	markIndex, markTerm uint64
	markSeq             uint64 // record that set the mark (TypeCompact or TypeSnapshot); 0 if none

	hs    HardState
	hsSeq uint64 // record of the latest hard state; 0 if none

	snap    SnapshotMeta
	snapSeq uint64 // record of the latest snapshot metadata; 0 if none
}

func (g *group) lastIndex() uint64 {
	if len(g.ents) > 0 {
		return g.first + uint64(len(g.ents)) - 1
	}
	return g.markIndex
}

func (g *group) firstIndex() uint64 { return g.markIndex + 1 }

// term returns the term of index i, which must be in [markIndex, lastIndex].
func (g *group) term(i uint64) (uint64, bool) {
	if i == g.markIndex {
		return g.markTerm, true
	}
	if len(g.ents) > 0 && i >= g.first && i <= g.lastIndex() {
		return g.ents[i-g.first].term, true
	}
	return 0, false
}

// pin is the lowest sequence number of a record the group still needs:
// its first live entry, its hard state, its snapshot metadata, its mark.
// math.MaxUint64 when it needs none.
func (g *group) pin() uint64 {
	p := uint64(math.MaxUint64)
	if len(g.ents) > 0 {
		p = g.ents[0].seq
	}
	for _, s := range []uint64{g.hsSeq, g.snapSeq, g.markSeq} {
		if s != 0 && s < p {
			p = s
		}
	}
	return p
}

// view simulates how a batch of records being validated changes a group's
// log positions, so that Append can check a whole batch before it changes
// anything.
type view struct {
	g                   *group // nil for a group without state
	markIndex, markTerm uint64
	snapIndex           uint64
	snapSet             bool
	reset               bool   // a snapshot in the batch discarded g's entries
	baseLast            uint64 // g's entries up to here are still in the view
	overFirst           uint64
	over                []uint64 // terms of the batch's entries, from index overFirst
}

func newView(g *group) *view {
	v := &view{g: g}
	if g != nil {
		v.markIndex, v.markTerm = g.markIndex, g.markTerm
		v.snapIndex, v.snapSet = g.snap.Index, g.snapSeq != 0
		v.baseLast = g.lastIndex()
	}
	return v
}

func (v *view) inBase(i uint64) bool {
	return !v.reset && v.g != nil && len(v.g.ents) > 0 && i >= v.g.first && i <= v.baseLast
}

func (v *view) lastIndex() uint64 {
	if len(v.over) > 0 {
		return v.overFirst + uint64(len(v.over)) - 1
	}
	if v.inBase(v.baseLast) {
		return v.baseLast
	}
	return v.markIndex
}

func (v *view) term(i uint64) (uint64, bool) {
	switch {
	case i == v.markIndex:
		return v.markTerm, true
	case len(v.over) > 0 && i >= v.overFirst && i < v.overFirst+uint64(len(v.over)):
		return v.over[i-v.overFirst], true
	case v.inBase(i):
		return v.g.ents[i-v.g.first].term, true
	}
	return 0, false
}

// validate checks that r can be appended in the view's state (Append's
// rules).
func (v *view) validate(r *Record, maxPayloadBytes int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: group %d %s record (term %d, index %d): %s", ErrInvalid, r.Group, r.Type, r.Term, r.Index, fmt.Sprintf(format, args...))
	}
	if r.payloadLen() > maxPayloadBytes {
		return bad("%d bytes of data, limit %d", r.payloadLen(), maxPayloadBytes)
	}
	if r.Index > maxIndex || r.Term > maxIndex {
		return bad("index or term above %d", uint64(maxIndex))
	}
	if r.Type != TypeEntry && r.EntryType != 0 {
		return bad("entry type %d on a record that is not an entry", r.EntryType)
	}
	switch r.Type {
	case TypeEntry:
		if r.Index <= v.markIndex {
			return bad("index at or below the compaction point %d", v.markIndex)
		}
		if last := v.lastIndex(); r.Index > last+1 {
			return bad("would leave a hole after the last index %d", last)
		}
		if r.Term == 0 {
			return bad("term 0")
		}
		if prev, ok := v.term(r.Index - 1); ok && r.Term < prev {
			return bad("term below the term %d of index %d", prev, r.Index-1)
		}
	case TypeHardState:
		if len(r.Data) != 0 {
			return bad("data on a hard state (the vote goes in Vote)")
		}
	case TypeSnapshot:
		if r.Index == 0 || r.Term == 0 {
			return bad("snapshot at index or term 0")
		}
		if r.Index < v.markIndex || (v.snapSet && r.Index < v.snapIndex) {
			return bad("older than the group's snapshot %d or compaction point %d", v.snapIndex, v.markIndex)
		}
	case TypeSnapshotMeta:
		if r.Index == 0 || r.Term == 0 {
			return bad("snapshot at index or term 0")
		}
		if v.snapSet && r.Index < v.snapIndex {
			return bad("older than the group's snapshot %d", v.snapIndex)
		}
		if r.Index > v.lastIndex() {
			return bad("past the last index %d", v.lastIndex())
		}
	default:
		return bad("not a record type Append takes")
	}
	return nil
}

// apply changes the view as a valid r changes the group.
func (v *view) apply(r *Record) {
	switch r.Type {
	case TypeEntry:
		i := r.Index
		if len(v.over) > 0 && i >= v.overFirst {
			v.over = append(v.over[:i-v.overFirst], r.Term)
			return
		}
		v.baseLast = min(v.baseLast, i-1)
		v.over = append(v.over[:0], r.Term)
		v.overFirst = i
	case TypeSnapshot:
		v.reset = true
		v.over = v.over[:0]
		v.markIndex, v.markTerm = r.Index, r.Term
		v.snapIndex, v.snapSet = r.Index, true
	case TypeSnapshotMeta:
		v.snapIndex, v.snapSet = r.Index, true
	}
}

// apply changes the group's state for record h (with payload) at location
// off/size, whose data (for entries) is cached as data (nil: not cached).
// drop is called for every cached entry removed (for the cache's byte
// count). With lenient set (recovery replay), an entry may start a run of
// entries below the group's first entry or with no entries at all (older
// records were in deleted segments); replay checks the result with
// checkReplayed. Otherwise apply assumes validate passed.
func (g *group) apply(h *recordHeader, payload []byte, off int64, data []byte, lenient bool, drop func(*entryMeta)) error {
	switch h.typ {
	case TypeEntry:
		i := h.index
		switch {
		case len(g.ents) == 0:
			g.first = i
		case i < g.first:
			if !lenient {
				panic(fmt.Sprintf("wal: group %d: entry %d below first entry %d passed validation", g.id, i, g.first))
			}
			g.truncateFrom(0, drop)
			g.first = i
		case i > g.lastIndex()+1:
			return fmt.Errorf("%w: group %d: entry %d leaves a hole after entry %d", ErrCorrupt, g.id, i, g.lastIndex())
		default:
			g.truncateFrom(int(i-g.first), drop)
		}
		g.ents = append(g.ents, entryMeta{seq: h.seq, term: h.term, off: off, size: uint32(h.size()), etype: h.entryType, data: data})
	case TypeHardState:
		g.hs = HardState{Term: h.term, Vote: le64(payload), Commit: h.index}
		g.hsSeq = h.seq
	case TypeSnapshot:
		g.truncateFrom(0, drop)
		g.markIndex, g.markTerm, g.markSeq = h.index, h.term, h.seq
		g.snap = SnapshotMeta{Index: h.index, Term: h.term, Meta: clone(payload)}
		g.snapSeq = h.seq
	case TypeSnapshotMeta:
		g.snap = SnapshotMeta{Index: h.index, Term: h.term, Meta: clone(payload)}
		g.snapSeq = h.seq
	case TypeCompact:
		if h.index < g.markIndex {
			return fmt.Errorf("%w: group %d: compaction to %d below the compaction point %d", ErrCorrupt, g.id, h.index, g.markIndex)
		}
		g.compactTo(h.index, drop)
		g.markIndex, g.markTerm, g.markSeq = h.index, h.term, h.seq
	default:
		return fmt.Errorf("%w: group %d: record type %d", ErrCorrupt, g.id, h.typ)
	}
	return nil
}

// truncateFrom removes ents[k:].
func (g *group) truncateFrom(k int, drop func(*entryMeta)) {
	for j := k; j < len(g.ents); j++ {
		drop(&g.ents[j])
	}
	clear(g.ents[k:])
	g.ents = g.ents[:k]
}

// compactTo removes the entries at or below index.
func (g *group) compactTo(index uint64, drop func(*entryMeta)) {
	if len(g.ents) == 0 || index < g.first {
		return
	}
	k := len(g.ents)
	if d := index - g.first; d < uint64(len(g.ents)) {
		k = int(d) + 1
	}
	for j := 0; j < k; j++ {
		drop(&g.ents[j])
	}
	rest := len(g.ents) - k
	if rest == 0 {
		g.ents = g.ents[:0]
		return
	}
	if k >= rest {
		// Copy into a fresh slice now and then, so that compacted
		// entries do not keep the old array alive.
		g.ents = append([]entryMeta(nil), g.ents[k:]...)
	} else {
		clear(g.ents[:k])
		g.ents = g.ents[k:]
	}
	g.first = index + 1
}

// checkReplayed checks the invariant after recovery replay: the live
// entries start right after the compaction point (at 1 without one).
func (g *group) checkReplayed() error {
	if len(g.ents) > 0 && g.first != g.markIndex+1 {
		return fmt.Errorf("%w: group %d: entries start at %d but the compaction point is %d (records missing)", ErrCorrupt, g.id, g.first, g.markIndex)
	}
	return nil
}

func le64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
