package ec

import (
	"fmt"
	"io"

	"github.com/klauspost/reedsolomon"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// Rebuild writes shard index of the set whole to dst — header, cells,
// checksum table, as Encode wrote it — each stripe's cell reconstructed
// from k other shards whose cells verify against their CRC32C (the
// shard's own copy, if any, is not read). ErrUnrecoverable: a stripe
// has fewer than k good shards besides it. One stripe in memory at a time.
func (s *Set) Rebuild(index int, dst io.Writer) error {
	if index < 0 || index >= s.p.Shards() {
		return fmt.Errorf("ec: rebuild shard %d of a %d+%d set", index, s.p.Data, s.p.Parity)
	}
	h := s.h
	h.index = index
	if _, err := dst.Write(h.encode()); err != nil {
		return fmt.Errorf("ec: write the rebuilt shard: %w", err)
	}
	cp := s.stripePool.Get().(*[][]byte)
	defer s.stripePool.Put(cp)
	all := *cp
	cells := make([][]byte, len(all))
	required := make([]bool, len(all))
	required[index] = true
	stripes := h.shardBytes / int64(s.p.CellBytes)
	crcs := make([]uint32, 0, h.shardBytes/ChunkBytes)
	for stripe := range stripes {
		good := s.gather(all, cells, stripe, index)
		if good < s.p.Data {
			return fmt.Errorf("%w: stripe %d of container %d: %d good shards besides shard %d, %d needed", ErrUnrecoverable, stripe, h.container, good, index, s.p.Data)
		}
		cells[index] = all[index][:0]
		if err := s.enc.ReconstructSome(cells, required); err != nil {
			return fmt.Errorf("ec: reconstruct shard %d, stripe %d: %w", index, stripe, err)
		}
		c := cells[index]
		if len(c) != s.p.CellBytes {
			return fmt.Errorf("ec: reconstruct shard %d, stripe %d: %d bytes: %w", index, stripe, len(c), reedsolomon.ErrShardSize)
		}
		for j := 0; j < len(c); j += ChunkBytes {
			crcs = append(crcs, crc32c.Checksum(c[j:j+ChunkBytes]))
		}
		if _, err := dst.Write(c); err != nil {
			return fmt.Errorf("ec: write the rebuilt shard: %w", err)
		}
	}
	if _, err := dst.Write(appendTable(crcs)); err != nil {
		return fmt.Errorf("ec: write the rebuilt shard: %w", err)
	}
	return nil
}

// gather reads stripe's cells of up to k shards other than skip whose
// 16 KiB chunks verify into all (cells[i] = all[i] for each, nil for the
// others) and returns how many.
func (s *Set) gather(all, cells [][]byte, stripe int64, skip int) int {
	good := 0
	base := stripe * int64(s.p.CellBytes)
	for i, r := range s.shards {
		cells[i] = nil
		if r == nil || i == skip || good == s.p.Data {
			continue
		}
		c := all[i][:s.p.CellBytes]
		if _, err := r.ReadAt(c, headerBytes+base); err != nil {
			continue
		}
		ok := true
		first := base / ChunkBytes
		for k := 0; k < len(c); k += ChunkBytes {
			if crc32c.Checksum(c[k:k+ChunkBytes]) != s.crcs[i][first+int64(k/ChunkBytes)] {
				ok = false
				break
			}
		}
		if ok {
			cells[i] = c
			good++
		}
	}
	for i := range cells {
		if cells[i] == nil {
			cells[i] = all[i][:0]
		}
	}
	return good
}
