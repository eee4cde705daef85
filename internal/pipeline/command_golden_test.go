package pipeline

import (
	"bytes"
	"testing"

	"github.com/spindle-store/spindle/internal/goldenhex"
	"github.com/spindle-store/spindle/internal/transport"
)

// TestInlineWriteChunkGolden pins the encoding of a WriteChunk that carries
// its bytes in the entry (kind 5, FORMAT.md §12), and that it decodes back
// to a KindWriteChunk command with Inline set.
func TestInlineWriteChunkGolden(t *testing.T) {
	wc := transport.WriteChunk{PipelineID: 1, ContainerID: 2, LocalID: 3, Offset: 512, Length: 4, BytesPerChecksum: 512, Checksums: []uint32{0x11223344}}
	got := AppendCommand(nil, &Command{Kind: KindWriteChunk, ProposalID: 1<<48 | 7, WriteChunk: wc, Inline: []byte("abcd")})
	want := goldenhex.Decode(t,
		"01",                      // entry format version 1
		"05",                      // kind 5: WriteChunk with its bytes
		"07 00 00 00 00 00 01 00", // proposal ID 1<<48 | 7
		"14",                      // header length 20 (uvarint)
		"10 01",                   // WriteChunk.pipeline_id (field 2) = 1
		"18 02",                   // container_id (field 3) = 2
		"20 03",                   // local_id (field 4) = 3
		"28 80 04",                // offset (field 5) = 512
		"30 04",                   // length (field 6) = 4
		"38 80 04",                // bytes_per_checksum (field 7) = 512
		"42 04 44 33 22 11",       // checksums (field 8, packed fixed32) = [0x11223344]
		"04",                      // chunk length 4 (uvarint), = length
		"61 62 63 64",             // the chunk's bytes "abcd"
	)
	goldenhex.Check(t, "inline WriteChunk entry", got, want)

	cmds, err := DecodeCommands(want)
	if err != nil || len(cmds) != 1 {
		t.Fatalf("decode: %d commands, %v", len(cmds), err)
	}
	c := cmds[0]
	if c.Kind != KindWriteChunk || c.ProposalID != 1<<48|7 || !bytes.Equal(c.Inline, []byte("abcd")) ||
		c.WriteChunk.Offset != 512 || c.WriteChunk.Length != 4 || len(c.WriteChunk.Checksums) != 1 || c.WriteChunk.Checksums[0] != 0x11223344 {
		t.Fatalf("decoded %+v", c)
	}
	// A header-only WriteChunk of the same chunk is kind 1, no bytes.
	plain := AppendCommand(nil, &Command{Kind: KindWriteChunk, ProposalID: 1<<48 | 7, WriteChunk: wc})
	goldenhex.Check(t, "header-only WriteChunk entry", plain, goldenhex.Decode(t, "01", "01", "07 00 00 00 00 00 01 00", "14", "10 01 18 02 20 03 28 80 04 30 04 38 80 04 42 04 44 33 22 11"))
	if cmds, err := DecodeCommands(plain); err != nil || cmds[0].Inline != nil {
		t.Fatalf("header-only decode: inline %v, %v", cmds[0].Inline, err)
	}
}

// TestInlineWriteChunkRefused: a kind-5 command whose bytes do not match
// its header's length, or run past the entry, is ErrBadEntry.
func TestInlineWriteChunkRefused(t *testing.T) {
	good := AppendCommand(nil, &Command{Kind: KindWriteChunk, ProposalID: 9, Inline: []byte("abcd"),
		WriteChunk: transport.WriteChunk{ContainerID: 2, LocalID: 3, Length: 4, BytesPerChecksum: 512, Checksums: []uint32{1}}})
	for name, b := range map[string][]byte{
		"truncated bytes":  good[:len(good)-1],
		"no length":        good[:len(good)-5],
		"length mismatch":  append(append([]byte{}, good[:len(good)-5]...), 3, 'a', 'b', 'c'),
		"trailing garbage": append(append([]byte{}, good...), 0xff),
	} {
		if _, err := DecodeCommands(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
