package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// ToPebble adapts fs to Pebble's filesystem interface, so that a Pebble
// instance does all its I/O (and its crash-relevant syncs) through fs.
//
// Mapping:
//   - Create removes an existing file first (ignoring not-exist) and then
//     creates, so that the new file is a new inode even if the old name was a
//     hard link, as Pebble's own Create does.
//   - OpenReadWrite always creates; ReuseForWrite is Rename followed by
//     OpenReadWrite without create.
//   - OpenDir(d).Sync() is fs's directory sync (fsync of the directory on
//     Default, a durable directory sync on MemFS).
//   - File.SyncTo is SyncData and reports fullSync=true; Prefetch is a no-op;
//     OpenOptions are applied only to files with a valid Fd.
//   - Stat's FileInfo has a zero DeviceID; Unwrap returns nil; disk-write
//     categories are ignored.
func ToPebble(fs FS) pebblevfs.FS {
	return pebbleFS{fs: fs}
}

type pebbleFS struct {
	fs FS
}

var _ pebblevfs.FS = pebbleFS{}

func wrapPebble(f File, err error, opts ...pebblevfs.OpenOption) (pebblevfs.File, error) {
	if err != nil {
		return nil, err
	}
	pf := pebbleFile{File: f}
	if f.Fd() != InvalidFd {
		for _, o := range opts {
			o.Apply(pf)
		}
	}
	return pf, nil
}

func (p pebbleFS) Create(name string, _ pebblevfs.DiskWriteCategory) (pebblevfs.File, error) {
	if err := p.fs.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return wrapPebble(p.fs.Create(name))
}

func (p pebbleFS) Link(oldname, newname string) error { return p.fs.Link(oldname, newname) }

func (p pebbleFS) Open(name string, opts ...pebblevfs.OpenOption) (pebblevfs.File, error) {
	f, err := p.fs.Open(name)
	return wrapPebble(f, err, opts...)
}

func (p pebbleFS) OpenReadWrite(
	name string, _ pebblevfs.DiskWriteCategory, opts ...pebblevfs.OpenOption,
) (pebblevfs.File, error) {
	f, err := p.fs.OpenReadWrite(name, true)
	return wrapPebble(f, err, opts...)
}

func (p pebbleFS) OpenDir(name string) (pebblevfs.File, error) {
	return wrapPebble(p.fs.OpenDir(name))
}

func (p pebbleFS) Remove(name string) error                    { return p.fs.Remove(name) }
func (p pebbleFS) RemoveAll(name string) error                 { return p.fs.RemoveAll(name) }
func (p pebbleFS) Rename(oldname, newname string) error        { return p.fs.Rename(oldname, newname) }
func (p pebbleFS) MkdirAll(dir string, perm os.FileMode) error { return p.fs.MkdirAll(dir, perm) }
func (p pebbleFS) Lock(name string) (io.Closer, error)         { return p.fs.Lock(name) }
func (p pebbleFS) List(dir string) ([]string, error)           { return p.fs.List(dir) }

func (p pebbleFS) ReuseForWrite(
	oldname, newname string, _ pebblevfs.DiskWriteCategory,
) (pebblevfs.File, error) {
	if err := p.fs.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return wrapPebble(p.fs.OpenReadWrite(newname, false))
}

func (p pebbleFS) Stat(name string) (pebblevfs.FileInfo, error) {
	fi, err := p.fs.Stat(name)
	if err != nil {
		return nil, err
	}
	return pebbleFileInfo{fi}, nil
}

func (pebbleFS) PathBase(path string) string    { return filepath.Base(path) }
func (pebbleFS) PathJoin(elem ...string) string { return filepath.Join(elem...) }
func (pebbleFS) PathDir(path string) string     { return filepath.Dir(path) }
func (pebbleFS) Unwrap() pebblevfs.FS           { return nil }

func (p pebbleFS) GetDiskUsage(path string) (pebblevfs.DiskUsage, error) {
	u, err := p.fs.GetDiskUsage(path)
	if err != nil {
		return pebblevfs.DiskUsage{}, err
	}
	return pebblevfs.DiskUsage{AvailBytes: u.AvailBytes, TotalBytes: u.TotalBytes, UsedBytes: u.UsedBytes}, nil
}

type pebbleFile struct {
	File
}

var _ pebblevfs.File = pebbleFile{}

func (f pebbleFile) Stat() (pebblevfs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return pebbleFileInfo{fi}, nil
}

// SyncTo syncs the whole file (fdatasync), which Pebble accepts as a full
// sync.
func (f pebbleFile) SyncTo(length int64) (fullSync bool, err error) {
	if err := f.File.SyncData(); err != nil {
		return false, err
	}
	return true, nil
}

func (f pebbleFile) Prefetch(offset, length int64) error { return nil }

type pebbleFileInfo struct {
	os.FileInfo
}

func (pebbleFileInfo) DeviceID() pebblevfs.DeviceID { return pebblevfs.DeviceID{} }
