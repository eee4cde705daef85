package wal

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// crashWorkload appends entries of three groups in rounds, with syncs after
// most rounds (so that each round's records are one write batch, and some
// batches carry two rounds), a term conflict, a snapshot install, snapshot
// metadata, an idle fourth group, and compactions that delete segments and
// carry the idle group's records forward; with 4 KiB segments it rolls
// about ten times. acked is the highest sequence number acknowledged
// durable (WaitDurable or Compact returned) while crashed() was still false:
// the crash image, taken later, must hold every record up to it.
func crashWorkload(l *Log, crashed func() bool) (w *writer, acked uint64, err error) {
	w = &writer{l: l}
	ack := func(seq uint64) {
		if !crashed() {
			acked = max(acked, seq)
		}
	}
	sync := func(seq uint64) error {
		if err := l.WaitDurable(seq); err != nil {
			return err
		}
		ack(seq)
		return nil
	}
	seq, err := w.append(HardStateRecord(4, HardState{Term: 1, Vote: 4, Commit: 1}), EntryRecord(4, 1, 1, 0, data(4, 1, 1, 30)))
	if err != nil {
		return w, acked, err
	}
	if err := sync(seq); err != nil {
		return w, acked, err
	}
	next := map[uint64]uint64{1: 1, 2: 1, 3: 1}
	term := map[uint64]uint64{1: 1, 2: 1, 3: 1}
	sizes := []int{200, 500, 900, 40}
	for round := 0; round < 12; round++ {
		var recs []Record
		for g := uint64(1); g <= 3; g++ {
			n := 1 + (round+int(g))%3
			recs = append(recs, entries(g, next[g], term[g], n, sizes[(round+int(g))%len(sizes):]...)...)
			next[g] += uint64(n)
			recs = append(recs, HardStateRecord(g, HardState{Term: term[g], Vote: g, Commit: next[g] - 2}))
		}
		switch round {
		case 4: // group 2: a new leader overwrites its last two entries
			term[2]++
			next[2] -= 2
			recs = append(recs, entries(2, next[2], term[2], 3, 50)...)
			next[2] += 3
		case 6: // group 3 installs a snapshot past its log
			term[3]++
			snap := next[3] + 5
			recs = append(recs, SnapshotRecord(3, snap, term[3], []byte("conf-3")))
			next[3] = snap + 1
		case 7: // group 1 records a local snapshot
			recs = append(recs, SnapshotMetaRecord(1, next[1]-1, term[1], []byte("conf-1")))
		}
		seq, err := w.append(recs...)
		if err != nil {
			return w, acked, err
		}
		if round%3 != 2 {
			if err := sync(seq); err != nil {
				return w, acked, err
			}
		}
		if round%4 == 3 {
			for g := uint64(1); g <= 4; g++ {
				to := next[g] - 3
				if g == 4 {
					to = 1
				}
				if err := w.compact(g, to); err != nil {
					return w, acked, err
				}
				if o := w.ops[len(w.ops)-1]; o.rec.Type == TypeCompact {
					ack(o.seq)
				}
			}
		}
	}
	if err := l.Sync(); err != nil {
		return w, acked, err
	}
	ack(l.Stats().LastSeq)
	return w, acked, nil
}

// verifyRecovered opens the log on a crash image and checks that it
// recovered exactly the records up to some sequence number P at least
// acked: the model replayed to P is what every read returns.
func verifyRecovered(img *vfs.MemFS, ops []op, acked uint64) (*Log, uint64, error) {
	l, err := Open(smallConfig(img))
	if err != nil {
		return nil, 0, fmt.Errorf("reopen after crash: %w", err)
	}
	p := l.Stats().LastSeq
	if p < acked {
		_ = l.Close() // the verdict below is the error
		return nil, 0, fmt.Errorf("recovered up to record %d, acknowledged %d", p, acked)
	}
	if err := checkAgainst(l, modelAt(ops, p)); err != nil {
		_ = l.Close() // the check's error is the one
		return nil, 0, fmt.Errorf("recovered up to record %d (acknowledged %d): %w", p, acked, err)
	}
	return l, p, nil
}

// secondLife checks that a recovered log is whole, not just readable: it
// appends to a group and compacts it, syncs, crashes again (strict) and
// expects it all back.
func secondLife(l *Log, img *vfs.MemFS, ops []op, p uint64) error {
	w := &writer{l: l}
	for _, o := range ops {
		if o.seq <= p {
			w.ops = append(w.ops, o)
		}
	}
	last, err := l.LastIndex(1)
	if err != nil {
		return err
	}
	t, err := l.Term(1, last)
	if err != nil {
		return err
	}
	if _, err := w.append(entries(1, last+1, max(t, 1), 12, 400, 30)...); err != nil {
		return err
	}
	if err := w.compact(1, last+6); err != nil {
		return err
	}
	if err := l.Sync(); err != nil {
		return err
	}
	again := img.CrashClone(0, nil)
	if err := l.Close(); err != nil {
		return err
	}
	l2, err := Open(smallConfig(again))
	if err != nil {
		return fmt.Errorf("reopen after the second crash: %w", err)
	}
	defer func() { _ = l2.Close() }() // only read; the checks' errors are the ones
	if err := checkAgainst(l2, modelAt(w.ops, math.MaxUint64)); err != nil {
		return fmt.Errorf("after the second crash: %w", err)
	}
	return nil
}

var crashModes = []struct {
	name    string
	keepPct int
	seeds   int64 // crash images drawn per crash point
}{
	{"strict", 0, 1},              // exactly what was synced
	{"journaled-keep-50%", 50, 4}, // plus random unsynced writes, an in-order prefix of namespace ops
}

// TestCrashAtEveryOp crashes the filesystem at the k-th mutating operation
// for k = 1, 2, … until the workload (Open included) finishes before the
// k-th, reopens the log on what the crash left, and checks that it opens,
// that every acknowledged record is there, that it recovered exactly a
// prefix of the records, and that it works afterwards (second life).
func TestCrashAtEveryOp(t *testing.T) {
	for _, mode := range crashModes {
		t.Run(mode.name, func(t *testing.T) {
			const kMax = 20000
			k := int64(1)
			rolls, deleted := uint64(0), uint64(0)
		crashPoints:
			for ; k <= kMax; k++ {
				for s := int64(0); s < mode.seeds; s++ {
					seed := k + 100_000*s
					fs := vfs.NewMem()
					fs.CrashAtOp(k, mode.keepPct, seed)
					l, err := Open(smallConfig(fs))
					if err != nil {
						t.Fatalf("k=%d: open: %v", k, err)
					}
					w, acked, werr := crashWorkload(l, func() bool { return fs.Crashed() != nil })
					st := l.Stats()
					if err := l.Close(); err != nil && werr == nil {
						t.Fatalf("k=%d: close: %v", k, err)
					}
					if werr != nil {
						t.Fatalf("k=%d: workload: %v", k, werr)
					}
					img := fs.Crashed()
					if img == nil {
						rolls, deleted = st.Rolls, st.SegmentsDeleted
						break crashPoints
					}
					l2, p, err := verifyRecovered(img, w.ops, acked)
					if err != nil {
						t.Fatalf("k=%d seed %d: %v", k, seed, err)
					}
					if err := secondLife(l2, img, w.ops, p); err != nil {
						t.Fatalf("k=%d seed %d: after recovery: %v", k, seed, err)
					}
				}
			}
			if k > kMax {
				t.Fatalf("workload still running at k=%d", k)
			}
			if rolls < 8 || deleted < 3 {
				t.Fatalf("workload too tame: %d rolls, %d segments deleted", rolls, deleted)
			}
			t.Logf("crashed at every one of %d mutating operations (%d rolls, %d segments deleted)", k-1, rolls, deleted)
		})
	}
}

// mutatingKinds are the operations MemFS counts for CrashAtOp (among those
// the log uses).
var mutatingKinds = map[vfs.OpKind]bool{
	vfs.OpCreate: true, vfs.OpWrite: true, vfs.OpSync: true, vfs.OpSyncData: true,
	vfs.OpTruncate: true, vfs.OpSyncDir: true, vfs.OpRemove: true, vfs.OpRename: true,
}

type seenOp struct {
	k    int64
	kind vfs.OpKind
	path string
}

// recordOps runs f and returns the mutating operations it issued, each
// with the number CrashAtOp (armed on a fresh MemFS) would give it.
func recordOps(fs *vfs.MemFS, f func()) []seenOp {
	var ops []seenOp
	fs.InjectErrors(func(op vfs.Op) error {
		if mutatingKinds[op.Kind] {
			ops = append(ops, seenOp{k: fs.OpCount() + 1, kind: op.Kind, path: op.Path})
		}
		return nil
	})
	f()
	fs.InjectErrors(nil)
	return ops
}

// rollScenario fills most of the first segment, then appends two records
// in one Append: the first fits, the second starts a new segment; then
// compacts so that the first two segments are deleted. It returns the
// writer, what was acknowledged while crashed() was false, and the
// mutating operations of the roll and of the deletion.
func rollScenario(t *testing.T, fs *vfs.MemFS, crashed func() bool) (w *writer, acked uint64, roll, del []seenOp) {
	l, err := Open(smallConfig(fs))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer closeT(t, l)
	w = &writer{l: l}
	ack := func(seq uint64) {
		if !crashed() {
			acked = max(acked, seq)
		}
	}
	// 32 (header) + 7 × (48 + 500) = 3868 bytes of 4096.
	seq, err := w.append(entries(1, 1, 1, 7, 500)...)
	if err != nil || l.WaitDurable(seq) != nil {
		t.Fatalf("fill: %v", err)
	}
	ack(seq)
	roll = recordOps(fs, func() {
		seq, err = w.append(entries(1, 8, 1, 2, 100, 500)...)
		if err == nil {
			err = l.WaitDurable(seq)
		}
	})
	if err != nil {
		t.Fatalf("roll: %v", err)
	}
	ack(seq)
	// Two more segments, then compact everything but the last entries.
	seq, err = w.append(entries(1, 10, 1, 14, 500)...)
	if err != nil || l.WaitDurable(seq) != nil {
		t.Fatalf("more: %v", err)
	}
	ack(seq)
	del = recordOps(fs, func() { err = w.compact(1, 22) })
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	ack(w.ops[len(w.ops)-1].seq)
	return w, acked, roll, del
}

// TestCrashAtEveryStepOfARoll checks the roll's operations, one by one, in
// the order docs/CRASH_SAFETY.md gives them, then crashes at each (and at
// each step of a segment deletion) in three models, and checks that the
// log opens, has every acknowledged record, can read every entry (no
// segment it believes in is missing: seed 002), and works afterwards.
func TestCrashAtEveryStepOfARoll(t *testing.T) {
	_, _, roll, del := rollScenario(t, vfs.NewMem(), func() bool { return false })
	old, tmp, final := testDir+"/"+segmentName(1), testDir+"/"+segmentName(9)+tmpSuffix, testDir+"/"+segmentName(9)
	want := []seenOp{
		{kind: vfs.OpWrite, path: old},       // the batch's first record, in the old segment
		{kind: vfs.OpSyncData, path: old},    // the old segment complete and durable
		{kind: vfs.OpCreate, path: tmp},      // 1. create under a temporary name
		{kind: vfs.OpTruncate, path: tmp},    // 2. (preallocate, uncounted) and size
		{kind: vfs.OpWrite, path: tmp},       // 3. header
		{kind: vfs.OpSyncData, path: tmp},    // 4. header and size durable
		{kind: vfs.OpRename, path: tmp},      // 5. final name
		{kind: vfs.OpSyncDir, path: testDir}, // 6. name durable, then switch
		{kind: vfs.OpWrite, path: final},     // the batch's second record
		{kind: vfs.OpWrite, path: final},     // zeros written ahead of it (zeroAhead)
		{kind: vfs.OpSyncData, path: final},  // the round's fdatasync
	}
	if len(roll) != len(want) {
		t.Fatalf("roll operations: %+v", roll)
	}
	for i := range want {
		if roll[i].kind != want[i].kind || roll[i].path != want[i].path {
			t.Fatalf("roll operation %d: %s %s, want %s %s", i, roll[i].kind, roll[i].path, want[i].kind, want[i].path)
		}
	}
	// The deletion: the marker's round, then per deleted segment a remove
	// and a directory sync, oldest first.
	var removes []string
	for i, o := range del {
		if o.kind == vfs.OpRemove {
			removes = append(removes, o.path)
			if i+1 >= len(del) || del[i+1].kind != vfs.OpSyncDir {
				t.Fatalf("remove of %s not followed by a directory sync: %+v", o.path, del)
			}
		}
	}
	if len(removes) < 2 || removes[0] != old || !slices.IsSorted(removes) {
		t.Fatalf("deletions: %v", removes)
	}
	steps := append(append([]seenOp(nil), roll...), del...)
	for _, step := range steps {
		for _, pct := range []int{0, 50, 100} {
			for seed := int64(0); seed < 3; seed++ {
				if pct != 50 && seed > 0 {
					continue
				}
				fs := vfs.NewMem()
				fs.CrashAtOp(step.k, pct, seed)
				w, acked, _, _ := rollScenario(t, fs, func() bool { return fs.Crashed() != nil })
				img := fs.Crashed()
				if img == nil {
					t.Fatalf("crash at %d (%s %s) not taken", step.k, step.kind, step.path)
				}
				l, p, err := verifyRecovered(img, w.ops, acked)
				if err != nil {
					t.Fatalf("crash before %s %s (k=%d, keep %d%%, seed %d): %v", step.kind, step.path, step.k, pct, seed, err)
				}
				if err := checkReadable(l); err != nil {
					t.Fatalf("crash before %s %s (k=%d, keep %d%%): %v", step.kind, step.path, step.k, pct, err)
				}
				if err := secondLife(l, img, w.ops, p); err != nil {
					t.Fatalf("crash before %s %s (k=%d, keep %d%%): after recovery: %v", step.kind, step.path, step.k, pct, err)
				}
			}
		}
	}
}

// TestCrashDuringRecovery crashes at every operation of an Open that must
// clear a torn tail and remove a roll's leftover, and of the first appends
// after it.
func TestCrashDuringRecovery(t *testing.T) {
	base := vfs.NewMem()
	l := mustOpen(t, smallConfig(base))
	w := &writer{l: l}
	seq, err := w.append(entries(1, 1, 1, 4, 300)...)
	if err != nil || l.WaitDurable(seq) != nil {
		t.Fatal(err)
	}
	acked := seq
	closeT(t, l)
	// A torn tail: garbage after the last record, and a roll's leftover.
	tearTail(t, base, 77)
	f, err := base.Create(testDir + "/" + segmentName(99) + tmpSuffix)
	if err != nil {
		t.Fatal(err)
	}
	closeT(t, f)
	for _, mode := range crashModes {
		t.Run(mode.name, func(t *testing.T) {
			k := int64(1)
			for ; k < 1000; k++ {
				fs := base.CrashClone(100, nil)
				fs.CrashAtOp(k, mode.keepPct, k)
				l, err := Open(smallConfig(fs))
				if err != nil {
					t.Fatalf("k=%d: open: %v", k, err)
				}
				w2 := &writer{l: l, ops: slices.Clone(w.ops)}
				acked2 := acked
				seq, err := w2.append(entries(1, 5, 1, 10, 200)...)
				if err == nil {
					err = l.WaitDurable(seq)
				}
				if err != nil {
					t.Fatalf("k=%d: append after recovery: %v", k, err)
				}
				if fs.Crashed() == nil {
					acked2 = seq
				}
				closeT(t, l)
				img := fs.Crashed()
				if img == nil {
					break
				}
				l2, _, err := verifyRecovered(img, w2.ops, acked2)
				if err != nil {
					t.Fatalf("k=%d: %v", k, err)
				}
				closeT(t, l2)
			}
			t.Logf("crashed at every one of %d operations", k-1)
		})
	}
}

// abandon drops a log as kill -9 would: no sync, files and lock released,
// the filesystem (page cache) keeps whatever was written.
func abandon(l *Log) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	// As kill -9 does: no Close errors to see.
	for _, s := range l.segs {
		_ = s.f.Close()
	}
	_ = l.lock.Close()
}

// TestKillNineThenPowerLoss: after a kill -9 the next Open reads records
// and a segment name that may be only in the page cache; it must make them
// durable before building on them, or a power loss later takes away what
// the new process acknowledged after them.
func TestKillNineThenPowerLoss(t *testing.T) {
	t.Run("unsynced tail, then a roll", func(t *testing.T) {
		fs := vfs.NewMem()
		l := mustOpen(t, smallConfig(fs))
		seq, err := l.Append(entries(1, 1, 1, 3, 900)...)
		if err != nil || l.WaitDurable(seq) != nil {
			t.Fatal(err)
		}
		// Written (a round that failed its fdatasync), never synced.
		fs.InjectErrors(func(op vfs.Op) error {
			if op.Kind == vfs.OpSyncData {
				return vfs.ErrInjected
			}
			return nil
		})
		seq, _ = l.Append(entries(1, 4, 1, 1, 900)...)
		if err := l.WaitDurable(seq); err == nil {
			t.Fatal("sync did not fail")
		}
		fs.InjectErrors(nil)
		abandon(l)
		// The next process sees entry 4 and rolls at once: the old
		// segment is not written again in this life.
		l = mustOpen(t, smallConfig(fs))
		seq, err = l.Append(entries(1, 5, 1, 2, 900)...)
		if err != nil || l.WaitDurable(seq) != nil {
			t.Fatal(err)
		}
		if l.Stats().Rolls == 0 {
			t.Fatal("no roll")
		}
		closeT(t, l)
		l = mustOpen(t, smallConfig(fs.CrashClone(0, nil)))
		defer closeT(t, l)
		if li, _ := l.LastIndex(1); li != 6 {
			t.Fatalf("last index %d after power loss, want 6", li)
		}
	})
	t.Run("unsynced segment name", func(t *testing.T) {
		fs := vfs.NewMem()
		l := mustOpen(t, smallConfig(fs))
		seq, err := l.Append(entries(1, 1, 1, 5, 900)...)
		if err != nil {
			t.Fatal(err)
		}
		// The roll's directory sync fails: the new segment's name is
		// only in the page cache.
		fs.InjectErrors(func(op vfs.Op) error {
			if op.Kind == vfs.OpSyncDir {
				return vfs.ErrInjected
			}
			return nil
		})
		if err := l.WaitDurable(seq); err == nil {
			t.Fatal("roll did not fail")
		}
		fs.InjectErrors(nil)
		abandon(l)
		l = mustOpen(t, smallConfig(fs))
		if n := l.Stats().Segments; n != 2 {
			t.Fatalf("%d segments after reopen, want 2", n)
		}
		last, _ := l.LastIndex(1)
		seq, err = l.Append(entries(1, last+1, 1, 1, 10)...)
		if err != nil || l.WaitDurable(seq) != nil {
			t.Fatal(err)
		}
		closeT(t, l)
		l = mustOpen(t, smallConfig(fs.CrashClone(0, nil)))
		defer closeT(t, l)
		if li, _ := l.LastIndex(1); li != last+1 {
			t.Fatalf("last index %d after power loss, want %d", li, last+1)
		}
	})
}
