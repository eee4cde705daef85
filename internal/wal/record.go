package wal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// RecordType is the kind of a log record (byte 8 of its header).
type RecordType uint8

// Record types. The numbers are part of the on-disk format.
const (
	// TypeEntry is a raft log entry of one group at (Term, Index). Its
	// payload is the entry's data; EntryType is raft's entry type. An entry
	// at an index at or below the group's last index replaces that entry
	// and every later one (raft log conflict: the later record wins).
	TypeEntry RecordType = 1
	// TypeHardState is a group's raft HardState: Term, Vote (8-byte
	// payload) and Commit (in the Index field). The latest one counts.
	TypeHardState RecordType = 2
	// TypeSnapshot records that the group installed a snapshot at (Index,
	// Term), raft's ApplySnapshot: every entry of the group is discarded,
	// the log restarts after Index. Payload: the snapshot's metadata,
	// opaque to the log (for example an encoded ConfState).
	TypeSnapshot RecordType = 3
	// TypeCompact is the group's "truncated before" marker: entries at or
	// below Index are no longer needed; Term is the term of entry Index,
	// kept so that Term(Index) can still be answered. Written by
	// Log.Compact, and re-written by segment collection (carried forward).
	TypeCompact RecordType = 4
	// TypeSnapshotMeta records the metadata of the group's latest local
	// snapshot at (Index, Term) without touching its entries (raft's
	// CreateSnapshot). Also how segment collection carries a snapshot's
	// metadata forward.
	TypeSnapshotMeta RecordType = 5

	maxRecordType = TypeSnapshotMeta
)

func (t RecordType) String() string {
	switch t {
	case TypeEntry:
		return "entry"
	case TypeHardState:
		return "hardstate"
	case TypeSnapshot:
		return "snapshot"
	case TypeCompact:
		return "compact"
	case TypeSnapshotMeta:
		return "snapshotmeta"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

// On-disk layout constants (see the package documentation for the tables;
// record_golden_test.go pins the bytes of docs/FORMAT.md §11.4).
const (
	// recordHeaderSize is the size of a record header; the payload follows.
	recordHeaderSize = 48
	// segmentHeaderSize is the size of the header at offset 0 of every
	// segment file; the first record starts right after it.
	segmentHeaderSize = 32
	// formatVersion is the segment format version written and accepted.
	formatVersion = 1
	// hardStatePayloadSize is the payload of a TypeHardState record (vote).
	hardStatePayloadSize = 8
	// MaxRecordBytesLimit is the largest record (header + payload) the
	// format allows; Config.MaxRecordBytes may not exceed it. The decoder
	// rejects longer length fields before looking at the payload.
	MaxRecordBytesLimit = 16 << 20
)

// segmentMagic opens every segment file.
var segmentMagic = [8]byte{'S', 'P', 'N', 'D', 'L', 'W', 'A', 'L'}

// recordHeader is a decoded record header.
type recordHeader struct {
	typ        RecordType
	entryType  uint8
	batchPos   uint32 // seq minus the first seq of the write batch the record was written in
	seq        uint64
	group      uint64
	term       uint64
	index      uint64
	payloadLen uint32
}

// batchStart is the first sequence number of the write batch the record
// was written in: every record before it was durable when it was written.
func (h *recordHeader) batchStart() uint64 { return h.seq - uint64(h.batchPos) }

// size is the encoded size of the record.
func (h *recordHeader) size() int { return recordHeaderSize + int(h.payloadLen) }

// appendRecord encodes a record (header and payload) at the end of b.
func appendRecord(b []byte, h *recordHeader, payload []byte) []byte {
	start := len(b)
	var hdr [recordHeaderSize]byte
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(payload)))
	hdr[8] = byte(h.typ)
	hdr[9] = h.entryType
	// hdr[10:12] reserved, zero
	binary.LittleEndian.PutUint32(hdr[12:], h.batchPos)
	binary.LittleEndian.PutUint64(hdr[16:], h.seq)
	binary.LittleEndian.PutUint64(hdr[24:], h.group)
	binary.LittleEndian.PutUint64(hdr[32:], h.term)
	binary.LittleEndian.PutUint64(hdr[40:], h.index)
	b = append(b, hdr[:]...)
	b = append(b, payload...)
	crc := crc32c.Checksum(b[start+4:])
	binary.LittleEndian.PutUint32(b[start:], crc)
	return b
}

// Decoding outcomes other than success.
var (
	// errShort: b ends before the header or the payload its length names
	// (a record cut by the end of the file or of the read).
	errShort = errors.New("record extends past the end of the data")
	// errFraming: a header field is out of range (type, reserved bytes,
	// length, entry type of a non-entry record, payload of a hard state).
	errFraming = errors.New("bad record framing")
	// errChecksum: the CRC32C does not match.
	errChecksum = errors.New("record checksum mismatch")
)

// decodeRecord decodes the record at the start of b, checking framing and
// CRC. On success it returns the header and the payload, which aliases b.
// It never allocates and never reads past b.
func decodeRecord(b []byte) (recordHeader, []byte, error) {
	var h recordHeader
	if len(b) < recordHeaderSize {
		return h, nil, errShort
	}
	h.payloadLen = binary.LittleEndian.Uint32(b[4:])
	h.typ = RecordType(b[8])
	h.entryType = b[9]
	if h.typ == 0 || h.typ > maxRecordType || b[10] != 0 || b[11] != 0 ||
		h.payloadLen > MaxRecordBytesLimit-recordHeaderSize ||
		(h.typ != TypeEntry && h.entryType != 0) ||
		(h.typ == TypeHardState && h.payloadLen != hardStatePayloadSize) ||
		(h.typ == TypeCompact && h.payloadLen != 0) {
		return h, nil, errFraming
	}
	if uint64(len(b)) < recordHeaderSize+uint64(h.payloadLen) {
		return h, nil, errShort
	}
	n := recordHeaderSize + int(h.payloadLen)
	if crc32c.Checksum(b[4:n]) != binary.LittleEndian.Uint32(b) {
		return h, nil, errChecksum
	}
	h.batchPos = binary.LittleEndian.Uint32(b[12:])
	h.seq = binary.LittleEndian.Uint64(b[16:])
	h.group = binary.LittleEndian.Uint64(b[24:])
	h.term = binary.LittleEndian.Uint64(b[32:])
	h.index = binary.LittleEndian.Uint64(b[40:])
	if h.seq == 0 || uint64(h.batchPos) >= h.seq {
		return h, nil, errFraming
	}
	return h, b[recordHeaderSize:n], nil
}

// segmentHeader is the decoded header of a segment file.
type segmentHeader struct {
	logID    uint64
	firstSeq uint64
}

func encodeSegmentHeader(h segmentHeader) []byte {
	b := make([]byte, segmentHeaderSize)
	copy(b, segmentMagic[:])
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	binary.LittleEndian.PutUint64(b[12:], h.logID)
	binary.LittleEndian.PutUint64(b[20:], h.firstSeq)
	binary.LittleEndian.PutUint32(b[28:], crc32c.Checksum(b[:28]))
	return b
}

func decodeSegmentHeader(b []byte) (segmentHeader, error) {
	var h segmentHeader
	if len(b) < segmentHeaderSize {
		return h, fmt.Errorf("segment header: %d bytes, want %d", len(b), segmentHeaderSize)
	}
	if [8]byte(b[:8]) != segmentMagic {
		return h, fmt.Errorf("segment header: bad magic %q", b[:8])
	}
	if crc32c.Checksum(b[:28]) != binary.LittleEndian.Uint32(b[28:]) {
		return h, errors.New("segment header: checksum mismatch")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return h, fmt.Errorf("segment header: format version %d, want %d", v, formatVersion)
	}
	h.logID = binary.LittleEndian.Uint64(b[12:])
	h.firstSeq = binary.LittleEndian.Uint64(b[20:])
	if h.firstSeq == 0 {
		return h, errors.New("segment header: first sequence number 0")
	}
	return h, nil
}

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
