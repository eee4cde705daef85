package wal

import (
	"fmt"
	"math"
)

// Compact marks group's entries at or below index as no longer needed
// (they are applied and durable in the engine): it appends a compaction
// marker (TypeCompact, with the term of entry index), after which
// FirstIndex is index+1 and Term(index) still answers. It returns once the
// marker is durable and the segments no group needs any more are deleted
// (see collect). An index at or below the current compaction point is a
// no-op; one past LastIndex is ErrUnavailable.
//
// Compact may run concurrently with appends and reads; Compact calls are
// serialised with each other.
func (l *Log) Compact(group, index uint64) error {
	l.gcMu.Lock()
	defer l.gcMu.Unlock()
	l.mu.Lock()
	if err := l.usableLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	g := l.groupLocked(group)
	if index <= g.markIndex {
		l.mu.Unlock()
		return nil
	}
	if index > g.lastIndex() {
		l.mu.Unlock()
		return fmt.Errorf("%w: compact group %d to %d, last index %d", ErrUnavailable, group, index, g.lastIndex())
	}
	term, _ := g.term(index)
	seq := l.appendMarkerLocked(&Record{Type: TypeCompact, Group: group, Term: term, Index: index})
	l.mu.Unlock()
	if err := l.WaitDurable(seq); err != nil {
		return fmt.Errorf("wal: compact group %d to %d: %w", group, index, err)
	}
	return l.collect()
}

// appendMarkerLocked appends a record the log writes itself (a compaction
// marker, or a record carried forward), skipping Append's validation and
// back-pressure (these are a few small records per group).
func (l *Log) appendMarkerLocked(r *Record) uint64 {
	return l.appendLocked(r)
}

// collect deletes the oldest segments that no group needs any more. A
// segment is needed while it holds a record some group still needs: a live
// entry (above the compaction point, not replaced by a conflicting
// append), the latest hard state, the latest snapshot metadata, or the
// record that set the compaction point. Only a prefix of the segments is
// ever deleted, never the last one.
//
// When the oldest segments are held only by hard states and markers (of
// groups that are idle, for example) and not by live entries, collect
// first re-appends those records at the tail of the log (carries them
// forward; replaying the copy changes nothing), so that an idle group does
// not pin the log forever.
//
// Deletion happens only once every record appended when the decision was
// taken is durable: the decision relies on newer records (a hard state, a
// marker) superseding older ones, and those must survive a crash before
// what they supersede is gone. Files are then removed oldest first, with
// a directory sync after each, so that a crash leaves a suffix of the
// segments whatever order the filesystem commits directory changes in.
// gcMu is held.
func (l *Log) collect() error {
	l.mu.Lock()
	if err := l.usableLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	k := l.carryForwardLocked()
	if k == 0 {
		l.mu.Unlock()
		return nil
	}
	target := l.nextSeq - 1
	l.mu.Unlock()
	if err := l.WaitDurable(target); err != nil {
		return fmt.Errorf("wal: collect segments: %w", err)
	}
	l.mu.Lock()
	victims := append([]*segment(nil), l.segs[:k]...)
	l.segs = append(l.segs[:0:0], l.segs[k:]...)
	l.mu.Unlock()
	var err error
	for i, s := range victims {
		if err == nil {
			err = l.deleteSegment(s)
			if err != nil {
				l.mu.Lock()
				if l.err == nil {
					l.err = fmt.Errorf("%w: %w", ErrFailed, err)
				}
				l.mu.Unlock()
			}
		}
		l.mu.Lock()
		if uerr := l.unrefLocked(victims[i]); uerr != nil && err == nil {
			err = uerr
		}
		if err == nil {
			l.stats.SegmentsDeleted++
		}
		l.mu.Unlock()
	}
	return err
}

// deleteSegment removes one segment file and makes the removal durable.
func (l *Log) deleteSegment(s *segment) error {
	if err := l.fs.Remove(s.path); err != nil {
		return fmt.Errorf("wal: delete segment %s: %w", s.path, err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: delete segment %s: sync directory: %w", s.path, err)
	}
	return nil
}

// deletableLocked returns how many of the oldest segments hold no record
// with a sequence number below pin (never the last segment).
func (l *Log) deletableLocked(pin uint64) int {
	k := 0
	for k < len(l.segs)-1 && l.segs[k+1].firstSeq <= pin {
		k++
	}
	return k
}

// carryForwardLocked decides how many of the oldest segments can go,
// carrying hard states and markers forward when that frees more of them,
// and returns that number.
func (l *Log) carryForwardLocked() int {
	if len(l.segs) < 2 {
		return 0
	}
	minPin, minEntryPin := uint64(math.MaxUint64), uint64(math.MaxUint64)
	for _, g := range l.groups {
		minPin = min(minPin, g.pin())
		if len(g.ents) > 0 {
			minEntryPin = min(minEntryPin, g.ents[0].seq)
		}
	}
	k := l.deletableLocked(minPin)
	j := l.deletableLocked(minEntryPin)
	if j <= k {
		return k
	}
	// Segments [0, j) hold no live entry; re-append the hard states and
	// markers that keep them.
	limit := l.segs[j].firstSeq
	for _, g := range l.groups {
		if g.pin() >= limit {
			continue
		}
		if g.hsSeq != 0 && g.hsSeq < limit {
			l.appendMarkerLocked(&Record{Type: TypeHardState, Group: g.id, Term: g.hs.Term, Vote: g.hs.Vote, Index: g.hs.Commit})
			l.stats.CarriedRecords++
		}
		if g.snapSeq != 0 && g.snapSeq < limit {
			l.appendMarkerLocked(&Record{Type: TypeSnapshotMeta, Group: g.id, Term: g.snap.Term, Index: g.snap.Index, Data: g.snap.Meta})
			l.stats.CarriedRecords++
		}
		if g.markSeq != 0 && g.markSeq < limit {
			l.appendMarkerLocked(&Record{Type: TypeCompact, Group: g.id, Term: g.markTerm, Index: g.markIndex})
			l.stats.CarriedRecords++
		}
		if p := g.pin(); p < limit {
			panic(fmt.Sprintf("wal: group %d still pins record %d after carrying forward (limit %d)", g.id, p, limit))
		}
	}
	return l.deletableLocked(minPinLocked(l))
}

func minPinLocked(l *Log) uint64 {
	p := uint64(math.MaxUint64)
	for _, g := range l.groups {
		p = min(p, g.pin())
	}
	return p
}
