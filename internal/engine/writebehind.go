package engine

import (
	"fmt"
	"sync/atomic"
)

// Write-behind of logged writes.
//
// A logged write's bytes are durable in the caller's log; the block file
// needs them only by the time something reads the file or a sync makes it
// durable (SyncLogged, SyncLoggedBlocks, a PutBlock covering them, Close).
// So a logged chunk that extends the bytes a block file already gathers is
// appended to that file's write-behind buffer instead of being written at
// once: a writer of 1 KiB chunks costs one pwrite per wbFileMaxBytes, not
// one per chunk. On ext4 that pwrite is the largest single cost of a small
// replicated write (page-cache lookup, delayed allocation, and the inode's
// timestamp update, which in nojournal mode rewrites the inode buffer:
// 21 % of all samples of bench chunk-write 1 KiB x 64 with data and log on
// this VM's disk, three replicas).
//
// Invariants:
//   - The buffer holds bytes of one contiguous range [wbOff, wbOff+len)
//     of the file, all from logged writes that returned; nothing else is
//     ever deferred.
//   - Every reader of the file's bytes through the engine (readVerified,
//     AdoptChunk), every sync of the file (the committer's syncFile) and
//     the file leaving the cache (eviction, a deleted block, a dropped
//     container, Close) flushes it first; a file out of the cache takes no
//     more buffered writes (wbClosed), so a later user of the block, which
//     opens its own blockFile, never misses bytes held here.
//   - A flush that fails is sticky for the file (wbErr): the next write,
//     read or sync of it returns the error, so a failed write-behind
//     fails the sync that would have made the bytes durable, as a failed
//     pwrite or fdatasync does (the engine refuses every later mutation).
//   - Memory: one buffer per file of at most wbFileMaxBytes, allocated
//     on the first buffered write and freed when a sync or the cache's
//     eviction flushes it; all buffers' capacity together stays within
//     the cache's wbBudgetBytes (a write finding no room goes straight to
//     the file).
//
// Concurrency: wbMu guards the buffer and its fields; it is held across
// the flush's pwrite, so that a write, a read and a sync of the same file
// see the bytes in order. Lock order: fileCache.mu → blockFile.wbMu.

const (
	// wbFileMaxBytes is one file's buffer: a flush is one pwrite of at
	// most this much.
	wbFileMaxBytes = 64 << 10
	// wbChunkMaxBytes: larger logged chunks are written at once (they
	// are one pwrite's worth already).
	wbChunkMaxBytes = 16 << 10
	// defaultWriteBehindBudgetBytes bounds the buffers of all files of
	// one engine: 256 files writing small chunks at once.
	defaultWriteBehindBudgetBytes = 256 * wbFileMaxBytes
)

// wbBudget counts the capacity of all write-behind buffers of one cache.
type wbBudget struct {
	usedBytes atomic.Int64
	maxBytes  int64
}

func (w *wbBudget) take(n int64) bool {
	if w.usedBytes.Add(n) > w.maxBytes {
		w.usedBytes.Add(-n)
		return false
	}
	return true
}

func (w *wbBudget) give(n int64) {
	if w.usedBytes.Add(-n) < 0 {
		panic("engine: write-behind budget went below zero")
	}
}

// writeLogged writes a logged chunk's bytes at off of the file: into the
// write-behind buffer when they extend it (or start it) and it has room,
// else with a pwrite (after flushing what the buffer holds when the chunk
// does not extend it).
func (b *blockFile) writeLogged(data []byte, off int64) error {
	b.wbMu.Lock()
	defer b.wbMu.Unlock()
	if b.wbErr != nil {
		return b.wbErr
	}
	n := len(b.wbBuf)
	if n > 0 && (off != b.wbOff+int64(n) || n+len(data) > wbFileMaxBytes) {
		if err := b.flushLocked(); err != nil {
			return err
		}
		n = 0
	}
	if b.wbClosed || len(data) > wbChunkMaxBytes || (b.wbBuf == nil && !b.wb.take(wbFileMaxBytes)) {
		if _, err := b.f.WriteAt(data, off); err != nil {
			return fmt.Errorf("write %d bytes at offset %d of %s: %w", len(data), off, b.path, err)
		}
		return nil
	}
	if b.wbBuf == nil {
		b.wbBuf = make([]byte, 0, wbFileMaxBytes)
	}
	if n == 0 {
		b.wbOff = off
	}
	b.wbBuf = append(b.wbBuf, data...)
	return nil
}

// flushWriteBehind writes what the buffer holds to the file. free also
// gives the buffer's memory back (a sync: the file may see no more
// writes for a while); closed also makes later logged writes go straight
// to the file (the file left the cache).
func (b *blockFile) flushWriteBehind(free, closed bool) error {
	b.wbMu.Lock()
	defer b.wbMu.Unlock()
	err := b.flushLocked()
	if closed {
		b.wbClosed = true
	}
	if (free || closed) && b.wbBuf != nil {
		b.wbBuf = nil
		b.wb.give(wbFileMaxBytes)
	}
	return err
}

// flushLocked writes the buffer's bytes with one pwrite. b.wbMu held.
func (b *blockFile) flushLocked() error {
	if b.wbErr != nil {
		return b.wbErr
	}
	if len(b.wbBuf) == 0 {
		return nil
	}
	if _, err := b.f.WriteAt(b.wbBuf, b.wbOff); err != nil {
		b.wbErr = fmt.Errorf("write-behind of %d bytes at offset %d of %s: %w", len(b.wbBuf), b.wbOff, b.path, err)
	}
	b.wbBuf = b.wbBuf[:0]
	return b.wbErr
}
