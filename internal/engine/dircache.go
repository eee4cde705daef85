package engine

import (
	"sync"

	"github.com/spindle-store/spindle/internal/vfs"
)

// dirCache keeps container directories open for their entry syncs (a new
// block file's name must be durable before its data is acknowledged): an
// fsync on a kept descriptor instead of open + fsync + close per new block.
// Bounded by maxDirs (past it, every kept descriptor is closed and the
// cache starts over). Safe for concurrent use; syncs run outside the lock.
type dirCache struct {
	fs      vfs.FS
	maxDirs int
	mu      sync.Mutex
	dirs    map[string]*dirHandle
}

type dirHandle struct {
	f    vfs.File
	refs int // the cache's and each sync's in progress
}

func newDirCache(fs vfs.FS, maxDirs int) *dirCache {
	return &dirCache{fs: fs, maxDirs: maxDirs, dirs: map[string]*dirHandle{}}
}

// sync makes the entries of dir durable.
func (c *dirCache) sync(dir string) error {
	c.mu.Lock()
	h := c.dirs[dir]
	if h == nil {
		c.mu.Unlock()
		f, err := c.fs.OpenDir(dir)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if h = c.dirs[dir]; h == nil {
			if len(c.dirs) >= c.maxDirs {
				c.dropAllLocked()
			}
			h = &dirHandle{f: f, refs: 1}
			c.dirs[dir] = h
		} else {
			defer func() { _ = f.Close() }() // a directory, synced through h.f
		}
	}
	h.refs++
	c.mu.Unlock()
	err := h.f.Sync()
	c.mu.Lock()
	c.releaseLocked(h)
	c.mu.Unlock()
	return err
}

func (c *dirCache) releaseLocked(h *dirHandle) {
	h.refs--
	if h.refs == 0 {
		_ = h.f.Close() // a directory: its Sync's error was returned
	}
}

// drop forgets dir (its directory is being removed).
func (c *dirCache) drop(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.dirs[dir]; h != nil {
		delete(c.dirs, dir)
		c.releaseLocked(h)
	}
}

func (c *dirCache) dropAllLocked() {
	for d, h := range c.dirs {
		delete(c.dirs, d)
		c.releaseLocked(h)
	}
}

func (c *dirCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropAllLocked()
}
