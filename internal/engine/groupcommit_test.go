package engine

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// syncCounts counts the sync calls that reach the file system.
type syncCounts struct {
	blockFiles int64 // fdatasyncs of block files
	dirs       int64 // fsyncs of directories
	other      int64 // every other sync: the volumes' Pebble WAL syncs
}

// syncCounter observes a MemFS's operations (its error injector, which
// never fails one): it counts syncs and can park the first one matching
// hold until release is closed.
type syncCounter struct {
	blockFiles, dirs, other atomic.Int64
	hold                    func(vfs.Op) bool
	holdOnce                sync.Once
	release                 chan struct{}
}

func countSyncs(fs *vfs.MemFS) *syncCounter {
	c := &syncCounter{}
	fs.InjectErrors(func(op vfs.Op) error {
		switch {
		case op.Kind == vfs.OpSyncDir:
			c.dirs.Add(1)
		case op.Kind == vfs.OpSyncData && strings.HasSuffix(op.Path, ".blk"):
			c.blockFiles.Add(1)
		case op.Kind == vfs.OpSyncData || op.Kind == vfs.OpSync:
			c.other.Add(1)
		default:
			return nil
		}
		if c.hold != nil && c.hold(op) {
			c.holdOnce.Do(func() { <-c.release })
		}
		return nil
	})
	return c
}

func (c *syncCounter) counts() syncCounts {
	return syncCounts{blockFiles: c.blockFiles.Load(), dirs: c.dirs.Load(), other: c.other.Load()}
}

func (s syncCounts) minus(o syncCounts) syncCounts {
	return syncCounts{blockFiles: s.blockFiles - o.blockFiles, dirs: s.dirs - o.dirs, other: s.other - o.other}
}

// syncTogether has n callers call e.Sync at once. The first sync matching
// hold (in the round the first caller starts) is parked until every other
// caller has either gone to sleep on a round in flight (the committer's
// parkHook) or returned; only then is it released. It returns the sync
// rounds run and the syncs counted meanwhile, and how many callers slept
// on a round instead of returning at once.
func syncTogether(t *testing.T, e *Engine, c *syncCounter, n int, hold func(vfs.Op) bool) (rounds uint64, syncs syncCounts, parks int) {
	t.Helper()
	events := make(chan bool, 2*n) // true: a caller parked; false: one returned
	e.commit.parkHook = func() { events <- true }
	defer func() { e.commit.parkHook = nil }()
	c.hold, c.holdOnce, c.release = hold, sync.Once{}, make(chan struct{})
	beforeRounds, before := e.SyncStats().Rounds, c.counts()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.Sync()
			events <- false
		}()
	}
	// The caller holding the first sync neither parks nor returns until
	// released: wait for the other n-1.
	for range n - 1 {
		if <-events {
			parks++
		}
	}
	close(c.release)
	wg.Wait()
	e.commit.parkHook = nil
	close(events)
	for ev := range events {
		if ev {
			parks++
		}
	}
	close(errs)
	for err := range errs {
		mustNo(t, err)
	}
	c.hold = nil
	return e.SyncStats().Rounds - beforeRounds, c.counts().minus(before), parks
}

// TestGroupCommitAmortises: the group commit's headline property, counted
// at the file system, with barriers instead of timing. 16 writers write one
// chunk each into 4 new blocks of one container (4 chunks per block, each
// after the chunk before it); then all 16 call Sync at once, and the round
// the first of them starts is held in its first fdatasync until the other
// 15 have gone to sleep on it. That one round makes the 16 writes durable
// with 4 fdatasyncs (one per block file, not one per write) and one fsync
// of the container directory (for the 4 new files). Then the 4 blocks are
// committed (PutBlock syncs nothing: their data is durable, their records
// wait for the next Sync) and all 16 call Sync again the same way: one
// round, one metadata sync for the 4 records. Finally a crash keeps it all.
func TestGroupCommitAmortises(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	counter := countSyncs(fs)
	const writers, blocks, size = 16, 4, 600
	bds := make([]*BlockData, blocks)
	for i := range bds {
		bds[i] = &BlockData{ID: BlockID{Container: 1, Local: uint64(i + 1)}, BytesPerChecksum: testBPC, Length: writers / blocks * size}
	}

	// The writes: writer w writes chunk w/blocks of block w%blocks, once
	// the writer of the chunk before it is done (chunks are contiguous).
	before := counter.counts()
	chunks := make([]ChunkInfo, writers)
	wrote := make([]chan struct{}, writers)
	for w := range wrote {
		wrote[w] = make(chan struct{})
	}
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(wrote[w])
			if w >= blocks {
				<-wrote[w-blocks]
			}
			var err error
			chunks[w], err = writeChunk(e, bds[w%blocks].ID, uint64(w/blocks*size), size)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		mustNo(t, err)
	}
	if got := counter.counts().minus(before); got != (syncCounts{}) {
		t.Fatalf("chunk writes synced on their own: %+v", got)
	}
	for w, ch := range chunks {
		bd := bds[w%blocks]
		bd.Chunks = append(bd.Chunks, ch)
	}

	isBlockSync := func(op vfs.Op) bool { return op.Kind == vfs.OpSyncData && strings.HasSuffix(op.Path, ".blk") }
	rounds, syncs, parks := syncTogether(t, e, counter, writers, isBlockSync)
	if parks != writers-1 || rounds != 1 {
		t.Fatalf("%d Sync calls: %d slept on the round in flight, %d rounds ran; want %d and 1", writers, parks, rounds, writers-1)
	}
	if want := (syncCounts{blockFiles: blocks, dirs: 1}); syncs != want {
		t.Fatalf("%d chunk writes to %d new block files made durable with %+v, want %+v", writers, blocks, syncs, want)
	}

	before = counter.counts()
	for _, bd := range bds {
		mustNo(t, e.PutBlock(bd, 0))
	}
	if got := counter.counts().minus(before); got != (syncCounts{}) {
		t.Fatalf("PutBlock of durable data synced on its own: %+v", got)
	}
	isMetaSync := func(op vfs.Op) bool {
		return op.Kind == vfs.OpSync || op.Kind == vfs.OpSyncData && !strings.HasSuffix(op.Path, ".blk")
	}
	rounds, syncs, parks = syncTogether(t, e, counter, writers, isMetaSync)
	if parks != writers-1 || rounds != 1 {
		t.Fatalf("%d Sync calls: %d slept on the round in flight, %d rounds ran; want %d and 1", writers, parks, rounds, writers-1)
	}
	if want := (syncCounts{other: 1}); syncs != want {
		t.Fatalf("%d block records on one volume made durable with %+v, want %+v", blocks, syncs, want)
	}

	fs.InjectErrors(nil)
	e2 := openMem(t, fs.CrashClone(0, nil))
	defer closeT(t, e2)
	for _, bd := range bds {
		checkBlock(t, e2, bd.ID, bd.Length)
	}
}
