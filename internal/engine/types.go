package engine

import (
	"log/slog"

	"github.com/spindle-store/spindle/internal/vfs"
)

// ContainerID names a container, unique in the cluster.
type ContainerID uint64

// BlockID names a block: its container and its local ID in that container.
type BlockID struct {
	Container ContainerID
	Local     uint64
}

// ChunkInfo describes one chunk of a block: where it is, how long, and the
// CRC32C of each BytesPerChecksum piece of it.
type ChunkInfo struct {
	Offset    uint64
	Length    uint64
	Checksums []uint32
}

// BlockData is a block's committed metadata: what PutBlock stores and
// GetBlock returns. Chunks are contiguous from offset 0 and add up to Length.
type BlockData struct {
	ID               BlockID
	Length           uint64
	BytesPerChecksum uint32
	Chunks           []ChunkInfo
}

// ContainerInfo is a snapshot of a container's state.
type ContainerInfo struct {
	ID           ContainerID
	State        ContainerState
	Volume       string // data directory holding the container
	Dir          string // the container's directory
	MaxSizeBytes uint64
	// UsedBytes counts committed block lengths plus chunks written since
	// the last PutBlock of their block.
	UsedBytes uint64
	// Reason says why a container is UNHEALTHY.
	Reason string
	// BCSID is the block commit sequence ID: the sequence of the last
	// PutBlock applied to the container (in a pipeline, the raft index of
	// its entry; 0 when none carried one). It is persisted in the same
	// Pebble batch as that PutBlock's block record, so it is never ahead of
	// or behind the blocks it covers. Replicas of one container are ranked
	// by it: a replica with a lower BCSID missed block commits.
	BCSID uint64
	// DamagedBlocks lists the blocks of a CLOSED container found damaged
	// (local IDs, ascending; damage.go).
	DamagedBlocks []uint64
}

// Defaults and limits of Config.
const (
	DefaultMaxContainerSizeBytes = 5 << 30
	DefaultOpenFilesMax          = 1024
	DefaultSyncWorkers           = 32
	MaxSyncWorkers               = 256
	DefaultBlockRecordCacheMax   = 256
)

// Config configures an Engine. Zero fields take the defaults above.
type Config struct {
	// DataDirs are the volumes, one per disk. Each is formatted on first
	// use. Required.
	DataDirs []string
	// MaxContainerSizeBytes is the size limit of new containers.
	MaxContainerSizeBytes uint64
	// OpenFilesMax bounds the cache of open block files. Files still in
	// use (being written, or awaiting a sync) stay open past the bound
	// until released.
	OpenFilesMax int
	// SyncWorkers bounds the group commit's parallelism: how many sync
	// rounds may be in flight at once, and how many fdatasync calls one
	// round issues in parallel, so that a device with a deep queue sees
	// many flushes at a time (as independent writers would give it).
	SyncWorkers int
	// BlockRecordCacheMax bounds the cache of decoded block records used by
	// reads.
	BlockRecordCacheMax int
	// ReservedBytes is the free space every volume keeps (writes that
	// would eat into it fail with ErrVolumeFull); 0: ReservedPercent of
	// the volume's size, within [MinReservedBytes, MaxReservedBytes].
	ReservedBytes uint64
	// FailedVolumesTolerated: volumes that may fail to open or load at
	// Open and be left out (volfail.go); one more fails Open. 0: every
	// volume must open; negative: any number, while one volume opens.
	FailedVolumesTolerated int
	// FS is the filesystem; vfs.Default when nil.
	FS vfs.FS
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// DeleteGuard, when set, may refuse a DeleteBlock (its error, returned
	// before anything changes): the datanode's object lock holds.
	DeleteGuard func(BlockID) error
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.MaxContainerSizeBytes == 0 {
		out.MaxContainerSizeBytes = DefaultMaxContainerSizeBytes
	}
	if out.OpenFilesMax <= 0 {
		out.OpenFilesMax = DefaultOpenFilesMax
	}
	if out.SyncWorkers <= 0 {
		out.SyncWorkers = DefaultSyncWorkers
	}
	out.SyncWorkers = min(out.SyncWorkers, MaxSyncWorkers)
	if out.BlockRecordCacheMax <= 0 {
		out.BlockRecordCacheMax = DefaultBlockRecordCacheMax
	}
	if out.FS == nil {
		out.FS = vfs.Default
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

// ScanResult is what a container scan found.
type ScanResult struct {
	Container ContainerID
	Blocks    int
	Bytes     uint64
	// Damage lists every problem found, each naming block and offset.
	Damage []string
}
