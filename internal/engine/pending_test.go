package engine

import (
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// A read takes the block's layout under the container's lock and verifies
// the bytes against it after letting go (ReadChunk): the checksums it was
// handed must not change when a PutBlock trims the committed chunks from
// the pending list, nor when more chunks are written. They are kept in one
// array per block (blockState.sums); a trim that shifted that array down
// in place would hand the reader the next chunks' checksums.
func TestPendingChecksumsHandedOutStayUnchanged(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 7}
	bd := writeBlock(t, e, b, 1024, 2048, 1536)

	c, err := e.lookup(1)
	mustNo(t, err)
	layout, _, err := e.readableChunks(c, b)
	mustNo(t, err)
	want := make([][]uint32, len(layout))
	for i := range layout {
		if !sameChunk(&layout[i], &bd.Chunks[i]) {
			t.Fatalf("layout chunk %d: %+v, written %+v", i, layout[i], bd.Chunks[i])
		}
		want[i] = slices.Clone(layout[i].Checksums)
	}

	// Commit the first chunk (trims it from the pending list), then write
	// more: the layout handed out before must read as it did.
	first := &BlockData{ID: b, Length: bd.Chunks[0].Length, BytesPerChecksum: testBPC, Chunks: bd.Chunks[:1]}
	mustNo(t, e.PutBlock(first, 1))
	if _, err := writeChunk(e, b, bd.Length, 4096); err != nil {
		t.Fatal(err)
	}
	for i := range layout {
		if !slices.Equal(layout[i].Checksums, want[i]) {
			t.Fatalf("chunk %d's checksums changed after a trim and a write: %x, were %x", i, layout[i].Checksums, want[i])
		}
	}

	// The pending chunks left are the written ones, checksums included.
	layout, _, err = e.readableChunks(c, b)
	mustNo(t, err)
	if len(layout) != 4 {
		t.Fatalf("layout has %d chunks, want 4", len(layout))
	}
	for i := 1; i < 3; i++ {
		if !sameChunk(&layout[i], &bd.Chunks[i]) {
			t.Fatalf("after the trim, chunk %d: %+v, written %+v", i, layout[i], bd.Chunks[i])
		}
	}
	mustNo(t, e.PutBlock(&BlockData{ID: b, Length: bd.Length, BytesPerChecksum: testBPC, Chunks: bd.Chunks}, 2))
}
