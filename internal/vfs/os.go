package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// Default is the operating system's filesystem.
var Default FS = osFS{}

type osFS struct{}

type osFile struct {
	*os.File
	fd int // cached so that SyncData/Preallocate do not call (*os.File).Fd per call
}

func wrapOS(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &osFile{File: f, fd: int(f.Fd())}, nil
}

func (osFS) Create(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o644))
}

// CreatePerm is Create with the new file's permissions (see
// WriteFileAtomicPerm).
func (osFS) CreatePerm(name string, perm os.FileMode) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, perm))
}

func (osFS) Open(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDONLY|unix.O_CLOEXEC, 0))
}

func (osFS) OpenReadWrite(name string, create bool) (File, error) {
	flag := os.O_RDWR | unix.O_CLOEXEC
	if create {
		flag |= os.O_CREATE
	}
	return wrapOS(os.OpenFile(name, flag, 0o644))
}

func (osFS) OpenDir(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0))
}

func (osFS) SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	err = unix.Fsync(fd)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                 { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) Link(oldname, newname string) error          { return os.Link(oldname, newname) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: Readdirnames's error is the one
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// NearestExisting returns path if it exists, else the nearest of its
// parents that does (on the OS's filesystem): where a directory not made
// yet will be, for a question about its filesystem (its type, its room).
func NearestExisting(path string) string {
	p := filepath.Clean(path)
	for {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) || filepath.Dir(p) == p {
			return p
		}
		p = filepath.Dir(p)
	}
}

func (osFS) GetDiskUsage(path string) (DiskUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return DiskUsage{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	bsize := uint64(st.Bsize)
	total := st.Blocks * bsize
	free := st.Bfree * bsize
	return DiskUsage{AvailBytes: st.Bavail * bsize, TotalBytes: total, UsedBytes: total - free}, nil
}

// osLocks records the paths this process holds, because flock on a second
// descriptor of the same file in the same process would succeed silently on
// some kernels' emulations; in-process double locking is always an error.
var osLocks sync.Map

type osLock struct {
	f    *os.File
	name string
}

func (l *osLock) Close() error {
	osLocks.Delete(l.name)
	return l.f.Close() // closing the descriptor releases the flock
}

func (osFS) Lock(name string) (io.Closer, error) {
	if _, loaded := osLocks.LoadOrStore(name, true); loaded {
		return nil, fmt.Errorf("vfs: lock %s: already held by this process", name)
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		osLocks.Delete(name)
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close() // nothing written; the flock's error is the one
		osLocks.Delete(name)
		return nil, fmt.Errorf("vfs: lock %s: held by another process: %w", name, err)
	}
	return &osLock{f: f, name: name}, nil
}

func (f *osFile) SyncData() error {
	if err := unix.Fdatasync(f.fd); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

func (f *osFile) Preallocate(offset, lengthBytes int64) error {
	if lengthBytes <= 0 {
		return nil
	}
	err := unix.Fallocate(f.fd, unix.FALLOC_FL_KEEP_SIZE, offset, lengthBytes)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		return nil // filesystems without fallocate: preallocation is an optimisation only
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}

func (f *osFile) Fd() uintptr { return uintptr(f.fd) }

// OSFile returns the *os.File under a file of the OS filesystem (Default),
// so that a caller can hand it to io.Copy towards a *net.TCPConn and get
// sendfile (any wrapper type hides the *os.File and silently disables it).
// It returns false for every other File (MemFS files, directory handles of
// other implementations). The *os.File belongs to f: closing it closes f.
func OSFile(f File) (*os.File, bool) {
	if of, ok := f.(*osFile); ok && of != nil {
		return of.File, true
	}
	return nil, false
}
