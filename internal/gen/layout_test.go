package gen

import (
	"slices"
	"testing"
)

// TestLayout: walking the stream, blocks tile every key exactly, never
// cross a container, never pass the block size; each container's blocks
// are numbered from 1; every node holds 3 of every N containers, on the
// members of the container's pipeline.
func TestLayout(t *testing.T) {
	for _, cfg := range []Config{
		{SizeBytes: 1000, KeySizeBytes: 300, ContainerSizeBytes: 256, BlockSizeBytes: 100, Datanodes: 4},
		{SizeBytes: 1000, KeySizeBytes: 1000, ContainerSizeBytes: 1000, BlockSizeBytes: 1000, Datanodes: 3},
		{SizeBytes: 999, KeySizeBytes: 64, ContainerSizeBytes: 100, BlockSizeBytes: 100, Datanodes: 5},
		{SizeBytes: 10, KeySizeBytes: 64, ContainerSizeBytes: 8, BlockSizeBytes: 8, Datanodes: 9},
	} {
		l := newLayout(&cfg)
		keyBytes := make([]uint64, l.keys)
		perNode := map[uint64]int{}
		for c := 1; c <= l.containers; c++ {
			lo, hi := l.containerRange(c)
			m := l.members(c)
			if len(m) != 3 || m[0] == m[1] || m[1] == m[2] || !slices.IsSorted(m) {
				t.Fatalf("%+v: container %d members %v", cfg, c, m)
			}
			for _, n := range m {
				perNode[n]++
			}
			for pos := lo; pos < hi; {
				key, off, n := l.blockAt(pos)
				if n == 0 || n > cfg.BlockSizeBytes || pos+n > hi {
					t.Fatalf("%+v: block at %d: %d bytes, container %d ends at %d", cfg, pos, n, c, hi)
				}
				if off != keyBytes[key] || uint64(key)*cfg.KeySizeBytes+off != pos {
					t.Fatalf("%+v: block at %d: key %d offset %d, the key's bytes so far %d", cfg, pos, key, off, keyBytes[key])
				}
				keyBytes[key] += n
				if keyBytes[key] > l.keyLen(key) {
					t.Fatalf("%+v: key %d passes its length", cfg, key)
				}
				pos += n
			}
		}
		var total uint64
		for k, b := range keyBytes {
			if b != l.keyLen(k) {
				t.Fatalf("%+v: key %d: %d bytes in blocks, length %d", cfg, k, b, l.keyLen(k))
			}
			total += b
		}
		if total != cfg.SizeBytes {
			t.Fatalf("%+v: %d bytes in keys", cfg, total)
		}
		if l.containers >= cfg.Datanodes && l.containers%cfg.Datanodes == 0 {
			for n := uint64(1); n <= uint64(cfg.Datanodes); n++ {
				if perNode[n] != 3*l.containers/cfg.Datanodes {
					t.Fatalf("%+v: node %d holds %d of %d containers", cfg, n, perNode[n], l.containers)
				}
			}
		}
	}
}
