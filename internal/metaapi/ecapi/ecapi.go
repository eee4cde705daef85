// Package ecapi is the meta service's protocol for erasure coding (issue
// 37): the cluster's default policy and a bucket's, the conversion work
// of a datanode and its report, and an EC container's layout for readers;
// with its client calls as free functions over metaapi.Client's Do.
// Routes (JSON bodies, errors as in metaapi):
//
//	GET  /v1/ec/default              → Policy (the cluster default; "rep3" when none is set)
//	PUT  /v1/ec/default              Policy (204)
//	GET  /v1/ec/buckets/{bucket}     → Policy (the bucket's own, its tag's or the default: Source says which)
//	PUT  /v1/ec/buckets/{bucket}     Policy (204; "" removes the bucket's own)
//	POST /v1/ec/work                 WorkRequest → Work (a datanode: what to convert, which replicas to drop)
//	POST /v1/ec/converted            Converted (204: the container is EC from now on)
//	GET  /v1/ec/containers/{id}      → Layout (404 NOT_FOUND: not erasure-coded)
//	POST /v1/ec/rebuilt              Rebuilt (204: the shard's new datanode recorded)
//	POST /v1/ec/compacted            Compacted (204: the container's new generation recorded)
//	GET  /v1/ec/status               → Status (EC containers, shards missing, repairs)
//
// Invariants: a policy is ec.ParseSpec's text (its canonical String on
// the way out); a PUT of a coded policy is refused (INVALID) when fewer
// datanodes are registered than its shards, never taken and left
// unconvertible. A Converted report names a datanode for every shard, each
// shard already fsynced there; once the meta service answered it the
// container is erasure-coded, and only then does a Work answer list its
// replicas to drop. A Rebuilt report names a shard the datanode stored,
// verified and fsynced; once answered the shard is recorded there. A
// DropShards or DropQuarantined entry names a shard no record, rebuild or
// conversion or compaction in flight names on that datanode. A
// Compacted report names a new generation's shards, each already fsynced
// on its datanode; once answered the container is that generation and
// the previous one's shards are dropped (DropShards). Over TLS a datanode's work and reports
// are refused
// (FORBIDDEN) unless its certificate is the one its node record is bound
// to, as for heartbeats.
//
// Concurrency: the functions are safe for concurrent use when their Doer
// is (metaapi.Client is).
package ecapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// Routes.
const (
	DefaultRoute   = "/v1/ec/default"
	BucketsRoute   = "/v1/ec/buckets/"
	WorkRoute      = "/v1/ec/work"
	ConvertedRoute = "/v1/ec/converted"
	ContainerRoute = "/v1/ec/containers/"
	RebuiltRoute   = "/v1/ec/rebuilt"
	CompactedRoute = "/v1/ec/compacted"
	StatusRoute    = "/v1/ec/status"
)

// TagName is the S3 bucket tag that names a bucket's policy (when it has
// none of its own).
const TagName = "spindle-ec"

// Policy is a policy's text (ec.ParseSpec), and on reads where it comes
// from: "bucket", "tag", "default" or "" (the built-in rep3).
type Policy struct {
	Policy string `json:"policy"`
	Source string `json:"source,omitempty"`
}

// WorkRequest is a datanode asking for its erasure-coding work.
type WorkRequest struct {
	Node uint64 `json:"node"`
	// Converting lists the conversions it runs now.
	Converting []uint64 `json:"converting,omitempty"`
	// Compacting lists the compactions it runs now.
	Compacting []uint64 `json:"compacting,omitempty"`
	// Rebuilding lists the shard rebuilds it runs now.
	Rebuilding []ShardRef `json:"rebuilding,omitempty"`
	// Shards is every shard it stores (verified by its scrubber or when
	// received), with its file's modification time.
	Shards []HeldShard `json:"shards,omitempty"`
	// Inventory says Shards is the node's whole shard list (false: an
	// older datanode that does not send it).
	Inventory bool `json:"inventory,omitempty"`
	// Quarantined lists the shards its scrubber took out of service
	// (found corrupt), whose copies it keeps until they are rebuilt.
	Quarantined []ShardRef `json:"quarantined,omitempty"`
}

// ShardRef names a shard of a container: of its generation Generation
// (0, absent in JSON: the conversion's; each compaction writes the next).
type ShardRef struct {
	Container  uint64 `json:"container"`
	Generation uint32 `json:"generation,omitempty"`
	Index      int    `json:"index"`
}

// HeldShard is a shard a datanode stores: MTime (unix ns) tells one file
// from a later one of the same shard.
type HeldShard struct {
	ShardRef
	MTime int64 `json:"mtime"`
}

// Rebuild: reconstruct shard Index of Container from the other shards
// (Shards: the layout, Shards[Index] the node it is rebuilt from no
// more) and store it on this node, then report Rebuilt.
type Rebuild struct {
	ShardRef
	Policy  string  `json:"policy"`
	Logical uint64  `json:"logical"`
	Shards  []Shard `json:"shards"`
}

// Rebuilt reports a shard rebuilt, verified and fsynced on Node.
type Rebuilt struct {
	Node uint64 `json:"node"`
	ShardRef
}

// Status is the state of erasure coding (GET /v1/ec/status).
type Status struct {
	// Coded is the erasure-coded containers.
	Coded int `json:"coded"`
	// Shards, ShardsMissing, ShardsMoving: shards in all, those whose
	// datanode is DEAD or does not list them, those on a decommissioning
	// datanode (still readable, to move).
	Shards        int `json:"shards"`
	ShardsMissing int `json:"shards_missing"`
	ShardsMoving  int `json:"shards_moving"`
	// Degraded: containers with a shard missing; Unrecoverable: with
	// fewer than k shards left.
	Degraded      int `json:"degraded"`
	Unrecoverable int `json:"unrecoverable"`
	// Conversions and Repairs in flight; done and failed since the
	// leader started.
	Conversions   []Task `json:"conversions"`
	Repairs       []Task `json:"repairs"`
	RepairsDone   uint64 `json:"repairs_done"`
	RepairsFailed uint64 `json:"repairs_failed"`
	RepairedBytes uint64 `json:"repaired_bytes"`
	// Compactions in flight; done and failed since the leader started,
	// the shard bytes they freed (old generations' less new ones'), and
	// the bytes of blocks deleted from EC containers not yet compacted
	// away (DeadBytes).
	Compactions       []Task `json:"compactions"`
	CompactionsDone   uint64 `json:"compactions_done"`
	CompactionsFailed uint64 `json:"compactions_failed"`
	ReclaimedBytes    uint64 `json:"reclaimed_bytes"`
	DeadBytes         uint64 `json:"dead_bytes"`
	// Containers: each EC container's state (policy, nodes, missing).
	Containers []ContainerState `json:"containers"`
	// Space: raw bytes (replicas as the datanodes report them, shards)
	// and logical bytes (each replicated container once, at its largest
	// replica, and each EC container's logical bytes).
	ReplicaBytes   uint64      `json:"replica_bytes"`
	ShardBytes     uint64      `json:"shard_bytes"`
	LogicalBytes   uint64      `json:"logical_bytes"`
	ECLogicalBytes uint64      `json:"ec_logical_bytes"`
	Nodes          []NodeBytes `json:"nodes"`
}

// NodeBytes is a datanode's share of the raw bytes.
type NodeBytes struct {
	Node         uint64 `json:"node"`
	ReplicaBytes uint64 `json:"replica_bytes"`
	Shards       int    `json:"shards"`
	ShardBytes   uint64 `json:"shard_bytes"`
}

// Task is a conversion (Index -1) or a shard rebuild in flight.
type Task struct {
	Container uint64 `json:"container"`
	Index     int    `json:"index"`
	Node      uint64 `json:"node"`           // the converter, or the rebuild's target
	From      uint64 `json:"from,omitempty"` // a rebuild: the datanode the shard leaves
	Why       string `json:"why,omitempty"`
	Started   int64  `json:"started_unix_ms"`
}

// ContainerState is an EC container's shards.
type ContainerState struct {
	Container  uint64   `json:"container"`
	Generation uint32   `json:"generation,omitempty"`
	Policy     string   `json:"policy"`
	Nodes      []uint64 `json:"nodes"`
	Missing    []int    `json:"missing,omitempty"`
	Moving     []int    `json:"moving,omitempty"`
	// Logical bytes, and those of its blocks deleted since (DeadBytes:
	// freed by its next compaction).
	Logical   uint64 `json:"logical"`
	DeadBytes uint64 `json:"dead_bytes,omitempty"`
}

// Work is a datanode's erasure-coding work.
type Work struct {
	Convert []Conversion `json:"convert,omitempty"`
	// Compact lists compactions to run (at most one).
	Compact []Compaction `json:"compact,omitempty"`
	// Drop lists containers erasure-coded for good whose replica this
	// datanode still holds: it deletes them.
	Drop []uint64 `json:"drop,omitempty"`
	// Rebuild lists shards to reconstruct and store here.
	Rebuild []Rebuild `json:"rebuild,omitempty"`
	// DropShards lists stored shards no EC record names (a crashed
	// conversion's or rebuild's, a moved shard's old copy): the node
	// deletes each if its file still has that MTime.
	DropShards []HeldShard `json:"drop_shards,omitempty"`
	// DropQuarantined lists quarantined shards (of the request's
	// Quarantined) no EC record, rebuild or conversion in flight names
	// on the node any more (rebuilt elsewhere): it deletes their copies.
	DropQuarantined []ShardRef `json:"drop_quarantined,omitempty"`
}

// Conversion: encode this node's CLOSED replica of Container with Policy
// and store shard i on Targets[i].
type Conversion struct {
	Container uint64   `json:"container"`
	Policy    string   `json:"policy"`
	Targets   []Shard  `json:"targets"`
	Buckets   []string `json:"buckets,omitempty"`
}

// Compaction: read the live Blocks of Container (their bytes in its
// current generation From, on Shards), lay them out one after another as
// the logical bytes of generation Generation, encode them with Policy and
// store shard i on Targets[i]; then report Compacted.
type Compaction struct {
	Container  uint64  `json:"container"`
	From       uint32  `json:"from,omitempty"`
	Generation uint32  `json:"generation"`
	Policy     string  `json:"policy"`
	Logical    uint64  `json:"logical"`
	Shards     []Shard `json:"shards"`
	Blocks     []Block `json:"blocks"`
	Targets    []Shard `json:"targets"`
}

// Compacted reports a finished compaction: every shard of generation
// Generation fsynced on its node (Nodes[i] holds shard i), the blocks at
// their new offsets.
type Compacted struct {
	// Node is the compactor (over TLS, the caller's certificate must be
	// bound to it).
	Node       uint64   `json:"node"`
	Container  uint64   `json:"container"`
	From       uint32   `json:"from,omitempty"`
	Generation uint32   `json:"generation"`
	Logical    uint64   `json:"logical"`
	Nodes      []uint64 `json:"nodes"`
	Blocks     []Block  `json:"blocks"`
}

// Shard is where a shard is: a datanode and its data-path address (bulk).
type Shard struct {
	Node uint64 `json:"node"`
	Addr string `json:"addr"`
}

// Block is where a block's bytes are in an EC container's logical bytes.
type Block struct {
	Local  uint64 `json:"local"`
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
	CRC32C uint32 `json:"crc32c"`
}

// Converted reports a finished conversion: every shard fsynced on its node.
type Converted struct {
	// Node is the converter (over TLS, the caller's certificate must be
	// bound to it).
	Node      uint64   `json:"node"`
	Container uint64   `json:"container"`
	Policy    string   `json:"policy"`
	Logical   uint64   `json:"logical"`
	Nodes     []uint64 `json:"nodes"`
	Blocks    []Block  `json:"blocks"`
}

// Layout is an EC container as readers see it.
type Layout struct {
	Container  uint64  `json:"container"`
	Generation uint32  `json:"generation,omitempty"`
	Policy     string  `json:"policy"`
	Logical    uint64  `json:"logical"`
	Shards     []Shard `json:"shards"`
	Blocks     []Block `json:"blocks"`
}

// Doer runs one meta service call (metaapi.Client.Do).
type Doer interface {
	Do(ctx context.Context, method, path string, in, out any, idempotent bool) error
}

// GetDefault returns the cluster's default policy.
func GetDefault(ctx context.Context, c Doer) (Policy, error) {
	var p Policy
	err := c.Do(ctx, http.MethodGet, DefaultRoute, nil, &p, true)
	return p, err
}

// SetDefault sets the cluster's default policy.
func SetDefault(ctx context.Context, c Doer, policy string) error {
	return c.Do(ctx, http.MethodPut, DefaultRoute, Policy{Policy: policy}, nil, true)
}

// GetBucket returns the policy a bucket's containers get.
func GetBucket(ctx context.Context, c Doer, bucket string) (Policy, error) {
	var p Policy
	err := c.Do(ctx, http.MethodGet, BucketsRoute+url.PathEscape(bucket), nil, &p, true)
	return p, err
}

// SetBucket sets a bucket's own policy ("" removes it).
func SetBucket(ctx context.Context, c Doer, bucket, policy string) error {
	return c.Do(ctx, http.MethodPut, BucketsRoute+url.PathEscape(bucket), Policy{Policy: policy}, nil, true)
}

// GetWork asks for a datanode's erasure-coding work.
func GetWork(ctx context.Context, c Doer, req WorkRequest) (Work, error) {
	var w Work
	err := c.Do(ctx, http.MethodPost, WorkRoute, req, &w, true)
	return w, err
}

// ReportConverted reports a finished conversion (idempotent: a report of
// a container already erasure-coded with the same layout is no error).
func ReportConverted(ctx context.Context, c Doer, r Converted) error {
	return c.Do(ctx, http.MethodPost, ConvertedRoute, r, nil, true)
}

// GetLayout returns an EC container's layout.
func GetLayout(ctx context.Context, c Doer, container uint64) (Layout, error) {
	var l Layout
	err := c.Do(ctx, http.MethodGet, ContainerRoute+strconv.FormatUint(container, 10), nil, &l, true)
	return l, err
}

// ReportRebuilt reports a shard rebuilt and durable on its new node.
func ReportRebuilt(ctx context.Context, c Doer, r Rebuilt) error {
	return c.Do(ctx, http.MethodPost, RebuiltRoute, r, nil, true)
}

// ReportCompacted reports a finished compaction (idempotent: a report of
// the generation recorded already is no error).
func ReportCompacted(ctx context.Context, c Doer, r Compacted) error {
	return c.Do(ctx, http.MethodPost, CompactedRoute, r, nil, true)
}

// GetStatus returns the state of erasure coding.
func GetStatus(ctx context.Context, c Doer) (Status, error) {
	var s Status
	err := c.Do(ctx, http.MethodGet, StatusRoute, nil, &s, true)
	return s, err
}
