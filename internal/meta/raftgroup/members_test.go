package raftgroup

import (
	"encoding/binary"
	"maps"
	"testing"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// TestMemberSetRecord: the member set's record (FORMAT.md §13.5) keeps
// its learners (version 2), and a version 1 record (voters only, written
// before learners) still reads; a flipped byte is refused.
func TestMemberSetRecord(t *testing.T) {
	m := map[uint64]string{1: "a:1", 2: "b:2", 4: "d:4"}
	l := map[uint64]bool{4: true}
	b := encodeMembers(m, l)
	gm, gl, err := decodeMembers(b)
	if err != nil || !maps.Equal(gm, m) || !maps.Equal(gl, l) {
		t.Fatalf("round trip: %v %v %v, want %v %v", gm, gl, err, m, l)
	}
	v1 := []byte{membersVersionVoters}
	v1 = binary.LittleEndian.AppendUint32(v1, 1)
	v1 = binary.LittleEndian.AppendUint64(v1, 7)
	v1 = binary.LittleEndian.AppendUint16(v1, 3)
	v1 = append(v1, "g:7"...)
	v1 = binary.LittleEndian.AppendUint32(v1, crc32c.Checksum(v1))
	gm, gl, err = decodeMembers(v1)
	if err != nil || !maps.Equal(gm, map[uint64]string{7: "g:7"}) || len(gl) != 0 {
		t.Fatalf("version 1: %v %v %v", gm, gl, err)
	}
	b[9] ^= 1
	if _, _, err := decodeMembers(b); err == nil {
		t.Fatal("a flipped byte was read")
	}
}
