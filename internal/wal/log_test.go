package wal

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

func TestRoundTripAndReopen(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	w := &writer{l: l}
	if _, err := w.append(entries(1, 1, 1, 5, 10, 0, 200)...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.append(HardStateRecord(1, HardState{Term: 1, Vote: 3, Commit: 4})); err != nil {
		t.Fatal(err)
	}
	// Readable before durable (from the cache).
	if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatalf("before sync: %v", err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(entries(1, 6, 1, 1, 10)...); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	l = mustOpen(t, smallConfig(fs))
	defer closeT(t, l)
	if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	// Unknown group: raft's initial state.
	if f, _ := l.FirstIndex(9); f != 1 {
		t.Fatalf("first index of an unknown group: %d", f)
	}
	if li, _ := l.LastIndex(9); li != 0 {
		t.Fatalf("last index of an unknown group: %d", li)
	}
	if tm, err := l.Term(9, 0); err != nil || tm != 0 {
		t.Fatalf("term 0 of an unknown group: %d %v", tm, err)
	}
}

func TestManyGroupsInterleavedAcrossRolls(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	w := &writer{l: l}
	const groups = 7
	next := map[uint64]uint64{}
	for round := 0; round < 40; round++ {
		var batch []Record
		for g := uint64(1); g <= groups; g++ {
			if (round+int(g))%3 == 0 {
				continue
			}
			n := 1 + (round+int(g))%4
			if next[g] == 0 {
				next[g] = 1
			}
			batch = append(batch, entries(g, next[g], 1, n, 30, 90, 7)...)
			next[g] += uint64(n)
			batch = append(batch, HardStateRecord(g, HardState{Term: 1, Vote: g, Commit: next[g] - 1}))
		}
		seq, err := w.append(batch...)
		if err != nil {
			t.Fatal(err)
		}
		if round%2 == 0 {
			if err := l.WaitDurable(seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Rolls < 5 {
		t.Fatalf("only %d rolls; the test wants several", st.Rolls)
	}
	if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatal(err)
	}
	// Reads from segments (cache evicted): reopen.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, smallConfig(fs))
	defer closeT(t, l)
	if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	// maxBytes: at least one entry, then as many as fit.
	ents, err := l.Entries(1, 1, 20, 1)
	if err != nil || len(ents) != 1 {
		t.Fatalf("entries with maxBytes 1: %d, %v", len(ents), err)
	}
	ents, err = l.Entries(1, 1, 20, 3*(30+entryOverheadBytes))
	if err != nil || len(ents) < 1 || len(ents) > 3 {
		t.Fatalf("entries with a small maxBytes: %d, %v", len(ents), err)
	}
}

func TestTermConflict(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	w := &writer{l: l}
	must := func(_ uint64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.append(entries(1, 1, 1, 10, 100)...))
	must(w.append(entries(2, 1, 1, 3, 100)...))
	must(0, l.Sync())
	// A new leader at term 2 overwrites from index 6: 6..10 of term 1 go.
	must(w.append(entries(1, 6, 2, 2, 50)...))
	must(0, l.Sync())
	if li, _ := l.LastIndex(1); li != 7 {
		t.Fatalf("last index after conflict: %d, want 7", li)
	}
	// Then term 3 overwrites 7 only, and goes on.
	must(w.append(entries(1, 7, 3, 4, 20)...))
	// In one batch: an entry, then a conflict inside the batch itself.
	must(w.append(append(entries(2, 4, 1, 3, 10), entries(2, 5, 2, 1, 10)...)...))
	must(0, l.Sync())
	m := modelAt(w.ops, math.MaxUint64)
	if err := checkAgainst(l, m); err != nil {
		t.Fatal(err)
	}
	if tm, _ := l.Term(1, 6); tm != 2 {
		t.Fatalf("term of 6: %d", tm)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, smallConfig(fs))
	defer closeT(t, l)
	if err := checkAgainst(l, m); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

func TestAppendValidation(t *testing.T) {
	l := mustOpen(t, smallConfig(vfs.NewMem()))
	defer closeT(t, l)
	if _, err := l.Append(entries(1, 1, 2, 3, 10)...); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		recs []Record
	}{
		{"hole", entries(1, 5, 2, 1, 10)},
		{"index 0", entries(1, 0, 2, 1, 10)},
		{"term 0", entries(1, 4, 0, 1, 10)},
		{"term goes down", entries(1, 4, 1, 1, 10)},
		{"too large", entries(1, 4, 2, 1, 1024)},
		{"compact via append", []Record{{Type: TypeCompact, Group: 1, Index: 1}}},
		{"unknown type", []Record{{Type: 9, Group: 1}}},
		{"entry type on hard state", []Record{{Type: TypeHardState, Group: 1, EntryType: 1}}},
		{"new group not at 1", entries(2, 3, 1, 1, 10)},
		{"snapshot meta past the end", []Record{SnapshotMetaRecord(1, 9, 2, nil)}},
		// All or nothing: a good record then a bad one.
		{"batch with a bad record", append(entries(1, 4, 2, 1, 10), entries(1, 9, 2, 1, 10)...)},
	} {
		if _, err := l.Append(tc.recs...); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if li, _ := l.LastIndex(1); li != 3 {
		t.Fatalf("a refused batch changed the log: last index %d", li)
	}
	if ids, _ := l.Groups(); len(ids) != 1 {
		t.Fatalf("a refused batch created groups: %v", ids)
	}
	if err := l.Compact(1, 4); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("compact past the end: %v", err)
	}
}

func TestSnapshotsAndCompaction(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	w := &writer{l: l}
	check := func(what string) {
		t.Helper()
		if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if _, err := w.append(entries(1, 1, 1, 20, 150)...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.append(entries(2, 1, 1, 20, 150)...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.append(SnapshotMetaRecord(1, 15, 1, []byte("confstate-1"))); err != nil {
		t.Fatal(err)
	}
	if err := w.compact(1, 10); err != nil {
		t.Fatal(err)
	}
	check("after compact")
	if _, err := l.Entries(1, 10, 12, math.MaxUint64); !errors.Is(err, ErrCompacted) {
		t.Fatalf("entries below the compaction point: %v", err)
	}
	if err := w.compact(1, 5); err != nil {
		t.Fatalf("compact below the point is a no-op: %v", err)
	}
	// Group 2 installs a snapshot past its log: entries gone, log after 40.
	if _, err := w.append(SnapshotRecord(2, 40, 3, []byte("confstate-2"))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.append(entries(2, 41, 3, 3, 10)...); err != nil {
		t.Fatal(err)
	}
	check("after snapshot")
	if err := w.compact(2, 42); err != nil {
		t.Fatal(err)
	}
	if err := w.compact(1, 20); err != nil {
		t.Fatal(err)
	}
	check("after more compaction")
	if st := l.Stats(); st.SegmentsDeleted == 0 {
		t.Fatalf("no segment deleted: %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, smallConfig(fs))
	w.l = l
	defer closeT(t, l)
	check("after reopen")
}

// An idle group's hard state in the oldest segment must not pin the log:
// collection carries it forward.
func TestIdleGroupDoesNotPinTheLog(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	w := &writer{l: l}
	if _, err := w.append(HardStateRecord(9, HardState{Term: 4, Vote: 2, Commit: 0})); err != nil {
		t.Fatal(err)
	}
	if _, err := w.append(entries(9, 1, 4, 1, 10)...); err != nil {
		t.Fatal(err)
	}
	if err := w.compact(9, 1); err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	for i := 0; i < 30; i++ {
		if _, err := w.append(entries(1, next, 1, 4, 200)...); err != nil {
			t.Fatal(err)
		}
		next += 4
		if err := w.compact(1, next-2); err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats()
	if st.Segments > 3 || st.CarriedRecords == 0 {
		t.Fatalf("log not collected: %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, smallConfig(fs))
	w.l = l
	defer closeT(t, l)
	if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatal(err)
	}
}

// N appenders whose records arrive while a round is in flight are covered
// by one more round: one write and one fdatasync for all of them.
func TestGroupCommitSharesRounds(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, Config{Dir: testDir, FS: fs, Logger: quietLogger, SegmentSizeBytes: 2 << 20})
	defer closeT(t, l)
	const n = 9
	var appended sync.WaitGroup
	appended.Add(n)
	inFlight, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpSyncData {
			once.Do(func() { close(inFlight); <-release }) // hold the first round's fdatasync
		}
		return nil
	})
	before := l.Stats()
	first, err := l.Append(entries(100, 1, 1, 1, 10)...)
	if err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error)
	go func() { firstDone <- l.WaitDurable(first) }()
	<-inFlight // the first round holds only the first record
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := uint64(1); g <= n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := l.Append(entries(g, 1, 1, 1, 10)...)
			appended.Done()
			if err == nil {
				err = l.WaitDurable(seq)
			}
			errs <- err
		}()
	}
	appended.Wait()
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	fs.InjectErrors(nil)
	after := l.Stats()
	if rounds := after.Rounds - before.Rounds; rounds != 2 {
		t.Fatalf("%d rounds for 1 + %d concurrent appends, want 2", rounds, n)
	}
	if syncs := after.SyncDatas - before.SyncDatas; syncs != 2 {
		t.Fatalf("%d fdatasyncs, want 2", syncs)
	}
	if w := after.Writes - before.Writes; w != 2 {
		t.Fatalf("%d writes, want 2", w)
	}
}

// Back-pressure: with a tiny buffer, appenders that find it full run
// rounds themselves; nothing deadlocks and everything is durable.
func TestBackPressure(t *testing.T) {
	fs := vfs.NewMem()
	cfg := smallConfig(fs)
	cfg.MaxBufferedBytes = 300
	l := mustOpen(t, cfg)
	var wg sync.WaitGroup
	for g := uint64(1); g <= 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= 30; i++ {
				if _, err := l.Append(entries(g, i, 1, 1, 100)...); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	if st.Rounds == 0 {
		t.Fatal("no round ran while the buffer was full")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, cfg)
	defer closeT(t, l)
	for g := uint64(1); g <= 4; g++ {
		if li, _ := l.LastIndex(g); li != 30 {
			t.Fatalf("group %d: last index %d after close and reopen", g, li)
		}
	}
}

// Concurrent appenders, syncers, readers and compaction (for the race
// detector), checked against the model at the end.
func TestConcurrentUse(t *testing.T) {
	fs := vfs.NewMem()
	cfg := smallConfig(fs)
	cfg.CacheBytes = 2048 // force reads from segments
	l := mustOpen(t, cfg)
	const groups, perGroup = 6, 60
	var wg sync.WaitGroup
	for g := uint64(1); g <= groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= perGroup; i++ {
				seq, err := l.Append(EntryRecord(g, 1, i, 0, data(g, i, 1, 40+int(i%5)*30)), HardStateRecord(g, HardState{Term: 1, Commit: i}))
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := l.WaitDurable(seq); err != nil {
						t.Error(err)
						return
					}
				}
				if i%10 == 0 {
					if err := l.Compact(g, i-5); err != nil {
						t.Error(err)
						return
					}
				}
				first, _ := l.FirstIndex(g)
				ents, err := l.Entries(g, first, i+1, math.MaxUint64)
				if err != nil && !errors.Is(err, ErrCompacted) {
					t.Error(err)
					return
				}
				for _, e := range ents {
					if string(e.Data) != string(data(g, e.Index, 1, 40+int(e.Index%5)*30)) {
						t.Errorf("group %d entry %d: wrong data", g, e.Index)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, cfg)
	defer closeT(t, l)
	for g := uint64(1); g <= groups; g++ {
		first, _ := l.FirstIndex(g)
		last, _ := l.LastIndex(g)
		if first != perGroup-5+1 || last != perGroup {
			t.Fatalf("group %d: [%d, %d]", g, first, last)
		}
		hs, _ := l.HardState(g)
		if hs.Commit != perGroup {
			t.Fatalf("group %d: hard state %+v", g, hs)
		}
	}
}

func TestSyncFailureIsSticky(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	seq, err := l.Append(entries(1, 1, 1, 3, 10)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(seq); err != nil {
		t.Fatal(err)
	}
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpSyncData {
			return vfs.ErrInjected
		}
		return nil
	})
	seq, err = l.Append(entries(1, 4, 1, 1, 10)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(seq); !errors.Is(err, ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("wait after a failed fdatasync: %v", err)
	}
	fs.InjectErrors(nil)
	// Sticky: no retry, no more appends or reads, even once the disk is fine.
	if _, err := l.Append(entries(1, 5, 1, 1, 10)...); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after failure: %v", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("sync after failure: %v", err)
	}
	if _, err := l.Entries(1, 1, 2, math.MaxUint64); !errors.Is(err, ErrFailed) {
		t.Fatalf("read after failure: %v", err)
	}
	if err := l.Compact(1, 2); !errors.Is(err, ErrFailed) {
		t.Fatalf("compact after failure: %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("close after failure: %v", err)
	}
	// Recovery from what is durable: the first three entries (the fourth
	// may or may not have reached the disk).
	l = mustOpen(t, smallConfig(fs.CrashClone(0, nil)))
	defer closeT(t, l)
	if li, _ := l.LastIndex(1); li != 3 {
		t.Fatalf("after reopen: last index %d, want 3", li)
	}
}

// A roll that fails at any of its steps fails the log; the next Open
// removes the leftover and recovers every acknowledged record.
func TestRollFailure(t *testing.T) {
	for _, kind := range []vfs.OpKind{vfs.OpCreate, vfs.OpTruncate, vfs.OpPreallocate, vfs.OpWrite, vfs.OpSyncData, vfs.OpRename, vfs.OpSyncDir} {
		t.Run(kind.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			l := mustOpen(t, smallConfig(fs))
			next := uint64(1)
			for l.Stats().Rolls == 0 || next < 10 {
				if _, err := l.Append(entries(1, next, 1, 1, 500)...); err != nil {
					t.Fatal(err)
				}
				next++
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			acked := next - 1
			rolls := l.Stats().Rolls
			fs.InjectErrors(func(op vfs.Op) error {
				if op.Kind == kind && (hasSuffix(op.Path, ".tmp") || (kind == vfs.OpSyncDir && op.Path == testDir)) {
					return vfs.ErrInjected
				}
				return nil
			})
			var err error
			for l.Stats().Rolls == rolls && err == nil {
				if _, err = l.Append(entries(1, next, 1, 1, 500)...); err == nil {
					next++
					if err = l.Sync(); err == nil {
						acked = next - 1
					}
				}
			}
			if !errors.Is(err, ErrFailed) {
				t.Fatalf("roll with a failing %s: %v", kind, err)
			}
			fs.InjectErrors(nil)
			if err := l.Close(); !errors.Is(err, ErrFailed) {
				t.Errorf("Close of the failed log: %v, want ErrFailed", err)
			}
			for _, pct := range []int{0, 100} {
				l2 := mustOpen(t, smallConfig(fs.CrashClone(pct, nil)))
				if li, _ := l2.LastIndex(1); li < acked {
					t.Fatalf("keep %d%%: last index %d, acknowledged %d", pct, li, acked)
				}
				if err := checkReadable(l2); err != nil {
					t.Fatalf("keep %d%%: %v", pct, err)
				}
				closeT(t, l2)
			}
		})
	}
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

// checkReadable reads every entry of every group (from the segments when
// the cache is cold): no segment the log refers to may be missing.
func checkReadable(l *Log) error {
	ids, err := l.Groups()
	if err != nil {
		return err
	}
	for _, id := range ids {
		first, _ := l.FirstIndex(id)
		last, _ := l.LastIndex(id)
		if _, err := l.Entries(id, first, last+1, math.MaxUint64); err != nil {
			return err
		}
	}
	return nil
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Dir: "/x", FS: vfs.NewMem(), SegmentSizeBytes: 1000, MaxRecordBytes: 1024},
		{Dir: "/x", FS: vfs.NewMem(), MaxRecordBytes: 10},
		{Dir: "/x", FS: vfs.NewMem(), MaxRecordBytes: MaxRecordBytesLimit + 1},
	} {
		if _, err := Open(cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := Open(Config{Dir: "/x", FS: vfs.NewMem(), MustExist: true}); !errors.Is(err, ErrNoLog) {
		t.Errorf("MustExist on an empty directory: %v", err)
	}
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	if _, err := Open(smallConfig(fs)); err == nil {
		t.Error("second open of a locked log succeeded")
	}
	closeT(t, l)
}

func TestOSFilesystem(t *testing.T) {
	cfg := Config{Dir: t.TempDir() + "/wal", SegmentSizeBytes: 8192, MaxRecordBytes: 2048, Logger: quietLogger}
	l := mustOpen(t, cfg)
	w := &writer{l: l}
	for i := uint64(0); i < 20; i++ {
		if _, err := w.append(entries(1, 1+i*5, 1, 5, 300)...); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.compact(1, 60); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, cfg)
	defer closeT(t, l)
	if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Segments > 10 {
		t.Fatalf("%d segments after compaction", st.Segments)
	}
}
