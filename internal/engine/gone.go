package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Gone marks. A pipeline follower being caught up can be sent a chunk
// without its bytes because the block was deleted since: its leader
// applied a committed DeleteBlock of it at log index D and can no longer
// read the chunk back. The follower will apply that DeleteBlock too, so
// it need not store the chunk; but between acknowledging the chunk's
// entry and applying D it must not fail at the block's PutBlock (which
// finds nothing to commit), also across a crash. MarkGone records
// "block b is deleted at D" durably before the entry is acknowledged;
// until the DeleteBlock removes the mark, a PutBlock of b below D is a
// no-op that only moves the BCSID, and the DeleteBlock succeeds though b
// has no record. Reads are unchanged: b is not found, as it will be on
// every replica from D on.
//
// Invariants: a mark exists only with its container (loadGone drops the
// others, finishDelete deletes them); a mark names a D above the index of
// every chunk it excuses (the pipeline checks it, writeMissing); a mark is
// removed, durably, with the block by DeleteBlock.

// goneValueSize: D u64 LE | CRC32C of the 8 bytes before, u32 LE.
const goneValueSize = 12

func goneKey(b BlockID) []byte { return markKey(keyPrefixGone, b) }

func encodeGoneValue(deleteIndex uint64) []byte {
	v := make([]byte, goneValueSize)
	binary.LittleEndian.PutUint64(v, deleteIndex)
	return sealRecord(v[:8], v)
}

func decodeGoneValue(v []byte) (uint64, error) {
	if len(v) != goneValueSize {
		return 0, fmt.Errorf("%w: gone mark of %d bytes, want %d", ErrCorrupt, len(v), goneValueSize)
	}
	if err := checkSeal(v); err != nil {
		return 0, fmt.Errorf("gone mark: %w", err)
	}
	return binary.LittleEndian.Uint64(v), nil
}

// MarkGone records durably that block b is deleted by the entry at index
// deleteIndex of its container's pipeline log: a committed DeleteBlock
// this replica has not applied yet (see above). It returns once the mark
// is durable. A container whose BCSID is at or past deleteIndex has
// applied that entry already: nothing is written. ErrNotFound: no such
// container (the caller creates it, as for a write).
func (e *Engine) MarkGone(b BlockID, deleteIndex uint64) error {
	if err := e.check(); err != nil {
		return blockErr("mark gone", b, err)
	}
	if deleteIndex == 0 {
		return blockErr("mark gone", b, fmt.Errorf("%w: delete index 0", ErrInvalid))
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return blockErr("mark gone", b, err)
	}
	c.mu.Lock()
	if c.state == StateDeleting {
		c.mu.Unlock()
		return blockErr("mark gone", b, fmt.Errorf("%w: state %s", ErrNotOpen, c.state))
	}
	if d, ok := c.gone[b.Local]; (ok && d >= deleteIndex) || c.bcsid >= deleteIndex {
		c.mu.Unlock()
		return nil
	}
	if err := c.vol.writable(); err != nil {
		c.mu.Unlock()
		return blockErr("mark gone", b, err)
	}
	if err := c.vol.db.Set(goneKey(b), encodeGoneValue(deleteIndex), pebble.NoSync); err != nil {
		c.mu.Unlock()
		return blockErr("mark gone", b, err)
	}
	seq := e.commit.markVolume(c.vol)
	if c.gone == nil {
		c.gone = map[uint64]uint64{}
	}
	c.gone[b.Local] = deleteIndex
	c.mu.Unlock()
	if err := e.commit.sync(seq); err != nil {
		return blockErr("mark gone", b, err)
	}
	return nil
}

// GoneAt returns the delete index of block b's gone mark (0: none).
func (e *Engine) GoneAt(b BlockID) uint64 {
	c, err := e.lookup(b.Container)
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone[b.Local]
}

// goneBelowLocked says whether a put of block local at sequence bcsid is
// one of a block whose deletion at a later index is marked. c.mu must be
// held.
func (c *container) goneBelowLocked(local, bcsid uint64) bool {
	d, ok := c.gone[local]
	return ok && bcsid < d
}

// dropGoneLocked deletes block local's gone mark (NoSync: the caller's
// sync covers it) and reports whether there was one. c.mu must be held.
func (e *Engine) dropGoneLocked(c *container, b BlockID) (bool, error) {
	if _, ok := c.gone[b.Local]; !ok {
		return false, nil
	}
	if err := c.vol.db.Delete(goneKey(b), pebble.NoSync); err != nil {
		return true, err
	}
	delete(c.gone, b.Local)
	return true, nil
}

// loadGone reads volume v's gone marks into their containers; a mark of
// a container gone or being deleted is deleted. A mark that does not
// decode is deleted with an error logged: without it, the block's put is
// refused as one of chunks this replica lacks, and the pipeline replaces
// the replica (safe, only slower).
func (e *Engine) loadGone(v *volume) error {
	return e.loadBlockMarks(v, keyPrefixGone, "gone marks", func(c *container, b BlockID, value []byte) bool {
		if c.state == StateDeleting {
			return false
		}
		d, err := decodeGoneValue(value)
		if err != nil {
			e.log.Error("engine: gone mark dropped", "container", b.Container, "block", b.Local, "err", err)
			return false
		}
		if c.gone == nil {
			c.gone = map[uint64]uint64{}
		}
		c.gone[b.Local] = d
		return true
	})
}
