package transport

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// allocated returns the bytes allocated while decoding b into m.
func allocated(m Message, b []byte) (uint64, error) {
	var s1, s2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&s1)
	err := m.Unmarshal(b)
	runtime.ReadMemStats(&s2)
	return s2.TotalAlloc - s1.TotalAlloc, err
}

func field(num protowire.Number, body []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
}

// Hostile headers of up to MaxHeaderBytes: decoding any of them allocates
// at most maxDecodeAmplification × MaxHeaderBytes, or is refused before
// allocating.
func TestDecodeAllocationBound(t *testing.T) {
	const maxDecodeAmplification = 24
	n := MaxHeaderBytes - 64
	packedVarints := append(protowire.AppendVarint(nil, uint64(n)), make([]byte, n)...)
	voters := append(protowire.AppendVarint(nil, uint64(n-32)), make([]byte, n-32)...)
	cases := []struct {
		name    string
		m       Message
		b       []byte
		refused bool
	}{
		{"block of empty chunks", new(PutBlock), field(3, bytes.Repeat([]byte{0x2a, 0x00}, n/2)), false},
		{"response block of empty chunks", new(Response), field(5, bytes.Repeat([]byte{0x2a, 0x00}, n/2)), false},
		{"unpacked checksums", new(WriteChunk), bytes.Repeat([]byte{0x45, 0, 0, 0, 0}, n/5), false},
		{"packed payload lengths", new(RaftMessage), append(field(2, nil), append([]byte{0x1a}, packedVarints...)...), false},
		{"unpacked payload lengths", new(RaftMessage), append(field(2, nil), bytes.Repeat([]byte{0x18, 0x00}, n/2)...), false},
		{"raft: MaxRaftEntries empty entries", new(RaftMessage), field(2, bytes.Repeat([]byte{0x3a, 0x00}, MaxRaftEntries)), false},
		{"raft: too many entries", new(RaftMessage), field(2, bytes.Repeat([]byte{0x3a, 0x00}, n/2)), true},
		{"raft: storage responses", new(RaftMessage), field(2, bytes.Repeat([]byte{0x72, 0x00}, n/2)), true},
		{"raft: snapshot of packed voters", new(RaftMessage), field(2, field(9, field(2, field(1, append([]byte{0x0a}, voters...))))), false},
		{"raft: snapshot of unpacked voters", new(RaftMessage), field(2, field(9, field(2, field(1, bytes.Repeat([]byte{0x08, 0x00}, n/2-16))))), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.b) > MaxHeaderBytes {
				t.Fatalf("test header of %d bytes", len(c.b))
			}
			got, err := allocated(c.m, c.b)
			if c.refused != (err != nil) {
				t.Fatalf("Unmarshal = %v", err)
			}
			if err != nil && !errors.Is(err, ErrBadFrame) {
				t.Fatal(err)
			}
			t.Logf("%d header bytes: %d bytes allocated (%.1f×)", len(c.b), got, float64(got)/float64(len(c.b)))
			if got > maxDecodeAmplification*MaxHeaderBytes {
				t.Fatalf("decoding allocated %d bytes", got)
			}
			if c.refused && got > 64<<10 {
				t.Fatalf("refused after allocating %d bytes", got)
			}
		})
	}
}
