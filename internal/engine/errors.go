package engine

import (
	"errors"
	"fmt"
)

// Errors returned by the engine; test them with errors.Is. Every error the
// engine returns wraps one of these with the container, block and offset it
// concerns.
var (
	// ErrCorrupt marks damage found on disk: a checksum that does not match
	// stored data, a metadata record that does not decode. It is the one
	// corruption marker of the engine.
	ErrCorrupt = errors.New("corrupt")
	// ErrChecksumMismatch is a write whose data does not match the checksums
	// the writer computed: the writer's (or the network's) fault, nothing is
	// written.
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrNotFound is a missing container, block or chunk range.
	ErrNotFound = errors.New("not found")
	// ErrExists is a container that already exists, or whose import is in
	// progress.
	ErrExists = errors.New("already exists")
	// ErrNotOpen is a write, put or close to a container that is not OPEN,
	// or busy being created or closed; a delete of a busy container; and a
	// write overtaken by a close, an UNHEALTHY mark or a delete while its
	// bytes were on their way to the file.
	ErrNotOpen = errors.New("container not open")
	// ErrContainerFull is a write that would take a container past its
	// maximum size.
	ErrContainerFull = errors.New("container full")
	// ErrVolumeFull is a write or a new container that would eat into a
	// volume's reserve of free space (see Config.ReservedBytes).
	ErrVolumeFull = errors.New("volume full")
	// ErrOverlap is a chunk that overlaps written data without being an
	// identical replay of one chunk.
	ErrOverlap = errors.New("chunk overlaps written data")
	// ErrHole is a chunk that would leave a hole in a block (blocks are
	// written contiguously from offset 0).
	ErrHole = errors.New("chunk leaves a hole")
	// ErrInvalid is a malformed request.
	ErrInvalid = errors.New("invalid request")
	// ErrFailed is returned for every mutation after a sync of data or
	// metadata failed: the kernel may have dropped the dirty pages
	// ("fsyncgate"), so the engine refuses to acknowledge anything more
	// until it is reopened and recovery has run.
	ErrFailed = errors.New("engine failed")
	// ErrClosed is any call after Close.
	ErrClosed = errors.New("engine closed")
	// ErrSequence is a PutBlock that would change a block at a sequence
	// (BCSID) below the container's: a put applied out of order, which the
	// pipeline never does (it applies a group's entries in index order);
	// refused, nothing changes. A re-applied put at a lower sequence that
	// changes nothing (raft replay after a restart) is not an error.
	ErrSequence = errors.New("block commit sequence behind the container's")
	// ErrNotClosed is a whole-container export of a container that is not
	// CLOSED: only a CLOSED container's block files are immutable.
	ErrNotClosed = errors.New("container not closed")
)

func blockErr(op string, b BlockID, err error) error {
	return fmt.Errorf("engine: %s container %d block %d: %w", op, b.Container, b.Local, err)
}

func blockOffErr(op string, b BlockID, offset uint64, err error) error {
	return fmt.Errorf("engine: %s container %d block %d offset %d: %w", op, b.Container, b.Local, offset, err)
}

func containerErr(op string, id ContainerID, err error) error {
	return fmt.Errorf("engine: %s container %d: %w", op, id, err)
}
