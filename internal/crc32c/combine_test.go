package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

var castagnoli = Table

// TestCRCCombine: the combination of two parts' CRC32C is the CRC32C of
// the whole, for every split of random data (lengths 0 and 1 included),
// and the table form of a piece shift agrees with it.
func TestCRCCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 70000)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 1, 2, 7, 8, 100, 4096, 16384, 16385, 70000} {
		whole := crc32.Checksum(data[:n], castagnoli)
		for _, split := range []int{0, 1, n / 3, n / 2, n - 1, n} {
			if split < 0 || split > n {
				continue
			}
			a := crc32.Checksum(data[:split], castagnoli)
			b := crc32.Checksum(data[split:n], castagnoli)
			if got := Combine(a, b, uint64(n-split)); got != whole {
				t.Fatalf("n %d split %d: combined %08x, want %08x", n, split, got, whole)
			}
			if got := NewShift(uint64(n-split)).Apply(a) ^ b; got != whole {
				t.Fatalf("n %d split %d: table shift %08x, want %08x", n, split, got, whole)
			}
		}
	}
}
