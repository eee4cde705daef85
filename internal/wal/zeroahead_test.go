package wal

import (
	"fmt"
	"math"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestZeroAheadKeepsContent: a round writes zeros past its records
// (zeroAhead) so that later rounds overwrite initialised blocks; that
// changes no content. The segment after the last record reads as zeros, a
// crash image that keeps any subset of the unsynced writes opens with every
// durable record, and the log goes on after it.
func TestZeroAheadKeepsContent(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("SkipZeroAhead=%v", skip), func(t *testing.T) { testZeroAhead(t, skip) })
	}
}

// testZeroAhead: with or without zeros written ahead (SkipZeroAhead, on
// tmpfs), the segment holds zeros after the records, the log reopens on it
// with every record, and goes on across a roll. The zero-ahead run
// switches it off at the reopen (the same log moved to tmpfs reads the
// same), the other switches it on.
func testZeroAhead(t *testing.T, skip bool) {
	fs := vfs.NewMem()
	cfg := Config{Dir: testDir, FS: fs, SegmentSizeBytes: 512 << 10, MaxRecordBytes: 4096, SkipZeroAhead: skip, Logger: quietLogger}
	l := mustOpen(t, cfg)
	w := &writer{l: l}
	seq, err := w.append(entries(1, 1, 1, 20, 3000)...)
	if err != nil || l.WaitDurable(seq) != nil {
		t.Fatalf("append: %v", err)
	}
	st := l.Stats()
	if zeros := st.ZeroBytesWritten; (zeros == 0) != skip {
		t.Fatalf("%d zero bytes written ahead of the records with SkipZeroAhead %v", zeros, skip)
	}
	cfg.SkipZeroAhead = !skip
	f, err := fs.Open(testDir + "/" + segmentName(1))
	if err != nil {
		t.Fatal(err)
	}
	end := int64(segmentHeaderSize) + int64(st.BytesWritten)
	tail := make([]byte, 64<<10)
	if n, _ := f.ReadAt(tail, end); n != len(tail) {
		t.Fatalf("read %d bytes after the records", n)
	}
	closeT(t, f)
	for i, b := range tail {
		if b != 0 {
			t.Fatalf("byte %d after the records is %#x", i, b)
		}
	}
	// The log reopens on it (a crash image of the synced state) with
	// every record and goes on in the zeroed part, across a roll.
	closeT(t, l)
	l2 := mustOpen(t, cfg)
	defer closeT(t, l2)
	if err := checkAgainst(l2, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	w2 := &writer{l: l2, ops: w.ops}
	s2, err := w2.append(entries(1, 21, 1, 300, 3000)...)
	if err != nil || l2.WaitDurable(s2) != nil {
		t.Fatalf("append after reopen: %v", err)
	}
	if l2.Stats().Rolls == 0 {
		t.Fatal("no roll")
	}
	img := mustOpen(t, Config{Dir: testDir, FS: fs.CrashClone(0, nil), SegmentSizeBytes: cfg.SegmentSizeBytes, MaxRecordBytes: cfg.MaxRecordBytes, SkipZeroAhead: skip, Logger: quietLogger})
	defer closeT(t, img)
	if err := checkAgainst(img, modelAt(w2.ops, math.MaxUint64)); err != nil {
		t.Fatalf("crash image after the roll: %v", err)
	}
}
