package engine

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// goneBlock is the put of a block whose chunks a caught-up follower was
// excused from storing: described, never written here.
func goneBlock(b BlockID) *BlockData {
	data := content(b, 0, 1500)
	return &BlockData{ID: b, BytesPerChecksum: testBPC, Length: 1500,
		Chunks: []ChunkInfo{{Offset: 0, Length: 1500, Checksums: ComputeChecksums(nil, data, testBPC)}}}
}

// TestGoneMarkExcusesPutUntilDelete: with a gone mark at D, a put of the
// block below D succeeds without a record (only the BCSID moves), the
// block stays unreadable, and the DeleteBlock at D succeeds and removes
// the mark; after that the same put is refused again, as one of chunks
// this replica lacks. Without the mark the put is refused (the replica
// would leave its pipeline: CHAOS_FINDINGS §1).
func TestGoneMarkExcusesPutUntilDelete(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	gone := goneBlock(BlockID{Container: 1, Local: 7})
	wantErr(t, e.PutBlock(gone, 5), ErrNotFound)

	mustNo(t, e.MarkGone(gone.ID, 20))
	if d := e.GoneAt(gone.ID); d != 20 {
		t.Fatalf("GoneAt %d, want 20", d)
	}
	mustNo(t, e.PutBlock(gone, 12))
	if got := bcsidOf(t, e, 1); got != 12 {
		t.Fatalf("BCSID %d after an excused put at 12, want 12", got)
	}
	if _, err := e.GetBlock(gone.ID); err == nil {
		t.Fatal("an excused put left a block record")
	}
	if _, err := e.ReadChunk(gone.ID, 0, 1500, nil); err == nil {
		t.Fatal("an excused block reads")
	}
	mustNo(t, e.DeleteBlock(gone.ID))
	if d := e.GoneAt(gone.ID); d != 0 {
		t.Fatalf("GoneAt %d after the delete, want 0", d)
	}
	wantErr(t, e.DeleteBlock(gone.ID), ErrNotFound)
	wantErr(t, e.PutBlock(gone, 25), ErrNotFound)
}

// TestGoneMarkIgnoresPutsAtOrPastDelete: a put at or above D is not
// excused (a block ID written again after its delete is a new block), and
// a mark for a delete the container has applied already (its BCSID at or
// past D) is not written.
func TestGoneMarkIgnoresPutsAtOrPastDelete(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	gone := goneBlock(BlockID{Container: 1, Local: 7})
	mustNo(t, e.MarkGone(gone.ID, 20))
	wantErr(t, e.PutBlock(gone, 20), ErrNotFound)

	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: 8}, 100), 30))
	other := BlockID{Container: 1, Local: 9}
	mustNo(t, e.MarkGone(other, 30))
	if d := e.GoneAt(other); d != 0 {
		t.Fatalf("a mark below the container's BCSID was kept: GoneAt %d", d)
	}
	wantErr(t, e.MarkGone(BlockID{Container: 2, Local: 1}, 5), ErrNotFound)
	wantErr(t, e.MarkGone(other, 0), ErrInvalid)
}

// TestDeleteOfAPartBlockRemovesItsGoneMark: the follower held some of the
// block's chunks before it fell behind; the delete removes chunks and mark.
func TestDeleteOfAPartBlockRemovesItsGoneMark(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 7}
	writeBlock(t, e, b, 1000)
	mustNo(t, e.MarkGone(b, 40))
	mustNo(t, e.DeleteBlock(b))
	if d := e.GoneAt(b); d != 0 {
		t.Fatalf("GoneAt %d after the delete", d)
	}
	mustNo(t, e.Close())
	e = openMem(t, fs)
	defer closeT(t, e)
	if d := e.GoneAt(b); d != 0 {
		t.Fatalf("GoneAt %d after the delete and a reopen", d)
	}
}

// TestGoneMarksGoWithTheirContainer: a container's delete deletes its
// marks; a new container of the same ID starts without them.
func TestGoneMarksGoWithTheirContainer(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1))
	mustNo(t, e.CreateContainer(2))
	mustNo(t, e.MarkGone(BlockID{Container: 1, Local: 7}, 9))
	mustNo(t, e.MarkGone(BlockID{Container: 2, Local: 7}, 9))
	mustNo(t, e.DeleteContainer(1, true))
	mustNo(t, e.Close())
	e = openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	if d := e.GoneAt(BlockID{Container: 1, Local: 7}); d != 0 {
		t.Fatalf("a deleted container's mark came back: GoneAt %d", d)
	}
	if d := e.GoneAt(BlockID{Container: 2, Local: 7}); d != 9 {
		t.Fatalf("container 2's mark: GoneAt %d, want 9", d)
	}
}

// TestMarkGoneSurvivesACrashOnceReturned: a crash at every operation of
// MarkGone; once it returned, the reopened engine has the mark and
// excuses the put (the follower acknowledged the entry on that promise).
// Before it returned, the mark may or may not be there, never damaged.
func TestMarkGoneSurvivesACrashOnceReturned(t *testing.T) {
	base := vfs.NewMem()
	e := openMem(t, base)
	mustNo(t, e.CreateContainer(1))
	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: 1}, 700), 3))
	mustNo(t, e.Close())
	gone := goneBlock(BlockID{Container: 1, Local: 7})
	const kMax = 200 // bound: MarkGone is a handful of operations
	k, kept := int64(1), 0
	for ; k <= kMax; k++ {
		fs := base.CrashClone(100, nil)
		e := openMem(t, fs)
		fs.CrashAtOp(k, 0, k)
		returned := e.MarkGone(gone.ID, 20) == nil && fs.Crashed() == nil
		mustNo(t, e.Close())
		img := fs.Crashed()
		if img == nil {
			break // the run ended before the k-th operation
		}
		e2 := openMem(t, img)
		d := e2.GoneAt(gone.ID)
		switch {
		case returned && d != 20:
			t.Fatalf("k=%d: MarkGone returned, after the crash GoneAt %d", k, d)
		case d != 0 && d != 20:
			t.Fatalf("k=%d: GoneAt %d", k, d)
		case d == 20:
			if err := e2.PutBlock(gone, 12); err != nil {
				t.Fatalf("k=%d: put excused by the mark: %v", k, err)
			}
			kept++
		}
		mustNo(t, e2.Close())
	}
	if k > kMax {
		t.Fatalf("MarkGone still running at k=%d", k)
	}
	if kept == 0 {
		t.Fatal("no crash image held the mark: the loop did not reach past MarkGone's sync")
	}
	t.Logf("crashed at every one of %d mutating operations", k-1)
}

// TestGoneMarkBytes pins a mark's key and value (FORMAT.md §3).
func TestGoneMarkBytes(t *testing.T) {
	key := goneKey(BlockID{Container: 1, Local: 7})
	if got, want := hex.EncodeToString(key), "47000000000000000100000000000000"+"07"; got != want {
		t.Fatalf("gone key %s, want %s", got, want)
	}
	v := encodeGoneValue(20)
	// D = 20 u64 LE | CRC32C 0x29433953 of those 8 bytes, u32 LE.
	want, _ := hex.DecodeString("1400000000000000" + "53394329")
	if !bytes.Equal(v, want) || len(v) != goneValueSize {
		t.Fatalf("gone value %x", v)
	}
	if d, err := decodeGoneValue(v); err != nil || d != 20 {
		t.Fatalf("decode: %d, %v", d, err)
	}
	v[3] ^= 1
	wantErr(t, func() error { _, err := decodeGoneValue(v); return err }(), ErrCorrupt)
}

// TestGoneMarkDoesNotExcusePutOnClosedContainer: a replica closed by
// itself (its pipeline's log did not close it) and then caught up from
// the log refuses the log's later puts as not open, excused or not; an
// excused put must not move its BCSID either, or the replica would rank
// level with the replicas that hold the puts it refused (CHAOS_FINDINGS
// §9: a replica missing two committed blocks was counted healthy).
func TestGoneMarkDoesNotExcusePutOnClosedContainer(t *testing.T) {
	for _, markFirst := range []bool{true, false} {
		e := openMem(t, vfs.NewMem())
		mustNo(t, e.CreateContainer(1))
		mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: 8}, 100), 10))
		gone := goneBlock(BlockID{Container: 1, Local: 7})
		if markFirst {
			mustNo(t, e.MarkGone(gone.ID, 20))
		}
		mustNo(t, e.CloseContainer(1))
		if !markFirst {
			mustNo(t, e.MarkGone(gone.ID, 20))
		}
		wantErr(t, e.PutBlock(gone, 12), ErrNotOpen)
		if got := bcsidOf(t, e, 1); got != 10 {
			t.Fatalf("mark first %v: BCSID %d after a put refused on a CLOSED container, want 10", markFirst, got)
		}
		mustNo(t, e.DeleteBlock(gone.ID))
		closeT(t, e)
	}
}
