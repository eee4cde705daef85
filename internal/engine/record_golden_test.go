package engine

import (
	"bytes"
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/goldenhex"
)

// The golden-byte tests pin the on-disk records byte for byte to the worked
// examples of docs/FORMAT.md §2-§5 (which were read back from a real
// engine's volume). A round trip alone cannot catch a change made to an
// encoder and its decoder together; these can. A failure here means the
// disk format changed: old volumes would no longer read. If that is
// intended, it needs a new format version, not a new golden value.

// golden and checkGolden: the helpers shared by every golden-byte test.
var (
	golden      = goldenhex.Decode
	checkGolden = goldenhex.Check
)

// TestVolumeRecordGolden: docs/FORMAT.md §2.
func TestVolumeRecordGolden(t *testing.T) {
	want := golden(t,
		"53 50 4e 44 4c 56 4f 4c", // magic SPNDLVOL
		"01 00 00 00",             // format version 1
		"5f 45 af 6c 8b 16 fa ac 85 a7 47 31 05 8a 4b 2b", // UUID
		"c2 d2 fd fc a1 01 00 00",                         // created 1795245855426 ms
		"45 6e c9 3f",                                     // CRC32C 0x3fc96e45 of bytes 0..35
	)
	in := volumeRecord{
		FormatVersion: 1,
		UUID:          [16]byte{0x5f, 0x45, 0xaf, 0x6c, 0x8b, 0x16, 0xfa, 0xac, 0x85, 0xa7, 0x47, 0x31, 0x05, 0x8a, 0x4b, 0x2b},
		CreatedUnixMs: 1795245855426,
	}
	checkGolden(t, "volume record", encodeVolumeRecord(in), want)
	got, err := decodeVolumeRecord(want)
	if err != nil || got != in {
		t.Fatalf("decode of the golden volume record: %+v, %v; want %+v", got, err, in)
	}
}

// TestKeyGolden: docs/FORMAT.md §3.
func TestKeyGolden(t *testing.T) {
	ck := golden(t, "43", "00 00 00 00 00 00 00 01") // 'C' | container 1 BE
	checkGolden(t, "container key", containerKey(1), ck)
	if id, ok := decodeContainerKey(ck); !ok || id != 1 {
		t.Fatalf("decode of the golden container key: %d, %v", id, ok)
	}
	bk := golden(t, "42", "00 00 00 00 00 00 00 01", "00 00 00 00 00 00 00 07") // 'B' | 1 | 7, BE
	b := BlockID{Container: 1, Local: 7}
	checkGolden(t, "block key", blockKey(b), bk)
	if got, ok := decodeBlockKey(bk); !ok || got != b {
		t.Fatalf("decode of the golden block key: %v, %v", got, ok)
	}
}

// TestContainerRecordGolden: docs/FORMAT.md §4, and the state byte of every
// state.
func TestContainerRecordGolden(t *testing.T) {
	want := golden(t,
		"02",                      // record version 2
		"01",                      // state OPEN
		"01 00 00 00 00 00 00 00", // container ID 1
		"00 00 00 40 01 00 00 00", // max size 5 GiB
		"c8 d2 fd fc a1 01 00 00", // created 1795245855432 ms
		"00 00 00 00 00 00 00 00", // BCSID 0
		"3c e3 cf c9",             // CRC32C of bytes 0..33
	)
	in := containerRecord{ID: 1, State: StateOpen, MaxSizeBytes: 5 << 30, CreatedUnixMs: 1795245855432}
	checkGolden(t, "container record", encodeContainerRecord(in), want)
	got, err := decodeContainerRecord(want)
	if err != nil || got != in {
		t.Fatalf("decode of the golden container record: %+v, %v; want %+v", got, err, in)
	}
	// Version 1 (before the BCSID) is still read, as BCSID 0.
	v1 := golden(t,
		"01",                      // record version 1
		"01",                      // state OPEN
		"01 00 00 00 00 00 00 00", // container ID 1
		"00 00 00 40 01 00 00 00", // max size 5 GiB
		"c8 d2 fd fc a1 01 00 00", // created 1795245855432 ms
		"58 b3 3d 84",             // CRC32C 0x843db358 of bytes 0..25
	)
	if got, err := decodeContainerRecord(v1); err != nil || got != in {
		t.Fatalf("decode of the golden version-1 container record: %+v, %v; want %+v", got, err, in)
	}
	for s, b := range map[ContainerState]byte{StateOpen: 1, StateClosed: 2, StateUnhealthy: 3, StateDeleting: 4} {
		in.State = s
		if enc := encodeContainerRecord(in); enc[1] != b {
			t.Fatalf("state %v encodes as %d, the format says %d", s, enc[1], b)
		}
	}
}

// TestBlockRecordGolden: docs/FORMAT.md §5, block 1/7 with chunk 0 = 1000
// bytes of 'a' (pieces of 512 and 488 bytes) and chunk 1 = 100 bytes of 'b'.
func TestBlockRecordGolden(t *testing.T) {
	want := golden(t,
		"01",                      // record version 1
		"01 00 00 00 00 00 00 00", // container ID 1
		"07 00 00 00 00 00 00 00", // local block ID 7
		"00 02 00 00",             // bytes per checksum 512
		"4c 04 00 00 00 00 00 00", // block length 1100
		"02 00 00 00",             // chunk count 2
		"e8 03 00 00",             // chunk 0 length 1000
		"1f a6 32 6f",             //   piece 0 CRC32C 0x6f32a61f
		"9e d0 78 b8",             //   piece 1 CRC32C 0xb878d09e
		"64 00 00 00",             // chunk 1 length 100
		"db 06 7e aa",             //   piece 0 CRC32C 0xaa7e06db
		"2d df ac 91",             // CRC32C 0x91acdf2d of bytes 0..52
	)
	// The piece checksums are those of the data the example describes.
	a, b := bytes.Repeat([]byte("a"), 1000), bytes.Repeat([]byte("b"), 100)
	sums := []uint32{crc32c.Checksum(a[:512]), crc32c.Checksum(a[512:]), crc32c.Checksum(b)}
	if sums[0] != 0x6f32a61f || sums[1] != 0xb878d09e || sums[2] != 0xaa7e06db {
		t.Fatalf("piece checksums of the example data: %08x", sums)
	}
	in := &BlockData{ID: BlockID{Container: 1, Local: 7}, BytesPerChecksum: 512, Length: 1100, Chunks: []ChunkInfo{
		{Offset: 0, Length: 1000, Checksums: sums[0:2]},
		{Offset: 1000, Length: 100, Checksums: sums[2:3]},
	}}
	if len(want) != 57 {
		t.Fatalf("golden block record is %d bytes, the format says 57", len(want))
	}
	checkGolden(t, "block record", encodeBlockRecord(in), want)
	got, err := decodeBlockRecord(want)
	if err != nil {
		t.Fatalf("decode of the golden block record: %v", err)
	}
	if got.ID != in.ID || got.BytesPerChecksum != in.BytesPerChecksum || got.Length != in.Length || len(got.Chunks) != len(in.Chunks) {
		t.Fatalf("decode of the golden block record: %+v, want %+v", got, in)
	}
	for i := range in.Chunks {
		g, w := got.Chunks[i], in.Chunks[i]
		if g.Offset != w.Offset || g.Length != w.Length || !slices.Equal(g.Checksums, w.Checksums) {
			t.Fatalf("decoded chunk %d: %+v, want %+v", i, g, w)
		}
	}
}
