package engine

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Block-granular damage of CLOSED containers.
//
// A CLOSED container's block files no longer change, so bytes that fail
// their checksums there (a flipped bit, a short or missing file) are
// damage to that block alone: the block is marked damaged (with the first
// error found), the container stays CLOSED and its other blocks go on
// being read and exported. The datanode reports the marks to the meta
// service, which repairs the block from a good replica (RepairBlock) or
// replaces the replica. A mark is cleared when the block is repaired or
// deleted, or when a scrub finds the block whole again. Marks are kept in
// memory and in the volume's Pebble store ('X' | container | local, the
// error as the value: FORMAT.md §3), written NoSync (durable with the next
// sync round): advisory — a mark lost in a crash is found again by the
// scrubber or a read, a stale one is cleared by the next scrub or repair.
// An OPEN container's damage still marks the whole container UNHEALTHY:
// its pipeline must stop writing to it. Metadata damage (an undecodable
// block or container record) always marks the container UNHEALTHY.

// MaxDamagedBlocksPerContainer bounds the damaged blocks remembered per
// container; one more marks the whole container UNHEALTHY (a replica that
// damaged is replaced whole).
const MaxDamagedBlocksPerContainer = 1024

// noteBlockDamage records damage err (ErrCorrupt; anything else is
// ignored) found in block b's bytes: a damaged block of a CLOSED
// container, the container UNHEALTHY otherwise (see noteCorruption).
func (e *Engine) noteBlockDamage(c *container, b BlockID, err error) {
	if !errors.Is(err, ErrCorrupt) {
		return
	}
	c.mu.Lock()
	if c.state == StateClosed && c.busy == "" {
		if _, ok := c.damaged[b.Local]; ok {
			c.mu.Unlock()
			return
		}
		if len(c.damaged) < MaxDamagedBlocksPerContainer {
			if c.damaged == nil {
				c.damaged = map[uint64]string{}
			}
			c.damaged[b.Local] = err.Error()
			c.mu.Unlock()
			e.log.Error("engine: damaged block in a CLOSED container", "container", c.id, "block", b.Local, "err", err)
			e.persistMark(c, b, err.Error())
			return
		}
	}
	c.mu.Unlock()
	e.noteCorruption(c, err)
}

// DamagedBlocks lists the damaged blocks of container id (local IDs,
// ascending) and why the first was found damaged; none for a container
// without damage.
func (e *Engine) DamagedBlocks(id ContainerID) ([]uint64, error) {
	c, err := e.lookup(id)
	if err != nil {
		return nil, containerErr("damaged blocks", id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.damaged)), nil
}

// RepairBlock replaces the bytes of block bd.ID, marked damaged or not, in
// a CLOSED container with the Length bytes read from r (another replica's
// copy of the block). bd must be the block's record here exactly (length,
// checksum size, chunks and their checksums): a replica whose record
// differs is not this block. Every piece is verified as it arrives; the
// bytes go to a new file next to the block file, which is synced and
// renamed over it (the directory synced): a crash leaves the old file or
// the new one, and a stray ".repair" file that Open ignores and the next
// repair truncates. The damage mark is cleared. ErrNotFound: the block was
// deleted meanwhile (nothing left behind).
func (e *Engine) RepairBlock(bd *BlockData, r io.Reader) error {
	b := bd.ID
	if err := e.check(); err != nil {
		return blockErr("repair block", b, err)
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return blockErr("repair block", b, err)
	}
	c.mu.Lock()
	if c.state != StateClosed || c.busy != "" {
		err := fmt.Errorf("%w: state %s %s: only a CLOSED container's block is repaired", ErrNotOpen, c.state, c.busy)
		c.mu.Unlock()
		return blockErr("repair block", b, err)
	}
	local, err := e.loadBlock(c, b)
	c.mu.Unlock()
	if err != nil {
		return blockErr("repair block", b, err)
	}
	if !sameBlock(local, bd) {
		return blockErr("repair block", b, fmt.Errorf("%w: the source's block record differs from this replica's", ErrInvalid))
	}
	path := e.blockPath(c, b.Local)
	tmp := path + ".repair"
	f, err := e.fs.Create(tmp)
	if err != nil {
		return blockErr("repair block", b, err)
	}
	// dropTmp removes the temporary file of a repair that failed, best
	// effort: the repair's own error is the one to report, and a leftover
	// is truncated by the block's next repair (Create).
	dropTmp := func() { _ = e.fs.Remove(tmp) }
	done := false
	defer func() {
		if !done {
			_ = f.Close() // the file is dropped: its Close has nothing to keep
			dropTmp()
		}
	}()
	step := max(scanBufferBytes/uint64(bd.BytesPerChecksum), 1) * uint64(bd.BytesPerChecksum)
	buf := make([]byte, step)
	for i := range bd.Chunks {
		ch := &bd.Chunks[i]
		for pos := uint64(0); pos < ch.Length; pos += step {
			n := min(step, ch.Length-pos)
			if _, err := io.ReadFull(r, buf[:n]); err != nil {
				return blockErr("repair block", b, fmt.Errorf("reading the source's bytes at offset %d: %w", ch.Offset+pos, err))
			}
			p0 := pos / uint64(bd.BytesPerChecksum)
			if bad := VerifyPieces(buf[:n], ch.Checksums[p0:], bd.BytesPerChecksum); bad >= 0 {
				return blockErr("repair block", b, fmt.Errorf("%w: the source's bytes at offset %d fail their checksum", ErrCorrupt, ch.Offset+pos+uint64(bad)*uint64(bd.BytesPerChecksum)))
			}
			if _, err := f.WriteAt(buf[:n], int64(ch.Offset+pos)); err != nil {
				return blockErr("repair block", b, err)
			}
		}
	}
	if err := f.SyncData(); err != nil {
		return blockErr("repair block", b, err)
	}
	if err := f.Close(); err != nil {
		done = true
		dropTmp()
		return blockErr("repair block", b, err)
	}
	done = true
	// The rename happens under c.mu: a DeleteBlock marks the block
	// deleting under it, so either it sees (and later removes) the new
	// file, or the repair sees the deletion and leaves nothing.
	c.mu.Lock()
	_, deleting := c.deleting[b.Local]
	if !deleting {
		if _, lerr := e.loadBlock(c, b); errors.Is(lerr, ErrNotFound) {
			deleting = true
		}
	}
	if deleting {
		c.mu.Unlock()
		dropTmp()
		return blockErr("repair block", b, fmt.Errorf("%w: deleted during the repair", ErrNotFound))
	}
	if err := e.fs.Rename(tmp, path); err != nil {
		c.mu.Unlock()
		dropTmp()
		return blockErr("repair block", b, err)
	}
	_, marked := c.damaged[b.Local]
	delete(c.damaged, b.Local)
	c.mu.Unlock()
	e.files.drop(b)
	if marked {
		e.persistMark(c, b, "")
	}
	if err := e.fs.SyncDir(c.dir); err != nil {
		return blockErr("repair block", b, e.commit.poison(err))
	}
	e.log.Info("engine: block repaired", "container", b.Container, "block", b.Local, "bytes", bd.Length)
	return nil
}

// sameBlock says whether a and b describe the same bytes.
func sameBlock(a, b *BlockData) bool {
	if a.ID != b.ID || a.Length != b.Length || a.BytesPerChecksum != b.BytesPerChecksum || len(a.Chunks) != len(b.Chunks) {
		return false
	}
	for i := range a.Chunks {
		if !sameChunk(&a.Chunks[i], &b.Chunks[i]) {
			return false
		}
	}
	return true
}

// ScrubBlock verifies every checksum of block b of a container, reading
// at most scanBufferBytes at a time and calling pace with the bytes of
// each read before it (the scrubber's rate limit; an error from pace stops
// the scrub and is returned). Damage is marked (noteBlockDamage) and
// returned as an ErrCorrupt error; a block deleted meanwhile is nil.
func (e *Engine) ScrubBlock(bd *BlockData, pace func(n uint64) error) error {
	c, err := e.lookup(bd.ID.Container)
	if err != nil {
		return blockErr("scrub", bd.ID, err)
	}
	if bad := e.scanBlockPaced(c, bd, make([]byte, scanBufferBytes), pace); bad != nil {
		return bad
	}
	// Whole: a mark left from before (a crash after a repair) goes.
	c.mu.Lock()
	_, marked := c.damaged[bd.ID.Local]
	delete(c.damaged, bd.ID.Local)
	c.mu.Unlock()
	if marked {
		e.log.Info("engine: a block marked damaged scrubs whole; mark cleared", "container", c.id, "block", bd.ID.Local)
		e.persistMark(c, bd.ID, "")
	}
	return nil
}

// maxMarkBytes bounds the error kept with a persisted damage mark.
const maxMarkBytes = 512

func damageKey(b BlockID) []byte { return markKey(keyPrefixDamage, b) }

// persistMark writes (reason != "") or deletes block b's damage mark in
// c's volume store, NoSync (made durable by the next sync round; see
// above: marks are advisory). A failure is logged, not returned.
func (e *Engine) persistMark(c *container, b BlockID, reason string) {
	if c.vol.readOnly != nil {
		return // kept in memory only, as a failed store would
	}
	var err error
	if reason != "" {
		err = c.vol.db.Set(damageKey(b), []byte(reason[:min(len(reason), maxMarkBytes)]), pebble.NoSync)
	} else {
		err = c.vol.db.Delete(damageKey(b), pebble.NoSync)
	}
	if err != nil {
		e.log.Warn("engine: could not store a damage mark", "container", b.Container, "block", b.Local, "err", err)
		return
	}
	e.commit.markVolume(c.vol)
}

// loadMarks reads volume v's damage marks into its CLOSED containers; a
// mark of a block or container gone, or of a container not CLOSED, is
// deleted.
func (e *Engine) loadMarks(v *volume) error {
	return e.loadBlockMarks(v, keyPrefixDamage, "damage marks", func(c *container, b BlockID, value []byte) bool {
		if c.state != StateClosed {
			return false
		}
		if _, err := e.loadBlock(c, b); err != nil {
			return false
		}
		if c.damaged == nil {
			c.damaged = map[uint64]string{}
		}
		c.damaged[b.Local] = string(value)
		return true
	})
}

// loadBlockMarks calls keep for each per-block mark of volume v under
// prefix (keys laid out as block keys) whose container is on v; a mark
// keep refuses, or of a container not on v, is deleted (NoSync). what
// names the marks in errors.
func (e *Engine) loadBlockMarks(v *volume, prefix byte, what string, keep func(c *container, b BlockID, value []byte) bool) error {
	it, err := v.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return fmt.Errorf("engine: volume %s: %s: %w", v.dir, what, err)
	}
	// Close returns the iteration's error, which it.Error() below already
	// returned: nothing more to report.
	defer func() { _ = it.Close() }()
	var stale [][]byte
	for it.First(); it.Valid(); it.Next() {
		k := slices.Clone(it.Key())
		kb := slices.Clone(k)
		kb[0] = keyPrefixBlock
		b, ok := decodeBlockKey(kb)
		c := e.containers[b.Container]
		if !ok || c == nil || c.vol != v || !keep(c, b, it.Value()) {
			stale = append(stale, k)
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("engine: volume %s: %s: %w", v.dir, what, err)
	}
	if v.readOnly != nil {
		stale = nil // left for a restart with room
	}
	for _, k := range stale {
		if err := v.db.Delete(k, pebble.NoSync); err != nil {
			return fmt.Errorf("engine: volume %s: %s: %w", v.dir, what, err)
		}
	}
	return nil
}

// isNotExist: a block file that is not there.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
