package gen

import (
	"bytes"
	"testing"
)

// TestContentRanges: any range of a key, at any alignment, is the same
// bytes as that range of the whole key; keys and seeds differ.
func TestContentRanges(t *testing.T) {
	whole := make([]byte, 1000)
	Content(42, 3, 0, whole)
	for _, r := range [][2]int{{0, 0}, {0, 1}, {1, 2}, {3, 5}, {7, 9}, {8, 16}, {5, 995}, {13, 1000}, {999, 1000}} {
		part := make([]byte, r[1]-r[0])
		Content(42, 3, uint64(r[0]), part)
		if !bytes.Equal(part, whole[r[0]:r[1]]) {
			t.Fatalf("range %v differs from the whole key's", r)
		}
	}
	other := make([]byte, len(whole))
	Content(42, 4, 0, other)
	if bytes.Equal(other, whole) {
		t.Fatal("keys 3 and 4 have the same content")
	}
	Content(43, 3, 0, other)
	if bytes.Equal(other, whole) {
		t.Fatal("seeds 42 and 43 give the same content")
	}
	if KeyName(7) != "key-00000007" || KeyName(12) <= KeyName(11) {
		t.Fatalf("key names %q %q %q", KeyName(7), KeyName(11), KeyName(12))
	}
}

func BenchmarkContent(b *testing.B) {
	buf := make([]byte, 4<<20)
	b.SetBytes(int64(len(buf)))
	for i := 0; b.Loop(); i++ {
		Content(1, i, 0, buf)
	}
}
