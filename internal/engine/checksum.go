package engine

import (
	"fmt"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// Checksum limits. A checksum covers one piece of BytesPerChecksum bytes of a
// chunk (the last piece may be shorter); pieces start at the chunk's first byte.
const (
	DefaultBytesPerChecksum = 16 << 10
	MinBytesPerChecksum     = 512
	MaxBytesPerChecksum     = 16 << 20
	// MaxChunkSizeBytes bounds one WriteChunk; it also bounds the memory a
	// request may pin.
	MaxChunkSizeBytes = 64 << 20
)

// CRC32C returns the CRC32C (Castagnoli) of p.
func CRC32C(p []byte) uint32 { return crc32c.Checksum(p) }

// PieceCount is the number of checksums of a chunk of lengthBytes.
func PieceCount(lengthBytes uint64, bytesPerChecksum uint32) int {
	return int((lengthBytes + uint64(bytesPerChecksum) - 1) / uint64(bytesPerChecksum))
}

// ComputeChecksums computes the CRC32C of every bytesPerChecksum piece of
// data, appending to dst. This is the writer's side: clients call it.
func ComputeChecksums(dst []uint32, data []byte, bytesPerChecksum uint32) []uint32 {
	bpc := int(bytesPerChecksum)
	for off := 0; off < len(data); off += bpc {
		end := min(off+bpc, len(data))
		dst = append(dst, CRC32C(data[off:end]))
	}
	return dst
}

// VerifyPieces checks data (which starts at a piece boundary) against sums,
// which must hold a checksum for each of its pieces; it returns the index
// of the first bad piece, or -1. This is the reader's side: the engine and
// every client of a stream of checked pieces call it.
func VerifyPieces(data []byte, sums []uint32, bytesPerChecksum uint32) int {
	bpc := int(bytesPerChecksum)
	for i, off := 0, 0; off < len(data); i, off = i+1, off+bpc {
		end := min(off+bpc, len(data))
		if CRC32C(data[off:end]) != sums[i] {
			return i
		}
	}
	return -1
}

func validBytesPerChecksum(bpc uint32) error {
	if bpc < MinBytesPerChecksum || bpc > MaxBytesPerChecksum {
		return fmt.Errorf("%w: bytes per checksum %d outside [%d, %d]", ErrInvalid, bpc, MinBytesPerChecksum, MaxBytesPerChecksum)
	}
	return nil
}
