package wal

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/spindle-store/spindle/internal/vfs"
)

// Open opens the log in cfg.Dir, creating the directory and a new log
// when it holds no segment (unless cfg.MustExist), and recovers it: see
// the package documentation and docs/CRASH_SAFETY.md §8.5. Damage
// inside the durable part of the log fails Open with an error wrapping
// ErrCorrupt; a torn tail is truncated.
func Open(cfg Config) (*Log, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dir := filepath.Clean(c.Dir)
	fs := c.FS
	if err := vfs.MkdirAllDurable(fs, dir); err != nil {
		return nil, fmt.Errorf("wal: create log directory %s: %w", dir, err)
	}
	lk, err := fs.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("wal: lock log directory %s: %w", dir, err)
	}
	l := &Log{
		cfg:        c,
		fs:         fs,
		dir:        dir,
		lock:       lk,
		maxPayload: c.MaxRecordBytes - recordHeaderSize,
		log:        c.Logger,
		groups:     make(map[uint64]*group),
		nextSeq:    1,
	}
	l.cond = sync.NewCond(&l.mu)
	if err := l.recover(); err != nil {
		// Best effort: recover's error is the one; the next Open recovers again.
		for _, s := range l.segs {
			_ = s.f.Close()
		}
		_ = lk.Close()
		return nil, err
	}
	return l, nil
}

// recover lists the directory and either creates a new log or reads and
// checks every segment, rebuilding the groups.
func (l *Log) recover() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("wal: list log directory %s: %w", l.dir, err)
	}
	var firsts []uint64
	for _, name := range names {
		if strings.HasSuffix(name, segmentSuffix+tmpSuffix) {
			// A roll that did not finish (steps 1-5): the segment never
			// joined the log.
			p := filepath.Join(l.dir, name)
			if err := l.fs.Remove(p); err != nil {
				return fmt.Errorf("wal: remove leftover %s: %w", p, err)
			}
			l.log.Info("wal: removed the leftover of an interrupted segment roll", "file", p)
			continue
		}
		if seq, ok := parseSegmentName(name); ok {
			firsts = append(firsts, seq)
		}
	}
	slices.Sort(firsts)
	if len(firsts) == 0 {
		if l.cfg.MustExist {
			return fmt.Errorf("%w: %s", ErrNoLog, l.dir)
		}
		return l.create()
	}
	var buf []byte
	for i, first := range firsts {
		last := i == len(firsts)-1
		res, err := l.recoverSegment(first, last, &buf)
		if err != nil {
			return fmt.Errorf("wal: recover segment %s: %w", filepath.Join(l.dir, segmentName(first)), err)
		}
		if !last && i+1 < len(firsts) && firsts[i+1] != res.lastSeq+1 {
			return fmt.Errorf("%w: segment %s ends with record %d but the next segment %s starts at %d (records missing)",
				ErrCorrupt, segmentName(first), res.lastSeq, segmentName(firsts[i+1]), firsts[i+1])
		}
		if last {
			l.nextSeq = res.lastSeq + 1
			l.durableSeq = res.lastSeq
			seg := l.segs[len(l.segs)-1]
			l.tailSeg, l.tailOff, l.tailCap = seg.firstSeq, res.end, seg.sizeBytes
			l.active = seg
		}
	}
	for _, g := range l.groups {
		if err := g.checkReplayed(); err != nil {
			return fmt.Errorf("wal: recover %s: %w", l.dir, err)
		}
	}
	// What was read must be durable before anything is built on it: after
	// a kill -9 the tail may still sit in the page cache only, and a
	// segment's name in an unsynced directory.
	if err := l.active.f.SyncData(); err != nil {
		return fmt.Errorf("wal: fdatasync segment %s: %w", l.active.path, err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: sync log directory %s: %w", l.dir, err)
	}
	return nil
}

// create starts a new log: a random log ID and the first segment.
func (l *Log) create() error {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("wal: log ID: %w", err)
	}
	l.logID = binary.LittleEndian.Uint64(id[:])
	seg, err := createSegment(l.fs, l.dir, l.logID, 1, l.cfg.SegmentSizeBytes)
	if err != nil {
		return err
	}
	l.segs = append(l.segs, seg)
	l.active = seg
	l.tailSeg, l.tailOff, l.tailCap = 1, segmentHeaderSize, seg.sizeBytes
	l.log.Info("wal: created a new log", "dir", l.dir, "log_id", fmt.Sprintf("%016x", l.logID))
	return nil
}

// recoverSegment opens, reads and checks one segment, replays its records
// into the groups and, for the last segment, clears a torn tail.
func (l *Log) recoverSegment(first uint64, last bool, bufp *[]byte) (scanResult, error) {
	path := filepath.Join(l.dir, segmentName(first))
	var f vfs.File
	var err error
	if last {
		f, err = l.fs.OpenReadWrite(path, false)
	} else {
		f, err = l.fs.Open(path)
	}
	if err != nil {
		return scanResult{}, err
	}
	seg := &segment{firstSeq: first, path: path, f: f, refs: 1}
	l.segs = append(l.segs, seg)
	st, err := f.Stat()
	if err != nil {
		return scanResult{}, err
	}
	size := st.Size()
	if size < segmentHeaderSize || size > MaxSegmentFileBytes {
		return scanResult{}, fmt.Errorf("%w: file size %d bytes not in [%d, %d]", ErrCorrupt, size, segmentHeaderSize, MaxSegmentFileBytes)
	}
	seg.sizeBytes = size
	buf := slices.Grow((*bufp)[:0], int(size))[:size]
	*bufp = buf
	if n, err := f.ReadAt(buf, 0); n != len(buf) && (err == nil || errors.Is(err, io.EOF)) {
		return scanResult{}, fmt.Errorf("short read: %d of %d bytes: %v", n, len(buf), err)
	} else if err != nil && !errors.Is(err, io.EOF) {
		return scanResult{}, err
	}
	hdr, err := decodeSegmentHeader(buf)
	if err != nil {
		return scanResult{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if hdr.firstSeq != first {
		return scanResult{}, fmt.Errorf("%w: header says first record %d, name says %d", ErrCorrupt, hdr.firstSeq, first)
	}
	if len(l.segs) == 1 {
		l.logID = hdr.logID
	} else if hdr.logID != l.logID {
		return scanResult{}, fmt.Errorf("%w: log ID %016x, the log's is %016x (a segment of another log)", ErrCorrupt, hdr.logID, l.logID)
	}
	res, err := scanSegment(buf, hdr, last, l.replay)
	if err != nil {
		return res, err
	}
	if res.needRepair {
		// A torn tail: zero everything after the last whole record, so
		// that nothing of it can be mistaken for records once new ones
		// are written after them. Synced (below, in recover) before any
		// append.
		newSize := max(size, l.cfg.SegmentSizeBytes)
		l.log.Warn("wal: truncating the torn tail of the log", "segment", path, "offset", res.end, "last_record", res.lastSeq)
		if err := f.Truncate(res.end); err != nil {
			return res, err
		}
		if err := f.Truncate(newSize); err != nil {
			return res, err
		}
		if err := f.Preallocate(res.end, newSize-res.end); err != nil {
			return res, err
		}
		seg.sizeBytes = newSize
	}
	return res, nil
}

// replay applies one recovered record to its group.
func (l *Log) replay(h *recordHeader, payload []byte, off int64) error {
	if h.index > maxIndex || h.term > maxIndex || (h.typ == TypeEntry && (h.index == 0 || h.term == 0)) {
		return fmt.Errorf("%w: group %d %s record with index %d term %d", ErrCorrupt, h.group, h.typ, h.index, h.term)
	}
	g := l.groups[h.group]
	if g == nil {
		g = &group{id: h.group}
		l.groups[h.group] = g
	}
	return g.apply(h, payload, off, nil, true, l.cache.drop)
}
