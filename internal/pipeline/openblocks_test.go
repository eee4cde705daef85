package pipeline

import (
	"math/rand/v2"
	"testing"
)

// TestOpenBlocksLowest drives openBlocks with writes, checkpoint and
// final PutBlocks and deletions of a few blocks, in log order, and checks
// lowest() after every step against a model that keeps every open chunk
// in a plain list: the first index of a chunk that no PutBlock covers.
// Blocks grow to thousands of chunks (many openSegmentChunks segments)
// between deletions. Each block's first open chunk is checked too (a
// block's chunks missing from the map hide behind another's lowest).
func TestOpenBlocksLowest(t *testing.T) {
	type chunk struct{ block, end, index uint64 }
	rng := rand.New(rand.NewPCG(7, 11))
	ob := newOpenBlocks()
	var model []chunk
	ends := map[uint64]uint64{} // block → bytes written
	for index := uint64(1); index <= 40000; index++ {
		b := uint64(rng.IntN(4))
		switch r := rng.IntN(1000); {
		case r < 960: // a chunk of 1..3 units
			n := uint64(1 + rng.IntN(3))
			ob.wrote(1, b, ends[b], n, index)
			ends[b] += n
			model = append(model, chunk{b, ends[b], index})
		case r < 998: // a PutBlock of some prefix written so far
			length := uint64(0)
			if ends[b] > 0 {
				length = uint64(rng.Int64N(int64(ends[b]) + 1))
			}
			ob.committed(1, b, length)
			kept := model[:0]
			for _, c := range model {
				if c.block != b || c.end > length {
					kept = append(kept, c)
				}
			}
			model = kept
		default: // DeleteBlock: a new block under that name starts from 0
			ob.deleted(1, b)
			ends[b] = 0
			kept := model[:0]
			for _, c := range model {
				if c.block != b {
					kept = append(kept, c)
				}
			}
			model = kept
		}
		want := uint64(0)
		first := map[uint64]uint64{} // block → its first open chunk's index
		for _, c := range model {
			if want == 0 || c.index < want {
				want = c.index
			}
			if f, ok := first[c.block]; !ok || c.index < f {
				first[c.block] = c.index
			}
		}
		if got := ob.lowest(); got != want {
			t.Fatalf("after index %d: lowest %d, want %d", index, got, want)
		}
		if len(ob.open) != len(first) {
			t.Fatalf("after index %d: %d blocks open, want %d", index, len(ob.open), len(first))
		}
		for b, f := range first {
			q := ob.open[[2]uint64{1, b}]
			if q == nil || q.segs[0][q.head].index != f {
				t.Fatalf("after index %d: block %d's first open chunk is not index %d", index, b, f)
			}
		}
	}
}
