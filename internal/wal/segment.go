package wal

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spindle-store/spindle/internal/vfs"
)

// Segment file names: the first sequence number of the segment as 16
// lower-case hex digits, then ".wal"; while a roll prepares it, the same
// name with ".tmp" appended.
const (
	segmentSuffix = ".wal"
	tmpSuffix     = ".tmp"
	lockName      = "LOCK"
)

func segmentName(firstSeq uint64) string {
	return fmt.Sprintf("%016x%s", firstSeq, segmentSuffix)
}

// parseSegmentName returns the first sequence number a segment file name
// stands for; ok is false for any other name.
func parseSegmentName(name string) (uint64, bool) {
	if len(name) != 16+len(segmentSuffix) || !strings.HasSuffix(name, segmentSuffix) {
		return 0, false
	}
	hex := name[:16]
	if strings.ToLower(hex) != hex {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	return v, true
}

// segment is one segment file of the log.
type segment struct {
	firstSeq  uint64
	path      string
	f         vfs.File
	sizeBytes int64 // capacity: the file's preallocated size
	// zeroedTo: every byte below it was written in this life of the log
	// (records, or zeros written ahead: Log.zeroAhead), so that a write
	// below it overwrites initialised blocks. Owned by the round in
	// flight, like Log.active.
	zeroedTo int64
	// refs counts the log's own reference (while the segment is in
	// Log.segs) and every read in progress; the file is closed when it
	// drops to zero. Guarded by Log.mu.
	refs int
}

// scanResult is what scanSegment found in one segment file.
type scanResult struct {
	end     int64  // offset just past the last valid record
	lastSeq uint64 // sequence number of the last valid record, or firstSeq-1
	// needRepair: the bytes from end on are not all zero (a torn tail
	// that Open must clear before anything is appended after end).
	needRepair bool
}

// maxTornScanBytes bounds the checksum work scanSegment spends looking for
// valid records behind damage in the last segment; past it, the damage is
// reported as corruption rather than guessed to be a torn tail.
const maxTornScanBytes = 1 << 30

// scanSegment validates the records of one segment file, held whole in buf,
// whose header hdr has already been checked, calling visit for each valid
// record in order (payload aliases buf). Records must carry consecutive
// sequence numbers from hdr.firstSeq; after the last record the file must
// be zero to its end.
//
// In a segment that is not the last of the log, any deviation is ErrCorrupt
// (a segment is complete and synced before the next one is created). In the
// last segment, a deviation at offset X is either the torn tail of the last
// write batch, which was never acknowledged, or damage to durable records:
// it is damage if a valid record further on was written in a batch that
// started after the record expected at X (its batch start is greater than
// that record's sequence number), since such a batch was written only
// after a sync covered X; also if a valid record further on repeats an
// earlier sequence number. Otherwise it is a torn tail: the result ends at
// X with needRepair set.
func scanSegment(buf []byte, hdr segmentHeader, last bool, visit func(h *recordHeader, payload []byte, off int64) error) (scanResult, error) {
	res := scanResult{end: segmentHeaderSize, lastSeq: hdr.firstSeq - 1}
	next := hdr.firstSeq
	var prevBatch uint64
	off := segmentHeaderSize
	defect := func(why string) (scanResult, error) {
		if !last {
			return res, fmt.Errorf("%w: offset %d (record %d expected): %s, in a segment that is not the last", ErrCorrupt, off, next, why)
		}
		if err := checkTornTail(buf, off, next); err != nil {
			return res, fmt.Errorf("offset %d (record %d expected, %s): %w", off, next, why, err)
		}
		res.needRepair = true
		return res, nil
	}
	for {
		rest := buf[off:]
		if len(rest) == 0 {
			return res, nil
		}
		if len(rest) < recordHeaderSize || allZero(rest[:recordHeaderSize]) {
			if allZero(rest) {
				return res, nil // the end: preallocated space
			}
			return defect("non-zero bytes after the end of the records")
		}
		h, payload, err := decodeRecord(rest)
		if err != nil {
			return defect(err.Error())
		}
		if h.seq != next {
			// A record whose checksum holds but that is not the next
			// one: no torn write produces it.
			return res, fmt.Errorf("%w: offset %d: record %d where record %d was expected", ErrCorrupt, off, h.seq, next)
		}
		if off > segmentHeaderSize && h.batchPos != 0 && h.batchStart() != prevBatch {
			return res, fmt.Errorf("%w: offset %d: record %d claims batch start %d inside batch %d", ErrCorrupt, off, h.seq, h.batchStart(), prevBatch)
		}
		if visit != nil {
			if err := visit(&h, payload, int64(off)); err != nil {
				return res, fmt.Errorf("offset %d record %d: %w", off, h.seq, err)
			}
		}
		prevBatch = h.batchStart()
		off += h.size()
		next++
		res.end = int64(off)
		res.lastSeq = h.seq
	}
}

// checkTornTail looks, from off+1 on, for records whose checksum holds,
// and returns ErrCorrupt if one proves that the region at off was durable
// (see scanSegment). next is the sequence number expected at off.
func checkTornTail(buf []byte, off int, next uint64) error {
	budget := maxTornScanBytes
	for p := off + 1; p+recordHeaderSize <= len(buf); p++ {
		if t := RecordType(buf[p+8]); t == 0 || t > maxRecordType {
			continue // cheap filter: most offsets fail here
		}
		h, _, err := decodeRecord(buf[p:])
		if err == errChecksum || err == nil {
			budget -= recordHeaderSize + int(h.payloadLen)
		}
		if budget < 0 {
			return fmt.Errorf("%w: damage at offset %d; too much data behind it to tell a torn write from damage", ErrCorrupt, off)
		}
		if err != nil {
			continue
		}
		if h.seq < next {
			return fmt.Errorf("%w: damage at offset %d is followed at offset %d by record %d, an earlier sequence number", ErrCorrupt, off, p, h.seq)
		}
		if h.batchStart() > next {
			return fmt.Errorf("%w: damage at offset %d is followed at offset %d by record %d, written in a batch that started at %d, after a sync that covered record %d", ErrCorrupt, off, p, h.seq, h.batchStart(), next)
		}
	}
	return nil
}

// createSegment is the segment roll (docs/CRASH_SAFETY.md §8.3, steps 1-7):
// it creates the segment whose first record will have sequence number
// firstSeq, of capacity sizeBytes, and returns it once its directory entry
// is durable. On error nothing of it is left in use (a leftover temporary
// file is removed by the next Open).
func createSegment(fs vfs.FS, dir string, logID, firstSeq uint64, sizeBytes int64) (*segment, error) {
	name := segmentName(firstSeq)
	final := filepath.Join(dir, name)
	tmp := final + tmpSuffix
	fail := func(step string, err error) (*segment, error) {
		return nil, fmt.Errorf("wal: roll to segment %s: %s: %w", name, step, err)
	}
	// 1. Create the file under a temporary name (truncating a leftover).
	f, err := fs.Create(tmp)
	if err != nil {
		return fail("create", err)
	}
	closeFail := func(step string, err error) (*segment, error) {
		_ = f.Close() // best effort: err is the one; the next Open removes the file
		return fail(step, err)
	}
	// 2. Reserve its blocks and give it its final size: zeros.
	if err := f.Preallocate(0, sizeBytes); err != nil {
		return closeFail("preallocate", err)
	}
	if err := f.Truncate(sizeBytes); err != nil {
		return closeFail("truncate", err)
	}
	// 3. The header.
	if _, err := f.WriteAt(encodeSegmentHeader(segmentHeader{logID: logID, firstSeq: firstSeq}), 0); err != nil {
		return closeFail("write header", err)
	}
	// 4. Header and size durable before the name can be.
	if err := f.SyncData(); err != nil {
		return closeFail("fdatasync", err)
	}
	// 5. The final name.
	if err := fs.Rename(tmp, final); err != nil {
		return closeFail("rename", err)
	}
	// 6. The name durable. Only now is the segment part of the log.
	if err := fs.SyncDir(dir); err != nil {
		return closeFail("sync directory", err)
	}
	// Reopen under the final name (what errors and later opens see).
	if err := f.Close(); err != nil {
		return fail("close", err)
	}
	if f, err = fs.OpenReadWrite(final, false); err != nil {
		return fail("reopen", err)
	}
	return &segment{firstSeq: firstSeq, path: final, f: f, sizeBytes: sizeBytes, refs: 1}, nil
}
