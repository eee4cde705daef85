package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// MkdirAllDurable creates dir and any missing parents, and syncs the parent
// of every directory it created, so that the new directories survive a
// crash: a mkdir is a directory entry, durable only once its parent is
// synced. A dir that already exists costs one Stat.
func MkdirAllDurable(fs FS, dir string) error {
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		_, err := fs.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if parent := filepath.Dir(d); parent == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fs.SyncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic replaces path with data so that a crash leaves either
// the old file or the new one, whole: the bytes go to path+".tmp", which is
// fsynced, renamed over path, and the directory synced (the rename is a
// directory entry). On failure the temporary file is removed. For small
// files written whole: identity, ready and state files.
func WriteFileAtomic(fs FS, path string, data []byte) error {
	return WriteFileAtomicPerm(fs, path, data, 0o644)
}

// WriteFileAtomicPerm is WriteFileAtomic with the new file's permissions
// (0600 for secrets: keys, credentials), set when the temporary file is
// created, so that the bytes are never readable by others. A filesystem
// without permissions (MemFS) ignores perm.
func WriteFileAtomicPerm(fs FS, path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	var f File
	var err error
	if pc, ok := fs.(permCreator); ok {
		// A leftover would keep its old mode through O_TRUNC: it must go.
		if err := fs.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		f, err = pc.CreatePerm(tmp, perm)
	} else {
		f, err = fs.Create(tmp)
	}
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		_ = fs.Remove(tmp) // best effort: err is the error; the next write replaces a leftover
		return err
	}
	return fs.SyncDir(filepath.Dir(path))
}

// permCreator is a filesystem whose files have permissions (the OS).
type permCreator interface {
	CreatePerm(name string, perm os.FileMode) (File, error)
}

// maxReadFileBytes bounds ReadFile: it is for small files written whole
// (WriteFileAtomic), never for data.
const maxReadFileBytes = 1 << 20

// ReadFile reads the whole of a small file (at most maxReadFileBytes).
func ReadFile(fs FS, path string) (_ []byte, err error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	b, err := io.ReadAll(io.LimitReader(f, maxReadFileBytes+1))
	if err == nil && len(b) > maxReadFileBytes {
		err = fmt.Errorf("vfs: %s: larger than %d bytes", path, maxReadFileBytes)
	}
	return b, err
}
