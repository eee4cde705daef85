package ecmeta

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// Prefix is the first byte of the erasure-coding records (docs/FORMAT.md
// §13.3): 'E' 0x00 the cluster's default policy (a bucket configuration
// record, state.BucketConfRecord, whose document is the policy's text),
// 'E' 0x01 | container ID u64 BE an EC container (Record).
const Prefix = 'E'

// DefaultKey is the key of the cluster's default policy.
func DefaultKey() []byte { return []byte{Prefix, 0} }

// ContainerKey is the key of an EC container's record.
func ContainerKey(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte{Prefix, 1}, id) }

// containerKeyBytes is the length of a ContainerKey.
const containerKeyBytes = 10

// recordVersion is the first byte of a Record of generation 0 (its
// conversion's shards); recordVersionGen of a later generation (a
// compaction's), which carries it after the container ID.
const (
	recordVersion    = 1
	recordVersionGen = 2
)

// Bounds of a Record.
const (
	maxShards = 256
	maxBlocks = 1 << 20
)

// Record is an erasure-coded container: its shards' generation (0 from
// its conversion, the next at each compaction), its policy, its logical
// bytes (its blocks one after another, in local ID order), the datanode
// of each shard (Nodes[i] holds shard i) and where each block is.
type Record struct {
	Container  uint64
	Generation uint32
	Converted  time.Time
	Policy     string // ec.Spec's canonical text
	Logical    uint64
	Nodes      []uint64
	Blocks     []ecapi.Block
}

// Encode: version u8 = 1 | container u64 | converted unix ms u64 | policy
// length u16 | policy | logical u64 | shards u16 | node ID u64 × shards |
// blocks u32 | (local u64 | offset u64 | length u64 | crc32c u32) × blocks
// | CRC32C u32 of everything before it. Little-endian. A later generation
// than 0: version u8 = 2 and the generation u32 after the container.
func (r Record) Encode() []byte {
	b := []byte{recordVersion}
	if r.Generation > 0 {
		b[0] = recordVersionGen
	}
	b = binary.LittleEndian.AppendUint64(b, r.Container)
	if r.Generation > 0 {
		b = binary.LittleEndian.AppendUint32(b, r.Generation)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Converted.UnixMilli()))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Policy)))
	b = append(b, r.Policy...)
	b = binary.LittleEndian.AppendUint64(b, r.Logical)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Nodes)))
	for _, n := range r.Nodes {
		b = binary.LittleEndian.AppendUint64(b, n)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Blocks)))
	for _, bl := range r.Blocks {
		b = binary.LittleEndian.AppendUint64(b, bl.Local)
		b = binary.LittleEndian.AppendUint64(b, bl.Offset)
		b = binary.LittleEndian.AppendUint64(b, bl.Length)
		b = binary.LittleEndian.AppendUint32(b, bl.CRC32C)
	}
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

// DecodeRecord decodes a Record strictly (lengths, CRC, policy, shards
// matching the policy, blocks within the logical bytes); an error wraps
// state.ErrCorrupt.
func DecodeRecord(v []byte) (Record, error) {
	bad := func(f string, a ...any) (Record, error) {
		return Record{}, fmt.Errorf("%w: EC container record: %s", state.ErrCorrupt, fmt.Sprintf(f, a...))
	}
	if len(v) < 1+8+8+2+8+2+4+4 {
		return bad("%d bytes", len(v))
	}
	n := len(v) - 4
	if got, want := crc32c.Checksum(v[:n]), binary.LittleEndian.Uint32(v[n:]); got != want {
		return bad("crc %08x, want %08x", got, want)
	}
	b := v[:n]
	if b[0] != recordVersion && b[0] != recordVersionGen {
		return bad("version %d", b[0])
	}
	r := Record{Container: binary.LittleEndian.Uint64(b[1:])}
	b = b[9:]
	if v[0] == recordVersionGen {
		if len(b) < 4+8+2 {
			return bad("%d bytes", len(v))
		}
		if r.Generation = binary.LittleEndian.Uint32(b); r.Generation == 0 {
			return bad("version 2 of generation 0")
		}
		b = b[4:]
	}
	r.Converted = time.UnixMilli(int64(binary.LittleEndian.Uint64(b)))
	b = b[8:]
	pl := int(binary.LittleEndian.Uint16(b))
	if len(b) < 2+pl+8+2 || pl > ec.MaxSpecBytes {
		return bad("policy of %d bytes", pl)
	}
	r.Policy = string(b[2 : 2+pl])
	b = b[2+pl:]
	r.Logical = binary.LittleEndian.Uint64(b)
	ns := int(binary.LittleEndian.Uint16(b[8:]))
	b = b[10:]
	if ns > maxShards || len(b) < 8*ns+4 {
		return bad("%d shards in %d bytes", ns, len(b))
	}
	for i := range ns {
		r.Nodes = append(r.Nodes, binary.LittleEndian.Uint64(b[8*i:]))
	}
	b = b[8*ns:]
	nb := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if nb > maxBlocks || uint64(len(b)) != uint64(nb)*28 {
		return bad("%d blocks in %d bytes", nb, len(b))
	}
	for i := range int(nb) {
		x := b[28*i:]
		r.Blocks = append(r.Blocks, ecapi.Block{Local: binary.LittleEndian.Uint64(x), Offset: binary.LittleEndian.Uint64(x[8:]),
			Length: binary.LittleEndian.Uint64(x[16:]), CRC32C: binary.LittleEndian.Uint32(x[24:])})
	}
	if err := r.check(); err != nil {
		return bad("%v", err)
	}
	return r, nil
}

// check validates a record's fields against each other.
func (r Record) check() error {
	spec, err := ec.ParseSpec(r.Policy)
	if err != nil {
		return err
	}
	if !spec.Coded() || len(r.Nodes) != spec.Shards() {
		return fmt.Errorf("policy %s with %d shard nodes", r.Policy, len(r.Nodes))
	}
	if r.Container == 0 {
		return fmt.Errorf("container 0")
	}
	seen := map[uint64]bool{}
	for _, n := range r.Nodes {
		if n == 0 || seen[n] {
			return fmt.Errorf("shard nodes %v: each shard on its own datanode", r.Nodes)
		}
		seen[n] = true
	}
	var end uint64
	for i, bl := range r.Blocks {
		if bl.Offset != end || (i > 0 && bl.Local <= r.Blocks[i-1].Local) {
			return fmt.Errorf("block %d (local %d) at %d, want %d in local ID order", i, bl.Local, bl.Offset, end)
		}
		end += bl.Length
	}
	if end != r.Logical {
		return fmt.Errorf("blocks add up to %d bytes, logical %d", end, r.Logical)
	}
	return nil
}
