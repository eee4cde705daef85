package wal

import (
	"fmt"
	"slices"
	"sort"
)

// readableLocked reports why the log serves no reads, if it does not. A
// failed log serves none: its in-memory state may include records that
// never became durable.
func (l *Log) readableLocked() error {
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// emptyGroup stands for a group the log has no record of: first index 1,
// last index 0, term 0 at index 0 (raft's initial state).
var emptyGroup = &group{}

func (l *Log) groupLocked(id uint64) *group {
	if g := l.groups[id]; g != nil {
		return g
	}
	return emptyGroup
}

// FirstIndex returns the first index of group's log that may be read:
// one past its compaction point (1 for a group without one, or unknown).
func (l *Log) FirstIndex(group uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readableLocked(); err != nil {
		return 0, err
	}
	return l.groupLocked(group).firstIndex(), nil
}

// LastIndex returns the index of group's last entry (its compaction point
// when it has no entries; 0 for a group unknown to the log).
func (l *Log) LastIndex(group uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readableLocked(); err != nil {
		return 0, err
	}
	return l.groupLocked(group).lastIndex(), nil
}

// Term returns the term of entry index of group, for index in
// [FirstIndex-1, LastIndex]; ErrCompacted below, ErrUnavailable above.
func (l *Log) Term(group, index uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readableLocked(); err != nil {
		return 0, err
	}
	g := l.groupLocked(group)
	if index < g.markIndex {
		return 0, fmt.Errorf("%w: group %d index %d, compaction point %d", ErrCompacted, group, index, g.markIndex)
	}
	t, ok := g.term(index)
	if !ok {
		return 0, fmt.Errorf("%w: group %d index %d, last index %d", ErrUnavailable, group, index, g.lastIndex())
	}
	return t, nil
}

// HardState returns group's latest hard state (zero if it has none).
func (l *Log) HardState(group uint64) (HardState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readableLocked(); err != nil {
		return HardState{}, err
	}
	return l.groupLocked(group).hs, nil
}

// Snapshot returns the metadata of group's latest snapshot record
// (TypeSnapshot or TypeSnapshotMeta); ok is false when it has none. Meta
// must not be modified.
func (l *Log) Snapshot(group uint64) (meta SnapshotMeta, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readableLocked(); err != nil {
		return SnapshotMeta{}, false, err
	}
	g := l.groupLocked(group)
	return g.snap, g.snapSeq != 0, nil
}

// Groups returns the IDs of the groups the log holds records of, sorted.
func (l *Log) Groups() ([]uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.readableLocked(); err != nil {
		return nil, err
	}
	ids := make([]uint64, 0, len(l.groups))
	for id := range l.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// segmentForLocked returns the segment holding the record with sequence
// number seq, which must be in the log.
func (l *Log) segmentForLocked(seq uint64) *segment {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].firstSeq > seq }) - 1
	if i < 0 {
		panic(fmt.Sprintf("wal: record %d is live but its segment is gone (first segment starts at %d)", seq, l.segs[0].firstSeq))
	}
	return l.segs[i]
}

// entryRead is one entry Entries must read from its segment.
type entryRead struct {
	out  int // position in the result
	seg  *segment
	seq  uint64
	off  int64
	size uint32
}

// Entries returns group's entries [lo, hi), at least one if lo < hi, and
// no more than fit in maxBytes counting each entry as its data plus 16
// bytes (about raft's framing). ErrCompacted if lo is at or below the
// compaction point, ErrUnavailable if hi is past LastIndex+1. Recent
// entries come from memory; older ones are read from their segments, their
// records' CRCs checked (ErrCorrupt on a mismatch). The result belongs to
// the caller; the entries' Data must not be modified. No lock is held
// while segments are read.
func (l *Log) Entries(group, lo, hi, maxBytes uint64) ([]Entry, error) {
	l.mu.Lock()
	if err := l.readableLocked(); err != nil {
		l.mu.Unlock()
		return nil, err
	}
	g := l.groupLocked(group)
	switch {
	case lo > hi:
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: group %d entries [%d, %d)", ErrInvalid, group, lo, hi)
	case lo <= g.markIndex:
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: group %d entries from %d, compaction point %d", ErrCompacted, group, lo, g.markIndex)
	case hi > g.lastIndex()+1:
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: group %d entries to %d, last index %d", ErrUnavailable, group, hi-1, g.lastIndex())
	case lo == hi:
		l.mu.Unlock()
		return nil, nil
	}
	out := make([]Entry, 0, min(hi-lo, 1024))
	var reads []entryRead
	var total uint64
	for i := lo; i < hi; i++ {
		e := &g.ents[i-g.first]
		sz := uint64(e.size) - recordHeaderSize + entryOverheadBytes
		if len(out) > 0 && sz > maxBytes-min(total, maxBytes) {
			break
		}
		total += sz
		out = append(out, Entry{Term: e.term, Index: i, Type: e.etype, Data: e.data})
		if e.data == nil {
			s := l.segmentForLocked(e.seq)
			s.refs++
			reads = append(reads, entryRead{out: len(out) - 1, seg: s, seq: e.seq, off: e.off, size: e.size})
		}
	}
	l.mu.Unlock()
	var err error
	if len(reads) > 0 {
		err = readEntries(group, out, reads)
		l.mu.Lock()
		for _, r := range reads {
			if uerr := l.unrefLocked(r.seg); uerr != nil && err == nil {
				err = uerr
			}
		}
		l.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return out[:len(out):len(out)], nil
}

// readEntries reads the records of reads (in segment and offset order)
// with one ReadAt per cluster of nearby records, checks them and fills in
// the entries' data.
func readEntries(group uint64, out []Entry, reads []entryRead) error {
	for i := 0; i < len(reads); {
		j := i + 1
		start := reads[i].off
		end := start + int64(reads[i].size)
		for j < len(reads) && reads[j].seg == reads[i].seg && reads[j].off >= end &&
			reads[j].off+int64(reads[j].size)-start <= readClusterMaxBytes {
			end = reads[j].off + int64(reads[j].size)
			j++
		}
		buf := make([]byte, end-start)
		if _, err := reads[i].seg.f.ReadAt(buf, start); err != nil {
			return fmt.Errorf("wal: read group %d entries from segment %s offset %d: %w", group, reads[i].seg.path, start, err)
		}
		for k := i; k < j; k++ {
			r := &reads[k]
			e := &out[r.out]
			b := buf[r.off-start : r.off-start+int64(r.size)]
			h, payload, err := decodeRecord(b)
			if err != nil || h.typ != TypeEntry || h.seq != r.seq || h.group != group || h.index != e.Index || h.term != e.Term || h.size() != int(r.size) {
				return fmt.Errorf("%w: segment %s offset %d: group %d entry %d (record %d) does not read back: %v", ErrCorrupt, r.seg.path, r.off, group, e.Index, r.seq, err)
			}
			e.Data = payload[:len(payload):len(payload)]
		}
		i = j
	}
	return nil
}
