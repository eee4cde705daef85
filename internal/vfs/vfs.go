// Package vfs is the small filesystem interface through which every file
// operation of Spindle's storage engine (and of the Pebble instances it opens)
// goes, with two implementations:
//
//   - Default (OS): real files, pwrite/pread, fsync/fdatasync, flock.
//   - MemFS: an in-memory filesystem that models what a crash keeps. File data
//     becomes durable only at Sync/SyncData of that file; a directory entry
//     (create, rename, remove, link, mkdir) becomes durable only when its
//     parent directory is synced (SyncDir, or OpenDir(d).Sync()). A MemFS can
//     be "crashed" at the k-th mutating operation, producing a clone that holds
//     only what was durable at that moment (optionally plus a random subset of
//     unsynced file writes and an in-order prefix of unsynced namespace
//     operations, as a power loss on a journaling filesystem may leave), and
//     it can inject errors
//     into chosen operations.
//
// OSFile unwraps a Default file to its *os.File, so that io.Copy towards a
// *net.TCPConn uses sendfile (a wrapper type would silently disable it).
//
// Invariants:
//   - Paths are slash-separated and are interpreted by the implementation;
//     callers build them with path/filepath.Join.
//   - SyncData (fdatasync) makes a file's contents and size durable; it does
//     not make the file's directory entry durable. Callers that create or
//     rename a file and need it to survive a crash must SyncDir its parent.
//   - Errors for missing files satisfy errors.Is(err, os.ErrNotExist); errors
//     for existing files on exclusive create satisfy os.ErrExist.
//
// Concurrency: an FS and its Files are safe for concurrent use; concurrent
// WriteAt calls to disjoint ranges of one File are allowed. Closing a File
// while another goroutine uses it is a caller bug.
package vfs

import (
	"io"
	"os"
)

// File is an open file. ReadAt/WriteAt are positional (pread/pwrite) and do
// not move the offset used by Read/Write.
type File interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes data and all metadata durable (fsync). On a directory it
	// makes the directory's entries durable.
	Sync() error
	// SyncData makes data and size durable (fdatasync).
	SyncData() error
	// Truncate sets the size of the file.
	Truncate(sizeBytes int64) error
	// Preallocate reserves space for [offset, offset+lengthBytes) without
	// changing the file size where the platform supports it; a no-op
	// elsewhere.
	Preallocate(offset, lengthBytes int64) error
	// Stat describes the file.
	Stat() (os.FileInfo, error)
	// Fd returns the OS file descriptor, or InvalidFd for in-memory files.
	Fd() uintptr
}

// InvalidFd is returned by File.Fd when there is no OS file descriptor.
const InvalidFd uintptr = ^uintptr(0)

// DiskUsage is the space on the filesystem holding a path.
type DiskUsage struct {
	AvailBytes uint64
	TotalBytes uint64
	UsedBytes  uint64
}

// FS is a filesystem.
type FS interface {
	// Create creates or truncates name and opens it read-write.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens name read-write, creating it (empty) when create is
	// true and it does not exist. It never truncates.
	OpenReadWrite(name string, create bool) (File, error)
	// OpenDir opens a directory so that its entries can be synced.
	OpenDir(name string) (File, error)
	// SyncDir makes the entries of directory dir durable (open + fsync + close).
	SyncDir(dir string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything below it; nil if it is missing.
	RemoveAll(name string) error
	// Rename atomically renames oldname to newname, replacing a file there.
	Rename(oldname, newname string) error
	// Link creates newname as a hard link to oldname.
	Link(oldname, newname string) error
	// List returns the names of the entries of dir, sorted.
	List(dir string) ([]string, error)
	// Stat describes name.
	Stat(name string) (os.FileInfo, error)
	// Lock takes an exclusive advisory lock on name (creating it); the
	// returned Closer releases it. A second Lock of a held name fails.
	Lock(name string) (io.Closer, error)
	// GetDiskUsage reports space on the filesystem holding path.
	GetDiskUsage(path string) (DiskUsage, error)
}
