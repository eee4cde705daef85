package wal

import (
	"bytes"
	"encoding/hex"
	"io"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"

	"github.com/spindle-store/spindle/internal/goldenhex"
)

// The golden-byte tests pin the segment header and every record type byte
// for byte: the worked example of docs/FORMAT.md §11.4 (header, an entry, a
// hard state) and, laid out by the table of §11.3, one record of each other
// type. A round trip alone cannot catch a change made to an encoder and its
// decoder together; these can. A failure here means the log format changed:
// existing logs would no longer replay. If that is intended, it needs a new
// format version, not a new golden value.

// golden and checkGolden: the helpers shared by every golden-byte test.
var (
	golden      = goldenhex.Decode
	checkGolden = goldenhex.Check
)

// goldenSegmentHeader is the header of docs/FORMAT.md §11.4: log ID
// 0xe63a792984ab0be7, first sequence number 1.
func goldenSegmentHeader(t *testing.T) []byte {
	return golden(t,
		"53 50 4e 44 4c 57 41 4c", // magic SPNDLWAL
		"01 00 00 00",             // format version 1
		"e7 0b ab 84 29 79 3a e6", // log ID
		"01 00 00 00 00 00 00 00", // first sequence number 1
		"df af 07 47",             // CRC32C 0x4707afdf of bytes 0..27
	)
}

// goldenRecords are the two records of docs/FORMAT.md §11.4, written in one
// round: an entry of group 7 (term 2, index 1, normal, data "WriteChunk
// hdr") and the group's hard state (term 2, vote 3, commit 1).
func goldenRecords(t *testing.T) (entry, hardState []byte) {
	entry = golden(t,
		"00 90 3e 93",             // CRC32C 0x933e9000 of bytes 4..61
		"0e 00 00 00",             // payload length 14
		"01",                      // type 1: entry
		"00",                      // raft entry type 0: normal
		"00 00",                   // reserved
		"00 00 00 00",             // batch position 0: first of its batch
		"01 00 00 00 00 00 00 00", // sequence number 1
		"07 00 00 00 00 00 00 00", // group 7
		"02 00 00 00 00 00 00 00", // term 2
		"01 00 00 00 00 00 00 00", // index 1
		hex.EncodeToString([]byte("WriteChunk hdr")), // payload
	)
	hardState = golden(t,
		"34 8b 68 54",             // CRC32C 0x54688b34 of bytes 4..55
		"08 00 00 00",             // payload length 8
		"02",                      // type 2: hard state
		"00",                      // raft entry type: 0
		"00 00",                   // reserved
		"01 00 00 00",             // batch position 1: batch started at record 1
		"02 00 00 00 00 00 00 00", // sequence number 2
		"07 00 00 00 00 00 00 00", // group 7
		"02 00 00 00 00 00 00 00", // term 2
		"01 00 00 00 00 00 00 00", // commit index 1
		"03 00 00 00 00 00 00 00", // payload: vote 3
	)
	return entry, hardState
}

func TestSegmentHeaderGolden(t *testing.T) {
	want := goldenSegmentHeader(t)
	in := segmentHeader{logID: 0xe63a792984ab0be7, firstSeq: 1}
	checkGolden(t, "segment header", encodeSegmentHeader(in), want)
	got, err := decodeSegmentHeader(want)
	if err != nil || got != in {
		t.Fatalf("decode of the golden segment header: %+v, %v; want %+v", got, err, in)
	}
}

// TestRecordGolden encodes one record of each type and decodes the golden
// bytes back.
func TestRecordGolden(t *testing.T) {
	entry, hardState := goldenRecords(t)
	cases := []struct {
		name    string
		h       recordHeader
		payload []byte
		want    []byte
	}{
		{"entry", recordHeader{typ: TypeEntry, seq: 1, group: 7, term: 2, index: 1}, []byte("WriteChunk hdr"), entry},
		{"hard state", recordHeader{typ: TypeHardState, batchPos: 1, seq: 2, group: 7, term: 2, index: 1},
			[]byte{3, 0, 0, 0, 0, 0, 0, 0}, hardState},
		{"conf change entry", recordHeader{typ: TypeEntry, entryType: 2, batchPos: 2, seq: 10, group: 0x0102030405060708, term: 5, index: 6},
			[]byte{0xaa, 0xbb}, golden(t,
				"75 b7 c6 5f",             // CRC32C 0x5fc6b775
				"02 00 00 00",             // payload length 2
				"01",                      // type 1: entry
				"02",                      // raft entry type 2: conf change v2
				"00 00",                   // reserved
				"02 00 00 00",             // batch position 2
				"0a 00 00 00 00 00 00 00", // sequence number 10
				"08 07 06 05 04 03 02 01", // group 0x0102030405060708
				"05 00 00 00 00 00 00 00", // term 5
				"06 00 00 00 00 00 00 00", // index 6
				"aa bb",                   // payload
			)},
		{"snapshot installed", recordHeader{typ: TypeSnapshot, seq: 11, group: 7, term: 3, index: 100},
			[]byte("conf"), golden(t,
				"fd d7 ad da",             // CRC32C 0xdaadd7fd
				"04 00 00 00",             // payload length 4
				"03",                      // type 3: snapshot installed
				"00",                      // raft entry type: 0
				"00 00",                   // reserved
				"00 00 00 00",             // batch position 0
				"0b 00 00 00 00 00 00 00", // sequence number 11
				"07 00 00 00 00 00 00 00", // group 7
				"03 00 00 00 00 00 00 00", // term 3
				"64 00 00 00 00 00 00 00", // index 100
				"63 6f 6e 66",             // payload "conf"
			)},
		{"compaction marker", recordHeader{typ: TypeCompact, batchPos: 1, seq: 12, group: 7, term: 3, index: 90},
			nil, golden(t,
				"82 70 84 48",             // CRC32C 0x48847082
				"00 00 00 00",             // payload length 0
				"04",                      // type 4: compaction marker
				"00",                      // raft entry type: 0
				"00 00",                   // reserved
				"01 00 00 00",             // batch position 1
				"0c 00 00 00 00 00 00 00", // sequence number 12
				"07 00 00 00 00 00 00 00", // group 7
				"03 00 00 00 00 00 00 00", // term 3
				"5a 00 00 00 00 00 00 00", // index 90
			)},
		{"snapshot metadata", recordHeader{typ: TypeSnapshotMeta, seq: 13, group: 7, term: 3, index: 95},
			[]byte{0x08, 0x01}, golden(t,
				"68 81 b7 95",             // CRC32C 0x95b78168
				"02 00 00 00",             // payload length 2
				"05",                      // type 5: snapshot metadata
				"00",                      // raft entry type: 0
				"00 00",                   // reserved
				"00 00 00 00",             // batch position 0
				"0d 00 00 00 00 00 00 00", // sequence number 13
				"07 00 00 00 00 00 00 00", // group 7
				"03 00 00 00 00 00 00 00", // term 3
				"5f 00 00 00 00 00 00 00", // index 95
				"08 01",                   // payload
			)},
	}
	for _, c := range cases {
		c.h.payloadLen = uint32(len(c.payload))
		checkGolden(t, c.name, appendRecord(nil, &c.h, c.payload), c.want)
		h, payload, err := decodeRecord(c.want)
		if err != nil || h != c.h || !bytes.Equal(payload, c.payload) {
			t.Fatalf("%s: decode of the golden bytes: %+v %x, %v; want %+v %x", c.name, h, payload, err, c.h, c.payload)
		}
	}
}

// TestSegmentGolden runs the example of docs/FORMAT.md §11.4 through the
// Log API and compares the segment file: the log assigns the sequence
// numbers and batch positions, so this pins them too. The log ID is random,
// so the header is compared with the example's except for the ID (and the
// header CRC, which covers it).
func TestSegmentGolden(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, smallConfig(fs))
	if _, err := l.Append(EntryRecord(7, 2, 1, 0, []byte("WriteChunk hdr")), HardStateRecord(7, HardState{Term: 2, Vote: 3, Commit: 1})); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	f, err := fs.Open(testDir + "/" + segmentName(1))
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, f)
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4096 {
		t.Fatalf("segment is %d bytes, want SegmentSizeBytes 4096", len(got))
	}
	hdr := goldenSegmentHeader(t)
	copy(hdr[12:20], got[12:20]) // this log's random ID
	if _, err := decodeSegmentHeader(got[:segmentHeaderSize]); err != nil {
		t.Fatalf("segment header: %v", err)
	}
	checkGolden(t, "segment header without its ID and CRC", append(got[:12:12], got[20:28]...), append(hdr[:12:12], hdr[20:28]...))
	entry, hardState := goldenRecords(t)
	want := append(entry, hardState...)
	end := segmentHeaderSize + len(want)
	checkGolden(t, "records", got[segmentHeaderSize:end], want)
	if !allZero(got[end:]) {
		t.Fatal("segment is not zero after its last record")
	}
}
