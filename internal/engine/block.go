package engine

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// putBlockAttemptsMax bounds how often PutBlock re-verifies when another
// PutBlock of the same block committed while it waited for its data sync.
const putBlockAttemptsMax = 8

// PutBlock commits block metadata: its length and chunk list. The chunk
// list must be exactly the chunks written to the block from offset 0 (all
// of them, or a prefix), and must extend, never shrink, what is committed.
// PutBlock first waits until the data of those chunks is durable, so that a
// record never becomes durable before the data it describes; the record
// itself is durable after the next Sync. Nothing changes on error.
//
// bcsid is the put's block commit sequence ID: in a pipeline the raft index
// of its entry (one entry may carry several puts, so several may share
// one); callers without one pass 0. A put at or above the container's
// BCSID is applied as above and raises the BCSID to bcsid, also when the
// block record is already as bd says; the container record with the new
// BCSID is written in the same Pebble batch as the block record, so the
// BCSID is never ahead of or behind the blocks it covers. A put below it was applied before (raft re-applies entries after
// a restart): it succeeds without a change when the committed block covers
// it (the same chunks, or a prefix of them: an earlier checkpoint) or the
// block is gone (deleted since); it gets the error it got the first time
// when it is refused as it stands (its chunks do not match, the container
// is not OPEN, …). A put below it that would change a block is refused
// with ErrSequence and logged as an error: the pipeline applies a group's
// entries in index order, so that is a broken invariant, and applying it
// would put the BCSID behind a block it covers.
func (e *Engine) PutBlock(bd *BlockData, bcsid uint64) error {
	b := bd.ID
	if err := e.check(); err != nil {
		return blockErr("put block", b, err)
	}
	if err := validateBlockData(bd); err != nil {
		return blockErr("put block", b, err)
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return blockErr("put block", b, err)
	}
	for attempt := 0; attempt < putBlockAttemptsMax; attempt++ {
		c.mu.Lock()
		if c.goneBelowLocked(b.Local, bcsid) && c.writableLocked() == nil {
			// A put of a block a later committed DeleteBlock deletes, whose chunks this replica was excused from storing
			// (gone.go), on a container that takes puts (else refused below: a CLOSED replica's BCSID ranks it against
			// the others, CHAOS_FINDINGS §9): applied as the delete will leave it, only the sequence moves.
			err := e.advanceLocked(c, bcsid)
			c.mu.Unlock()
			if err != nil {
				return blockErr("put block", b, err)
			}
			return nil
		}
		if bcsid < c.bcsid {
			cur := c.bcsid
			err := e.replayedPutLocked(c, bd, bcsid)
			c.mu.Unlock()
			if errors.Is(err, ErrSequence) {
				e.log.Error("engine: put block below the container's commit sequence refused: applied out of order", "container", b.Container,
					"block", b.Local, "bcsid", bcsid, "container_bcsid", cur, "err", err)
			}
			if err != nil {
				return blockErr("put block", b, err)
			}
			return nil
		}
		bs, seq, err := e.verifyPutLocked(c, bd)
		if err == nil && bs == nil {
			err = e.advanceLocked(c, bcsid) // the record is as bd says: only the sequence moves
		}
		logged := err == nil && bs != nil && loggedUpTo(bs, bd.Length)
		c.mu.Unlock()
		if err != nil {
			return blockErr("put block", b, err)
		}
		if bs == nil {
			return nil
		}
		if logged {
			// Logged chunks' file is synced now, before the record can be durable.
			seq = max(seq, e.commit.promoteLogged(func(id BlockID) bool { return id == b }))
		}
		if err := e.commit.sync(seq); err != nil {
			return blockErr("put block", b, err)
		}
		c.mu.Lock()
		if c.blocks[b.Local] != bs || bs.committedLen > bd.Length || bcsid < c.bcsid {
			c.mu.Unlock()
			continue // state changed while we synced: verify again
		}
		_, _, err = e.verifyPutLocked(c, bd)
		if err != nil {
			c.mu.Unlock()
			return blockErr("put block", b, err)
		}
		err = e.commitPutLocked(c, bs, bd, bcsid)
		c.mu.Unlock()
		if err != nil {
			return blockErr("put block", b, err)
		}
		return nil
	}
	return blockErr("put block", b, fmt.Errorf("%w: block changed under %d attempts", ErrOverlap, putBlockAttemptsMax))
}

// CheckPut says whether PutBlock(bd) would find here every chunk bd names
// (written and not failed, or committed, with the checksums bd gives),
// without changing anything: a pipeline's leader asks it before proposing
// a PutBlock, so that a PutBlock reaching the log names chunks the leader
// holds, and a replica whose apply of it finds chunks missing has diverged
// (it is not a refusal every replica shares). The answer holds until the
// block is written to or deleted.
func (e *Engine) CheckPut(bd *BlockData) error {
	b := bd.ID
	if err := e.check(); err != nil {
		return blockErr("check put", b, err)
	}
	if err := validateBlockData(bd); err != nil {
		return blockErr("check put", b, err)
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return blockErr("check put", b, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, _, err := e.verifyPutLocked(c, bd); err != nil {
		return blockErr("check put", b, err)
	}
	return nil
}

// validateBlockData checks bd on its own: contiguous chunks from 0 that add
// up to Length, with the right number of checksums each.
func validateBlockData(bd *BlockData) error {
	if len(bd.Chunks) > maxChunksPerBlock {
		return fmt.Errorf("%w: %d chunks exceed %d", ErrInvalid, len(bd.Chunks), maxChunksPerBlock)
	}
	var off uint64
	for i := range bd.Chunks {
		ch := &bd.Chunks[i]
		if ch.Offset != off {
			return fmt.Errorf("%w: chunk %d at offset %d, want %d (chunks are contiguous)", ErrHole, i, ch.Offset, off)
		}
		if err := checkChunkArgs(ch.Length, bd.BytesPerChecksum, ch.Checksums); err != nil {
			return fmt.Errorf("chunk %d: %w", i, err)
		}
		off += ch.Length
	}
	if off != bd.Length {
		return fmt.Errorf("%w: length %d, chunks add up to %d", ErrInvalid, bd.Length, off)
	}
	return nil
}

// verifyPutLocked checks bd against what was written and committed. It
// returns the block state and the sequence number the data must be durable
// to, or a nil state when bd is already committed as is.
func (e *Engine) verifyPutLocked(c *container, bd *BlockData) (*blockState, uint64, error) {
	if err := c.writableLocked(); err != nil {
		return nil, 0, err
	}
	bs, err := e.blockStateLocked(c, bd.ID.Local)
	if err != nil {
		return nil, 0, err
	}
	if bs.broken != nil {
		return nil, 0, bs.broken
	}
	if bd.Length < bs.committedLen {
		return nil, 0, fmt.Errorf("%w: length %d would shrink the committed %d", ErrInvalid, bd.Length, bs.committedLen)
	}
	if bd.Length > bs.nextOffset {
		// A chunk range the put names is missing here.
		return nil, 0, fmt.Errorf("%w: length %d, only %d bytes written", ErrNotFound, bd.Length, bs.nextOffset)
	}
	if len(bd.Chunks) > 0 && bs.bpc != 0 && bd.BytesPerChecksum != bs.bpc {
		return nil, 0, fmt.Errorf("%w: bytes per checksum %d, block uses %d", ErrInvalid, bd.BytesPerChecksum, bs.bpc)
	}
	i := 0
	if bs.committedLen > 0 {
		old, err := e.loadBlock(c, bd.ID)
		if err != nil {
			return nil, 0, err
		}
		if len(bd.Chunks) < len(old.Chunks) {
			return nil, 0, fmt.Errorf("%w: %d chunks, %d committed", ErrInvalid, len(bd.Chunks), len(old.Chunks))
		}
		for ; i < len(old.Chunks); i++ {
			if !sameChunk(&bd.Chunks[i], &old.Chunks[i]) {
				return nil, 0, fmt.Errorf("%w: chunk %d at offset %d differs from the committed one", ErrInvalid, i, bd.Chunks[i].Offset)
			}
		}
		if bd.Length == bs.committedLen {
			return nil, 0, nil
		}
	}
	var seq uint64
	for j := 0; i < len(bd.Chunks); i, j = i+1, j+1 {
		if j >= len(bs.pending) {
			return nil, 0, fmt.Errorf("%w: chunk %d at offset %d does not match the chunk written there", ErrInvalid, i, bd.Chunks[i].Offset)
		}
		if written := bs.pendingInfo(j); !sameChunk(&bd.Chunks[i], &written) {
			return nil, 0, fmt.Errorf("%w: chunk %d at offset %d does not match the chunk written there", ErrInvalid, i, bd.Chunks[i].Offset)
		}
		if !bs.pending[j].done {
			return nil, 0, fmt.Errorf("%w: chunk %d at offset %d is still being written", ErrInvalid, i, bd.Chunks[i].Offset)
		}
		seq = max(seq, bs.pending[j].seq)
	}
	return bs, seq, nil
}

// replayedPutLocked decides a put below the container's BCSID, which was
// applied before if the pipeline applied in order: nil when it changes
// nothing (the committed block covers it, or the block is gone: deleted
// since); the error the put gets anyway when it is refused as it stands
// (it was refused the first time, the same way: say its chunks do not
// match the ones written); ErrSequence when it would change the block (it
// was not applied before: a put out of order). c.mu must be held.
func (e *Engine) replayedPutLocked(c *container, bd *BlockData, bcsid uint64) error {
	if _, ok := c.deleting[bd.ID.Local]; ok {
		return nil // being deleted: the put was followed by a delete
	}
	old, err := e.loadBlock(c, bd.ID)
	if bs := c.blocks[bd.ID.Local]; errors.Is(err, ErrNotFound) && bs != nil && bs.empty() {
		// A state with nothing in it, left by a look at the block (a
		// recovery's AdoptChunk that found no file, a CheckWrite): not
		// a block being written. Forgotten, so that the put below is
		// seen as what it is: one of a block deleted since.
		delete(c.blocks, bd.ID.Local)
	}
	switch {
	case errors.Is(err, ErrNotFound) && c.blocks[bd.ID.Local] == nil:
		return nil // deleted since
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	default:
		if covers(old, bd) {
			return nil
		}
	}
	if _, _, err := e.verifyPutLocked(c, bd); err != nil {
		return err
	}
	return fmt.Errorf("%w: sequence %d, container at %d: the put would change the block", ErrSequence, bcsid, c.bcsid)
}

// covers says whether committed record old holds everything bd says: the same chunks, or more.
func covers(old, bd *BlockData) bool {
	if bd.Length > old.Length || len(bd.Chunks) > len(old.Chunks) {
		return false
	}
	for i := range bd.Chunks {
		if !sameChunk(&bd.Chunks[i], &old.Chunks[i]) {
			return false
		}
	}
	return true
}

// advanceLocked raises c's BCSID to bcsid (a put whose block record is
// already as it says): the container record is written unsynced, the next
// Sync covers it. c.mu must be held.
func (e *Engine) advanceLocked(c *container, bcsid uint64) error {
	if bcsid <= c.bcsid {
		return nil
	}
	if err := c.vol.db.Set(containerKey(c.id), encodeContainerRecord(c.record(c.state, bcsid)), pebble.NoSync); err != nil {
		return err
	}
	e.commit.markVolume(c.vol)
	c.bcsid = bcsid
	return nil
}

// loggedUpTo says whether a chunk of bs's pending list below length was
// a logged write. c.mu must be held.
func loggedUpTo(bs *blockState, length uint64) bool {
	for i := range bs.pending {
		if bs.pending[i].offset >= length {
			break
		}
		if bs.pending[i].logged {
			return true
		}
	}
	return false
}

func sameChunk(a, b *ChunkInfo) bool {
	return a.Offset == b.Offset && a.Length == b.Length && slices.Equal(a.Checksums, b.Checksums)
}

// commitPutLocked writes the record, and the container record with its
// BCSID raised to bcsid when that is higher, in one Pebble batch (unsynced:
// the next Sync covers it), and trims the committed chunks from the pending list.
func (e *Engine) commitPutLocked(c *container, bs *blockState, bd *BlockData, bcsid uint64) error {
	rec := &BlockData{ID: bd.ID, Length: bd.Length, BytesPerChecksum: bd.BytesPerChecksum, Chunks: cloneChunks(bd.Chunks)}
	batch := c.vol.db.NewBatch()
	err := batch.Set(blockKey(bd.ID), encodeBlockRecord(rec), nil)
	if err == nil && bcsid > c.bcsid {
		err = batch.Set(containerKey(c.id), encodeContainerRecord(c.record(c.state, bcsid)), nil)
	}
	if err == nil {
		err = batch.Commit(pebble.NoSync)
	}
	_ = batch.Close() // frees the batch; its Set's or Commit's error is err
	if err != nil {
		return err
	}
	c.bcsid = max(c.bcsid, bcsid)
	e.commit.markVolume(c.vol)
	e.records.put(rec)
	n := 0
	for n < len(bs.pending) && bs.pending[n].offset < bd.Length {
		n++
	}
	bs.trimPending(n)
	bs.committedLen = bd.Length
	if len(bs.pending) == 0 {
		// Nothing beyond the record: the state can be rebuilt from it, so
		// do not keep it (bounds memory by what is being written).
		delete(c.blocks, bd.ID.Local)
	}
	return nil
}

func cloneChunks(in []ChunkInfo) []ChunkInfo {
	out := make([]ChunkInfo, len(in))
	for i := range in {
		out[i] = ChunkInfo{Offset: in[i].Offset, Length: in[i].Length, Checksums: slices.Clone(in[i].Checksums)}
	}
	return out
}

// GetBlock returns block b's committed metadata.
func (e *Engine) GetBlock(b BlockID) (*BlockData, error) {
	if e.closed.Load() {
		return nil, blockErr("get block", b, ErrClosed)
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return nil, blockErr("get block", b, err)
	}
	bd, err := e.loadBlock(c, b)
	if err != nil {
		e.noteCorruption(c, err)
		return nil, blockErr("get block", b, err)
	}
	return &BlockData{ID: bd.ID, Length: bd.Length, BytesPerChecksum: bd.BytesPerChecksum, Chunks: cloneChunks(bd.Chunks)}, nil
}

// ListBlocksMax bounds one page of ListBlocks.
const ListBlocksMax = 10000

// ListBlocks returns up to limit committed blocks of container id with a
// local ID greater than startAfter (use 0 to start; local IDs are > 0 in
// practice, and a block with local ID 0 is returned only on the first page), in local ID order.
func (e *Engine) ListBlocks(id ContainerID, startAfter uint64, first bool, limit int) ([]*BlockData, error) {
	if limit <= 0 || limit > ListBlocksMax {
		limit = ListBlocksMax
	}
	c, err := e.lookup(id)
	if err != nil {
		return nil, containerErr("list blocks", id, err)
	}
	lo, hi := blockKeyRange(id)
	if !first {
		lo = blockKey(BlockID{Container: id, Local: startAfter + 1})
		if startAfter == ^uint64(0) {
			return nil, nil
		}
	}
	it, err := c.vol.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, containerErr("list blocks", id, err)
	}
	// Close returns the iteration's error, which it.Error() below already
	// returned: nothing more to report.
	defer func() { _ = it.Close() }()
	var out []*BlockData
	for it.First(); it.Valid() && len(out) < limit; it.Next() {
		bid, _ := decodeBlockKey(it.Key())
		bd, err := decodeBlockRecord(it.Value())
		if err == nil && bd.ID != bid {
			err = fmt.Errorf("%w: record of block %d stored under key of %d", ErrCorrupt, bd.ID.Local, bid.Local)
		}
		if err != nil {
			e.noteCorruption(c, err)
			return out, blockErr("list blocks", bid, err)
		}
		out = append(out, bd)
	}
	return out, it.Error()
}

// DeleteBlock removes block b: its record, durably (through the group
// commit, without holding the container lock across the sync), then its
// file. While that runs the block is neither writable nor readable.
func (e *Engine) DeleteBlock(b BlockID) error {
	err := e.check()
	if g := e.cfg.DeleteGuard; err == nil && g != nil {
		err = g(b) // refused before anything changes (Config.DeleteGuard)
	}
	if err != nil {
		return blockErr("delete block", b, err)
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return blockErr("delete block", b, err)
	}
	c.mu.Lock()
	if c.state == StateDeleting || c.busy != "" {
		err := fmt.Errorf("%w: state %s %s", ErrNotOpen, c.state, c.busy)
		c.mu.Unlock()
		return blockErr("delete block", b, err)
	}
	if _, ok := c.deleting[b.Local]; ok {
		c.mu.Unlock()
		return blockErr("delete block", b, fmt.Errorf("%w: already being deleted", ErrNotFound))
	}
	var length uint64
	bs := c.blocks[b.Local]
	bd, lerr := e.loadBlock(c, b)
	switch {
	case lerr == nil:
		length = bd.Length
	case errors.Is(lerr, ErrNotFound) && bs != nil:
	case errors.Is(lerr, ErrNotFound):
		// Nothing of the block here; a gone mark (gone.go) was waiting
		// for this delete: it is done.
		marked, err := e.dropGoneLocked(c, b)
		if !marked {
			c.mu.Unlock()
			return blockErr("delete block", b, lerr)
		}
		if err != nil {
			c.mu.Unlock()
			return blockErr("delete block", b, err)
		}
		seq := e.commit.markVolume(c.vol)
		c.mu.Unlock()
		if err := e.commit.sync(seq); err != nil {
			return blockErr("delete block", b, err)
		}
		return nil
	case errors.Is(lerr, ErrCorrupt):
		// A damaged record can still be deleted; its length is unknown.
	default:
		c.mu.Unlock()
		return blockErr("delete block", b, lerr)
	}
	if bs != nil {
		length = bs.nextOffset
	}
	if err := c.vol.writable(); err != nil {
		c.mu.Unlock()
		return blockErr("delete block", b, err)
	}
	if err := c.vol.db.Delete(blockKey(b), pebble.NoSync); err != nil {
		c.mu.Unlock()
		return blockErr("delete block", b, err)
	}
	if _, err := e.dropGoneLocked(c, b); err != nil {
		c.mu.Unlock()
		return blockErr("delete block", b, err)
	}
	seq := e.commit.markVolume(c.vol)
	e.records.drop(b)
	delete(c.blocks, b.Local)
	if _, marked := c.damaged[b.Local]; marked {
		delete(c.damaged, b.Local)
		if err := c.vol.db.Delete(damageKey(b), pebble.NoSync); err != nil {
			e.log.Warn("engine: could not delete a damage mark", "container", b.Container, "block", b.Local, "err", err)
		}
	}
	c.deleting[b.Local] = struct{}{}
	c.usedBytes -= min(length, c.usedBytes)
	path := e.blockPath(c, b.Local)
	c.mu.Unlock()
	e.files.drop(b)

	err = e.commit.sync(seq)
	if err == nil {
		// The record is gone durably: the block is deleted. A file left by
		// a failed unlink (or one a crash undoes) is an orphan that
		// nothing reads, and a rewrite of the block truncates it.
		if rerr := e.fs.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			e.log.Warn("engine: deleted block's file left behind", "container", b.Container, "block", b.Local, "err", rerr)
		}
	}
	c.mu.Lock()
	delete(c.deleting, b.Local)
	c.mu.Unlock()
	if err != nil {
		return blockErr("delete block", b, err)
	}
	return nil
}

// ReadChunk reads length bytes at offset of block b, from committed chunks
// and from chunks written since (which may not be durable yet), verifying
// the CRC32C of every piece it touches. It reads into dst's storage when
// large enough and returns the bytes. A mismatch is an ErrCorrupt error
// naming container, block and offset, and marks the container UNHEALTHY;
// wrong bytes are never returned.
func (e *Engine) ReadChunk(b BlockID, offset, length uint64, dst []byte) ([]byte, error) {
	data, _, _, err := e.readChunk(b, offset, length, dst)
	return data, err
}

// ReadChunkSums is ReadChunk that also returns the stored CRC32C of each
// piece of the bytes read, when the range lies on the pieces' grid (it
// starts on a piece boundary and every chunk it crosses ends on one, or
// the range ends with it): bpc bytes each from offset, the last one
// shorter when the range ends within a short last piece. A reader that
// answers with checksums (the datanode) then need not compute them over
// the bytes a second time. Off the grid, sums is nil and bpc 0.
func (e *Engine) ReadChunkSums(b BlockID, offset, length uint64, dst []byte) (data []byte, sums []uint32, bpc uint32, err error) {
	data, chunks, bpc, err := e.readChunk(b, offset, length, dst)
	if err != nil {
		return nil, nil, 0, err
	}
	if sums, ok := storedSums(chunks, bpc, offset, offset+length); ok {
		return data, sums, bpc, nil
	}
	return data, nil, 0, nil
}

// storedSums returns the stored checksums of [offset, end) of a block
// laid out as chunks when the range lies on the pieces' grid (see
// ReadChunkSums); else false. chunks cover the range.
func storedSums(chunks []ChunkInfo, bpc uint32, offset, end uint64) ([]uint32, bool) {
	var sums []uint32
	p := uint64(bpc)
	first, last := findChunk(chunks, offset), findChunk(chunks, end-1)
	if p == 0 || first < 0 || last < 0 {
		return nil, false
	}
	for i := first; i <= last; i++ {
		ch := &chunks[i]
		lo, hi := max(offset, ch.Offset), min(end, ch.Offset+ch.Length)
		if (lo-ch.Offset)%p != 0 {
			return nil, false
		}
		// Whole pieces, or the chunk's own (short) last piece where the
		// range ends.
		if (hi-ch.Offset)%p != 0 && !(i == last && hi == ch.Offset+ch.Length) {
			return nil, false
		}
		sums = append(sums, ch.Checksums[(lo-ch.Offset)/p:(hi-ch.Offset+p-1)/p]...)
	}
	return sums, true
}

// readChunk reads and verifies [offset, offset+length) of block b (see
// ReadChunk) and returns the layout it read from.
func (e *Engine) readChunk(b BlockID, offset, length uint64, dst []byte) ([]byte, []ChunkInfo, uint32, error) {
	if e.closed.Load() {
		return nil, nil, 0, blockOffErr("read chunk", b, offset, ErrClosed)
	}
	if length == 0 || length > MaxChunkSizeBytes {
		return nil, nil, 0, blockOffErr("read chunk", b, offset, fmt.Errorf("%w: read length %d not in [1, %d]", ErrInvalid, length, MaxChunkSizeBytes))
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return nil, nil, 0, blockOffErr("read chunk", b, offset, err)
	}
	chunks, bpc, err := e.readableChunks(c, b)
	if err != nil {
		e.noteCorruption(c, err)
		return nil, nil, 0, blockOffErr("read chunk", b, offset, err)
	}
	end := offset + length
	var readable uint64
	if n := len(chunks); n > 0 {
		readable = chunks[n-1].Offset + chunks[n-1].Length
	}
	if end < offset || end > readable {
		return nil, nil, 0, blockOffErr("read chunk", b, offset, fmt.Errorf("%w: range of %d bytes beyond the %d readable bytes", ErrNotFound, length, readable))
	}
	bf, _, err := e.files.acquire(b, e.blockPath(c, b.Local), false)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = e.missingFile(c, b, err)
		}
		return nil, nil, 0, blockOffErr("read chunk", b, offset, err)
	}
	defer bf.release()
	out, badOff, err := readVerified(bf, chunks, bpc, offset, end, dst)
	if err != nil {
		e.noteBlockDamage(c, b, blockOffErr("read chunk", b, badOff, err))
		return nil, nil, 0, blockOffErr("read chunk", b, badOff, err)
	}
	return out, chunks, bpc, nil
}

// readVerified reads [offset, end) of a block whose layout is chunks,
// covering whole checksum pieces, and verifies them. The covered range is
// contiguous because chunks are, so it is one pread.
func readVerified(bf *blockFile, chunks []ChunkInfo, bpc uint32, offset, end uint64, dst []byte) ([]byte, uint64, error) {
	first := findChunk(chunks, offset)
	last := findChunk(chunks, end-1)
	if first < 0 || last < 0 {
		panic(fmt.Sprintf("engine: read [%d,%d) outside chunk layout", offset, end))
	}
	fc, lc := &chunks[first], &chunks[last]
	start := fc.Offset + (offset-fc.Offset)/uint64(bpc)*uint64(bpc)
	stop := min(lc.Offset+((end-1-lc.Offset)/uint64(bpc)+1)*uint64(bpc), lc.Offset+lc.Length)
	n := int(stop - start)
	if err := bf.flushWriteBehind(false, false); err != nil {
		return nil, start, err
	}
	var buf []byte
	if cap(dst) >= n {
		buf = dst[:n]
	} else {
		buf = make([]byte, n)
	}
	got, err := bf.f.ReadAt(buf, int64(start))
	if err != nil && !(err == io.EOF && got == n) {
		if err == io.EOF {
			return nil, start + uint64(got), fmt.Errorf("%w: block file ends at %d, metadata says %d", ErrCorrupt, start+uint64(got), stop)
		}
		return nil, start, err
	}
	for i := first; i <= last; i++ {
		ch := &chunks[i]
		lo := max(start, ch.Offset)
		hi := min(stop, ch.Offset+ch.Length)
		p0 := (lo - ch.Offset) / uint64(bpc)
		if bad := VerifyPieces(buf[lo-start:hi-start], ch.Checksums[p0:], bpc); bad >= 0 {
			at := ch.Offset + (p0+uint64(bad))*uint64(bpc)
			return nil, at, fmt.Errorf("%w: checksum mismatch in the %d bytes at offset %d", ErrCorrupt, min(uint64(bpc), ch.Offset+ch.Length-at), at)
		}
	}
	return buf[offset-start : end-start], 0, nil
}

// readableChunks returns the layout a read may use: the committed chunks
// followed by the chunks written since, up to the first still in flight.
func (e *Engine) readableChunks(c *container, b BlockID) ([]ChunkInfo, uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.deleting[b.Local]; ok {
		return nil, 0, fmt.Errorf("%w: block %d is being deleted", ErrNotFound, b.Local)
	}
	var chunks []ChunkInfo
	var bpc uint32
	bs := c.blocks[b.Local]
	if bs == nil || bs.committedLen > 0 {
		bd, err := e.loadBlock(c, b)
		switch {
		case err == nil:
			chunks, bpc = bd.Chunks, bd.BytesPerChecksum
		case errors.Is(err, ErrNotFound) && bs != nil:
		default:
			return nil, 0, err
		}
	}
	if bs != nil {
		if len(bs.pending) > 0 {
			chunks = slices.Clip(chunks)
		}
		for i := range bs.pending {
			if !bs.pending[i].done {
				break
			}
			chunks = append(chunks, bs.pendingInfo(i))
			bpc = bs.bpc
		}
	}
	return chunks, bpc, nil
}

// missingFile decides what a block file that is not there means: if the
// block was deleted since the caller looked it up (a DeleteBlock racing a
// read or a scan), it is simply not found; if the block still exists, its
// data is lost: damage, and the container is marked UNHEALTHY.
func (e *Engine) missingFile(c *container, b BlockID, err error) error {
	c.mu.Lock()
	_, deleting := c.deleting[b.Local]
	bs := c.blocks[b.Local]
	c.mu.Unlock()
	if !deleting && bs == nil {
		if _, lerr := e.loadBlock(c, b); errors.Is(lerr, ErrNotFound) {
			deleting = true
		}
	}
	if deleting {
		return fmt.Errorf("%w: block deleted during the read", ErrNotFound)
	}
	err = fmt.Errorf("%w: block file missing: %v", ErrCorrupt, err)
	e.noteBlockDamage(c, b, err)
	return err
}

// noteCorruption marks c UNHEALTHY when err is damage found on disk.
func (e *Engine) noteCorruption(c *container, err error) {
	if !errors.Is(err, ErrCorrupt) {
		return
	}
	if merr := e.setUnhealthy(c, err.Error()); merr != nil {
		e.log.Error("engine: could not mark container UNHEALTHY", "container", c.id, "err", merr)
	}
}

// scanBufferBytes bounds the memory of a container scan.
const scanBufferBytes = 1 << 20

// maxDamageReports bounds ScanResult.Damage.
const maxDamageReports = 100

// ScanContainer reads every committed block of a container and verifies every
// checksum. Damage is listed in the result and marked: the damaged blocks of
// a CLOSED container, the whole container UNHEALTHY otherwise (damage.go);
// the error is for failures to scan at all.
func (e *Engine) ScanContainer(id ContainerID) (ScanResult, error) {
	res := ScanResult{Container: id}
	c, err := e.lookup(id)
	if err != nil {
		return res, containerErr("scan", id, err)
	}
	damage := func(format string, args ...any) {
		if len(res.Damage) < maxDamageReports {
			res.Damage = append(res.Damage, fmt.Sprintf(format, args...))
		}
	}
	buf := make([]byte, scanBufferBytes)
	var startAfter uint64
	first := true
	for {
		blocks, err := e.ListBlocks(id, startAfter, first, 1000)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return res, err
		}
		if err != nil {
			damage("%v", err)
		}
		for _, bd := range blocks {
			res.Blocks++
			res.Bytes += bd.Length
			if err := e.scanBlockPaced(c, bd, buf, nil); err != nil {
				damage("%v", err)
			}
		}
		if err != nil || len(blocks) < 1000 {
			break
		}
		first, startAfter = false, blocks[len(blocks)-1].ID.Local
	}
	return res, nil
}

// scanBlockPaced verifies every checksum of block bd of c (see
// ScrubBlock); damage is marked and returned, ErrCorrupt.
func (e *Engine) scanBlockPaced(c *container, bd *BlockData, buf []byte, pace func(n uint64) error) error {
	if bd.Length == 0 {
		return nil
	}
	bf, _, err := e.files.acquire(bd.ID, e.blockPath(c, bd.ID.Local), false)
	if isNotExist(err) {
		err = e.missingFile(c, bd.ID, err)
		if errors.Is(err, ErrNotFound) {
			return nil // deleted since the scan listed it
		}
	}
	if err != nil {
		return fmt.Errorf("container %d block %d: block file: %w", c.id, bd.ID.Local, err)
	}
	defer bf.release()
	step := max(uint64(len(buf))/uint64(bd.BytesPerChecksum), 1) * uint64(bd.BytesPerChecksum)
	for i := range bd.Chunks {
		ch := &bd.Chunks[i]
		for pos := uint64(0); pos < ch.Length; pos += step {
			n := min(step, ch.Length-pos)
			if pace != nil {
				if err := pace(n); err != nil {
					return err
				}
			}
			if _, _, err := readVerified(bf, bd.Chunks[i:i+1], bd.BytesPerChecksum, ch.Offset+pos, ch.Offset+pos+n, buf); err != nil {
				err = fmt.Errorf("container %d block %d offset %d: %w", c.id, bd.ID.Local, ch.Offset+pos, err)
				e.noteBlockDamage(c, bd.ID, err)
				return err
			}
		}
	}
	return nil
}

// recordCache keeps decoded block records for reads, bounded by count.
// Entries are shared and must not be modified.
type recordCache struct {
	max   int
	mu    sync.Mutex
	items map[BlockID]*list.Element
	lru   list.List
}

func newRecordCache(max int) *recordCache {
	return &recordCache{max: max, items: make(map[BlockID]*list.Element)}
}

func (r *recordCache) get(b BlockID) *BlockData {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el := r.items[b]; el != nil {
		r.lru.MoveToFront(el)
		return el.Value.(*BlockData)
	}
	return nil
}

func (r *recordCache) put(bd *BlockData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el := r.items[bd.ID]; el != nil {
		el.Value = bd
		r.lru.MoveToFront(el)
		return
	}
	r.items[bd.ID] = r.lru.PushFront(bd)
	for r.lru.Len() > r.max {
		old := r.lru.Remove(r.lru.Back()).(*BlockData)
		delete(r.items, old.ID)
	}
}

func (r *recordCache) drop(b BlockID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el := r.items[b]; el != nil {
		r.lru.Remove(el)
		delete(r.items, b)
	}
}

func (r *recordCache) dropContainer(id ContainerID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for b, el := range r.items {
		if b.Container == id {
			r.lru.Remove(el)
			delete(r.items, b)
		}
	}
}
