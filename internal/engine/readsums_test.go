package engine

import (
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// storedSums hands back the stored checksums exactly when the range lies
// on the pieces' grid, and then exactly the pieces of the range.
func TestStoredSumsOnlyOnTheGrid(t *testing.T) {
	// bpc 512: chunk a of 1000 bytes (pieces 512, 488), chunk b of 100;
	// chunk c of 1024 (two whole pieces), chunk d of 512.
	chunks := []ChunkInfo{
		{Offset: 0, Length: 1000, Checksums: []uint32{0xa0, 0xa1}},
		{Offset: 1000, Length: 100, Checksums: []uint32{0xb0}},
	}
	whole := []ChunkInfo{
		{Offset: 0, Length: 1024, Checksums: []uint32{0xc0, 0xc1}},
		{Offset: 1024, Length: 512, Checksums: []uint32{0xd0}},
		{Offset: 1536, Length: 700, Checksums: []uint32{0xe0, 0xe1}},
	}
	for _, c := range []struct {
		chunks   []ChunkInfo
		off, end uint64
		want     []uint32 // nil: off the grid
	}{
		{chunks, 0, 512, []uint32{0xa0}},
		{chunks, 0, 1000, []uint32{0xa0, 0xa1}},  // ends with the chunk's short piece
		{chunks, 512, 1000, []uint32{0xa1}},      //
		{chunks, 1000, 1100, []uint32{0xb0}},     //
		{chunks, 0, 1100, nil},                   // a's short piece breaks the grid
		{chunks, 100, 512, nil},                  // starts off a boundary
		{chunks, 0, 600, nil},                    // ends inside a piece
		{chunks, 512, 1001, nil},                 // crosses into b after a short piece
		{whole, 512, 1536, []uint32{0xc1, 0xd0}}, // across whole pieces
		{whole, 0, 2236, []uint32{0xc0, 0xc1, 0xd0, 0xe0, 0xe1}},
		{whole, 1024, 2048, []uint32{0xd0, 0xe0}}, // ends on e's first boundary
		{whole, 1024, 2000, nil},                  // ends inside e's second piece
	} {
		got, ok := storedSums(c.chunks, 512, c.off, c.end)
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("[%d,%d): %x (%v), want %x", c.off, c.end, got, ok, c.want)
		}
	}
}

// ReadChunkSums: on the grid, the stored checksums are those of the bytes
// read (as ComputeChecksums finds them); off it, none.
func TestReadChunkSumsMatchTheBytes(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	bd := writeBlock(t, e, b, 4*testBPC, 2*testBPC+100)
	mustNo(t, e.PutBlock(bd, 0))
	for _, r := range [][2]uint64{{0, 4 * testBPC}, {testBPC, 5 * testBPC}, {0, bd.Length}, {4 * testBPC, 2*testBPC + 100}} {
		data, sums, bpc, err := e.ReadChunkSums(b, r[0], r[1], nil)
		mustNo(t, err)
		if bpc != testBPC || !slices.Equal(sums, ComputeChecksums(nil, data, testBPC)) || string(data) != string(content(b, r[0], int(r[1]))) {
			t.Errorf("range %v: bpc %d, %d sums, want the bytes' own", r, bpc, len(sums))
		}
	}
	data, sums, bpc, err := e.ReadChunkSums(b, 1, testBPC, nil)
	mustNo(t, err)
	if sums != nil || bpc != 0 || string(data) != string(content(b, 1, testBPC)) {
		t.Errorf("off the grid: %d sums, bpc %d", len(sums), bpc)
	}
}
