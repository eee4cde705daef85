package engine

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// countBlockWrites counts the writes to block files that fs sees from now
// on (InjectErrors with a counter that injects nothing, or fail as told).
func countBlockWrites(fs *vfs.MemFS, fail *atomic.Bool) *atomic.Int64 {
	var n atomic.Int64
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && strings.HasSuffix(op.Path, ".blk") {
			n.Add(1)
			if fail != nil && fail.Load() {
				return vfs.ErrInjected
			}
		}
		return nil
	})
	return &n
}

// TestLoggedWritesGatheredIntoOnePwrite: contiguous small logged chunks
// of a block reach its file in one write per wbFileMaxBytes, a read sees
// every one of them at once, and SyncLogged makes them all durable.
func TestLoggedWritesGatheredIntoOnePwrite(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	writes := countBlockWrites(fs, nil)
	const chunkBytes, chunks = 1024, 40 // 40 KiB: within one buffer
	var all []ChunkInfo
	for i := range chunks {
		all = append(all, loggedChunk(t, e, b, uint64(i*chunkBytes), chunkBytes))
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("%d block-file writes for %d gathered chunks before anything read or synced them, want 0", n, chunks)
	}
	got, err := e.ReadChunk(b, 0, chunks*chunkBytes, nil)
	mustNo(t, err)
	if string(got) != string(content(b, 0, chunks*chunkBytes)) {
		t.Fatal("read of gathered logged chunks returned other bytes")
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("%d block-file writes for %d gathered chunks, want 1", n, chunks)
	}
	// A chunk that does not extend the buffer (a later offset: another
	// writer's) flushes it; one past wbChunkMaxBytes goes straight out.
	loggedChunk(t, e, b, chunks*chunkBytes, 64)
	big := loggedChunk(t, e, BlockID{Container: 1, Local: 2}, 0, wbChunkMaxBytes+testBPC)
	if n := writes.Load(); n != 2 {
		t.Fatalf("%d block-file writes after a large logged chunk, want 2", n)
	}
	mustNo(t, e.SyncLogged())
	fs.InjectErrors(nil)
	img := openMem(t, fs.CrashClone(0, nil))
	defer closeT(t, img)
	for _, ch := range all { // adopted in order, as a recovery does
		if err := img.AdoptChunk(b, ch.Offset, ch.Length, testBPC, ch.Checksums); err != nil {
			t.Fatalf("chunk at %d not durable after SyncLogged: %v", ch.Offset, err)
		}
	}
	if !survives(t, fs, BlockID{Container: 1, Local: 2}, big) {
		t.Fatal("the large logged chunk is not durable after SyncLogged")
	}
	if used := e.files.wb.usedBytes.Load(); used != 0 {
		t.Fatalf("write-behind holds %d bytes of budget after SyncLogged, want 0", used)
	}
}

// TestWriteBehindFlushedWhenFileLeavesCache: with one open file allowed,
// a logged chunk of block 1 still in its buffer when block 2's write
// evicts block 1's file is written out then, so that a read, which opens
// block 1 again, finds it. (Without the flush in evictLocked the read
// finds no bytes and reports the block corrupt.)
func TestWriteBehindFlushedWhenFileLeavesCache(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs, func(c *Config) { c.OpenFilesMax = 1 })
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b1, b2 := BlockID{Container: 1, Local: 1}, BlockID{Container: 1, Local: 2}
	loggedChunk(t, e, b1, 0, 1000)
	loggedChunk(t, e, b2, 0, 1000)
	for _, b := range []BlockID{b1, b2} {
		got, err := e.ReadChunk(b, 0, 1000, nil)
		mustNo(t, err)
		if string(got) != string(content(b, 0, 1000)) {
			t.Fatalf("block %d: read other bytes", b.Local)
		}
	}
}

// TestWriteBehindFailureFailsSync: a gathered chunk whose later write to
// the block file fails is not lost silently: the SyncLogged that should
// make it durable fails and the engine refuses every later mutation, as
// after a failed fdatasync.
func TestWriteBehindFailureFailsSync(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeFailedT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	var fail atomic.Bool
	countBlockWrites(fs, &fail)
	loggedChunk(t, e, b, 0, 1000)
	fail.Store(true)
	err := e.SyncLogged()
	wantErr(t, err, ErrFailed)
	wantErr(t, err, vfs.ErrInjected)
	fail.Store(false)
	_, err = writeChunk(e, b, 1000, 100)
	wantErr(t, err, ErrFailed)
}
