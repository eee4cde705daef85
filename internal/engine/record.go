package engine

import (
	"encoding/binary"
	"fmt"
)

// On-disk records. Every record ends with the CRC32C of all bytes before it;
// integers are little-endian, except Pebble keys, which are big-endian so that
// iteration follows numeric order. The byte tables are in doc.go and
// docs/FORMAT.md; keep the three in step (record_golden_test.go pins the
// documented examples byte for byte).

const (
	// recordVersion is the version of block records; container records
	// are at containerRecordVersion (version 1, without the BCSID, is
	// still read).
	recordVersion          = 1
	containerRecordVersion = 2

	keyPrefixContainer = 'C' // 'C' | containerID u64 BE
	keyPrefixBlock     = 'B' // 'B' | containerID u64 BE | localID u64 BE
	keyPrefixDamage    = 'X' // 'X' | containerID u64 BE | localID u64 BE: a damage mark (damage.go)
	keyPrefixGone      = 'G' // 'G' | containerID u64 BE | localID u64 BE: a gone mark (gone.go)

	containerRecordSize   = 38 // version 2
	containerRecordSizeV1 = 30 // version 1: no BCSID (it reads as 0)
	blockHeaderSize       = 33
	volumeRecordSize      = 40
	volumeMagic           = "SPNDLVOL"

	// maxChunksPerBlock bounds a block record's chunk list, and with it the
	// memory a decoder may allocate for a record read from disk.
	maxChunksPerBlock = 1 << 22
)

// ContainerState is the lifecycle state of a container.
type ContainerState uint8

// Container states. OPEN accepts writes; CLOSED takes no more writes or
// puts (its blocks are final; whole blocks may still be deleted, as the
// cluster's block deletion does); UNHEALTHY was found damaged by a read or
// scan (readable, not writable; blocks may be deleted); DELETING is being
// removed (recovery finishes the removal after a crash).
const (
	StateOpen      ContainerState = 1
	StateClosed    ContainerState = 2
	StateUnhealthy ContainerState = 3
	StateDeleting  ContainerState = 4
)

func (s ContainerState) String() string {
	switch s {
	case StateOpen:
		return "OPEN"
	case StateClosed:
		return "CLOSED"
	case StateUnhealthy:
		return "UNHEALTHY"
	case StateDeleting:
		return "DELETING"
	}
	return fmt.Sprintf("STATE(%d)", uint8(s))
}

func (s ContainerState) valid() bool { return s >= StateOpen && s <= StateDeleting }

// containerRecord is the value under key 'C'|id.
type containerRecord struct {
	ID            ContainerID
	State         ContainerState
	MaxSizeBytes  uint64
	CreatedUnixMs uint64
	// BCSID is the block commit sequence ID: the sequence of the last
	// PutBlock applied to the container (0: none, or a version 1 record).
	BCSID uint64
}

func containerKey(id ContainerID) []byte {
	k := make([]byte, 9)
	k[0] = keyPrefixContainer
	binary.BigEndian.PutUint64(k[1:], uint64(id))
	return k
}

func blockKey(b BlockID) []byte {
	k := make([]byte, 17)
	k[0] = keyPrefixBlock
	binary.BigEndian.PutUint64(k[1:], uint64(b.Container))
	binary.BigEndian.PutUint64(k[9:], b.Local)
	return k
}

// blockKeyRange returns [lo, hi) covering every block key of container id.
func blockKeyRange(id ContainerID) (lo, hi []byte) {
	lo = blockKey(BlockID{Container: id})
	hi = make([]byte, 9)
	hi[0] = keyPrefixBlock
	binary.BigEndian.PutUint64(hi[1:], uint64(id)+1)
	if uint64(id) == ^uint64(0) {
		hi = []byte{keyPrefixBlock + 1}
	}
	return lo, hi
}

// markKey is block b's key under prefix (keyPrefixDamage, keyPrefixGone):
// laid out as its block key.
func markKey(prefix byte, b BlockID) []byte {
	k := blockKey(b)
	k[0] = prefix
	return k
}

// markKeyRange returns [lo, hi) covering every per-block mark of container
// id under prefix (keyPrefixDamage, keyPrefixGone): keys laid out as block
// keys.
func markKeyRange(prefix byte, id ContainerID) (lo, hi []byte) {
	lo, hi = blockKeyRange(id)
	lo[0] = prefix
	if len(hi) == 1 {
		return lo, []byte{prefix + 1}
	}
	hi[0] = prefix
	return lo, hi
}

func decodeBlockKey(k []byte) (BlockID, bool) {
	if len(k) != 17 || k[0] != keyPrefixBlock {
		return BlockID{}, false
	}
	return BlockID{Container: ContainerID(binary.BigEndian.Uint64(k[1:])), Local: binary.BigEndian.Uint64(k[9:])}, true
}

func decodeContainerKey(k []byte) (ContainerID, bool) {
	if len(k) != 9 || k[0] != keyPrefixContainer {
		return 0, false
	}
	return ContainerID(binary.BigEndian.Uint64(k[1:])), true
}

func encodeContainerRecord(r containerRecord) []byte {
	b := make([]byte, containerRecordSize)
	b[0] = containerRecordVersion
	b[1] = byte(r.State)
	binary.LittleEndian.PutUint64(b[2:], uint64(r.ID))
	binary.LittleEndian.PutUint64(b[10:], r.MaxSizeBytes)
	binary.LittleEndian.PutUint64(b[18:], r.CreatedUnixMs)
	binary.LittleEndian.PutUint64(b[26:], r.BCSID)
	return sealRecord(b[:containerRecordSize-4], b)
}

// sealRecord writes the CRC32C of body into the last 4 bytes of full, where
// body is full minus those 4 bytes.
func sealRecord(body, full []byte) []byte {
	binary.LittleEndian.PutUint32(full[len(body):], CRC32C(body))
	return full
}

// checkSeal checks the CRC32C that sealRecord wrote in the last 4 bytes
// of b (at least 5 bytes long).
func checkSeal(b []byte) error {
	if len(b) < 5 {
		return fmt.Errorf("%w: record of %d bytes is too short", ErrCorrupt, len(b))
	}
	body := b[:len(b)-4]
	want := binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := CRC32C(body); got != want {
		return fmt.Errorf("%w: record crc32c %08x, stored %08x", ErrCorrupt, got, want)
	}
	return nil
}

func checkRecordCRC(b []byte, version byte) error {
	if err := checkSeal(b); err != nil {
		return err
	}
	if body := b[:len(b)-4]; body[0] != version {
		return fmt.Errorf("%w: record version %d, want %d", ErrCorrupt, body[0], version)
	}
	return nil
}

// decodeContainerRecord decodes a version 2 record (38 bytes) or a version 1
// record (30 bytes, written before the BCSID existed: its BCSID is 0).
func decodeContainerRecord(b []byte) (containerRecord, error) {
	var r containerRecord
	version := byte(containerRecordVersion)
	switch len(b) {
	case containerRecordSize:
	case containerRecordSizeV1:
		version = 1
	default:
		return r, fmt.Errorf("%w: container record of %d bytes, want %d (or %d, version 1)", ErrCorrupt, len(b), containerRecordSize, containerRecordSizeV1)
	}
	if err := checkRecordCRC(b, version); err != nil {
		return r, err
	}
	r.State = ContainerState(b[1])
	if !r.State.valid() {
		return r, fmt.Errorf("%w: container record state %d", ErrCorrupt, b[1])
	}
	r.ID = ContainerID(binary.LittleEndian.Uint64(b[2:]))
	r.MaxSizeBytes = binary.LittleEndian.Uint64(b[10:])
	r.CreatedUnixMs = binary.LittleEndian.Uint64(b[18:])
	if version == containerRecordVersion {
		r.BCSID = binary.LittleEndian.Uint64(b[26:])
	}
	return r, nil
}

// encodeBlockRecord encodes a block's metadata. Chunks are contiguous from
// offset 0, so offsets are not stored.
func encodeBlockRecord(bd *BlockData) []byte {
	size := blockHeaderSize + 4
	for i := range bd.Chunks {
		size += 4 + 4*len(bd.Chunks[i].Checksums)
	}
	b := make([]byte, size)
	b[0] = recordVersion
	binary.LittleEndian.PutUint64(b[1:], uint64(bd.ID.Container))
	binary.LittleEndian.PutUint64(b[9:], bd.ID.Local)
	binary.LittleEndian.PutUint32(b[17:], bd.BytesPerChecksum)
	binary.LittleEndian.PutUint64(b[21:], bd.Length)
	binary.LittleEndian.PutUint32(b[29:], uint32(len(bd.Chunks)))
	p := blockHeaderSize
	for i := range bd.Chunks {
		c := &bd.Chunks[i]
		binary.LittleEndian.PutUint32(b[p:], uint32(c.Length))
		p += 4
		for _, s := range c.Checksums {
			binary.LittleEndian.PutUint32(b[p:], s)
			p += 4
		}
	}
	if p != size-4 {
		panic(fmt.Sprintf("engine: block record size %d, wrote %d", size-4, p))
	}
	return sealRecord(b[:p], b)
}

// decodeBlockRecord decodes and validates a block record: CRC, version, that
// the chunk lengths add up to the block length, the checksum counts, and the
// bounds that keep a hostile record from allocating without limit.
func decodeBlockRecord(b []byte) (*BlockData, error) {
	if len(b) < blockHeaderSize+4 {
		return nil, fmt.Errorf("%w: block record of %d bytes is too short", ErrCorrupt, len(b))
	}
	if err := checkRecordCRC(b, recordVersion); err != nil {
		return nil, err
	}
	bd := &BlockData{
		ID: BlockID{
			Container: ContainerID(binary.LittleEndian.Uint64(b[1:])),
			Local:     binary.LittleEndian.Uint64(b[9:]),
		},
		BytesPerChecksum: binary.LittleEndian.Uint32(b[17:]),
		Length:           binary.LittleEndian.Uint64(b[21:]),
	}
	n := binary.LittleEndian.Uint32(b[29:])
	body := b[blockHeaderSize : len(b)-4]
	if n > maxChunksPerBlock || uint64(n)*8 > uint64(len(body)) {
		return nil, fmt.Errorf("%w: block record claims %d chunks in %d bytes", ErrCorrupt, n, len(body))
	}
	if err := validBytesPerChecksum(bd.BytesPerChecksum); err != nil && n > 0 {
		return nil, fmt.Errorf("%w: block record: %v", ErrCorrupt, err)
	}
	bd.Chunks = make([]ChunkInfo, n)
	sums := make([]uint32, 0, (len(body)-4*int(n))/4)
	var off uint64
	p := 0
	for i := range bd.Chunks {
		if p+4 > len(body) {
			return nil, fmt.Errorf("%w: block record truncated at chunk %d", ErrCorrupt, i)
		}
		l := uint64(binary.LittleEndian.Uint32(body[p:]))
		p += 4
		if l == 0 || l > MaxChunkSizeBytes {
			return nil, fmt.Errorf("%w: block record chunk %d length %d", ErrCorrupt, i, l)
		}
		k := PieceCount(l, bd.BytesPerChecksum)
		if p+4*k > len(body) {
			return nil, fmt.Errorf("%w: block record truncated in checksums of chunk %d", ErrCorrupt, i)
		}
		start := len(sums)
		for j := 0; j < k; j++ {
			sums = append(sums, binary.LittleEndian.Uint32(body[p:]))
			p += 4
		}
		bd.Chunks[i] = ChunkInfo{Offset: off, Length: l, Checksums: sums[start:len(sums):len(sums)]}
		off += l
	}
	if p != len(body) {
		return nil, fmt.Errorf("%w: block record has %d trailing bytes", ErrCorrupt, len(body)-p)
	}
	if off != bd.Length {
		return nil, fmt.Errorf("%w: block record length %d, chunks add up to %d", ErrCorrupt, bd.Length, off)
	}
	return bd, nil
}

// volumeRecord is the content of a volume's identity file.
type volumeRecord struct {
	FormatVersion uint32
	UUID          [16]byte
	CreatedUnixMs uint64
}

const volumeFormatVersion = 1

func encodeVolumeRecord(r volumeRecord) []byte {
	b := make([]byte, volumeRecordSize)
	copy(b, volumeMagic)
	binary.LittleEndian.PutUint32(b[8:], r.FormatVersion)
	copy(b[12:28], r.UUID[:])
	binary.LittleEndian.PutUint64(b[28:], r.CreatedUnixMs)
	return sealRecord(b[:36], b)
}

func decodeVolumeRecord(b []byte) (volumeRecord, error) {
	var r volumeRecord
	if len(b) != volumeRecordSize {
		return r, fmt.Errorf("%w: volume identity of %d bytes, want %d", ErrCorrupt, len(b), volumeRecordSize)
	}
	if string(b[:8]) != volumeMagic {
		return r, fmt.Errorf("%w: volume identity magic %q", ErrCorrupt, b[:8])
	}
	want := binary.LittleEndian.Uint32(b[36:])
	if got := CRC32C(b[:36]); got != want {
		return r, fmt.Errorf("%w: volume identity crc32c %08x, stored %08x", ErrCorrupt, got, want)
	}
	r.FormatVersion = binary.LittleEndian.Uint32(b[8:])
	if r.FormatVersion != volumeFormatVersion {
		return r, fmt.Errorf("%w: volume format version %d, this build reads %d", ErrCorrupt, r.FormatVersion, volumeFormatVersion)
	}
	copy(r.UUID[:], b[12:28])
	r.CreatedUnixMs = binary.LittleEndian.Uint64(b[28:])
	return r, nil
}
