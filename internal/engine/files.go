package engine

import (
	"container/list"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/spindle-store/spindle/internal/vfs"
)

// blockFile is an open block file, shared by every user of the block.
// References: the cache holds one while the file is in it; each user holds
// one while it reads or writes; the group committer holds one while the file
// has unsynced writes. The descriptor is closed when the count reaches zero,
// so eviction never closes a file in use or one that still has to be synced.
type blockFile struct {
	id   BlockID
	path string
	f    vfs.File
	refs atomic.Int32
	elem *list.Element // position in the LRU; guarded by fileCache.mu

	// Write-behind of logged writes (writebehind.go), guarded by wbMu.
	wb       *wbBudget // the cache's
	wbMu     sync.Mutex
	wbOff    int64  // file offset of wbBuf[0]
	wbBuf    []byte // nil, or wbFileMaxBytes of capacity taken from wb
	wbClosed bool   // out of the cache: logged writes go straight to the file
	wbErr    error  // a failed flush, sticky
}

func (b *blockFile) release() {
	n := b.refs.Add(-1)
	if n < 0 {
		panic(fmt.Sprintf("engine: block file %s released more than acquired", b.path))
	}
	if n == 0 {
		if len(b.wbBuf) > 0 {
			panic(fmt.Sprintf("engine: block file %s closed with %d bytes of write-behind unwritten", b.path, len(b.wbBuf)))
		}
		_ = b.f.Close() // read-only or fully synced by now: nothing to lose
	}
}

// fileCache keeps up to maxFiles block files open so that a chunk write
// costs one pwrite: no open, stat or close per chunk.
type fileCache struct {
	fs       vfs.FS
	maxFiles int
	wb       wbBudget

	mu    sync.Mutex
	files map[BlockID]*blockFile
	lru   list.List // front = most recently used
}

func newFileCache(fs vfs.FS, maxFiles int) *fileCache {
	c := &fileCache{fs: fs, maxFiles: maxFiles, files: make(map[BlockID]*blockFile)}
	c.wb.maxBytes = defaultWriteBehindBudgetBytes
	return c
}

// cached returns block id's file with a reference if the cache holds it,
// else nil (the caller then acquires it by path).
func (c *fileCache) cached(id BlockID) *blockFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bf := c.files[id]; bf != nil {
		c.lru.MoveToFront(bf.elem)
		bf.refs.Add(1)
		return bf
	}
	return nil
}

// acquire returns the open file of block id, opening it (read-write, and
// creating it when create is set) if needed. The caller must release it.
// created reports that this call created a file that did not exist, so that
// the caller can have the parent directory synced.
func (c *fileCache) acquire(id BlockID, path string, create bool) (bf *blockFile, created bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bf := c.files[id]; bf != nil {
		c.lru.MoveToFront(bf.elem)
		bf.refs.Add(1)
		return bf, false, nil
	}
	var f vfs.File
	if create {
		// One open for a new block (no failed open first): a file that
		// is empty after it counts as created (its name gets a directory
		// sync, harmless if it was an empty leftover); a non-empty one is
		// a leftover the caller truncates.
		f, err = c.fs.OpenReadWrite(path, true)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err != nil {
				_ = f.Close() // nothing written; Stat's error is err
			} else {
				created = fi.Size() == 0
			}
		}
	} else {
		f, err = c.fs.OpenReadWrite(path, false)
	}
	if err != nil {
		return nil, false, err
	}
	bf = &blockFile{id: id, path: path, f: f, wb: &c.wb}
	bf.refs.Store(2) // the cache's and the caller's
	bf.elem = c.lru.PushFront(bf)
	c.files[id] = bf
	for c.lru.Len() > c.maxFiles {
		c.evictLocked(c.lru.Back().Value.(*blockFile))
	}
	return bf, created, nil
}

// evictLocked takes bf out of the cache. Its write-behind is written
// first (a later user of the block opens a blockFile of its own, which must
// find the bytes in the file); a failure stays with bf (wbErr) and fails
// the sync that covers its logged writes.
func (c *fileCache) evictLocked(bf *blockFile) {
	_ = bf.flushWriteBehind(false, true)
	c.lru.Remove(bf.elem)
	delete(c.files, bf.id)
	bf.release()
}

// drop removes block id from the cache (its descriptor closes once unused).
func (c *fileCache) drop(id BlockID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bf := c.files[id]; bf != nil {
		c.evictLocked(bf)
	}
}

// dropContainer removes every block of container id from the cache.
func (c *fileCache) dropContainer(id ContainerID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for bid, bf := range c.files {
		if bid.Container == id {
			c.evictLocked(bf)
		}
	}
}

func (c *fileCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, bf := range c.files {
		c.evictLocked(bf)
	}
}
