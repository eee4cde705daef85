package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// committer is the engine's group commit. Writers mark what they dirtied
// (a block file, a directory entry, a volume's metadata) and get a sequence
// number; sync(seq) returns once everything marked up to seq is durable. A
// caller that finds its write not yet covered starts a sync round for
// everybody: the round takes the dirty sets, fdatasyncs every dirty file
// (in parallel when fdatasync is slow), fsyncs every dirty directory, then
// syncs each dirty volume's Pebble WAL once. Writers arriving meanwhile are
// covered by a later round, so N concurrent writes cost about one fdatasync
// per touched file and one metadata sync.
//
// Rounds are pipelined: up to workers run at once, each on the sets it
// took, so that a device with a deep queue sees many flushes in flight (as
// N independent writers calling fdatasync would), while a fast device
// batches. durableSeq only advances over the completed prefix of rounds in
// the order they started, so "durable up to seq" keeps its meaning: every
// round that started before, and so every write marked before, is done.
//
// Invariant: a sequence number is handed out only after the write it stands
// for has completed (pwrite returned, Pebble batch committed), so a round
// that starts after seq was handed out covers that write.
//
// A failed sync poisons the committer: the kernel may have dropped the dirty
// pages, so nothing written since the last good round can be vouched for;
// every later sync and mutation returns ErrFailed.
type committer struct {
	// workers bounds both the rounds in flight and the parallel
	// fdatasyncs of one round (Config.SyncWorkers).
	workers int

	mu         sync.Mutex
	seq        uint64 // last sequence number handed out
	durableSeq uint64 // everything up to here is durable
	started    uint64 // target of the latest round started
	inflight   []*round
	err        error
	dirty      *dirtySets
	// logged holds the block files with logged writes (WriteLoggedChunk)
	// not yet handed to a round, each with a reference: their bytes are
	// also in a durable log, so no round syncs them until they are
	// promoted (promoteLogged: SyncLogged, SyncLoggedBlocks, PutBlock,
	// Close) into the dirty set.
	logged map[*blockFile]struct{}
	// lastPromote is the sequence number of the latest promotion: a
	// logged write promoted before is durable once durableSeq reaches it.
	lastPromote uint64
	spare       []*dirtySets // emptied sets, reused so that a round allocates nothing
	// removedDirs: directories removed (a deleted container's, forgetDir)
	// while rounds were in flight: a round that had taken one in its set
	// finds it gone, which is no failure. Cleared once no round runs.
	removedDirs map[string]struct{}

	// fileSyncNs is a moving average of one fdatasync's latency, updated
	// atomically by concurrent rounds. Files are synced in parallel only
	// when a sync is slow enough that overlapping them pays for the
	// hand-off (on tmpfs it never does).
	fileSyncNs atomic.Int64

	// stats, guarded by mu
	rounds     uint64
	fileSyncs  uint64
	dirSyncs   uint64
	metaSyncs  uint64
	syncFileFn func(*blockFile) error
	syncDirFn  func(string) error
	syncVolFn  func(*volume) error

	// parkHook, when set (tests only, before the engine is used), is
	// called without c.mu each time a sync call is about to sleep on a
	// round in flight, so that a test can tell when callers have joined a
	// round instead of hoping the scheduler got them there.
	parkHook func()
}

// dirtySets is what one round makes durable.
type dirtySets struct {
	files map[*blockFile]struct{} // each holds a reference
	dirs  map[string]struct{}
	vols  map[*volume]struct{}
}

func newDirtySets() *dirtySets {
	return &dirtySets{files: make(map[*blockFile]struct{}), dirs: make(map[string]struct{}), vols: make(map[*volume]struct{})}
}

// round is one sync round in flight; done is closed when its syncs have
// returned.
type round struct {
	target uint64
	done   chan struct{}
}

func (r *round) isDone() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func newCommitter(workers int, syncFile func(*blockFile) error, syncDir func(string) error, syncVol func(*volume) error) *committer {
	c := &committer{
		workers:    workers,
		dirty:      newDirtySets(),
		logged:     make(map[*blockFile]struct{}),
		syncFileFn: syncFile,
		syncDirFn:  syncDir,
		syncVolFn:  syncVol,
	}
	return c
}

// markFile records an unsynced write to bf (taking a reference when bf was
// clean) and returns its sequence number.
func (c *committer) markFile(bf *blockFile) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.dirty.files[bf]; !ok {
		bf.refs.Add(1)
		c.dirty.files[bf] = struct{}{}
	}
	c.seq++
	return c.seq
}

// markLogged records a logged write to bf (taking a reference when bf
// has none logged yet): no sequence number, no round syncs it until it is
// promoted.
func (c *committer) markLogged(bf *blockFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.logged[bf]; !ok {
		bf.refs.Add(1)
		c.logged[bf] = struct{}{}
	}
}

// promoteLogged hands the logged files that match (all of them when match
// is nil) to the dirty set and returns the sequence number to sync up to
// for every logged write to them, earlier promotions included: a new one
// when it moved any, else the latest promotion's.
func (c *committer) promoteLogged(match func(BlockID) bool) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := false
	for bf := range c.logged {
		if match != nil && !match(bf.id) {
			continue
		}
		delete(c.logged, bf)
		if _, ok := c.dirty.files[bf]; ok {
			bf.release() // the dirty set holds one already
		} else {
			c.dirty.files[bf] = struct{}{}
		}
		moved = true
	}
	if moved {
		c.seq++
		c.lastPromote = c.seq
	}
	return c.lastPromote
}

// loggedFiles counts the files with logged writes not yet promoted.
func (c *committer) loggedFiles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.logged)
}

// markDir records an unsynced entry in directory dir.
func (c *committer) markDir(dir string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirty.dirs[dir] = struct{}{}
	c.seq++
	return c.seq
}

// forgetDir drops dir (a deleted container's directory, about to be
// removed) from the dirty set: nothing in it needs to be durable any more,
// and syncing it once it is gone would fail the round and poison the
// engine. A round already in flight that holds it ignores its absence.
func (c *committer) forgetDir(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dirty.dirs, dir)
	if len(c.inflight) > 0 {
		if c.removedDirs == nil {
			c.removedDirs = make(map[string]struct{})
		}
		c.removedDirs[dir] = struct{}{}
	}
}

// removedDuringRound says whether err, of a round's sync of dir, is dir's
// removal by forgetDir's caller.
func (c *committer) removedDuringRound(dir string, err error) bool {
	if !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.removedDirs[dir]
	return ok
}

// markVolume records an unsynced metadata commit on v.
func (c *committer) markVolume(v *volume) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirty.vols[v] = struct{}{}
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

// sync returns when everything up to seq is durable, running sync rounds as needed.
func (c *committer) sync(seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.durableSeq < seq {
		if c.err != nil {
			return c.err
		}
		if c.started < seq && len(c.inflight) < c.workers {
			c.runRound()
			continue
		}
		// Sleep on the round this wait depends on: the first that covers
		// seq if it is still running, else the oldest unfinished one
		// (which holds durableSeq back); with no round covering seq and
		// no room for one, also the oldest. Only the waiters of a round
		// wake when it ends.
		wait := c.inflight[0]
		for _, r := range c.inflight {
			if r.target >= seq {
				if !r.isDone() {
					wait = r
				}
				break
			}
		}
		c.mu.Unlock()
		if c.parkHook != nil {
			c.parkHook()
		}
		<-wait.done
		c.mu.Lock()
	}
	return c.err
}

// runRound runs one sync round over the current dirty sets. c.mu is held on
// entry and on return, released while the round syncs.
func (c *committer) runRound() {
	r := &round{target: c.seq, done: make(chan struct{})}
	c.started = r.target
	c.inflight = append(c.inflight, r)
	sets := c.dirty
	if n := len(c.spare); n > 0 {
		c.dirty, c.spare = c.spare[n-1], c.spare[:n-1]
	} else {
		c.dirty = newDirtySets()
	}
	c.mu.Unlock()
	err := c.round(sets.files, sets.dirs, sets.vols)
	nFiles, nDirs, nVols := len(sets.files), len(sets.dirs), len(sets.vols)
	clear(sets.files)
	clear(sets.dirs)
	clear(sets.vols)
	c.mu.Lock()
	c.spare = append(c.spare, sets)
	c.rounds++
	c.fileSyncs += uint64(nFiles)
	c.dirSyncs += uint64(nDirs)
	c.metaSyncs += uint64(nVols)
	if err != nil && c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	close(r.done)
	// Advance over the completed prefix, in start order. A failed round
	// advances nothing: the committer is poisoned.
	for len(c.inflight) > 0 && c.inflight[0].isDone() {
		if t := c.inflight[0].target; t > c.durableSeq && c.err == nil {
			c.durableSeq = t
		}
		c.inflight = c.inflight[1:]
	}
	if len(c.inflight) == 0 {
		c.removedDirs = nil // no round left that could hold one
	}
	// Waiters of rounds still running wake when those end and then see a
	// failure in c.err: every waiter sleeps on a round that is running.
}

// round makes one set of dirty things durable. Order matters: block data and
// directory entries first, metadata last, so that no metadata record is
// durable before the data it describes (PutBlock also waits for its data
// before committing the record at all).
func (c *committer) round(files map[*blockFile]struct{}, dirs map[string]struct{}, vols map[*volume]struct{}) error {
	var firstErr error
	if len(files) <= 2 || c.workers <= 1 || c.fileSyncNs.Load() < parallelSyncMinNs {
		for bf := range files {
			start := time.Now()
			if err := c.syncFileFn(bf); err != nil && firstErr == nil {
				firstErr = err
			}
			c.noteSync(time.Since(start).Nanoseconds())
			bf.release()
		}
	} else {
		firstErr = c.parallelFiles(files)
	}
	for d := range dirs {
		if err := c.syncDirFn(d); err != nil && firstErr == nil && !c.removedDuringRound(d, err) {
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

// noteSync folds one fdatasync latency into the moving average (a racy
// read-modify-write between concurrent rounds loses an update now and then,
// which an average does not mind).
func (c *committer) noteSync(ns int64) {
	avg := c.fileSyncNs.Load()
	c.fileSyncNs.Store(avg + (ns-avg)/8)
}

// parallelSyncMinNs: below this average fdatasync latency, a round syncs
// its files one after the other; above, in parallel. A goroutine hand-off
// costs a few µs; a device flush tens of µs or more.
const parallelSyncMinNs = 20_000

func (c *committer) parallelFiles(files map[*blockFile]struct{}) error {
	list := make([]*blockFile, 0, len(files))
	for bf := range files {
		list = append(list, bf)
	}
	return parallelEach(len(list), c.workers, func(i int) error {
		start := time.Now()
		err := c.syncFileFn(list[i])
		c.noteSync(time.Since(start).Nanoseconds())
		list[i].release()
		return err
	})
}

// parallelEach runs fn(0) … fn(n-1) on at most workers goroutines, every
// one of them whatever the others return, and returns the first error
// (in completion order) or nil.
func parallelEach(n, workers int, fn func(i int) error) error {
	workers = min(workers, n)
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	wg.Add(workers)
	for w := 0; w < workers; w++ {
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := fn(int(i)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// poison puts the committer in the failed state (if it is not already) and
// returns that state's error. Every sync failure anywhere in the engine goes
// through here, so that "a sync failed" always means the same thing: nothing
// more is acknowledged until the engine is reopened.
func (c *committer) poison(err error) error {
	if errors.Is(err, ErrVolumeFull) || errors.Is(err, pebble.ErrReadOnly) {
		// A volume opened read-only refused a write: nothing was lost.
		return fmt.Errorf("%w: %w", ErrVolumeFull, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrFailed, err)
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
