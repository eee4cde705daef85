package engine

import (
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// loggedChunk writes content(b, off, n) at off as a logged write.
func loggedChunk(t testing.TB, e *Engine, b BlockID, off uint64, n int) ChunkInfo {
	t.Helper()
	data := content(b, off, n)
	sums := ComputeChecksums(nil, data, testBPC)
	mustNo(t, e.WriteLoggedChunk(b, off, data, testBPC, sums, false))
	return ChunkInfo{Offset: off, Length: uint64(n), Checksums: sums}
}

// survives opens the strict crash image of fs (only what was synced) and
// reports whether the chunk's bytes are in its block file there.
func survives(t testing.TB, fs *vfs.MemFS, b BlockID, ch ChunkInfo) bool {
	t.Helper()
	e := openMem(t, fs.CrashClone(0, nil))
	defer closeT(t, e)
	return e.AdoptChunk(b, ch.Offset, ch.Length, testBPC, ch.Checksums) == nil
}

// TestLoggedWritesDurableOnlyWhenPromoted: a logged write is read at once
// but Sync does not make it durable; SyncLoggedBlocks does for the blocks
// it names only, SyncLogged for all, and a PutBlock covering one syncs its
// file before its record can be durable.
func TestLoggedWritesDurableOnlyWhenPromoted(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b1, b2, b3 := BlockID{Container: 1, Local: 1}, BlockID{Container: 1, Local: 2}, BlockID{Container: 1, Local: 3}
	c1 := loggedChunk(t, e, b1, 0, 1000)
	c2 := loggedChunk(t, e, b2, 0, 700)
	c3, err := writeChunk(e, b3, 0, 900)
	mustNo(t, err)
	if got, err := e.ReadChunk(b1, 0, 1000, nil); err != nil || string(got) != string(content(b1, 0, 1000)) {
		t.Fatalf("read of a logged write before any sync: %v", err)
	}
	if n := e.LoggedFiles(); n != 2 {
		t.Fatalf("LoggedFiles %d, want 2", n)
	}
	mustNo(t, e.Sync())
	if survives(t, fs, b1, c1) || survives(t, fs, b2, c2) {
		t.Fatal("Sync made a logged write durable: it should leave that to the log")
	}
	if !survives(t, fs, b3, c3) {
		t.Fatal("a plain write is not durable after Sync")
	}
	mustNo(t, e.SyncLoggedBlocks(map[BlockID]struct{}{b1: {}}))
	if !survives(t, fs, b1, c1) {
		t.Fatal("SyncLoggedBlocks did not make the named block's logged write durable")
	}
	if survives(t, fs, b2, c2) {
		t.Fatal("SyncLoggedBlocks synced a block it did not name")
	}
	mustNo(t, e.SyncLogged())
	if !survives(t, fs, b2, c2) || e.LoggedFiles() != 0 {
		t.Fatalf("SyncLogged left a logged write unsynced (%d files)", e.LoggedFiles())
	}

	// PutBlock of logged chunks: once its record is durable (a Sync),
	// the data is too.
	b4 := BlockID{Container: 1, Local: 4}
	bd := &BlockData{ID: b4, BytesPerChecksum: testBPC}
	for _, n := range []int{600, 1200} {
		ch := loggedChunk(t, e, b4, bd.Length, n)
		bd.Chunks = append(bd.Chunks, ch)
		bd.Length += uint64(n)
	}
	mustNo(t, e.PutBlock(bd, 0))
	mustNo(t, e.Sync())
	img := openMem(t, fs.CrashClone(0, nil))
	defer closeT(t, img)
	checkBlock(t, img, b4, bd.Length)
}

// TestReplayLoggedChunkKeepsLaterChunks: after a restart, replaying a
// block's first chunk from the log writes its bytes again without
// truncating the file, whose later chunk (made durable before the
// restart) is then adopted; a plain write of that first chunk would have
// truncated it away. A lost logged chunk comes back from the replay.
func TestReplayLoggedChunkKeepsLaterChunks(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	b, lost := BlockID{Container: 1, Local: 1}, BlockID{Container: 1, Local: 2}
	mustNo(t, e.CreateContainer(1))
	c0 := loggedChunk(t, e, b, 0, 800)
	c1, err := writeChunk(e, b, 800, 1500)
	mustNo(t, err)
	cl := loggedChunk(t, e, lost, 0, 900)
	mustNo(t, e.Sync()) // b's file (both chunks) durable; lost's bytes not
	img := fs.CrashClone(0, nil)
	mustNo(t, e.Close())

	e2 := openMem(t, img)
	defer closeT(t, e2)
	mustNo(t, e2.ReplayLoggedChunk(b, 0, content(b, 0, 800), testBPC, c0.Checksums))
	mustNo(t, e2.AdoptChunk(b, c1.Offset, c1.Length, testBPC, c1.Checksums))
	if e2.AdoptChunk(lost, 0, cl.Length, testBPC, cl.Checksums) == nil {
		t.Fatal("a logged write never synced was in the crash image")
	}
	mustNo(t, e2.ReplayLoggedChunk(lost, 0, content(lost, 0, 900), testBPC, cl.Checksums))
	// Replayed twice (a second restart): an identical chunk, no change.
	mustNo(t, e2.ReplayLoggedChunk(lost, 0, content(lost, 0, 900), testBPC, cl.Checksums))
	for _, x := range []struct {
		b BlockID
		n uint64
	}{{b, 2300}, {lost, 900}} {
		got, err := e2.ReadChunk(x.b, 0, x.n, nil)
		if err != nil || string(got) != string(content(x.b, 0, int(x.n))) {
			t.Fatalf("block %v after replay: %v", x.b, err)
		}
	}
	// The log's bytes are verified like a client's.
	bad := content(lost, 900, 100)
	sums := ComputeChecksums(nil, bad, testBPC)
	bad[3] ^= 1
	wantErr(t, e2.ReplayLoggedChunk(lost, 900, bad, testBPC, sums), ErrChecksumMismatch)
}
