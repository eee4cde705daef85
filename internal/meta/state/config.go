package state

import (
	"errors"
	"fmt"
	"github.com/spindle-store/spindle/internal/lifecycle"
	"log/slog"
	"net"
	"time"

	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/vfs"
	"github.com/spindle-store/spindle/internal/wal"
)

// PipelineSize is the number of datanodes in a pipeline.
const PipelineSize = 3

// MaxNodeID is the highest node ID the meta service assigns (a datanode's
// raft ID must fit in 16 bits: the pipeline's proposal IDs carry it).
const MaxNodeID = 1<<16 - 1

// Defaults of the service's own limits (the cluster defaults are in
// metaapi).
const (
	// DefaultAllocationGrace: a block allocated and not committed for this
	// long is garbage (an interrupted put) and scheduled for deletion.
	DefaultAllocationGrace = time.Hour
	// DefaultBlockTokenLifetime: a block token expires this long after it
	// was minted; DefaultBlockKeyRotation: a new signing key is made this
	// long after the last (two kept: a token outlives no key). Both ≥ the
	// first, package meta/tokenkeys.
	DefaultBlockTokenLifetime = time.Hour
	DefaultBlockKeyRotation   = 6 * time.Hour
	// DefaultContainersPerPipeline: OPEN containers kept per OPEN pipeline.
	DefaultContainersPerPipeline = 1
	// DefaultLeaveTimeout: a CLOSED pipeline's members are told to leave it
	// once none of its containers is reported OPEN, or after this long.
	DefaultLeaveTimeout = time.Minute
	// DefaultDeleteRedeliverAfter: a block deletion delivered and not
	// acknowledged is delivered again after this long.
	DefaultDeleteRedeliverAfter = 30 * time.Second
	// DefaultMaxDeleteAttempts: deliveries of one block deletion before the
	// meta service gives up on it (logged and counted).
	DefaultMaxDeleteAttempts = 5
	// DefaultCloseResendAfter: a close_container command is repeated, to a
	// node still reporting the container OPEN, at most this often.
	DefaultCloseResendAfter = 3 * time.Second
)

// Named bounds.
const (
	// MaxDeleteBlocksPerHeartbeat bounds the block IDs of the delete_blocks
	// commands in one heartbeat response.
	MaxDeleteBlocksPerHeartbeat = 1000
	// MaxCommandsPerHeartbeat bounds the commands in one heartbeat response
	// (a datanode runs a bounded number of them at once).
	MaxCommandsPerHeartbeat = 64
	// MaxExpiredPerTick bounds the expired allocations turned into pending
	// deletions in one Tick.
	MaxExpiredPerTick = 10000
	// MaxRequestBytes bounds a request body.
	MaxRequestBytes = 32 << 20
	// DefaultMinAvailableBytes is Config.MinAvailableBytes' default: room
	// for a few heartbeat intervals of writes before the volumes' own
	// reserve refuses them.
	DefaultMinAvailableBytes = 64 << 20
	// DefaultMinLiveReplicas is Config.MinLiveReplicas' default: a
	// pipeline's raft majority, as Ceph's min_size 2 of size 3.
	DefaultMinLiveReplicas = PipelineSize/2 + 1
)

// Config configures a meta service. Zero values take the defaults.
type Config struct {
	// Dir holds the Pebble store (created if missing).
	Dir string
	// BodyReadTimeout, MaxBodyBytesInFlight and BodyAdmitWait bound the
	// request bodies being read (admission.go; defaults
	// DefaultBodyReadTimeout, DefaultMaxBodyBytesInFlight and
	// DefaultBodyAdmitWait).
	BodyReadTimeout      time.Duration
	MaxBodyBytesInFlight int64
	BodyAdmitWait        time.Duration
	// FS is the filesystem of the store (default vfs.Default, the OS);
	// tests give a vfs.MemFS to crash it or inject faults.
	FS vfs.FS
	// Listen is the HTTP address of Start/Run (default 127.0.0.1:0).
	Listen string
	// ReadyFile, when set, receives "ADDR\nPID\n" once Run serves.
	ReadyFile string

	HeartbeatInterval     time.Duration
	StaleAfter            time.Duration
	DeadAfter             time.Duration
	PipelinesPerNode      int
	ContainerSizeBytes    uint64
	ContainersPerPipeline int
	AllocationGrace       time.Duration
	// BlockTokenLifetime, BlockKeyRotation: block tokens (meta/tokenkeys).
	BlockTokenLifetime, BlockKeyRotation time.Duration
	LeaveTimeout                         time.Duration
	DeleteRedeliverAfter                 time.Duration
	MaxDeleteAttempts                    int
	CloseResendAfter                     time.Duration
	// MinAvailableBytes: a datanode reporting less space available for
	// new data (above its volumes' reserves) gets no new pipeline, and
	// its OPEN pipelines are closed, so that puts go to nodes with room
	// (DefaultMinAvailableBytes).
	MinAvailableBytes uint64
	// MinLiveReplicas (DefaultMinLiveReplicas): the fewest HEALTHY members
	// of a pipeline that blocks are allocated on. A pipeline with a DEAD
	// member stays OPEN, and takes writes, only while at least this many
	// of its members are HEALTHY and no replacement member exists
	// (cluster/degraded.go); below it the pipeline is closed and writes
	// are refused rather than acknowledged by fewer replicas. From a raft
	// majority (PipelineSize/2+1) to PipelineSize (never degraded).
	MinLiveReplicas int

	// Replication manager (replication.go; zero: the Default* values).
	ReplicationFactor  int
	CopyRetryAfter     time.Duration
	MaxCopiesPerTarget int
	MaxCopiesPerSource int
	MaxInflightCopies  int
	// CopyStartTimeout: a scheduled copy its target has not listed in
	// Copying for this long is taken as lost (default 3 heartbeat
	// intervals + 10 s).
	CopyStartTimeout time.Duration
	// CopyTimeoutMin: a copy older than this and than its size at
	// MinCopyBytesPerS is taken as lost (DefaultCopyTimeoutMin).
	CopyTimeoutMin time.Duration
	// Safe mode: SafeModeMinNodes datanodes (default min(3, registered))
	// reported and SafeModeContainerFraction (default 0.99) of the CLOSED
	// containers with a healthy replica; DisableSafeMode starts without
	// it (tests).
	SafeModeMinNodes          int
	SafeModeContainerFraction float64
	DisableSafeMode           bool

	// TickInterval is how often Start runs Tick (default
	// HeartbeatInterval); negative: never (tests call Tick themselves).
	TickInterval time.Duration
	// Lifecycle: the S3 lifecycle runner's settings (meta/lcmeta; zero: defaults).
	Lifecycle lifecycle.Settings
	// Now is the clock (default time.Now); tests inject one.
	Now    func() time.Time
	Logger *slog.Logger

	// Replication (raft.go): with Peers set, the service is member ID of
	// the raft group of Peers (member ID → host:port, each member's
	// Listen: it serves the API and the raft messages on it). Without,
	// it is a group of one that commits straight to its store.
	ID    uint64
	Peers map[uint64]string
	// RaftTickInterval (DefaultRaftTickInterval) and ElectionTicks
	// (DefaultElectionTicks): a follower that hears no leader for
	// ElectionTicks ticks (randomised up to twice that) campaigns.
	RaftTickInterval time.Duration
	ElectionTicks    int
	// SnapshotEntries (DefaultSnapshotEntries): a member checkpoints its
	// store once this many entries were applied since its last; the raft
	// log is then compacted to LogRetainEntries (DefaultLogRetainEntries)
	// entries behind the checkpoint (snapshot.go).
	SnapshotEntries  int
	LogRetainEntries int
	// MaxProposalBacklogBytes (DefaultMaxProposalBacklogBytes) bounds
	// the serving leader's proposals not yet applied to its store: a
	// client write that finds the backlog at the bound waits for it to
	// drain, at most ProposalBacklogWait (DefaultProposalBacklogWait),
	// then is refused BUSY (the client retries), instead of growing it
	// until raft drops a proposal and the leader stops serving. The
	// cluster manager's own writes (heartbeats, Tick) are not held back.
	MaxProposalBacklogBytes int
	ProposalBacklogWait     time.Duration
	// RestoreAsNewGroup (--restore): Dir holds a store restored from a
	// backup, of a group whose members are gone; the member starts a new
	// group of Peers, which must be this member alone, from it (raftgroup,
	// bootstrapRestored). Ignored once the raft log exists.
	RestoreAsNewGroup bool
	// Join: a member being added to a running group (spindle admin meta
	// add) starts with an empty log instead of bootstrapping Peers as the
	// group, and waits for the leader's snapshot.
	Join bool

	// Listener, when set (tests, benches), is what Start serves on instead of
	// listening on Listen (a member restarted on its address).
	Listener net.Listener
	// TLS secures the HTTP API (mutual TLS 1.3: every client, datanode and
	// peer presents a certificate of the cluster CA) and the raft messages
	// and snapshots it sends to its peers; nil: plaintext (--insecure).
	TLS *tlsconf.Settings
	// AdminToken, without TLS (--insecure), is the admin credential: the
	// calls of the admin classes (auth.go) need "Authorization: Bearer
	// AdminToken". Empty: none (plaintext: every call allowed). Ignored
	// with TLS, where the credential is an admin certificate.
	AdminToken string
	// KEK seals the secrets the store holds (S3 secret keys, token
	// signing keys; package kek): its files, raft log, snapshots and
	// backups hold them sealed. Nil: Open loads it from SPINDLE_KEK or
	// KEKFile (default kek.DefaultPath(Dir), created at the first start).
	KEK     *kek.Keyring
	KEKFile string
	// AuditLog is the audit log's path (package meta/audit): "" is
	// Dir + ".audit.jsonl" (beside the store) on the OS filesystem, none
	// on another (tests on a MemFS); "off": none. AuditMaxBytes and
	// AuditKeep bound its rotation (0: audit's defaults).
	AuditLog      string
	AuditMaxBytes int64
	AuditKeep     int
	// JoinCA, with TLS, lets datanodes join with a one-time token (join.go):
	// it signs their certificates. Nil: no joins.
	JoinCA *tlsconf.CA
	// CertValidity is the lifetime of the certificates JoinCA issues
	// (joins, renewals; 0: tlsconf.DefaultCertValidity).
	CertValidity time.Duration
}

func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.MinAvailableBytes == 0 {
		c.MinAvailableBytes = DefaultMinAvailableBytes
	}
	if c.MinLiveReplicas == 0 {
		c.MinLiveReplicas = DefaultMinLiveReplicas
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = metaapi.DefaultHeartbeatInterval
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = metaapi.DefaultStaleAfter
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = metaapi.DefaultDeadAfter
	}
	if c.PipelinesPerNode <= 0 {
		c.PipelinesPerNode = metaapi.DefaultPipelinesPerNode
	}
	if c.ContainerSizeBytes == 0 {
		c.ContainerSizeBytes = metaapi.DefaultContainerSizeBytes
	}
	if c.ContainersPerPipeline <= 0 {
		c.ContainersPerPipeline = DefaultContainersPerPipeline
	}
	if c.AllocationGrace <= 0 {
		c.AllocationGrace = DefaultAllocationGrace
	}
	if c.BlockTokenLifetime <= 0 {
		c.BlockTokenLifetime = DefaultBlockTokenLifetime
	}
	if c.BlockKeyRotation <= 0 {
		c.BlockKeyRotation = max(DefaultBlockKeyRotation, c.BlockTokenLifetime)
	}
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = DefaultLeaveTimeout
	}
	if c.DeleteRedeliverAfter <= 0 {
		c.DeleteRedeliverAfter = DefaultDeleteRedeliverAfter
	}
	if c.MaxDeleteAttempts <= 0 {
		c.MaxDeleteAttempts = DefaultMaxDeleteAttempts
	}
	if c.CloseResendAfter <= 0 {
		c.CloseResendAfter = DefaultCloseResendAfter
	}
	if c.ReplicationFactor <= 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.CopyRetryAfter <= 0 {
		c.CopyRetryAfter = DefaultCopyRetryAfter
	}
	if c.MaxCopiesPerTarget <= 0 {
		c.MaxCopiesPerTarget = DefaultMaxCopiesPerTarget
	}
	if c.MaxCopiesPerSource <= 0 {
		c.MaxCopiesPerSource = DefaultMaxCopiesPerSource
	}
	if c.MaxInflightCopies <= 0 {
		c.MaxInflightCopies = DefaultMaxInflightCopies
	}
	if c.CopyStartTimeout <= 0 {
		c.CopyStartTimeout = 3*c.HeartbeatInterval + CopyStartSlack
	}
	if c.CopyTimeoutMin <= 0 {
		c.CopyTimeoutMin = DefaultCopyTimeoutMin
	}
	if c.SafeModeContainerFraction == 0 {
		c.SafeModeContainerFraction = DefaultSafeModeContainerFraction
	}
	if c.TickInterval == 0 {
		c.TickInterval = c.HeartbeatInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.BodyReadTimeout <= 0 {
		c.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if c.MaxBodyBytesInFlight <= 0 {
		c.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	// One body of the largest size must always fit.
	c.MaxBodyBytesInFlight = max(c.MaxBodyBytesInFlight, MaxRequestBytes)
	if c.BodyAdmitWait <= 0 {
		c.BodyAdmitWait = DefaultBodyAdmitWait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RaftTickInterval <= 0 {
		c.RaftTickInterval = DefaultRaftTickInterval
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = DefaultElectionTicks
	}
	if c.MaxProposalBacklogBytes <= 0 {
		c.MaxProposalBacklogBytes = DefaultMaxProposalBacklogBytes
	}
	if c.ProposalBacklogWait <= 0 {
		c.ProposalBacklogWait = DefaultProposalBacklogWait
	}
	if c.SnapshotEntries <= 0 {
		c.SnapshotEntries = DefaultSnapshotEntries
	}
	if c.LogRetainEntries < 0 {
		c.LogRetainEntries = 0
	} else if c.LogRetainEntries == 0 {
		c.LogRetainEntries = DefaultLogRetainEntries
	}
}

func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("meta: --dir is required")
	}
	if c.BlockKeyRotation < c.BlockTokenLifetime {
		return fmt.Errorf("meta: block key rotation %s is shorter than the block token lifetime %s: a token would outlive its key", c.BlockKeyRotation, c.BlockTokenLifetime)
	}
	if c.DeadAfter <= c.StaleAfter {
		return fmt.Errorf("meta: dead-after %s must exceed stale-after %s", c.DeadAfter, c.StaleAfter)
	}
	if c.MinLiveReplicas < DefaultMinLiveReplicas || c.MinLiveReplicas > PipelineSize {
		return fmt.Errorf("meta: min-live-replicas %d: want %d (a raft majority of a pipeline) to %d", c.MinLiveReplicas, DefaultMinLiveReplicas, PipelineSize)
	}
	if c.SafeModeContainerFraction < 0 || c.SafeModeContainerFraction > 1 {
		return fmt.Errorf("meta: safe-mode container fraction %g: want 0..1", c.SafeModeContainerFraction)
	}
	return nil
}

// Defaults and bounds of the replication manager.
const (
	// DefaultReplicationFactor: healthy replicas wanted of every CLOSED
	// container.
	DefaultReplicationFactor = PipelineSize
	// DefaultSafeModeMinNodes: datanodes that must have reported since the
	// start before safe mode ends (at most the registered ones).
	DefaultSafeModeMinNodes = 3
	// DefaultSafeModeContainerFraction: fraction of the CLOSED containers
	// that must have a healthy replica reported before safe mode ends.
	DefaultSafeModeContainerFraction = 0.99
	// DefaultCopyRetryAfter: a source that failed a copy of a container is
	// not chosen again for it for this long when another source exists.
	DefaultCopyRetryAfter = 30 * time.Second
	// DefaultMaxCopiesPerTarget bounds the copies in flight to one node.
	DefaultMaxCopiesPerTarget = 4
	// DefaultMaxCopiesPerSource bounds the copies in flight from one node.
	DefaultMaxCopiesPerSource = 4
	// DefaultMaxInflightCopies bounds the copies in flight in the cluster.
	DefaultMaxInflightCopies = 64
	// DefaultCopyTimeoutMin: a copy is given at least this long in all
	// (the bound grows with its size, see MinCopyBytesPerS).
	DefaultCopyTimeoutMin = 10 * time.Minute
	// MinCopyBytesPerS: a copy slower than this (over its whole age) is
	// taken as lost once it is older than DefaultCopyTimeoutMin.
	MinCopyBytesPerS = 20_000_000
	// copyStartSlack is added to three heartbeat intervals for the
	// default CopyStartTimeout.
	CopyStartSlack = 10 * time.Second
	// MaxTrims bounds the replica deletions (over-replication) in flight
	// in the cluster.
	MaxTrims = 64
)

// Raft defaults and bounds of a replicated meta service (the meta raft
// group, raft.go).
const (
	// DefaultRaftTickInterval is one raft tick; DefaultElectionTicks of
	// them without a leader's heartbeat start an election (1 s), a leader
	// heartbeats every raftHeartbeatTicks.
	DefaultRaftTickInterval = 100 * time.Millisecond
	DefaultElectionTicks    = 10
	// maxRaftRecordBytes bounds one meta log record (an entry: a
	// mutation's Pebble batch; a key of MaxBlocksPerKey blocks is ~2 MiB).
	MaxRaftRecordBytes = wal.MaxRecordBytesLimit
	// maxRaftMsgBytes bounds the entries of one append message.
	MaxRaftMsgBytes = 1 << 20
	// DefaultMaxProposalBacklogBytes: Config.MaxProposalBacklogBytes.
	// With one proposal of at most MaxRaftRecordBytes past it, the
	// backlog stays under raft's bound on uncommitted entries
	// (MaxUncommittedProposalBytes), so that raft never drops a
	// proposal for its size.
	DefaultMaxProposalBacklogBytes = 32 << 20
	// MaxUncommittedProposalBytes is raft's bound on a leader's
	// uncommitted entries (raftgroup).
	MaxUncommittedProposalBytes = 64 << 20
	// DefaultProposalBacklogWait: Config.ProposalBacklogWait.
	DefaultProposalBacklogWait = 10 * time.Second
)

// Checkpoints of a replicated member (snapshot.go).
const (
	// DefaultSnapshotEntries: a member checkpoints its store once this
	// many entries were applied since its last checkpoint.
	DefaultSnapshotEntries = 100000
	// DefaultLogRetainEntries: entries kept in the raft log behind the
	// latest checkpoint, so that a follower a little behind catches up
	// from the log rather than from a snapshot.
	DefaultLogRetainEntries = 10000
)

// Request bodies are admitted against two bounds, so that clients that
// send slowly or all at once cannot hold the service's memory and
// goroutines without limit (a slowloris behind the mutual TLS, or a burst
// of large inline commits):
//
//   - time: a body must arrive within BodyReadTimeout of its admission
//     (MaxRequestBytes at 0.5 MB/s); a read past it fails, the request is
//     refused INVALID and its connection closed by net/http;
//   - bytes: the bodies admitted at once weigh at most MaxBodyBytesInFlight
//     (each its Content-Length, MaxRequestBytes when it has none), held
//     until its handler returns. A request finding no room waits up to
//     BodyAdmitWait and is then refused BUSY (503) before a byte of its
//     body is read: nothing was done, and the client retries it
//     (metaapi.ErrBusy), POSTs included.
//
// Requests without a body (GETs, most DELETEs) are not counted. The raft
// stream and snapshot routes (raftnet.go) are not under these bounds:
// they are long-lived by design and served only to meta members.
const (
	DefaultBodyReadTimeout      = 60 * time.Second
	DefaultMaxBodyBytesInFlight = 256 << 20
	DefaultBodyAdmitWait        = 10 * time.Second
)
