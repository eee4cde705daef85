package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// committer is the engine's group commit. Writers mark what they dirtied
// (a block file, a directory entry, a volume's metadata) and get a sequence
// number; sync(seq) returns once everything marked up to seq is durable. One
// caller at a time runs a sync round for everybody: it takes the dirty sets,
// fdatasyncs every dirty file (in parallel, up to SyncWorkers), fsyncs every
// dirty directory, then syncs each dirty volume's Pebble WAL once. Writers
// arriving meanwhile wait and are covered by the next round, so N concurrent
// writes cost one fdatasync per touched file and one metadata sync.
//
// Invariant: a sequence number is handed out only after the write it stands
// for has completed (pwrite returned, Pebble batch committed), so a round
// that starts after seq was handed out covers that write.
//
// A failed sync poisons the committer: the kernel may have dropped the dirty
// pages, so nothing written since the last good round can be vouched for;
// every later sync and mutation returns ErrFailed.
type committer struct {
	workers int

	mu         sync.Mutex
	cond       sync.Cond
	seq        uint64 // last sequence number handed out
	durableSeq uint64 // everything up to here is durable
	running    bool
	err        error
	files      map[*blockFile]struct{} // each holds a reference
	dirs       map[string]struct{}
	vols       map[*volume]struct{}
	// spare sets, emptied after a round and swapped in at the next, so
	// that a round allocates nothing
	spareFiles map[*blockFile]struct{}
	spareDirs  map[string]struct{}
	spareVols  map[*volume]struct{}
	// fileSyncNs is a moving average of one fdatasync's latency (written
	// by the round runner only, which is one goroutine at a time). Files
	// are synced in parallel only when a sync is slow enough that
	// overlapping them pays for the hand-off (on tmpfs it never does).
	fileSyncNs int64

	// stats, guarded by mu
	rounds     uint64
	fileSyncs  uint64
	dirSyncs   uint64
	metaSyncs  uint64
	syncFileFn func(*blockFile) error
	syncDirFn  func(string) error
	syncVolFn  func(*volume) error
}

func newCommitter(workers int, syncFile func(*blockFile) error, syncDir func(string) error, syncVol func(*volume) error) *committer {
	c := &committer{
		workers:    workers,
		files:      make(map[*blockFile]struct{}),
		dirs:       make(map[string]struct{}),
		vols:       make(map[*volume]struct{}),
		spareFiles: make(map[*blockFile]struct{}),
		spareDirs:  make(map[string]struct{}),
		spareVols:  make(map[*volume]struct{}),
		syncFileFn: syncFile,
		syncDirFn:  syncDir,
		syncVolFn:  syncVol,
	}
	c.cond.L = &c.mu
	return c
}

// markFile records an unsynced write to bf (taking a reference when bf was
// clean) and returns its sequence number.
func (c *committer) markFile(bf *blockFile) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.files[bf]; !ok {
		bf.refs.Add(1)
		c.files[bf] = struct{}{}
	}
	c.seq++
	return c.seq
}

// markDir records an unsynced entry in directory dir.
func (c *committer) markDir(dir string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirs[dir] = struct{}{}
	c.seq++
	return c.seq
}

// markVolume records an unsynced metadata commit on v.
func (c *committer) markVolume(v *volume) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vols[v] = struct{}{}
	c.seq++
	return c.seq
}

// current returns the last sequence number handed out.
func (c *committer) current() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

func (c *committer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// sync returns when everything up to seq is durable, running sync rounds as
// needed.
func (c *committer) sync(seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.durableSeq < seq {
		if c.err != nil {
			return c.err
		}
		if c.running {
			c.cond.Wait()
			continue
		}
		c.running = true
		target := c.seq
		files, dirs, vols := c.files, c.dirs, c.vols
		c.files, c.dirs, c.vols = c.spareFiles, c.spareDirs, c.spareVols
		c.mu.Unlock()
		err := c.round(files, dirs, vols)
		nFiles, nDirs, nVols := len(files), len(dirs), len(vols)
		clear(files)
		clear(dirs)
		clear(vols)
		c.mu.Lock()
		c.spareFiles, c.spareDirs, c.spareVols = files, dirs, vols
		c.running = false
		c.rounds++
		c.fileSyncs += uint64(nFiles)
		c.dirSyncs += uint64(nDirs)
		c.metaSyncs += uint64(nVols)
		if err != nil {
			c.err = fmt.Errorf("%w: %w", ErrFailed, err)
		} else if target > c.durableSeq {
			c.durableSeq = target
		}
		c.cond.Broadcast()
	}
	return c.err
}

// round makes one set of dirty things durable. Order matters: block data and
// directory entries first, metadata last, so that no metadata record is
// durable before the data it describes (PutBlock also waits for its data
// before committing the record at all).
func (c *committer) round(files map[*blockFile]struct{}, dirs map[string]struct{}, vols map[*volume]struct{}) error {
	var firstErr error
	if len(files) <= 2 || c.workers <= 1 || c.fileSyncNs < parallelSyncMinNs {
		for bf := range files {
			start := time.Now()
			if err := c.syncFileFn(bf); err != nil && firstErr == nil {
				firstErr = err
			}
			c.fileSyncNs += (time.Since(start).Nanoseconds() - c.fileSyncNs) / 8
			bf.release()
		}
	} else {
		firstErr = c.parallelFiles(files)
	}
	for d := range dirs {
		if err := c.syncDirFn(d); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return firstErr // metadata must not become durable over missing data
	}
	for v := range vols {
		if err := c.syncVolFn(v); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// parallelSyncMinNs: below this average fdatasync latency, a round syncs
// its files one after the other; above, in parallel. A goroutine hand-off
// costs a few µs; a device flush tens of µs or more.
const parallelSyncMinNs = 20_000

func (c *committer) parallelFiles(files map[*blockFile]struct{}) error {
	work := make(chan *blockFile, len(files))
	for bf := range files {
		work <- bf
	}
	close(work)
	n := min(c.workers, len(files))
	errs := make(chan error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer wg.Done()
			var first error
			for bf := range work {
				start := time.Now()
				if err := c.syncFileFn(bf); err != nil && first == nil {
					first = err
				}
				if d := time.Since(start).Nanoseconds(); d < parallelSyncMinNs {
					// a fast sync seen in parallel: let the average fall
					// so that small rounds go serial again
					atomic.AddInt64(&c.fileSyncNs, (d-atomic.LoadInt64(&c.fileSyncNs))/8)
				}
				bf.release()
			}
			errs <- first
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// poison puts the committer in the failed state (if it is not already) and
// returns that state's error. Every sync failure anywhere in the engine goes
// through here, so that "a sync failed" always means the same thing: nothing
// more is acknowledged until the engine is reopened.
func (c *committer) poison(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrFailed, err)
		c.cond.Broadcast()
	}
	return c.err
}

// CommitStats counts the work of the group commit since Open.
type CommitStats struct {
	Rounds, FileSyncs, DirSyncs, MetaSyncs uint64
}

func (c *committer) stats() CommitStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CommitStats{Rounds: c.rounds, FileSyncs: c.fileSyncs, DirSyncs: c.dirSyncs, MetaSyncs: c.metaSyncs}
}
