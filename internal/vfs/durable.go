package vfs

import (
	"errors"
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
