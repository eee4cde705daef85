package ec

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/reedsolomon"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// Encode reads a container's logical bytes from src and writes its k+m
// shards to dst (len(dst) == p.Shards(), in shard order): one pass, one
// stripe (k cells) in memory at a time. The shards are complete once it
// returns nil; making them durable is the writers' business. They are of
// the container's generation 0 (its conversion); EncodeGeneration writes
// a later one (a compaction).
func Encode(src io.ReaderAt, logical int64, p Policy, container uint64, dst []io.Writer) error {
	return EncodeGeneration(src, logical, p, container, 0, dst)
}

// EncodeGeneration is Encode of generation gen of the container: the
// shards' headers name it, so that shards of two generations never make
// one set (Open).
func EncodeGeneration(src io.ReaderAt, logical int64, p Policy, container uint64, gen uint32, dst []io.Writer) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(dst) != p.Shards() {
		return fmt.Errorf("ec: %d shard writers for %d shards", len(dst), p.Shards())
	}
	enc, err := reedsolomon.New(p.Data, p.Parity, reedsolomon.WithMaxGoroutines(1)) // a background conversion: one core
	if err != nil {
		return fmt.Errorf("ec: %w", err)
	}
	h := header{data: p.Data, parity: p.Parity, cellBytes: p.CellBytes, container: container, generation: gen, logical: logical, shardBytes: p.ShardDataBytes(logical)}
	for i, w := range dst {
		h.index = i
		if _, err := w.Write(h.encode()); err != nil {
			return fmt.Errorf("ec: write shard %d: %w", i, err)
		}
	}
	cells := make([][]byte, p.Shards())
	buf := make([]byte, p.Shards()*p.CellBytes)
	for i := range cells {
		cells[i] = buf[i*p.CellBytes : (i+1)*p.CellBytes : (i+1)*p.CellBytes]
	}
	crcs := make([][]uint32, p.Shards())
	for off := int64(0); off < logical; off += p.StripeBytes() {
		for i := range p.Data {
			c := cells[i]
			start := off + int64(i)*int64(p.CellBytes)
			n := 0
			if start < logical {
				n, err = src.ReadAt(c[:min(int64(len(c)), logical-start)], start)
				if err != nil && !(errors.Is(err, io.EOF) && int64(n) == min(int64(len(c)), logical-start)) {
					return fmt.Errorf("ec: read the container at %d: %w", start, err)
				}
			}
			clear(c[n:])
		}
		if err := enc.Encode(cells); err != nil {
			return fmt.Errorf("ec: encode: %w", err)
		}
		for i, c := range cells {
			for j := 0; j < len(c); j += ChunkBytes {
				crcs[i] = append(crcs[i], crc32c.Checksum(c[j:j+ChunkBytes]))
			}
			if _, err := dst[i].Write(c); err != nil {
				return fmt.Errorf("ec: write shard %d: %w", i, err)
			}
		}
	}
	for i, w := range dst {
		if _, err := w.Write(appendTable(crcs[i])); err != nil {
			return fmt.Errorf("ec: write shard %d: %w", i, err)
		}
	}
	return nil
}
