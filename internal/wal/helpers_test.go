package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

const testDir = "/log"

// smallConfig: 4 KiB segments and 1 KiB records, so that rolls are frequent.
func smallConfig(fs vfs.FS) Config {
	return Config{Dir: testDir, FS: fs, SegmentSizeBytes: 4096, MaxRecordBytes: 1024, Logger: quietLogger}
}

func mustOpen(t testing.TB, cfg Config) *Log {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// data returns deterministic payload bytes for an entry.
func data(group, index, term uint64, n int) []byte {
	b := make([]byte, n)
	x := group*1_000_003 + index*7919 + term*104_729 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// model is a reference implementation of the log's per-group semantics,
// used to check what the log returns.
type model struct {
	groups map[uint64]*modelGroup
}

type modelGroup struct {
	mark, markTerm uint64
	ents           []Entry // from index mark+1
	hs             HardState
	snap           SnapshotMeta
	hasSnap        bool
}

func newModel() *model { return &model{groups: map[uint64]*modelGroup{}} }

func (m *model) group(id uint64) *modelGroup {
	g := m.groups[id]
	if g == nil {
		g = &modelGroup{}
		m.groups[id] = g
	}
	return g
}

func (g *modelGroup) last() uint64 { return g.mark + uint64(len(g.ents)) }

func (g *modelGroup) term(i uint64) uint64 {
	if i == g.mark {
		return g.markTerm
	}
	return g.ents[i-g.mark-1].Term
}

func (m *model) apply(r Record) {
	g := m.group(r.Group)
	switch r.Type {
	case TypeEntry:
		if r.Index <= g.mark || r.Index > g.last()+1 {
			panic(fmt.Sprintf("model: bad entry %d for group %d (mark %d last %d)", r.Index, r.Group, g.mark, g.last()))
		}
		g.ents = append(g.ents[:r.Index-g.mark-1:r.Index-g.mark-1], Entry{Term: r.Term, Index: r.Index, Type: r.EntryType, Data: slices.Clone(r.Data)})
	case TypeHardState:
		g.hs = HardState{Term: r.Term, Vote: r.Vote, Commit: r.Index}
	case TypeSnapshot:
		g.ents = nil
		g.mark, g.markTerm = r.Index, r.Term
		g.snap, g.hasSnap = SnapshotMeta{Index: r.Index, Term: r.Term, Meta: slices.Clone(r.Data)}, true
	case TypeSnapshotMeta:
		g.snap, g.hasSnap = SnapshotMeta{Index: r.Index, Term: r.Term, Meta: slices.Clone(r.Data)}, true
	case TypeCompact:
		if r.Index <= g.mark {
			return
		}
		t := g.term(r.Index)
		g.ents = slices.Clone(g.ents[r.Index-g.mark:])
		g.mark, g.markTerm = r.Index, t
	}
}

// op is one state-changing record of a workload, with its sequence
// number.
type op struct {
	seq uint64
	rec Record
}

// modelAt replays the ops with sequence numbers up to seq.
func modelAt(ops []op, seq uint64) *model {
	m := newModel()
	for _, o := range ops {
		if o.seq <= seq {
			m.apply(o.rec)
		}
	}
	return m
}

// checkAgainst compares everything the log returns for the model's groups
// with the model.
func checkAgainst(l *Log, m *model) error {
	ids, err := l.Groups()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := m.groups[id]; !ok {
			return fmt.Errorf("group %d in the log, not in the model", id)
		}
	}
	for id, g := range m.groups {
		first, err := l.FirstIndex(id)
		if err != nil {
			return err
		}
		last, err := l.LastIndex(id)
		if err != nil {
			return err
		}
		if first != g.mark+1 || last != g.last() {
			return fmt.Errorf("group %d: first/last %d/%d, want %d/%d", id, first, last, g.mark+1, g.last())
		}
		if t, err := l.Term(id, g.mark); err != nil || t != g.markTerm {
			return fmt.Errorf("group %d: term of %d = %d, %v; want %d", id, g.mark, t, err, g.markTerm)
		}
		if g.mark > 0 {
			if _, err := l.Term(id, g.mark-1); !errors.Is(err, ErrCompacted) {
				return fmt.Errorf("group %d: term below the compaction point: %v", id, err)
			}
		}
		if _, err := l.Term(id, g.last()+1); !errors.Is(err, ErrUnavailable) {
			return fmt.Errorf("group %d: term past the end: %v", id, err)
		}
		ents, err := l.Entries(id, first, last+1, math.MaxUint64)
		if err != nil {
			return fmt.Errorf("group %d: entries [%d, %d]: %w", id, first, last, err)
		}
		if len(ents) != len(g.ents) {
			return fmt.Errorf("group %d: %d entries, want %d", id, len(ents), len(g.ents))
		}
		for i, e := range ents {
			w := g.ents[i]
			if e.Index != w.Index || e.Term != w.Term || e.Type != w.Type || !bytes.Equal(e.Data, w.Data) {
				return fmt.Errorf("group %d: entry %d: got (index %d term %d type %d, %d bytes), want (term %d type %d, %d bytes)",
					id, w.Index, e.Index, e.Term, e.Type, len(e.Data), w.Term, w.Type, len(w.Data))
			}
			if t, err := l.Term(id, e.Index); err != nil || t != e.Term {
				return fmt.Errorf("group %d: term of %d = %d, %v; want %d", id, e.Index, t, err, e.Term)
			}
		}
		hs, err := l.HardState(id)
		if err != nil {
			return err
		}
		if hs != g.hs {
			return fmt.Errorf("group %d: hard state %+v, want %+v", id, hs, g.hs)
		}
		snap, ok, err := l.Snapshot(id)
		if err != nil {
			return err
		}
		if ok != g.hasSnap || snap.Index != g.snap.Index || snap.Term != g.snap.Term || !bytes.Equal(snap.Meta, g.snap.Meta) {
			return fmt.Errorf("group %d: snapshot %v %+v, want %v %+v", id, ok, snap, g.hasSnap, g.snap)
		}
	}
	return nil
}

// writer drives a log and records the ops it appended, for checks against
// the model.
type writer struct {
	l   *Log
	ops []op
}

func (w *writer) append(recs ...Record) (uint64, error) {
	seq, err := w.l.Append(recs...)
	if err != nil {
		return 0, err
	}
	first := seq - uint64(len(recs)) + 1
	for i, r := range recs {
		r.Data = slices.Clone(r.Data)
		w.ops = append(w.ops, op{seq: first + uint64(i), rec: r})
	}
	return seq, nil
}

// compact runs Compact and records its marker (the next sequence number,
// when the compaction is not a no-op). Single-threaded use only.
func (w *writer) compact(group, index uint64) error {
	next := w.l.Stats().LastSeq + 1
	first, err := w.l.FirstIndex(group)
	if err != nil {
		return err
	}
	if err := w.l.Compact(group, index); err != nil {
		return err
	}
	if index >= first {
		w.ops = append(w.ops, op{seq: next, rec: Record{Type: TypeCompact, Group: group, Index: index}})
	}
	return nil
}

// entries builds n entries of group from index, term, with sizes cycling
// through sizes.
func entries(group, index, term uint64, n int, sizes ...int) []Record {
	var out []Record
	for i := 0; i < n; i++ {
		sz := sizes[i%len(sizes)]
		ix := index + uint64(i)
		out = append(out, EntryRecord(group, term, ix, uint8(ix%3), data(group, ix, term, sz)))
	}
	return out
}

// closeT closes c and fails the test on an error: a Close that fails is a
// bug of the code under test (make lint's errcheck).
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
