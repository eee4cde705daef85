package wal

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

func segmentFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, ok := parseSegmentName(n); ok {
			out = append(out, testDir+"/"+n)
		}
	}
	return out
}

func readAll(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, f)
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// patch overwrites bytes of a file, durably.
func patch(t *testing.T, fs vfs.FS, path string, off int64, b []byte) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, f)
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
}

func truncateFile(t *testing.T, fs vfs.FS, path string, size int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, f)
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
}

type recInfo struct {
	off  int64
	h    recordHeader
	size int
}

// recordsOf walks the valid records of a segment image.
func recordsOf(buf []byte) []recInfo {
	var out []recInfo
	off := segmentHeaderSize
	for {
		h, _, err := decodeRecord(buf[off:])
		if err != nil {
			return out
		}
		out = append(out, recInfo{off: int64(off), h: h, size: h.size()})
		off += h.size()
	}
}

// tearTail writes random non-zero bytes right after the last record of the
// last segment, as a torn write could leave them.
func tearTail(t *testing.T, fs vfs.FS, seed int64) {
	t.Helper()
	segs := segmentFiles(t, fs)
	last := segs[len(segs)-1]
	recs := recordsOf(readAll(t, fs, last))
	end := int64(segmentHeaderSize)
	if len(recs) > 0 {
		end = recs[len(recs)-1].off + int64(recs[len(recs)-1].size)
	}
	g := make([]byte, 200)
	rng := rand.New(rand.NewSource(seed))
	for i := range g {
		g[i] = byte(1 + rng.Intn(255))
	}
	patch(t, fs, last, end, g)
}

// syncedLog writes batches of three entries of group 1, each batch synced,
// and returns the writer's ops (the log is closed).
func syncedLog(t *testing.T, cfg Config, batches int) []op {
	t.Helper()
	l := mustOpen(t, cfg)
	w := &writer{l: l}
	for b := 0; b < batches; b++ {
		seq, err := w.append(entries(1, uint64(1+3*b), 1, 3, 60, 200, 10)...)
		if err != nil || l.WaitDurable(seq) != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return w.ops
}

func bigSegments(fs vfs.FS) Config {
	c := smallConfig(fs)
	c.SegmentSizeBytes = 1 << 20
	return c
}

func expectCorrupt(t *testing.T, cfg Config, what string) {
	t.Helper()
	l, err := Open(cfg)
	if err == nil {
		closeT(t, l)
		t.Fatalf("%s: Open succeeded", what)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: %v, want ErrCorrupt", what, err)
	}
	t.Logf("%s: %v", what, err)
}

// expectTruncatedTo opens a log whose tail was damaged, expects exactly the
// records up to seq, then appends past the damaged region and reopens:
// the repair must have cleared it.
func expectTruncatedTo(t *testing.T, cfg Config, ops []op, seq uint64) {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if got := l.Stats().LastSeq; got != seq {
		t.Fatalf("recovered up to record %d, want %d", got, seq)
	}
	if err := checkAgainst(l, modelAt(ops, seq)); err != nil {
		t.Fatal(err)
	}
	w := &writer{l: l}
	for _, o := range ops {
		if o.seq <= seq {
			w.ops = append(w.ops, o)
		}
	}
	// Small records: new sequence numbers end before the old records'
	// offsets do, so anything left of them would read as stale records.
	last, _ := l.LastIndex(1)
	if _, err := w.append(entries(1, last+1, 2, 5, 5)...); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(cfg)
	if err != nil {
		t.Fatalf("reopen after appending past the repaired tail: %v", err)
	}
	defer closeT(t, l)
	if err := checkAgainst(l, modelAt(w.ops, math.MaxUint64)); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptionInDurablePartIsRefused(t *testing.T) {
	t.Run("payload byte in the last segment", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, bigSegments(fs), 20)
		seg := segmentFiles(t, fs)[0]
		r := recordsOf(readAll(t, fs, seg))[30]
		patch(t, fs, seg, r.off+recordHeaderSize+5, []byte{0xff ^ readAll(t, fs, seg)[r.off+recordHeaderSize+5]})
		expectCorrupt(t, bigSegments(fs), "flipped payload byte")
	})
	t.Run("header byte in the last segment", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, bigSegments(fs), 20)
		seg := segmentFiles(t, fs)[0]
		r := recordsOf(readAll(t, fs, seg))[30]
		patch(t, fs, seg, r.off+4, []byte{0x7f}) // length
		expectCorrupt(t, bigSegments(fs), "damaged length")
	})
	t.Run("zeroed record in the last segment", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, bigSegments(fs), 20)
		seg := segmentFiles(t, fs)[0]
		r := recordsOf(readAll(t, fs, seg))[30]
		patch(t, fs, seg, r.off, make([]byte, r.size))
		expectCorrupt(t, bigSegments(fs), "zeroed record")
	})
	t.Run("byte in a segment that is not the last", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, smallConfig(fs), 20)
		segs := segmentFiles(t, fs)
		if len(segs) < 3 {
			t.Fatalf("%d segments", len(segs))
		}
		buf := readAll(t, fs, segs[1])
		recs := recordsOf(buf)
		r := recs[len(recs)-1] // even the last record of a non-last segment
		patch(t, fs, segs[1], r.off+recordHeaderSize, []byte{^buf[r.off+recordHeaderSize]})
		expectCorrupt(t, smallConfig(fs), "flipped byte in a middle segment")
	})
	t.Run("garbage in the zero tail of a segment that is not the last", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, smallConfig(fs), 20)
		segs := segmentFiles(t, fs)
		patch(t, fs, segs[0], 4090, []byte{1})
		expectCorrupt(t, smallConfig(fs), "garbage after the records of a middle segment")
	})
	t.Run("missing middle segment", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, smallConfig(fs), 20)
		segs := segmentFiles(t, fs)
		if err := fs.Remove(segs[1]); err != nil {
			t.Fatal(err)
		}
		expectCorrupt(t, smallConfig(fs), "missing segment")
	})
	t.Run("missing first segment with live entries", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, smallConfig(fs), 20)
		if err := fs.Remove(segmentFiles(t, fs)[0]); err != nil {
			t.Fatal(err)
		}
		expectCorrupt(t, smallConfig(fs), "missing first segment")
	})
	t.Run("segment header", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, smallConfig(fs), 20)
		patch(t, fs, segmentFiles(t, fs)[1], 3, []byte{'x'})
		expectCorrupt(t, smallConfig(fs), "bad magic")
	})
	t.Run("segment of another log", func(t *testing.T) {
		fs := vfs.NewMem()
		syncedLog(t, smallConfig(fs), 20)
		seg := segmentFiles(t, fs)[1]
		first, _ := parseSegmentName(seg[len(testDir)+1:])
		patch(t, fs, seg, 0, encodeSegmentHeader(segmentHeader{logID: 12345, firstSeq: first}))
		expectCorrupt(t, smallConfig(fs), "foreign log ID")
	})
}

func TestTornTailIsTruncated(t *testing.T) {
	// The last batch holds records 58..60 (20 batches of 3).
	const lastBatchStart, lastSeq = 58, 60
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, fs vfs.FS, seg string, recs []recInfo)
		want   uint64 // last record recovered
	}{
		{"cut in the middle of the last record", func(t *testing.T, fs vfs.FS, seg string, recs []recInfo) {
			r := recs[len(recs)-1]
			truncateFile(t, fs, seg, r.off+int64(r.size)/2)
		}, lastSeq - 1},
		{"cut in the middle of the last header", func(t *testing.T, fs vfs.FS, seg string, recs []recInfo) {
			truncateFile(t, fs, seg, recs[len(recs)-1].off+10)
		}, lastSeq - 1},
		{"last record zeroed", func(t *testing.T, fs vfs.FS, seg string, recs []recInfo) {
			r := recs[len(recs)-1]
			patch(t, fs, seg, r.off+int64(r.size)-20, make([]byte, 20))
		}, lastSeq - 1},
		{"checksum mismatch in the last record", func(t *testing.T, fs vfs.FS, seg string, recs []recInfo) {
			r := recs[len(recs)-1]
			patch(t, fs, seg, r.off+recordHeaderSize, []byte{0xee})
		}, lastSeq - 1},
		{"first page of the last batch lost, later records kept", func(t *testing.T, fs vfs.FS, seg string, recs []recInfo) {
			r := recs[lastBatchStart-1]
			patch(t, fs, seg, r.off, make([]byte, r.size+10))
		}, lastBatchStart - 1},
		{"garbage after the last record", func(t *testing.T, fs vfs.FS, seg string, recs []recInfo) {
			tearTail(t, fs, 1)
		}, lastSeq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			ops := syncedLog(t, bigSegments(fs), 20)
			seg := segmentFiles(t, fs)[0]
			recs := recordsOf(readAll(t, fs, seg))
			if len(recs) != lastSeq || recs[lastBatchStart-1].h.batchPos != 0 || recs[lastSeq-1].h.batchStart() != lastBatchStart {
				t.Fatalf("unexpected layout: %d records", len(recs))
			}
			tc.damage(t, fs, seg, recs)
			expectTruncatedTo(t, bigSegments(fs), ops, tc.want)
		})
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	h := recordHeader{typ: TypeEntry, seq: 5, batchPos: 2, group: 1, term: 1, index: 1}
	good := appendRecord(nil, &h, []byte("hello"))
	if _, p, err := decodeRecord(good); err != nil || string(p) != "hello" {
		t.Fatalf("good record: %v", err)
	}
	for _, tc := range []struct {
		name string
		mut  func(b []byte) []byte
		want error
	}{
		{"short header", func(b []byte) []byte { return b[:20] }, errShort},
		{"short payload", func(b []byte) []byte { return b[:len(b)-1] }, errShort},
		{"crc", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, errChecksum},
		{"type 0", func(b []byte) []byte { b[8] = 0; return b }, errFraming},
		{"type 6", func(b []byte) []byte { b[8] = 6; return b }, errFraming},
		{"reserved", func(b []byte) []byte { b[10] = 1; return b }, errFraming},
		{"huge length", func(b []byte) []byte { b[7] = 0x10; return b }, errFraming},
	} {
		b := tc.mut(append([]byte(nil), good...))
		if _, _, err := decodeRecord(b); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	h0 := recordHeader{typ: TypeEntry, seq: 2, batchPos: 2, group: 1}
	if _, _, err := decodeRecord(appendRecord(nil, &h0, nil)); err != errFraming {
		t.Errorf("batch position past the sequence number: %v", err)
	}
	if !strings.Contains(segmentName(0x1f), "000000000000001f.wal") {
		t.Errorf("segment name %s", segmentName(0x1f))
	}
	for _, bad := range []string{"000000000000001F.wal", "1f.wal", "0000000000000000.wal", "000000000000001f.wal.tmp", "LOCK"} {
		if _, ok := parseSegmentName(bad); ok {
			t.Errorf("%s parsed as a segment name", bad)
		}
	}
}
