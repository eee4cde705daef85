// Package metaapi is the control-plane protocol of Spindle's meta service:
// JSON over HTTP/1.1 on one address (127.0.0.1 in tests and in the embedded
// server), shared by datanodes (registration, heartbeats with container
// reports, commands back), clients (buckets, keys, block allocation) and the
// admin commands. The data path (chunks) never goes through the meta
// service: clients write to pipelines with internal/client.
//
// Routes (all bodies JSON; errors are an Error body with an HTTP status, a
// code and, refining it, a reason that callers switch on with errors.Is:
// errors.go):
//
//	POST   /v1/heartbeat                      Heartbeat → HeartbeatResponse
//	PUT    /v1/buckets/{bucket}               → Bucket          (409 exists)
//	GET    /v1/buckets                        → BucketList
//	DELETE /v1/buckets/{bucket}               (409 not empty)
//	POST   /v1/allocate                       AllocateRequest → AllocateResponse
//	POST   /v1/keys/{bucket}/{key...}         CommitKey → KeyInfo  (commit: atomic)
//	POST   /v1/allocations                    AllocateBatch → AllocateBatchResult (batch.go)
//	POST   /v1/commits                        CommitBatch (+ inline values) → CommitBatchResult (batch.go)
//	POST   /v1/gets                           GetBatch → GetBatchResult (+ inline values) (batch.go)
//	GET    /v1/keys/{bucket}/{key...}         → KeyInfo
//	DELETE /v1/keys/{bucket}/{key...}         (blocks deleted on datanodes later)
//	GET    /v1/list/{bucket}?prefix=&start_after=&limit=  → KeyList
//	GET    /v1/nodes | /v1/pipelines | /v1/containers     → NodeList | PipelineList | ContainerList
//	GET    /v1/replication                    → ReplicationStatus
//	POST   /v1/safemode/exit                  → ReplicationStatus (leaves safe mode now)
//	GET    /metrics                           Prometheus
//	GET    /v1/admin/backup                   tar stream of a store checkpoint (Client.Backup; meta's backup.go)
//	GET    /v1/meta/status                    → MetaStatus (every member of a replicated meta service)
//
// A replicated meta service (several members): only its leader serves; a
// member that does not answers UNAVAILABLE with not_leader and the
// leader's address (Error.Leader). Client takes every member's address
// and follows the leader (see Client).
//
// Invariants: a key is visible only once CommitKey returns (an interrupted
// put leaves only unreferenced blocks, which the meta service deletes); a
// committed key's blocks are never deleted while it exists; names are
// validated (ValidBucket, ValidKey) on both sides.
//
// Commit rules: every block of a CommitKey must have been handed out by
// Allocate for the same bucket and key (or for any key of the bucket:
// AllocateRequest.AnyKey) and not committed since (INVALID otherwise: a
// client cannot commit blocks it never got); the lengths sum to Size; no
// block twice; at most MaxBlocksPerKey blocks; no block of length 0. A
// CommitKey identical to the key's current version (same size, CRC32C and
// blocks) succeeds again, so that a commit whose answer was lost can be
// retried. A value of at most MaxInlineBytes may instead be committed
// inline (CommitKey.Inline, no blocks, no Allocate): stored in the key's
// record, durable and replicated as the record is, and returned by GetKey
// (KeyInfo.Inline); Size must be its length and CRC32C its checksum.
// Blocks allocated and never committed are garbage: after a grace period
// (an hour by default) the meta service deletes them.
//
// Deletion: replacing or deleting a key schedules its old blocks for
// deletion. The meta service sends delete_blocks to the leader of the
// block's pipeline (as the reports name it) while the pipeline is served;
// once a CLOSED pipeline is served by nobody, to every live datanode
// holding the container (re-replicated copies included), each deleting
// its own replica. A datanode acknowledges the blocks it deleted (or found
// gone) in its next heartbeat's DeletedBlocks; the others are sent again,
// a bounded number of times.
//
// Re-replication: the replicas of a CLOSED container are where the
// datanodes' reports say (not necessarily its pipeline's members). With
// fewer than the replication factor healthy, the meta service sends
// replicate_container to a target, which pulls the container from a
// source and reports it once complete; KeyBlock.Members are the healthy
// replicas.
//
// Concurrency: the types are plain values; Client is safe for concurrent use.
package metaapi

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
)

// Health of a datanode as the meta service sees it.
const (
	HealthHealthy = "HEALTHY" // heartbeat within StaleAfter
	HealthStale   = "STALE"   // no heartbeat for StaleAfter: no new pipelines or containers
	HealthDead    = "DEAD"    // no heartbeat for DeadAfter: its pipelines are closed
)

// Defaults of the cluster manager.
const (
	DefaultHeartbeatInterval = 1 * time.Second
	DefaultStaleAfter        = 5 * time.Second
	DefaultDeadAfter         = 30 * time.Second
	// DefaultPipelinesPerNode bounds the pipelines a datanode is a member of.
	DefaultPipelinesPerNode = 2
	// DefaultContainerSizeBytes: a container is closed once this full.
	DefaultContainerSizeBytes = 5 << 30
	// MaxKeyBytes and MaxBucketBytes bound names.
	MaxKeyBytes    = 1024
	MaxBucketBytes = 63
	// MaxListLimit bounds one page of a listing.
	MaxListLimit = 1000
	// MaxBlocksPerKey bounds a key's block list.
	MaxBlocksPerKey = 1 << 16
	// MaxInlineBytes bounds a value stored inline, in its key's record
	// (CommitKey.Inline), as MinIO keeps objects ≤ 128 KiB in metadata.
	MaxInlineBytes = 128 << 10
)

// Heartbeat is what a datanode sends every DefaultHeartbeatInterval (and
// at start). The first one, with NodeID 0, registers it: the meta service
// assigns a node ID (its raft ID in every pipeline), which the datanode
// keeps (in its log directory) and sends from then on together with UUID.
type Heartbeat struct {
	UUID       string `json:"uuid"` // stable identity of the datanode (random at its first start)
	NodeID     uint64 `json:"node_id,omitempty"`
	Addr       string `json:"addr"` // data-path address (peers and clients)
	MetricsURL string `json:"metrics_url,omitempty"`
	Capacity   uint64 `json:"capacity_bytes,omitempty"`
	Used       uint64 `json:"used_bytes,omitempty"`
	// Available is what new data may still take on the node's volumes
	// (free space above each volume's reserve); meaningful when Capacity
	// is set. A node with less than the meta service's MinAvailableBytes
	// gets no new pipeline, and its OPEN pipelines are closed.
	Available  uint64            `json:"available_bytes,omitempty"`
	Containers []ContainerReport `json:"containers,omitempty"`
	Pipelines  []PipelineReport  `json:"pipelines,omitempty"`
	// DeletedBlocks acknowledges delete_blocks: blocks this node deleted
	// (its DeleteBlock was applied) or found already gone since its last
	// heartbeat; at most MaxDeletedBlocksReport (the rest next time).
	DeletedBlocks []BlockRef `json:"deleted_blocks,omitempty"`
	// CopyFailures: replicate_container copies to this node that failed
	// since its last heartbeat, at most MaxCopyFailuresReport (the rest
	// next time). The meta service drops the copy and schedules it again,
	// from another source when there is one.
	CopyFailures []CopyFailure `json:"copy_failures,omitempty"`
	HeldBlocks   []holdapi.Ack `json:"held_blocks,omitempty"` // hold_blocks made durable (holdapi), at most holdapi.MaxAcks
	// Copying: the containers being copied to this node right now (a
	// replicate_container under way), at most MaxCopyingReport. A copy the
	// meta service scheduled that the target does not list here for
	// CopyStartTimeout is taken as lost.
	Copying []uint64 `json:"copying,omitempty"`
	// FailedPipelines: pipelines this node stopped serving because its
	// replica could not store what they wrote (a write failed here alone:
	// EIO, ENOSPC, an UNHEALTHY container; not acknowledged, the replica
	// UNHEALTHY). The meta service closes each. Reported in every
	// heartbeat while the node remembers it; at most MaxReportedPipelines.
	FailedPipelines []PipelineFailure `json:"failed_pipelines,omitempty"`
	// Scrub: the node's scrubber progress (nil: a datanode without one).
	Scrub *ScrubReport `json:"scrub,omitempty"`
	// FailedVolumes: the node's data directories out of use, at most
	// MaxFailedVolumesReport; their replicas are no longer reported.
	FailedVolumes []FailedVolume `json:"failed_volumes,omitempty"`
	// ReadOnlyVolumes: the node's data directories full when it started,
	// served read-only until it restarts with room; ≤ MaxFailedVolumesReport.
	ReadOnlyVolumes []FailedVolume `json:"read_only_volumes,omitempty"`
}

// PipelineFailure is a pipeline a datanode left after a local failure.
type PipelineFailure struct {
	ID        uint64 `json:"id"`
	Container uint64 `json:"container,omitempty"`
	// Reason says what failed, at most MaxCopyErrorBytes.
	Reason string `json:"reason"`
}

// CopyFailure is a replicate_container copy that failed on its target.
type CopyFailure struct {
	Container uint64 `json:"container"`
	// Source is the node the copy was read from (0: none could be
	// reached or tried).
	Source uint64 `json:"source"`
	// Error says what went wrong, at most MaxCopyErrorBytes (truncate
	// longer messages).
	Error string `json:"error"`
}

// Container states (ContainerReport.State and ContainerInfo.State).
const (
	ContainerOpen      = "OPEN"
	ContainerClosing   = "CLOSING" // meta only: close commands sent, not all replicas closed
	ContainerClosed    = "CLOSED"
	ContainerUnhealthy = "UNHEALTHY" // reports only
	ContainerDeleting  = "DELETING"  // reports only
)

// Pipeline states (Pipeline.State).
const (
	PipelineOpen   = "OPEN"
	PipelineClosed = "CLOSED"
)

// Bounds of a heartbeat, checked by Heartbeat.Validate (a heartbeat over
// them is malformed and refused, changing nothing).
const (
	MaxUUIDBytes          = 64
	MaxReportedContainers = 1 << 17
	MaxReportedPipelines  = 1024
	// MaxPipelineMembers bounds the member lists of a pipeline report.
	MaxPipelineMembers     = 16
	MaxDeletedBlocksReport = 10000
	// MaxReportBytes bounds every byte count in a report (1 PiB): larger is absurd.
	MaxReportBytes = 1 << 50
	// MaxCopyFailuresReport bounds Heartbeat.CopyFailures.
	MaxCopyFailuresReport = 1024
	// MaxCopyingReport bounds Heartbeat.Copying.
	MaxCopyingReport = 1024
	// MaxCopyErrorBytes bounds CopyFailure.Error.
	MaxCopyErrorBytes = 4096
)

// Validate checks a heartbeat: a UUID of 1..MaxUUIDBytes letters, digits,
// '-' or '_'; Addr host:port with a port in 1..65535; MetricsURL empty or
// http(s)://...; byte counts ≤ MaxReportBytes and Used ≤ Capacity when a
// capacity is given; container reports with non-zero, distinct IDs and a
// known state (OPEN, CLOSED, UNHEALTHY, DELETING); pipeline reports with
// non-zero, distinct IDs; copy failures with a non-zero container and an
// error of at most MaxCopyErrorBytes; copying containers non-zero and
// distinct; every list within its bound. Errors wrap ErrInvalid.
func (hb *Heartbeat) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: heartbeat: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if len(hb.UUID) == 0 || len(hb.UUID) > MaxUUIDBytes {
		return bad("uuid: want 1..%d characters, got %d", MaxUUIDBytes, len(hb.UUID))
	}
	for i := 0; i < len(hb.UUID); i++ {
		c := hb.UUID[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return bad("uuid %q: only letters, digits, '-' and '_'", hb.UUID)
		}
	}
	if err := validAddr(hb.Addr); err != nil {
		return bad("addr %q: %v", hb.Addr, err)
	}
	if hb.MetricsURL != "" {
		u, err := url.Parse(hb.MetricsURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(hb.MetricsURL) > 1024 {
			return bad("metrics_url %q: want http://host:port/path", hb.MetricsURL)
		}
	}
	if hb.Capacity > MaxReportBytes || hb.Used > MaxReportBytes {
		return bad("capacity %d / used %d bytes: over %d", hb.Capacity, hb.Used, uint64(MaxReportBytes))
	}
	if hb.Available > hb.Capacity {
		return bad("available %d bytes > capacity %d", hb.Available, hb.Capacity)
	}
	if hb.Capacity > 0 && hb.Used > hb.Capacity {
		return bad("used %d bytes > capacity %d", hb.Used, hb.Capacity)
	}
	if len(hb.Containers) > MaxReportedContainers {
		return bad("%d container reports, at most %d", len(hb.Containers), MaxReportedContainers)
	}
	seen := make(map[uint64]bool, len(hb.Containers))
	for _, c := range hb.Containers {
		if c.ID == 0 {
			return bad("container report with ID 0")
		}
		if seen[c.ID] {
			return bad("container %d reported twice", c.ID)
		}
		seen[c.ID] = true
		switch c.State {
		case ContainerOpen, ContainerClosed, ContainerUnhealthy, ContainerDeleting:
		default:
			return bad("container %d: unknown state %q (want OPEN, CLOSED, UNHEALTHY or DELETING)", c.ID, c.State)
		}
		if c.UsedBytes > MaxReportBytes {
			return bad("container %d: %d bytes used, over %d", c.ID, c.UsedBytes, uint64(MaxReportBytes))
		}
		if c.Blocks > MaxReportBytes {
			return bad("container %d: %d blocks", c.ID, c.Blocks)
		}
	}
	if len(hb.Pipelines) > MaxReportedPipelines {
		return bad("%d pipeline reports, at most %d", len(hb.Pipelines), MaxReportedPipelines)
	}
	clear(seen)
	for _, p := range hb.Pipelines {
		if p.ID == 0 {
			return bad("pipeline report with ID 0")
		}
		if seen[p.ID] {
			return bad("pipeline %d reported twice", p.ID)
		}
		if len(p.Behind) > MaxPipelineMembers {
			return bad("pipeline %d: %d members behind, at most %d", p.ID, len(p.Behind), MaxPipelineMembers)
		}
		seen[p.ID] = true
	}
	if len(hb.DeletedBlocks) > MaxDeletedBlocksReport {
		return bad("%d deleted blocks, at most %d", len(hb.DeletedBlocks), MaxDeletedBlocksReport)
	}
	for _, b := range hb.DeletedBlocks {
		if b.Container == 0 || b.Local == 0 {
			return bad("deleted block %d/%d: IDs start at 1", b.Container, b.Local)
		}
	}
	if len(hb.CopyFailures) > MaxCopyFailuresReport {
		return bad("%d copy failures, at most %d", len(hb.CopyFailures), MaxCopyFailuresReport)
	}
	for _, f := range hb.CopyFailures {
		if f.Container == 0 {
			return bad("copy failure of container 0")
		}
		if len(f.Error) > MaxCopyErrorBytes {
			return bad("copy failure of container %d: error of %d bytes, at most %d", f.Container, len(f.Error), MaxCopyErrorBytes)
		}
	}
	if len(hb.FailedPipelines) > MaxReportedPipelines {
		return bad("%d failed pipelines, at most %d", len(hb.FailedPipelines), MaxReportedPipelines)
	}
	for _, f := range hb.FailedPipelines {
		if f.ID == 0 {
			return bad("failed pipeline with ID 0")
		}
		if len(f.Reason) > MaxCopyErrorBytes {
			return bad("failed pipeline %d: reason of %d bytes, at most %d", f.ID, len(f.Reason), MaxCopyErrorBytes)
		}
	}
	if len(hb.Copying) > MaxCopyingReport {
		return bad("%d containers copying, at most %d", len(hb.Copying), MaxCopyingReport)
	}
	clear(seen)
	for _, id := range hb.Copying {
		if id == 0 {
			return bad("copying container 0")
		}
		if seen[id] {
			return bad("container %d listed as copying twice", id)
		}
		seen[id] = true
	}
	return hb.validateDamage()
}

// validAddr checks host:port with a non-empty host and a port in 1..65535.
func validAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("no host")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q: want 1..65535", port)
	}
	return nil
}

// ContainerReport is one container on a datanode.
type ContainerReport struct {
	ID        uint64 `json:"id"`
	State     string `json:"state"` // OPEN, CLOSED, UNHEALTHY, DELETING
	UsedBytes uint64 `json:"used_bytes"`
	Blocks    uint64 `json:"blocks,omitempty"`
	// BCSID is the replica's block commit sequence ID: the raft index of
	// the last PutBlock it applied (engine.ContainerInfo.BCSID). A CLOSED
	// replica with a lower BCSID than another replica of the container
	// missed block commits. Absent (0) from a datanode that predates it.
	BCSID uint64 `json:"bcsid,omitempty"`
	// DamagedBlocks: blocks of this CLOSED replica whose bytes failed
	// their checksums (scrubber or read), local IDs ascending; at most
	// MaxDamagedBlocksReport in a heartbeat, all containers together.
	DamagedBlocks []uint64 `json:"damaged_blocks,omitempty"`
}

// PipelineReport is one pipeline the datanode serves.
type PipelineReport struct {
	ID       uint64 `json:"id"`
	LeaderID uint64 `json:"leader_id"` // 0: none known
	Term     uint64 `json:"term"`
	Applied  uint64 `json:"applied"`
	// Behind: from the leader, the members behind its compacted log (a
	// raft snapshot would be needed): the meta service closes the
	// pipeline and has their replicas replaced by copies.
	Behind []uint64 `json:"behind,omitempty"`
}

// HeartbeatResponse carries the node's ID and the commands for it.
type HeartbeatResponse struct {
	NodeID   uint64    `json:"node_id"`
	Commands []Command `json:"commands,omitempty"`
	// Peers: the address the meta service last heard from every other
	// member of the pipelines the node reports serving (by node ID). A
	// datanode restarted on another address is reached there by its
	// peers from their next heartbeat on, without a restart.
	Peers []Member `json:"peers,omitempty"`
	// BlockTokenKeys: the keys block tokens are signed with (current and previous).
	BlockTokenKeys []blocktoken.Key `json:"block_token_keys,omitempty"`
}

// Command kinds sent to datanodes.
const (
	// CmdJoinPipeline: start serving the pipeline (idempotent).
	CmdJoinPipeline = "join_pipeline"
	// CmdLeavePipeline: stop serving the pipeline (it was closed).
	CmdLeavePipeline = "leave_pipeline"
	// CmdCloseContainer: the pipeline's leader proposes CloseContainer.
	// Sent to the leader the reports name (to every member still reporting
	// the container OPEN when none is known), repeated until no live
	// member reports it OPEN; a node that does not serve the pipeline (any
	// more) should close its replica itself.
	CmdCloseContainer = "close_container"
	// CmdDeleteBlocks: the pipeline's leader proposes DeleteBlock for each.
	// When Pipeline.State is CLOSED and nobody serves it, the node deletes
	// its own replica's blocks (the node may hold a re-replicated copy and
	// not be a member of the pipeline). Acknowledged in
	// Heartbeat.DeletedBlocks.
	CmdDeleteBlocks = "delete_blocks"
	// CmdReplicateContainer: the target (the node receiving the command)
	// pulls the CLOSED container Container from one of Sources (preferred
	// first) by the bulk streaming protocol, and reports it CLOSED once it
	// is complete and verified; SizeBytes is the container's expected size
	// (for progress), Pipeline the container's pipeline. Idempotent: a node
	// already holding the container, or already copying it, ignores a
	// repeat. The meta service repeats the command in every heartbeat
	// response while the copy is scheduled; the target lists the copy in
	// Heartbeat.Copying while it runs and reports a failure in
	// Heartbeat.CopyFailures.
	CmdReplicateContainer = "replicate_container"
	// CmdDeleteContainer: the node deletes its replica of Container: a
	// CLOSED one too many (the meta service counted more healthy replicas
	// than the replication factor) or an UNHEALTHY one replaced. Sent only
	// to a node whose reports do not list the container's pipeline
	// (Pipeline): no raft group there still writes to it. The node refuses
	// it for a pipeline it serves, a replica neither CLOSED nor UNHEALTHY,
	// or one being exported; a replica already gone is fine. Its next
	// reports lack the container.
	CmdDeleteContainer = "delete_container"
)

// Command is one instruction to a datanode.
type Command struct {
	Kind      string    `json:"kind"`
	Pipeline  *Pipeline `json:"pipeline,omitempty"`
	Container uint64    `json:"container,omitempty"`
	Blocks    []uint64  `json:"blocks,omitempty"` // local IDs in Container
	// Sources (replicate_container): the replicas to copy from, preferred first.
	Sources []Member `json:"sources,omitempty"`
	// SizeBytes (replicate_container): the container's expected bytes.
	SizeBytes uint64        `json:"size_bytes,omitempty"`
	Token     string        `json:"token,omitempty"` // replicate_container: the export token the sources ask for
	Hold      *holdapi.Hold `json:"hold,omitempty"`  // hold_blocks: the object lock hold of Blocks
}

// Pipeline is a raft group of datanodes.
type Pipeline struct {
	ID      uint64   `json:"id"`
	State   string   `json:"state,omitempty"` // OPEN, CLOSED
	Members []Member `json:"members"`
	Leader  uint64   `json:"leader_id,omitempty"`
	// Allocatable, in GET /v1/pipelines: blocks can be allocated on it now
	// (OPEN, every member HEALTHY and reporting it).
	Allocatable bool `json:"allocatable,omitempty"`
}

// Member is a datanode in a pipeline.
type Member struct {
	NodeID uint64 `json:"node_id"`
	Addr   string `json:"addr"`
	// CertName is the name of the datanode certificate the node is bound
	// to (its first heartbeat over mutual TLS); empty when not known.
	// Pipeline peers accept the member's raft messages only from a
	// connection with that certificate.
	CertName string `json:"cert_name,omitempty"`
}

// Bucket is a namespace of keys.
type Bucket struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Keys    uint64    `json:"keys"`
	Bytes   uint64    `json:"bytes"`
	// Owner is the access key of the S3 user who created the bucket
	// (empty: created outside S3); ACL the gateway's document for it.
	Owner string `json:"owner,omitempty"`
	ACL   []byte `json:"acl,omitempty"`
}

// BucketList lists buckets.
type BucketList struct {
	Buckets []Bucket `json:"buckets"`
}

// NodeList is GET /v1/nodes: every registered datanode, by node ID.
type NodeList struct {
	Nodes []NodeInfo `json:"nodes"`
}

// PipelineList is GET /v1/pipelines: every pipeline, open and closed, by ID.
type PipelineList struct {
	Pipelines []Pipeline `json:"pipelines"`
}

// ContainerList is GET /v1/containers: every container, by ID.
type ContainerList struct {
	Containers []ContainerInfo `json:"containers"`
}

// AllocateRequest asks for a new block for a key being written.
type AllocateRequest struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	// ExcludePipelines: pipelines that just failed for this client.
	ExcludePipelines []uint64 `json:"exclude_pipelines,omitempty"`
	// AnyKey: a block for any key of Bucket (Key empty), handed out ahead
	// of need (a client's pool of pre-allocated blocks); it commits under
	// whichever key of the bucket names it first, and is garbage, deleted
	// after the allocation grace, if none does.
	AnyKey bool `json:"any_key,omitempty"`
}

// AllocateResponse is a new block: a fresh local ID in an OPEN container of
// an OPEN pipeline.
type AllocateResponse struct {
	Block    BlockRef `json:"block"`
	Pipeline Pipeline `json:"pipeline"`
}

// BlockRef names a block.
type BlockRef struct {
	Container uint64 `json:"container"`
	Local     uint64 `json:"local"`
	Token     string `json:"token,omitempty"` // with allocations and key lookups (package blocktoken)
}

// KeyBlock is one block of a key, in key order.
type KeyBlock struct {
	BlockRef
	Pipeline uint64 `json:"pipeline"`
	Length   uint64 `json:"length"`
	// Members is filled on reads: where the replicas are.
	Members []Member `json:"members,omitempty"`
}

// CommitKey makes a key visible, atomically, replacing an older version.
type CommitKey struct {
	Size   uint64     `json:"size"`
	Blocks []KeyBlock `json:"blocks"`
	// CRC32C of the whole value (Castagnoli), as the client computed it.
	CRC32C uint32 `json:"crc32c"`
	// Inline is the whole value, stored in the key's record instead of
	// blocks (no Blocks then; Size = len(Inline) ≤ MaxInlineBytes, CRC32C
	// its checksum, both checked by the meta service).
	Inline []byte `json:"inline,omitempty"`
	// Object is the S3 metadata stored with the key (nil: a plain key).
	Object *ObjectMeta `json:"object,omitempty"`
	// Conditions are checked atomically with the commit.
	Conditions
	// CommitID, when set (Client.CommitKey sets a random one), names the
	// commit: one retried with the same ID after its outcome became
	// unknown answers what the first try committed, even if the key
	// changed since (remembered 10 minutes).
	CommitID string `json:"commit_id,omitempty"`
}

// KeyInfo describes a committed key.
type KeyInfo struct {
	Bucket    string      `json:"bucket"`
	Key       string      `json:"key"`
	Size      uint64      `json:"size"`
	CRC32C    uint32      `json:"crc32c"`
	Created   time.Time   `json:"created"`
	Blocks    []KeyBlock  `json:"blocks"`
	Inline    []byte      `json:"inline,omitempty"`     // the value stored inline (no Blocks, Size > 0); never in a listing
	Object    *ObjectMeta `json:"object,omitempty"`     // the S3 metadata stored with the key (nil: a plain key)
	VersionID string      `json:"version_id,omitempty"` // its S3 version ID when it has one (package versionapi)
}

// KeyList is one page of a listing.
type KeyList struct {
	Keys []KeyInfo `json:"keys"` // without Blocks
	// Next is the start_after of the next page; empty when done.
	Next string `json:"next,omitempty"`
	// CommonPrefixes: with a delimiter, the distinct prefixes (Prefix up
	// to and including the first delimiter after it) of the keys rolled
	// up, in order; each counts as one entry of the page.
	CommonPrefixes []string `json:"common_prefixes,omitempty"`
}

// NodeInfo is the admin view of a datanode.
type NodeInfo struct {
	NodeID        uint64    `json:"node_id"`
	UUID          string    `json:"uuid"`
	Addr          string    `json:"addr"`
	Health        string    `json:"health"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	Pipelines     []uint64  `json:"pipelines"`
	Containers    int       `json:"containers"`
	UsedBytes     uint64    `json:"used_bytes"`
	// CapacityBytes and AvailableBytes as the node's last heartbeat
	// reported them (0: not reported); Full: below the meta service's
	// MinAvailableBytes, so it gets no new pipeline.
	CapacityBytes  uint64 `json:"capacity_bytes"`
	AvailableBytes uint64 `json:"available_bytes"`
	Full           bool   `json:"full,omitempty"`
	// MetricsURL: the node's Prometheus /metrics (empty: none).
	MetricsURL string `json:"metrics_url,omitempty"`
	// FailedVolumes: its data directories out of use, as its last
	// heartbeat reported them.
	FailedVolumes []FailedVolume `json:"failed_volumes,omitempty"`
	// ReadOnlyVolumes: its data directories full at its start, served
	// read-only, as its last heartbeat reported them.
	ReadOnlyVolumes []FailedVolume `json:"read_only_volumes,omitempty"`
	// OpState is the node's operational state (NodeInService,
	// NodeDecommissioning, NodeDecommissioned, NodeInMaintenance), set by
	// an operator (ops.go), since OpSince; MaintenanceUntil ends a
	// maintenance; Decommission is the progress of a decommission.
	OpState          string                `json:"op_state"`
	OpSince          time.Time             `json:"op_since,omitzero"`
	MaintenanceUntil time.Time             `json:"maintenance_until,omitzero"`
	Decommission     *DecommissionProgress `json:"decommission,omitempty"`
}

// ContainerInfo is the admin view of a container.
type ContainerInfo struct {
	ID        uint64 `json:"id"`
	Pipeline  uint64 `json:"pipeline"`
	State     string `json:"state"` // OPEN, CLOSING, CLOSED
	UsedBytes uint64 `json:"used_bytes"`
	Blocks    uint64 `json:"blocks"`
	// CommittedBytes: the bytes of blocks committed into it (by key
	// commits), as the meta service counts them; 0 for a container no key
	// ever used, which holds nothing to lose.
	CommittedBytes uint64 `json:"committed_bytes"`
	// Replicas: the live datanodes (not DEAD, heard from since the meta
	// service started) whose last report lists the container, by node ID.
	Replicas []uint64 `json:"replicas,omitempty"`
	// BCSID is the highest block commit sequence ID a live replica
	// reports CLOSED (for a CLOSED container, that of its healthy
	// replicas), else the highest any reports.
	BCSID uint64 `json:"bcsid"`
	// ReplicaDetails: each of Replicas as its last report has it.
	ReplicaDetails []ReplicaInfo `json:"replica_details,omitempty"`
	// Missing: an OPEN or CLOSING container's pipeline's DEAD members;
	// UnderReplicated: Missing ones, or CLOSED with too few healthy
	// replicas (as ReplicationStatus counts them).
	Missing         []uint64 `json:"missing,omitempty"`
	UnderReplicated bool     `json:"under_replicated,omitempty"`
}

// ReplicaInfo is one replica of a container, as its datanode last
// reported it.
type ReplicaInfo struct {
	Node      uint64 `json:"node"`
	State     string `json:"state"` // OPEN, CLOSED, UNHEALTHY, DELETING
	UsedBytes uint64 `json:"used_bytes"`
	BCSID     uint64 `json:"bcsid"`
	// Behind: a CLOSED replica of a CLOSED container with a BCSID below
	// the highest reported: it missed block commits, is not counted
	// healthy, not read, and is replaced and deleted.
	Behind bool `json:"behind,omitempty"`
}

// ReplicationStatus is GET /v1/replication (and the answer of POST
// /v1/safemode/exit): the replication manager's state. Counts are from
// the latest reports; the totals since the meta service started.
type ReplicationStatus struct {
	// SafeMode: the meta service makes no replication decisions yet (after
	// a start, until enough reports arrived or an operator exits it).
	SafeMode bool `json:"safe_mode"`
	// SafeModeReason says which condition is missing, with numbers.
	SafeModeReason    string `json:"safe_mode_reason,omitempty"`
	ReplicationFactor int    `json:"replication_factor"`
	// UnderReplicated: CLOSED containers with fewer healthy replicas than
	// wanted, and OPEN or CLOSING ones of a pipeline with a DEAD member;
	// Unrecoverable: those with no healthy replica left.
	UnderReplicated int `json:"under_replicated"`
	Unrecoverable   int `json:"unrecoverable"`
	// UnderReplicatedOpen: those OPEN or CLOSING (their pipeline kept
	// OPEN without a DEAD member, or not yet settled); MinLiveReplicas:
	// the fewest HEALTHY members of a pipeline taking writes.
	UnderReplicatedOpen int `json:"under_replicated_open"`
	MinLiveReplicas     int `json:"min_live_replicas"`
	// AtRisk: containers (any state) with a replica on a STALE node — it
	// missed heartbeats but is not DEAD yet, so it still counts as a
	// replica above, and copies start only once it is DEAD.
	AtRisk int `json:"at_risk"`
	// PendingBytes: bytes of the copies still needed (each container's
	// size × its missing replicas), copies in flight included.
	PendingBytes     uint64     `json:"pending_bytes"`
	Inflight         []CopyTask `json:"inflight"`
	CopiedContainers uint64     `json:"copied_containers"`
	CopiedBytes      uint64     `json:"copied_bytes"`
	FailedCopies     uint64     `json:"failed_copies"`
	// FirstScheduled: the first copy scheduled since the start (zero:
	// none); LastCompleted: the last copy completed.
	FirstScheduled time.Time `json:"first_scheduled,omitzero"`
	// FirstDelivered: the first replicate_container sent to a target in a
	// heartbeat response (the first copy starts then).
	FirstDelivered time.Time `json:"first_delivered,omitzero"`
	LastCompleted  time.Time `json:"last_completed,omitzero"`
	// RateBytesPerS: CopiedBytes / (LastCompleted - FirstScheduled).
	RateBytesPerS float64 `json:"rate_bytes_per_s"`
	// OverReplicated: CLOSED containers with more healthy replicas than
	// wanted; Trimming: replica deletions sent and not yet seen done;
	// TrimmedReplicas: those done since the start.
	OverReplicated  int    `json:"over_replicated"`
	Trimming        int    `json:"trimming"`
	TrimmedReplicas uint64 `json:"trimmed_replicas"`
	// BehindReplicas: CLOSED replicas of CLOSED containers, on live
	// nodes, whose BCSID is below the highest reported for their
	// container (not counted healthy; replaced, then deleted).
	BehindReplicas int `json:"behind_replicas"`
	// Limits are the replication manager's settings in force.
	Limits ReplicationLimits `json:"limits"`
}

// ReplicationLimits are the replication manager's settings (spindle meta's
// flags of the same names).
type ReplicationLimits struct {
	MaxCopiesPerSource int `json:"max_copies_per_source"`
	MaxCopiesPerTarget int `json:"max_copies_per_target"`
	MaxInflightCopies  int `json:"max_inflight_copies"`
	// CopyRetryAfterMs: a source whose copy failed is not chosen again for this long.
	CopyRetryAfterMs int64 `json:"copy_retry_after_ms"`
	// CopyTimeoutMinMs: a copy older than this (and than its size at the
	// minimum copy rate) is taken as lost.
	CopyTimeoutMinMs int64 `json:"copy_timeout_min_ms"`
	// SafeModeMinNodes: 0 is min(3, registered datanodes).
	SafeModeMinNodes          int     `json:"safe_mode_min_nodes"`
	SafeModeContainerFraction float64 `json:"safe_mode_container_fraction"`
}

// CopyTask is one container copy in flight.
type CopyTask struct {
	Container uint64    `json:"container"`
	Source    uint64    `json:"source"`
	Target    uint64    `json:"target"`
	SizeBytes uint64    `json:"size_bytes"`
	Started   time.Time `json:"started"`
	// Attempt counts the copies of this container scheduled since it was
	// last complete (1: the first).
	Attempt int `json:"attempt"`
}

// Error is the body of every non-2xx response. As an error (what Client
// returns) it reads as its message and unwraps to the Err* value of its
// reason when it has one (ErrNoSuchBucket, …, see errors.go), which wraps
// that of its code, else to that of its code: errors.Is(err, ErrNotFound)
// and errors.Is(err, ErrNoSuchBucket) both work.
type Error struct {
	Code string `json:"code"` // one of the Code* constants
	// Reason refines Code (one of the Reason* constants, or empty): which
	// thing was not found, which rule a request broke. A client that does
	// not know it goes by Code alone.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
	// NotLeader: a member of a replicated meta service that does not
	// serve refused the request before doing anything (code UNAVAILABLE);
	// Leader is the address of the member it takes for the leader, when
	// it knows one.
	NotLeader bool   `json:"not_leader,omitempty"`
	Leader    string `json:"leader,omitempty"`
	// notSent: the request never reached the server (the dial failed).
	notSent bool
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "meta: " + e.Code
	}
	return e.Message
}

// Unwrap returns the Err* value of the reason, when it is one of the
// code's (errorOfReason), else that of the code (nil for an unknown code).
func (e *Error) Unwrap() error {
	if r := errorOfReason(e.Code, e.Reason); r != nil {
		return r
	}
	return errorOf(e.Code)
}

// errorOf maps a code to its Err* value.
func errorOf(code string) error {
	switch code {
	case CodeInvalid:
		return ErrInvalid
	case CodeNotFound:
		return ErrNotFound
	case CodeExists:
		return ErrExists
	case CodeNotEmpty:
		return ErrNotEmpty
	case CodeNoPipeline:
		return ErrNoPipeline
	case CodeUnavailable:
		return ErrUnavailable
	case CodeBusy:
		return ErrBusy
	case CodeInternal:
		return ErrInternal
	case CodePrecondition:
		return ErrPrecondition
	case CodeForbidden:
		return ErrForbidden
	}
	return nil
}

// CodeOf is the code and HTTP status a server answers err with: the first
// Err* value err wraps, INTERNAL (500) otherwise.
func CodeOf(err error) (code string, status int) {
	switch {
	case errors.Is(err, ErrInvalid):
		return CodeInvalid, 400
	case errors.Is(err, ErrNotFound):
		return CodeNotFound, 404
	case errors.Is(err, ErrExists):
		return CodeExists, 409
	case errors.Is(err, ErrNotEmpty):
		return CodeNotEmpty, 409
	case errors.Is(err, ErrNoPipeline):
		return CodeNoPipeline, 503
	case errors.Is(err, ErrBusy): // before ErrUnavailable, which it wraps
		return CodeBusy, 503
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable, 503
	case errors.Is(err, ErrPrecondition):
		return CodePrecondition, 412
	case errors.Is(err, ErrForbidden):
		return CodeForbidden, 403
	}
	return CodeInternal, 500
}

// Error codes.
const (
	CodeInvalid     = "INVALID"     // 400: bad name or body
	CodeNotFound    = "NOT_FOUND"   // 404: no such bucket, key, upload, user, …
	CodeExists      = "EXISTS"      // 409
	CodeNotEmpty    = "NOT_EMPTY"   // 409: bucket has keys
	CodeNoPipeline  = "NO_PIPELINE" // 503: no healthy pipeline to allocate from
	CodeUnavailable = "UNAVAILABLE" // 503
	// CodeBusy: 503, the request was refused before its body was read
	// (the request bodies in flight at their bound): nothing was done,
	// and any call may be tried again.
	CodeBusy     = "BUSY"
	CodeInternal = "INTERNAL" // 500
	// CodePrecondition: 412, a commit's Conditions do not hold, or a
	// datanode's removal is refused (NodeRemoval).
	CodePrecondition = "PRECONDITION_FAILED"
	// CodeForbidden: 403, the caller's certificate (its role, or the
	// datanode it may speak for) does not allow the call.
	CodeForbidden = "FORBIDDEN"
)

// Errors a Client returns (wrapped with the server's message); test with
// errors.Is. The errors of a Reason (errors.go) refine them.
var (
	ErrInvalid     = errors.New("invalid request")
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already exists")
	ErrNotEmpty    = errors.New("bucket not empty")
	ErrNoPipeline  = errors.New("no healthy pipeline")
	ErrUnavailable = errors.New("meta service unavailable")
	// ErrBusy (an ErrUnavailable): refused before anything was done.
	ErrBusy     = fmt.Errorf("%w: busy", ErrUnavailable)
	ErrInternal = errors.New("meta service internal error")
	// ErrPrecondition: a commit's Conditions did not hold, or a
	// datanode's removal was refused (NodeRemoval).
	ErrPrecondition = errors.New("precondition failed")
	ErrForbidden    = errors.New("forbidden")
)

// ValidBucket checks a bucket name: 3..63 bytes of lower-case letters,
// digits, '-' and '.', starting and ending with a letter or digit (as S3).
// Its errors wrap ErrInvalidBucketName (an ErrInvalid).
func ValidBucket(name string) error {
	if len(name) < 3 || len(name) > MaxBucketBytes {
		return fmt.Errorf("%w %q: want 3..%d characters", ErrInvalidBucketName, name, MaxBucketBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || ((c == '-' || c == '.') && i > 0 && i < len(name)-1)
		if !ok {
			return fmt.Errorf("%w %q: only a-z, 0-9, '-' and '.' (not first or last)", ErrInvalidBucketName, name)
		}
	}
	return nil
}

// ValidKey checks a key name: 1..1024 bytes of UTF-8 without NUL or
// control characters, not starting with '/', no "." or ".." segment. Its
// errors wrap ErrInvalidKeyName (an ErrInvalid).
func ValidKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: want 1..%d bytes, got %d", ErrInvalidKeyName, MaxKeyBytes, len(key))
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("%w %q: starts with '/'", ErrInvalidKeyName, key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return fmt.Errorf("%w %q: has a control character or invalid UTF-8", ErrInvalidKeyName, key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w %q: has a %q segment", ErrInvalidKeyName, key, seg)
		}
	}
	return nil
}
