package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spindle-store/spindle/internal/vfs"
)

// exportPageBlocks is how many block records an Export reads from Pebble at
// a time: its memory is one page of records whatever the container's size.
const exportPageBlocks = 1024

// Export is a whole-container read of a CLOSED container: its committed
// blocks in ascending local ID order, each with its metadata and its block
// file opened read-only, for a re-replication source or a client download
// that streams the files (sendfile: see vfs.OSFile).
//
// The source does not verify checksums (the bytes go to the wire without
// passing through user space); the receiver does (Importer.AddBlock). Block
// records are read in pages of exportPageBlocks; a block deleted while the
// export runs is skipped. An Export is used by one goroutine at a time.
type Export struct {
	e    *Engine
	c    *container
	info ContainerInfo

	pageSize   int
	page       []*BlockData
	idx        int
	startAfter uint64
	first      bool // the next page is the first (it may hold local ID 0)
	lastPage   bool // the current page is the last one
	closed     bool
}

// ExportContainer opens a CLOSED container for a whole-container read. A
// container in any other state is an error wrapping ErrNotClosed (only a
// CLOSED container's block files are immutable); a missing one wraps
// ErrNotFound.
func (e *Engine) ExportContainer(id ContainerID) (*Export, error) {
	if e.closed.Load() {
		return nil, containerErr("export", id, ErrClosed)
	}
	c, err := e.lookup(id)
	if err != nil {
		return nil, containerErr("export", id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != StateClosed || c.busy != "" {
		return nil, containerErr("export", id, fmt.Errorf("%w: state %s %s", ErrNotClosed, c.state, c.busy))
	}
	return &Export{e: e, c: c, info: c.infoLocked(), pageSize: exportPageBlocks, first: true}, nil
}

// Info returns the container as it was when the export was opened; UsedBytes
// is the sum of its committed block lengths.
func (x *Export) Info() ContainerInfo { return x.info }

// Next returns the next committed block in ascending local ID order: its
// metadata (decoded and checked) and its block file opened read-only, at
// offset 0, which the caller closes. It returns io.EOF after the last block.
// A block deleted since the export started is skipped. A block file shorter
// than the block, or missing while the block's record is there, is an error
// wrapping ErrCorrupt naming the container and the block (and the container
// is marked UNHEALTHY). A block of length 0 may have no file: it then comes
// with an empty file that is not an OS file.
func (x *Export) Next() (*BlockData, vfs.File, error) {
	if x.closed {
		return nil, nil, containerErr("export", x.info.ID, fmt.Errorf("%w: export closed", ErrInvalid))
	}
	for {
		if x.idx == len(x.page) {
			if x.lastPage {
				return nil, nil, io.EOF
			}
			page, err := x.e.ListBlocks(x.info.ID, x.startAfter, x.first, x.pageSize)
			if err != nil {
				return nil, nil, fmt.Errorf("engine: export container %d: %w", x.info.ID, err)
			}
			x.first, x.page, x.idx = false, page, 0
			x.lastPage = len(page) < x.pageSize
			continue
		}
		bd := x.page[x.idx]
		x.page[x.idx] = nil // the page's records go as the export goes
		x.idx++
		x.startAfter = bd.ID.Local
		f, err := x.open(bd)
		if errors.Is(err, errBlockGone) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		return bd, f, nil
	}
}

// errBlockGone: the block was deleted after its record was listed.
var errBlockGone = errors.New("block deleted during the export")

// open opens bd's file read-only and checks that it holds the block.
func (x *Export) open(bd *BlockData) (vfs.File, error) {
	e, c := x.e, x.c
	f, err := e.fs.Open(e.blockPath(c, bd.ID.Local))
	if errors.Is(err, os.ErrNotExist) {
		if bd.Length == 0 && !x.deleted(bd.ID) {
			return emptyFile{}, nil // an empty block never had a file
		}
		err = e.missingFile(c, bd.ID, err)
		if errors.Is(err, ErrNotFound) {
			return nil, errBlockGone
		}
		return nil, blockErr("export", bd.ID, err)
	}
	if err != nil {
		return nil, blockErr("export", bd.ID, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // read-only
		return nil, blockErr("export", bd.ID, err)
	}
	// Checked after the open: a block deleted before the open has no
	// record now; one deleted after it was still whole when opened.
	if x.deleted(bd.ID) {
		_ = f.Close() // read-only
		return nil, errBlockGone
	}
	if size := uint64(fi.Size()); size < bd.Length {
		_ = f.Close() // read-only
		err := fmt.Errorf("%w: block file holds %d bytes, the block has %d", ErrCorrupt, size, bd.Length)
		e.noteBlockDamage(c, bd.ID, err)
		return nil, blockErr("export", bd.ID, err)
	}
	return f, nil
}

// deleted says whether block b is being deleted or has no record any more.
func (x *Export) deleted(b BlockID) bool {
	x.c.mu.Lock()
	_, deleting := x.c.deleting[b.Local]
	x.c.mu.Unlock()
	if deleting {
		return true
	}
	_, err := x.e.loadBlock(x.c, b)
	return errors.Is(err, ErrNotFound)
}

// Close ends the export. Files returned by Next stay open until their
// callers close them. Closing twice is a no-op.
func (x *Export) Close() error {
	x.closed = true
	x.page = nil
	return nil
}

// emptyFile is the content of an empty block that has no file.
type emptyFile struct{}

var errEmptyFileReadOnly = errors.New("engine: empty block file is read-only")

func (emptyFile) Read([]byte) (int, error)           { return 0, io.EOF }
func (emptyFile) ReadAt([]byte, int64) (int, error)  { return 0, io.EOF }
func (emptyFile) Write([]byte) (int, error)          { return 0, errEmptyFileReadOnly }
func (emptyFile) WriteAt([]byte, int64) (int, error) { return 0, errEmptyFileReadOnly }
func (emptyFile) Close() error                       { return nil }
func (emptyFile) Sync() error                        { return nil }
func (emptyFile) SyncData() error                    { return nil }
func (emptyFile) Truncate(int64) error               { return errEmptyFileReadOnly }
func (emptyFile) Preallocate(int64, int64) error     { return errEmptyFileReadOnly }
func (emptyFile) Stat() (os.FileInfo, error)         { return emptyFileInfo{}, nil }
func (emptyFile) Fd() uintptr                        { return vfs.InvalidFd }

type emptyFileInfo struct{}

func (emptyFileInfo) Name() string       { return "empty block" }
func (emptyFileInfo) Size() int64        { return 0 }
func (emptyFileInfo) Mode() os.FileMode  { return 0o444 }
func (emptyFileInfo) ModTime() time.Time { return time.Time{} }
func (emptyFileInfo) IsDir() bool        { return false }
func (emptyFileInfo) Sys() any           { return nil }
