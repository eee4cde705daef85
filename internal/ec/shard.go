package ec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// A shard, as written by Encode and read by Open (docs/FORMAT.md §16):
//
//	offset  size  field
//	0       8     magic "SPNDSHRD"
//	8       1     version: 1 (generation 0), 2 (a later generation)
//	9       1     data shards k
//	10      1     parity shards m
//	11      1     this shard's index (0..k-1 data, k..k+m-1 parity)
//	12      4     cell bytes (u32 LE, a multiple of 16 KiB)
//	16      8     container ID (u64 LE)
//	24      8     the container's logical bytes (u64 LE)
//	32      8     this shard's cell bytes D (u64 LE: stripes × cell)
//	40      4     version 2: the generation (u32 LE, > 0); version 1: zero
//	44      16    zero
//	60      4     CRC32C of bytes 0..59 (u32 LE)
//	64      D     the cells, stripe after stripe
//	64+D    4·n   CRC32C of each 16 KiB of the cells (n = D / 16 KiB, u32 LE)
//	64+D+4n 4     CRC32C of that table (u32 LE)

// headerBytes is the size of a shard's header.
const headerBytes = 64

var shardMagic = [8]byte{'S', 'P', 'N', 'D', 'S', 'H', 'R', 'D'}

// Shard versions: 1 is a container's first generation (its conversion),
// 2 a later one (a compaction), whose generation is at byte 40; an older
// build refuses version 2, so it never mistakes one generation for
// another.
const (
	shardVersion    = 1
	shardVersionGen = 2
)

// ErrCorrupt: a shard's header or checksum table does not match its CRC,
// or disagrees with the other shards.
var ErrCorrupt = errors.New("ec: corrupt shard")

// header is a shard's header.
type header struct {
	data, parity, index int
	cellBytes           int
	container           uint64
	generation          uint32
	logical, shardBytes int64
}

func (h header) encode() []byte {
	b := make([]byte, headerBytes)
	copy(b, shardMagic[:])
	b[8], b[9], b[10], b[11] = shardVersion, byte(h.data), byte(h.parity), byte(h.index)
	if h.generation > 0 {
		b[8] = shardVersionGen
		binary.LittleEndian.PutUint32(b[40:], h.generation)
	}
	binary.LittleEndian.PutUint32(b[12:], uint32(h.cellBytes))
	binary.LittleEndian.PutUint64(b[16:], h.container)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.logical))
	binary.LittleEndian.PutUint64(b[32:], uint64(h.shardBytes))
	binary.LittleEndian.PutUint32(b[60:], crc32c.Checksum(b[:60]))
	return b
}

func decodeHeader(b []byte) (header, error) {
	if len(b) != headerBytes || [8]byte(b[:8]) != shardMagic {
		return header{}, fmt.Errorf("%w: not a shard header", ErrCorrupt)
	}
	if got, want := crc32c.Checksum(b[:60]), binary.LittleEndian.Uint32(b[60:]); got != want {
		return header{}, fmt.Errorf("%w: header crc %08x, want %08x", ErrCorrupt, got, want)
	}
	if b[8] != shardVersion && b[8] != shardVersionGen {
		return header{}, fmt.Errorf("%w: shard version %d", ErrCorrupt, b[8])
	}
	h := header{data: int(b[9]), parity: int(b[10]), index: int(b[11]), cellBytes: int(binary.LittleEndian.Uint32(b[12:])),
		container: binary.LittleEndian.Uint64(b[16:]), logical: int64(binary.LittleEndian.Uint64(b[24:])),
		shardBytes: int64(binary.LittleEndian.Uint64(b[32:]))}
	if b[8] == shardVersionGen {
		if h.generation = binary.LittleEndian.Uint32(b[40:]); h.generation == 0 {
			return header{}, fmt.Errorf("%w: version 2 shard of generation 0", ErrCorrupt)
		}
	}
	p := Policy{Data: h.data, Parity: h.parity, CellBytes: h.cellBytes}
	if err := p.Validate(); err != nil {
		return header{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if h.index >= h.data+h.parity || h.logical < 0 || h.shardBytes != p.ShardDataBytes(h.logical) {
		return header{}, fmt.Errorf("%w: index %d of %d, %d logical bytes in %d-byte shards", ErrCorrupt, h.index, h.data+h.parity, h.logical, h.shardBytes)
	}
	return h, nil
}

// tableBytes is the size of a shard's checksum table with its CRC.
func (h header) tableBytes() int64 { return 4*(h.shardBytes/ChunkBytes) + 4 }

// ShardBytes is the whole size of a shard of a container of logical
// bytes under p: header, cells, checksum table.
func ShardBytes(p Policy, logical int64) int64 {
	h := header{shardBytes: p.ShardDataBytes(logical)}
	return headerBytes + h.shardBytes + h.tableBytes()
}

// readTable reads and checks a shard's checksum table.
func readTable(r io.ReaderAt, h header) ([]uint32, error) {
	b := make([]byte, h.tableBytes())
	if _, err := r.ReadAt(b, headerBytes+h.shardBytes); err != nil {
		return nil, fmt.Errorf("ec: read the checksum table of shard %d: %w", h.index, err)
	}
	n := len(b) - 4
	if got, want := crc32c.Checksum(b[:n]), binary.LittleEndian.Uint32(b[n:]); got != want {
		return nil, fmt.Errorf("%w: shard %d: checksum table crc %08x, want %08x", ErrCorrupt, h.index, got, want)
	}
	crcs := make([]uint32, n/4)
	for i := range crcs {
		crcs[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return crcs, nil
}

// appendTable is the table of crcs with its CRC.
func appendTable(crcs []uint32) []byte {
	b := make([]byte, 0, 4*len(crcs)+4)
	for _, c := range crcs {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}
