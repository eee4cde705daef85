package engine

import (
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestAdoptChunkAfterRestart: chunks written and synced past the block's last
// PutBlock are not known after a restart until adopted (as the pipeline does
// from the raft log's WriteChunk headers); adopted, they read back and can be
// committed. A chunk whose bytes are not in the file, or do not match, is
// refused and changes nothing.
func TestAdoptChunkAfterRestart(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 7}
	bd := writeBlock(t, e, b, 1000, 1500)
	mustNo(t, e.PutBlock(bd, 0))
	tail := writeBlock(t, e, BlockID{Container: 1, Local: 99}, 1) // unrelated block, no put
	_ = tail
	c3, err := writeChunk(e, b, 2500, 700)
	mustNo(t, err)
	c4, err := writeChunk(e, b, 3200, 300)
	mustNo(t, err)
	mustNo(t, e.Sync())
	mustNo(t, e.Close())

	e = openMem(t, fs)
	defer closeT(t, e)
	if _, err := e.ReadChunk(b, 2500, 700, nil); err == nil {
		t.Fatal("chunk past the last PutBlock readable before adoption")
	}
	// Wrong checksums: refused, nothing changes.
	bad := append([]uint32(nil), c3.Checksums...)
	bad[0] ^= 1
	wantErr(t, e.AdoptChunk(b, 2500, 700, testBPC, bad), ErrChecksumMismatch)
	// A chunk past the end of the file: refused.
	wantErr(t, e.AdoptChunk(b, 3500, 10, testBPC, ComputeChecksums(nil, make([]byte, 10), testBPC)), ErrNotFound)
	// A committed chunk is an identical replay.
	mustNo(t, e.AdoptChunk(b, 0, 1000, testBPC, bd.Chunks[0].Checksums))
	mustNo(t, e.AdoptChunk(b, 2500, 700, testBPC, c3.Checksums))
	mustNo(t, e.AdoptChunk(b, 3200, 300, testBPC, c4.Checksums))
	mustNo(t, e.AdoptChunk(b, 3200, 300, testBPC, c4.Checksums)) // replay
	checkBlock(t, e, b, 3500)
	bd.Chunks = append(bd.Chunks, c3, c4)
	bd.Length = 3500
	mustNo(t, e.PutBlock(bd, 0))
	got, err := e.GetBlock(b)
	mustNo(t, err)
	if got.Length != 3500 || len(got.Chunks) != 4 {
		t.Fatalf("block after adopt+put: %+v", got)
	}
	// The next write continues after the adopted chunks.
	_, err = writeChunk(e, b, 3500, 100)
	mustNo(t, err)
}
