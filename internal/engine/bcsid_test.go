package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

func bcsidOf(t testing.TB, e *Engine, id ContainerID) uint64 {
	t.Helper()
	ci, err := e.Container(id)
	mustNo(t, err)
	return ci.BCSID
}

// TestBCSIDAdvancesAndSurvivesReopen: every applied put at a higher
// sequence raises the BCSID, also one whose record is unchanged; several
// puts may share a sequence; close and block deletes leave it alone; it is
// read back after a reopen.
func TestBCSIDAdvancesAndSurvivesReopen(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1))
	if got := bcsidOf(t, e, 1); got != 0 {
		t.Fatalf("new container BCSID %d, want 0", got)
	}
	a := writeBlock(t, e, BlockID{Container: 1, Local: 1}, 700)
	mustNo(t, e.PutBlock(a, 5))
	b := writeBlock(t, e, BlockID{Container: 1, Local: 2}, 300)
	mustNo(t, e.PutBlock(b, 5)) // one raft entry, two puts
	if got := bcsidOf(t, e, 1); got != 5 {
		t.Fatalf("BCSID %d after puts at 5", got)
	}
	mustNo(t, e.PutBlock(a, 9)) // the same record again (a final put equal to a checkpoint)
	if got := bcsidOf(t, e, 1); got != 9 {
		t.Fatalf("BCSID %d after an unchanged put at 9, want 9", got)
	}
	mustNo(t, e.DeleteBlock(b.ID))
	if got := bcsidOf(t, e, 1); got != 9 {
		t.Fatalf("BCSID %d after a delete, want 9 (deletes do not advance it)", got)
	}
	mustNo(t, e.CloseContainer(1))
	if got := bcsidOf(t, e, 1); got != 9 {
		t.Fatalf("BCSID %d after close, want 9", got)
	}
	mustNo(t, e.Close())
	e = openMem(t, fs)
	defer closeT(t, e)
	ci, err := e.Container(1)
	mustNo(t, err)
	if ci.BCSID != 9 || ci.State != StateClosed {
		t.Fatalf("after reopen: %+v, want CLOSED at BCSID 9", ci)
	}
	if l := e.ListContainers(); len(l) != 1 || l[0].BCSID != 9 {
		t.Fatalf("ListContainers %+v", l)
	}
}

// TestBCSIDReplayIsIdempotent: puts below the BCSID (raft re-applying
// entries after a restart) change nothing and succeed when the committed
// state covers them; one that would change a block is refused with
// ErrSequence and changes nothing.
func TestBCSIDReplayIsIdempotent(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	x := BlockID{Container: 1, Local: 1}
	first := writeBlock(t, e, x, 1000)
	mustNo(t, e.PutBlock(first, 3)) // a checkpoint
	ch, err := writeChunk(e, x, 1000, 500)
	mustNo(t, err)
	full := &BlockData{ID: x, BytesPerChecksum: testBPC, Length: 1500, Chunks: append(cloneChunks(first.Chunks), ch)}
	mustNo(t, e.PutBlock(full, 7)) // the final put
	gone := writeBlock(t, e, BlockID{Container: 1, Local: 2}, 200)
	mustNo(t, e.PutBlock(gone, 8))
	mustNo(t, e.DeleteBlock(gone.ID))
	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: 3}, 100), 10))

	// Replays, in log order: nothing changes, nothing fails.
	for _, r := range []struct {
		bd  *BlockData
		seq uint64
	}{{first, 3}, {full, 7}, {gone, 8}} {
		if err := e.PutBlock(r.bd, r.seq); err != nil {
			t.Fatalf("replay of the put at %d: %v", r.seq, err)
		}
	}
	checkBlock(t, e, x, 1500)
	if _, err := e.GetBlock(gone.ID); err == nil {
		t.Fatal("a replayed put brought back a deleted block")
	}
	if got := bcsidOf(t, e, 1); got != 10 {
		t.Fatalf("BCSID %d after replays, want 10", got)
	}

	// A put below the BCSID that would change a block: refused.
	late := writeBlock(t, e, BlockID{Container: 1, Local: 4}, 300)
	wantErr(t, e.PutBlock(late, 9), ErrSequence)
	if _, err := e.GetBlock(late.ID); err == nil {
		t.Fatal("a refused put committed its block")
	}
	ch2, err := writeChunk(e, x, 1500, 100)
	mustNo(t, err)
	longer := &BlockData{ID: x, BytesPerChecksum: testBPC, Length: 1600, Chunks: append(cloneChunks(full.Chunks), ch2)}
	wantErr(t, e.PutBlock(longer, 4), ErrSequence)
	checkBlock(t, e, x, 1500)
	if got := bcsidOf(t, e, 1); got != 10 {
		t.Fatalf("BCSID %d after refusals, want 10", got)
	}
	// The same puts at the current sequence or above are applied.
	mustNo(t, e.PutBlock(late, 10))
	mustNo(t, e.PutBlock(longer, 11))
	checkBlock(t, e, x, 1600)
	if got := bcsidOf(t, e, 1); got != 11 {
		t.Fatalf("BCSID %d, want 11", got)
	}

	// A put refused the first time (its chunks are not the ones written)
	// is refused the same way when replayed below the BCSID: not taken for
	// a put out of order.
	y := BlockID{Container: 1, Local: 5}
	wrong := writeBlock(t, e, y, 400)
	wrong.Chunks[0].Checksums = []uint32{1}
	wantErr(t, e.PutBlock(wrong, 12), ErrInvalid)
	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: 6}, 100), 13))
	err = e.PutBlock(wrong, 12)
	wantErr(t, err, ErrInvalid)
	if errors.Is(err, ErrSequence) {
		t.Fatalf("replay of a refused put: %v, want its own refusal, not ErrSequence", err)
	}
	// And on a CLOSED container, a put that would change a block is
	// refused as not OPEN; one the blocks cover is still a replay.
	ch3, err := writeChunk(e, x, 1600, 50)
	mustNo(t, err)
	longest := &BlockData{ID: x, BytesPerChecksum: testBPC, Length: 1650, Chunks: append(cloneChunks(longer.Chunks), ch3)}
	mustNo(t, e.CloseContainer(1))
	wantErr(t, e.PutBlock(longest, 5), ErrNotOpen)
	mustNo(t, e.PutBlock(first, 3))
	checkBlock(t, e, x, 1600)
}

// TestBCSIDExportImport: an export carries the BCSID, an import keeps the
// one it is given, across a reopen.
func TestBCSIDExportImport(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	mustNo(t, src.CreateContainer(3))
	mustNo(t, src.PutBlock(writeBlock(t, src, BlockID{Container: 3, Local: 1}, 900), 41))
	mustNo(t, src.CloseContainer(3))
	x, err := src.ExportContainer(3)
	mustNo(t, err)
	if x.Info().BCSID != 41 {
		t.Fatalf("export info %+v, want BCSID 41", x.Info())
	}
	closeT(t, x)
	fs := vfs.NewMem()
	dst := openMem(t, fs)
	mustNo(t, copyContainer(src, dst, 3, 0, nil))
	if got := bcsidOf(t, dst, 3); got != 41 {
		t.Fatalf("imported BCSID %d, want 41", got)
	}
	mustNo(t, dst.Close())
	dst = openMem(t, fs)
	defer closeT(t, dst)
	if got := bcsidOf(t, dst, 3); got != 41 {
		t.Fatalf("imported BCSID after reopen %d, want 41", got)
	}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	mustNo(t, err)
	return b
}

// TestContainerRecordBytes: the version 2 record, byte for byte (FORMAT.md
// §4), and a version 1 record written before the BCSID existed (the
// FORMAT.md example of that version) read with BCSID 0.
func TestContainerRecordBytes(t *testing.T) {
	r := containerRecord{ID: 1, State: StateClosed, MaxSizeBytes: 5 << 30, CreatedUnixMs: 1795245855432, BCSID: 1234}
	want := unhex(t, `02 02 01 00 00 00 00 00 00 00 00 00 00 40 01 00
		00 00 c8 d2 fd fc a1 01 00 00 d2 04 00 00 00 00 00 00 30 f5 6b ba`)
	if got := encodeContainerRecord(r); !bytes.Equal(got, want) {
		t.Fatalf("version 2 record:\n% x\nwant\n% x", got, want)
	}
	got, err := decodeContainerRecord(want)
	if err != nil || got != r {
		t.Fatalf("decode version 2: %+v, %v", got, err)
	}
	v1 := unhex(t, `01 01 01 00 00 00 00 00 00 00 00 00 00 40 01 00
		00 00 c8 d2 fd fc a1 01 00 00 58 b3 3d 84`)
	got, err = decodeContainerRecord(v1)
	if err != nil || got != (containerRecord{ID: 1, State: StateOpen, MaxSizeBytes: 5 << 30, CreatedUnixMs: 1795245855432}) {
		t.Fatalf("decode version 1: %+v, %v", got, err)
	}
	// A version byte that does not match the length is corrupt, its CRC
	// right or not.
	bad := bytes.Clone(v1)
	bad[0] = 2
	sealRecord(bad[:containerRecordSizeV1-4], bad)
	wantErr(t, func() error { _, err := decodeContainerRecord(bad); return err }(), ErrCorrupt)
	if !bytes.Equal(encodeContainerRecordV1(got), v1) {
		t.Fatal("the test's version 1 encoder does not give the FORMAT.md bytes")
	}
}

// encodeContainerRecordV1 is the version 1 layout (30 bytes, no BCSID),
// which the engine no longer writes but still reads.
func encodeContainerRecordV1(r containerRecord) []byte {
	b := make([]byte, containerRecordSizeV1)
	b[0] = 1
	b[1] = byte(r.State)
	binary.LittleEndian.PutUint64(b[2:], uint64(r.ID))
	binary.LittleEndian.PutUint64(b[10:], r.MaxSizeBytes)
	binary.LittleEndian.PutUint64(b[18:], r.CreatedUnixMs)
	return sealRecord(b[:containerRecordSizeV1-4], b)
}

// TestReplayOfDeletedBlockAfterFailedAdopt: after a restart, the recovery
// tries to adopt the log's WriteChunk of a block deleted since (its file
// is gone: the adoption fails), then raft re-applies the block's committed
// PutBlock, below the container's BCSID. The replay must see a block
// deleted since and change nothing. Before, the failed adoption left an
// empty block state that hid the deletion: the replay failed with "not
// found", and the pipeline took its replica for lost — every datanode
// restarted after kill -9 left its pipelines (found by spindle bench
// chaos, docs/CHAOS_FINDINGS.md §1).
func TestReplayOfDeletedBlockAfterFailedAdopt(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1))
	gone := writeBlock(t, e, BlockID{Container: 1, Local: 2}, 200)
	mustNo(t, e.PutBlock(gone, 8))
	mustNo(t, e.DeleteBlock(gone.ID))
	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: 3}, 100), 10))
	mustNo(t, e.Sync())
	mustNo(t, e.Close())
	e = openMem(t, fs)
	defer closeT(t, e)
	if err := e.AdoptChunk(gone.ID, 0, 200, testBPC, gone.Chunks[0].Checksums); err == nil {
		t.Fatal("a chunk of a deleted block was adopted")
	}
	if err := e.PutBlock(gone, 8); err != nil {
		t.Fatalf("replay of the deleted block's put: %v", err)
	}
	if _, err := e.GetBlock(gone.ID); err == nil {
		t.Fatal("the replay brought the deleted block back")
	}
	// The same after a CheckWrite looked at the block.
	if _, err := e.CheckWrite(gone.ID, 0, 200, testBPC, gone.Chunks[0].Checksums); err != nil {
		t.Fatalf("check write: %v", err)
	}
	if err := e.PutBlock(gone, 8); err != nil {
		t.Fatalf("replay after a check: %v", err)
	}
}
