package wal

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// FuzzDecodeRecord: the record decoder never panics, never reads past its
// input, and what it accepts re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, h := range []recordHeader{
		{typ: TypeEntry, entryType: 2, seq: 9, batchPos: 3, group: 7, term: 2, index: 40},
		{typ: TypeHardState, seq: 1, group: 7, term: 2, index: 39},
		{typ: TypeSnapshot, seq: 2, batchPos: 1, group: 1, term: 5, index: 100},
		{typ: TypeCompact, seq: 3, group: 1, term: 5, index: 90},
		{typ: TypeSnapshotMeta, seq: 4, group: 1, term: 5, index: 95},
	} {
		var p []byte
		switch h.typ {
		case TypeHardState:
			p = make([]byte, 8)
		case TypeEntry, TypeSnapshot, TypeSnapshotMeta:
			p = []byte("payload")
		}
		f.Add(appendRecord(nil, &h, p))
	}
	f.Add(make([]byte, recordHeaderSize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		h, p, err := decodeRecord(b)
		if !bytes.Equal(in, b) {
			t.Fatal("decoder modified its input")
		}
		if err != nil {
			return
		}
		if len(p) != int(h.payloadLen) || h.size() > len(b) {
			t.Fatalf("payload %d bytes, header says %d, input %d", len(p), h.payloadLen, len(b))
		}
		if re := appendRecord(nil, &h, p); !bytes.Equal(re, b[:h.size()]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re, b[:h.size()])
		}
	})
}

// segmentImage runs a small workload (several groups, a conflict, a hard
// state, snapshots, a compaction) in one 64 KiB segment and returns the
// segment file's bytes.
func segmentImage(f *testing.F) []byte {
	fs := vfs.NewMem()
	cfg := smallConfig(fs)
	cfg.SegmentSizeBytes = 64 << 10
	l, err := Open(cfg)
	if err != nil {
		f.Fatal(err)
	}
	w := &writer{l: l}
	steps := [][]Record{
		entries(1, 1, 1, 4, 30, 5),
		append(entries(2, 1, 1, 2, 12), HardStateRecord(2, HardState{Term: 1, Vote: 2, Commit: 1})),
		entries(1, 3, 2, 2, 9),
		{SnapshotRecord(3, 10, 2, []byte("cs"))},
		entries(3, 11, 2, 2, 7),
		{SnapshotMetaRecord(1, 3, 2, []byte("m"))},
	}
	for _, recs := range steps {
		seq, err := w.append(recs...)
		if err != nil || l.WaitDurable(seq) != nil {
			f.Fatal(err)
		}
	}
	if err := w.compact(1, 2); err != nil {
		f.Fatal(err)
	}
	closeT(f, l)
	b, err := readFileMem(fs, testDir+"/"+segmentName(1))
	if err != nil {
		f.Fatal(err)
	}
	// Keep the seed small: the records and some zeros after them.
	recs := recordsOf(b)
	end := recs[len(recs)-1].off + int64(recs[len(recs)-1].size)
	return b[:end+64]
}

func readFileMem(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

// FuzzRecoverSegment: Open of a log whose only segment holds arbitrary
// bytes never panics; it fails with ErrCorrupt or recovers a log whose
// every entry reads back, that takes appends, and that opens again.
func FuzzRecoverSegment(f *testing.F) {
	img := segmentImage(f)
	f.Add(img)
	f.Add(img[:len(img)-70])                 // cut inside the last record
	f.Add(append(bytes.Clone(img), 1, 2, 3)) // garbage after the zeros
	flipped := bytes.Clone(img)
	flipped[segmentHeaderSize+recordHeaderSize+2] ^= 0x40 // first record's payload
	f.Add(flipped)
	f.Add(img[:segmentHeaderSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		fs := vfs.NewMem()
		if err := fs.MkdirAll(testDir, 0o755); err != nil {
			t.Fatal(err)
		}
		wf, err := fs.Create(testDir + "/" + segmentName(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wf.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		closeT(t, wf)
		cfg := smallConfig(fs)
		l, err := Open(cfg)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open failed without ErrCorrupt: %v", err)
			}
			return
		}
		if err := checkReadable(l); err != nil {
			t.Fatalf("recovered log does not read: %v", err)
		}
		ids, _ := l.Groups()
		g := uint64(1 << 40) // a group the input does not name
		for slices.Contains(ids, g) {
			g++
		}
		seq, err := l.Append(entries(g, 1, 1, 3, 100)...)
		if err == nil {
			err = l.WaitDurable(seq)
		}
		if err != nil {
			t.Fatalf("append to the recovered log: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, err = Open(cfg)
		if err != nil {
			t.Fatalf("reopen after recovery and append: %v", err)
		}
		defer closeT(t, l)
		if li, _ := l.LastIndex(g); li != 3 {
			t.Fatalf("appended entries lost: last index %d", li)
		}
	})
}

// FuzzReplayRecords encodes a record sequence chosen by the fuzzer (types,
// small group IDs, terms and indexes, so that they collide) into a segment
// with valid checksums and consecutive sequence numbers, then damages one
// byte at a chosen offset (or none), and opens it: recovery of records the
// writer would never produce must fail with ErrCorrupt, not panic; what it
// accepts must read back, take appends and open again.
func FuzzReplayRecords(f *testing.F) {
	f.Add([]byte{1, 1, 1, 1, 0, 1, 1, 1, 2, 3, 2, 1, 1, 2, 0, 4, 1, 1, 1, 0}, uint16(0))
	f.Add([]byte{3, 2, 5, 9, 2, 1, 2, 5, 10, 1, 4, 2, 5, 9, 0, 5, 2, 5, 9, 4}, uint16(100))
	f.Add([]byte{1, 1, 1, 1, 0, 1, 1, 2, 1, 0, 1, 1, 1, 3, 0}, uint16(7))
	f.Fuzz(func(t *testing.T, spec []byte, damageAt uint16) {
		const recSpecBytes = 5 // type, group, term, index, payload length
		if len(spec) > 200*recSpecBytes {
			return
		}
		img := encodeSegmentHeader(segmentHeader{logID: 1, firstSeq: 1})
		batch := uint64(1)
		for i := 0; i+recSpecBytes <= len(spec); i += recSpecBytes {
			s := spec[i : i+recSpecBytes]
			seq := uint64(i/recSpecBytes + 1)
			if s[4]&0x80 != 0 {
				batch = seq // a new write batch starts here
			}
			h := recordHeader{typ: RecordType(1 + s[0]%5), group: uint64(s[1] % 4), term: uint64(s[2] % 8), index: uint64(s[3] % 32), seq: seq, batchPos: uint32(seq - batch)}
			var p []byte
			switch h.typ {
			case TypeHardState:
				p = make([]byte, 8)
			case TypeCompact:
			default:
				p = bytes.Repeat([]byte{s[4]}, int(s[4]&0x3f))
			}
			img = appendRecord(img, &h, p)
		}
		img = append(img, make([]byte, 64)...)
		if damageAt != 0 && int(damageAt) < len(img) {
			img[damageAt] ^= 0x5a
		}
		fs := vfs.NewMem()
		if err := fs.MkdirAll(testDir, 0o755); err != nil {
			t.Fatal(err)
		}
		wf, err := fs.Create(testDir + "/" + segmentName(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wf.WriteAt(img, 0); err != nil {
			t.Fatal(err)
		}
		closeT(t, wf)
		cfg := smallConfig(fs)
		cfg.SegmentSizeBytes = 64 << 10
		l, err := Open(cfg)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open failed without ErrCorrupt: %v", err)
			}
			return
		}
		if err := checkReadable(l); err != nil {
			t.Fatalf("recovered log does not read: %v", err)
		}
		ids, _ := l.Groups()
		for _, g := range ids {
			last, _ := l.LastIndex(g)
			term, err := l.Term(g, last)
			if err != nil {
				t.Fatalf("group %d: term of the last index %d: %v", g, last, err)
			}
			if _, err := l.Append(EntryRecord(g, max(term, 1), last+1, 0, []byte("x"))); err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("group %d: append: %v", g, err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, err = Open(cfg)
		if err != nil {
			t.Fatalf("reopen after recovery and appends: %v", err)
		}
		closeT(t, l)
	})
}
