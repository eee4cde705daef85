// Package meta is Spindle's meta service (`spindle meta`): the cluster
// manager (datanode registry and health, pipelines, containers, commands
// to datanodes) and the namespace (buckets, keys → block lists), with its
// state in one Pebble store, served over HTTP with the protocol of
// internal/metaapi and Prometheus metrics on /metrics — HTTPS with mutual
// TLS 1.3 (a client certificate of the cluster CA on every connection) when
// Config.TLS is set, its raft messages and snapshots to its peers too;
// plaintext otherwise (--insecure, logged at WARN).
//
// # Packages
//
//   - state: records, store, State (State.Mu), commit pipeline, overlay —
//     a bug in a record's bytes or in what an answer waits for.
//   - cluster: datanodes, health, pipelines, containers, replica views,
//     Allocator, BlockGC, Ops — a bug in allocation (allocate.go).
//   - repair: Rerepl (replication manager, safe mode), Damage — a bug in
//     re-replication (rerepl.go; replica views: cluster/cluster.go).
//   - namespace: buckets, keys, commit IDs, Multipart, S3Users — a bug in
//     a listing (namespace.go List, multipart.go ListUploads, ListParts).
//   - raftgroup: Member, the meta raft group's member — a bug in a leader
//     change (member.go stints and waits; state.EndStintLocked).
//   - creds: the KEK (package kek): loading, status, rotation — secrets at rest.
//   - meta: Service composing them, Open/Close, Heartbeat and Tick, admin
//     views, HTTP API, auth, admission, backups, the offline writer.
//
// Files named below that moved: records.go, commit.go → state;
// cluster.go, gc.go, ops.go → cluster; replication.go → repair/rerepl.go;
// damage.go → repair; namespace.go, commitid.go, users.go, multipart.go
// → namespace; raft.go → raftgroup/member.go; raftconf.go, raftnet.go,
// snapshot.go → raftgroup. s.mu is state.State.Mu, s.db state.State.Store,
// replicator raftgroup.Member.
//
// With TLS every route is served only to the certificate roles of its
// access class, and administrative calls and deletions are audited
// (auth.go); the data routes then check the bucket's owner and grants
// (package access over package authz, whose Check is the one decision;
// a commit inside its mutation, where an overwrite needs write and
// delete), and every change and refusal goes to the audit log (package
// audit, a rotated JSON-lines file beside the store); a datanode's UUID is bound to the certificate it registered
// under, and a heartbeat for it under another is refused (FORBIDDEN).
// Certificates (issue 33): package certreg records every certificate the
// service issues (joins with tokens naming role and hosts, renewals) and
// keeps the deny-list (revocations) as replicated state (certs.go,
// join.go); each member runs certwatch on its own certificate (renewal,
// its Guard fed the deny-list); a raft stream is accepted only from the
// member its sender's certificate binds (raftnet.BoundSender).
//
// # Cluster manager
//
// A datanode registers with its first heartbeat (node ID 0, a UUID): it
// gets the next node ID (1..MaxNodeID), persisted; the same UUID always
// gets the same ID back, and a heartbeat whose UUID and node ID disagree
// with the registry is refused (INVALID). Health comes from the time of
// the last heartbeat: HEALTHY, STALE after StaleAfter, DEAD after
// DeadAfter. Heartbeat times are kept in memory only: at start every node
// counts as last heard at the start time, so a restart of the meta service
// declares nobody dead before DeadAfter.
//
// Pipelines (PipelineSize = 3 members) are made at each Tick (not at a
// heartbeat, so that datanodes starting together are spread) from HEALTHY
// datanodes heard from since the start, at most PipelinesPerNode OPEN ones
// per datanode, members chosen among those in the fewest pipelines. A
// datanode that arrives once the others are full gets pipelines only when
// some close. A member
// learns its pipelines from join_pipeline commands, repeated in every
// heartbeat response until its heartbeat reports the pipeline. A pipeline
// with a DEAD member is CLOSED (for good) unless kept degraded (below);
// its OPEN containers become
// CLOSING; new pipelines are made from the healthy nodes when possible.
// The survivors are told to leave it (leave_pipeline) once none of its
// containers is OPEN on a live replica, or LeaveTimeout after the close.
//
// Degraded pipelines (cluster/degraded.go): while no replacement member
// exists, a pipeline with a DEAD member stays OPEN and takes writes on
// its live members, when every other member is HEALTHY, at least
// MinLiveReplicas of them (default 2, never below a raft majority: each
// write is committed on them, fsynced on each, so the durability
// contract holds for what they acknowledge), and fewer than PipelineSize
// datanodes could be members of a new pipeline (seen, HEALTHY, not full,
// IN_SERVICE: with three datanodes and one dead, two). Its OPEN and
// CLOSING containers are under-replicated (ReplicationStatus's
// UnderReplicated and UnderReplicatedOpen, ContainerInfo.Missing, the
// metric spindle_meta_replication_under_replicated_open). When the
// member comes back it rejoins the raft group, which catches its
// replicas up (or, past the leader's compacted log, reports it behind:
// the pipeline is closed, its containers copied), and the pipeline is
// whole again; once PipelineSize placeable datanodes exist (one joined)
// it is closed, the same Tick makes its replacement, and its CLOSED
// containers are re-replicated as any. The same holds in a larger
// cluster once fewer than PipelineSize placeable datanodes are left. The
// decision reads the members' health and the registry only: the same at
// every Tick and on a new meta leader.
//
// Containers: every OPEN pipeline has ContainersPerPipeline OPEN
// containers (made on demand by Allocate; IDs global, never reused). A
// block's local ID comes from its container's counter, persisted with the
// allocation in one synced batch, so no ID is handed out twice, restarts
// included. A container becomes CLOSING when the bytes of committed keys
// in it, or what a replica reports used, reach 90 % of ContainerSizeBytes (room
// for the blocks in flight when it closes), when a
// replica reports it CLOSED or UNHEALTHY, or when its pipeline closes; it
// takes no more blocks. close_container goes to the pipeline's leader
// (the reports name it; when none is known, to every live member that
// reports the container OPEN), at most every CloseResendAfter, until no
// live replica reports it OPEN; then (at a Tick) it is CLOSED. A replica
// reporting OPEN a container the meta service has CLOSED gets the command
// too.
//
// Allocation picks, round robin, an OPEN pipeline whose members are all
// HEALTHY and report it (a member not heard from since the start counts
// as serving it, as before the restart), skipping the pipelines the
// client excludes; when there is none, an OPEN pipeline with at least
// MinLiveReplicas (and a raft majority) of its members HEALTHY and
// serving it, the others STALE (a member just killed is STALE for a
// while: its pipeline's quorum still commits, fsynced on each member of
// it) or DEAD with the pipeline kept degraded (above);
// spindle_meta_degraded_allocations_total; none: NO_PIPELINE. With
// MinLiveReplicas = PipelineSize no block goes to a pipeline missing a
// member. A node reporting less than MinAvailableBytes
// available gets no new pipeline and its OPEN ones are closed.
//
// # Replicas of a CLOSED container
//
// An OPEN or CLOSING container's replicas are its pipeline's members. A
// CLOSED container's replicas are wherever the reports say (a copy made
// by re-replication is on a node outside the pipeline); like Ozone's SCM,
// the meta service learns them from the heartbeats and persists nothing
// of them. A healthy replica of container c is a node heard from since
// the start, not DEAD, whose last report lists c CLOSED with the highest
// BCSID any such report gives for c (OPEN, UNHEALTHY and DELETING
// replicas do not count). The BCSID (block commit sequence ID, as Ozone's)
// is the raft index of the last PutBlock a replica applied: a CLOSED
// replica behind the highest missed block commits — a member that left
// its pipeline before catching up and closed its replica by itself — so
// it is not counted, not read, never a copy's source, and deleted like an
// UNHEALTHY one. The comparison is among the live reports: with every
// replica at the highest BCSID dead, the best one left counts. Status:
// ReplicationStatus.BehindReplicas; metric
// spindle_meta_replication_behind_replicas.
//
// Reads: a KeyBlock's Members list, for a CLOSED container, its healthy
// replicas (the pipeline's members first, then the others by node ID),
// then the pipeline's live members not heard from since the start (their
// replicas are unknown yet), an address listed once; with no healthy
// replica reported at all (as right after a restart) the pipeline's
// members; last, every other live node reporting a replica that does not
// count (UNHEALTHY, behind, damaged; not DELETING), highest BCSID first,
// which a reader reaches only when every replica before it failed. OPEN
// and CLOSING containers: the pipeline's members.
//
// # Replication manager
//
// See package repair (internal/meta/repair), whose comment holds this
// section.
//
// # Damage
//
// See package repair (internal/meta/repair), whose comment holds this
// section.
//
// # Datanode operations
//
// An operator decommissions a node (its replicas stop counting and are
// copied elsewhere; DECOMMISSIONED once every container it holds has
// ReplicationFactor counted replicas elsewhere), puts it in maintenance
// until a deadline (its replicas count while it is down, its OPEN ones
// too), or recommissions it. The state is an 'O' record in the store (it
// survives restarts and failovers); a node not IN_SERVICE gets no pipeline
// and no copy and its OPEN pipelines are closed (cluster/ops.go).
//
// An operator removes a node for good (DELETE /v1/nodes/{id}, `spindle
// admin datanode remove`; cluster/remove.go, state/removed.go): a
// DECOMMISSIONED node, or a DEAD one (not IN_MAINTENANCE) whose every
// container has ReplicationFactor counted replicas elsewhere. Refused
// (PRECONDITION_FAILED, naming them) while it is a member of an OPEN
// pipeline or of one whose containers are still closing, still serves a
// CLOSED pipeline, or may hold a container's last counted replica (its
// last report's containers and its pipelines'). One batch: its 'O' record
// says REMOVED, the CLOSED pipelines it was a member of are rewritten
// without it; memory forgets it (registry, copies to it, trims, repairs,
// delete deliveries), so it leaves every listing and metric, and a
// deletion in replica mode completes with the live holders' acks alone.
// Decided: node IDs are never reused (its 'N' record stays, below the
// counter) and a removed UUID never comes back: its heartbeat, with its
// node ID or as a registration (ID 0), is refused INVALID, which stops
// a datanode at registration; a wiped datanode has a new UUID and
// registers as a new node. (Treating the UUID as a new node would bring
// the old replicas on its disks back as unknown extra copies.) A second
// removal answers the first again.
//
// # Safe mode
//
// See package repair (internal/meta/repair), whose comment holds this
// section.
//
// # Namespace
//
// A key is one record holding its ordered block list, size and CRC32C,
// or, for a value of at most metaapi.MaxInlineBytes committed inline
// (CommitKey.Inline, no Allocate), the value itself instead of blocks:
// durable and replicated exactly as the record is (one synced batch;
// with Peers, the raft log of a majority), visible whole or not at all.
// The commit checks the value's size and CRC32C; its answer does not
// carry the value back; GetKey returns it (over HTTP as
// metaapi.InlineContentType when asked), listings never do.
// CommitKey writes it in one synced batch together with the removal of
// the blocks' allocation records, the bucket's counts, the containers'
// committed bytes and, when it replaces a version, the pending deletion
// of the old blocks: a key is visible whole or not at all. The rules of a
// commit are in the metaapi package comment.
//
// # Deleting blocks, garbage
//
// Replacing a key, deleting a key, and an allocation that expired
// schedule blocks for deletion (a 'D' record, synced with the change that
// caused it). Delivery, at most MaxDeleteBlocksPerHeartbeat blocks per
// heartbeat response, one delete_blocks command per container:
//
//   - while some live member serves the pipeline's raft group: to the
//     leader the reports name (none known: held back). One
//     acknowledgement (Heartbeat.DeletedBlocks) from any member completes
//     it and removes the record. Unacknowledged, it is delivered again
//     DeleteRedeliverAfter later, MaxDeleteAttempts deliveries in all;
//   - once the pipeline is CLOSED and served by nobody: to every live
//     node whose report holds the container (each deletes its own
//     replica; a re-replicated copy is on a node outside the pipeline),
//     MaxDeleteAttempts deliveries per node; complete when each such node
//     acknowledged, once every live node has reported since the start
//     (replicas on DEAD nodes are not waited for: with no live holder it
//     completes at once).
//
// Known limit: while the pipeline is served, deletions go through its raft
// group to its members only; a copy of a CLOSED container on a node
// outside the pipeline (re-replicated while the pipeline was still OPEN,
// after a member reported it UNHEALTHY) keeps those blocks, unreferenced.
//
// A deletion still not complete DeleteRedeliverAfter after its last
// allowed delivery is dropped (logged; spindle_meta_deletes_dropped_total):
// the block then stays on disk, unreferenced. Delivery counts and
// acknowledgements live in memory: after a restart every pending deletion
// is delivered again (DeleteBlock of a deleted block is harmless).
//
// Garbage: every allocation is recorded with its time, bucket and key; a
// commit consumes it. An allocation not committed within AllocationGrace
// (an interrupted put; default an hour) is turned, at a Tick, into a
// pending deletion (reason "expired"); a commit naming it afterwards is
// refused (INVALID).
//
// # Store (Pebble, Dir/pebble)
//
// Keys (IDs big-endian, so that iteration is in ID order; names raw):
//
//	| key                                       | bytes    | value                          |
//	|-------------------------------------------|----------|--------------------------------|
//	| 'M'                                       | 1        | counters                       |
//	| 'N' | node ID u64                         | 9        | node record                    |
//	| 'P' | pipeline ID u64                     | 9        | pipeline record                |
//	| 'C' | container ID u64                    | 9        | container record               |
//	| 'B' | bucket name                         | 4..64    | bucket record                  |
//	| 'K' | bucket name | 0x00 | key name       | ≤ 1089   | key record (current version)   |
//	| 'V' | 'K' key's fields | 0x00 | ^ID u64   | ≤ 1098   | older version (package verrec) |
//	| 'A' | container ID u64 | local ID u64     | 17       | allocation record              |
//	| 'D' | container ID u64 | local ID u64     | 17       | pending deletion record        |
//	| 'U' | user name                           | 2..65    | S3 user record                 |
//	| 'T' | key ID u64                          | 9        | block-token signing key        |
//	| 'W' | bucket | 0x00 | key | 0x00 | upload | ≤ 1155   | multipart upload               |
//	| 'X' | 'W' key's fields | 0x00 | part u32  | ≤ 1160   | part record                    |
//	| 'G' | bucket | 0x00 | principal | 0x00 | prefix | ≤ 1351 | grant (package authz)  |
//	| 'S' | bucket | 0x00 | tagging or cors     | ≤ 73     | bucket configuration (S3)      |
//
// Values: byte 0 is the record version (1), then the fields below
// (integers little-endian; str = uvarint length then the bytes), then a
// CRC32C (Castagnoli) of every byte before it, u32 little-endian. Times
// are Unix milliseconds (0: none).
//
//	counters (29 bytes):  version u8 | next node ID u64 | next pipeline ID u64 | next container ID u64 | crc u32
//	node:                 version u8 | node ID u64 | registered u64 | uuid str | addr str | metrics URL str | crc u32
//	pipeline (31+8n):     version u8 | pipeline ID u64 | state u8 (1 OPEN, 2 CLOSED) | created u64 | closed u64 |
//	                      member count n u8 (0 only when CLOSED: members removed) | n × node ID u64 | crc u32
//	container (46 bytes): version u8 | container ID u64 | pipeline ID u64 | state u8 (1 OPEN, 2 CLOSING, 3 CLOSED) |
//	                      created u64 | next local ID u64 | committed bytes u64 | crc u32
//	bucket (29 bytes):    version u8 | created u64 | keys u64 | bytes u64 | [owner str | ACL str] | crc u32
//	bucket config:        version u8 | config version u8 (1) | updated u64 | document str (≤ 64 KiB) | crc u32
//	key (29+32n):         version u8 | size u64 | value CRC32C u32 | created u64 | block count n u32 |
//	                      n × (container u64 | local u64 | pipeline u64 | length u64) | [object] | [version: 'V' | flags u8 | ID u64] | crc u32
//	key inline (29+size): the same with n = 0 and the value (size bytes, ≤ metaapi.MaxInlineBytes)
//	                      after the block count: version | size | CRC32C | created | 0 u32 | value | [object] | crc
//	object (S3):          version u8 (1) | ETag str | Content-Type str | checksum type str | parts u32 |
//	                      headers map | user metadata map | checksums map (map: count u32, sorted str key/value pairs)
//	user:                 version u8 | created u64 | access key str | secret key str | crc u32
//	upload:               version u8 | initiated u64 | owner str | [object] | crc u32
//	part:                 version u8 | size u64 | CRC32C u32 | modified u64 | block count n u32 | n blocks |
//	                      ETag str | checksums map | crc u32
//	allocation:           version u8 | allocated u64 | bucket str | key str | crc u32
//	deletion (14 bytes):  version u8 | scheduled u64 | reason u8 (1 replaced, 2 deleted, 3 expired) | crc u32
//
// docs/FORMAT.md §13 draws the same with examples. Decoding is strict
// (length, version, CRC, field ranges, trailing bytes) and fuzzed; a
// record that fails is ErrCorrupt and Open refuses the store.
//
// # Invariants
//
//   - Every change a response depends on is in Pebble, synced, before the
//     response is sent — read-only responses included: a response waits
//     until every batch applied when its request looked at the state is
//     synced; one request's changes are one batch.
//   - A malformed request (ErrInvalid) changes nothing: validation comes
//     before any change, in memory or on disk.
//   - IDs (node, pipeline, container, local block) are never handed out
//     twice: counters are persisted in the batch that uses them.
//   - A committed key's blocks are never scheduled for deletion while the
//     key references them; a block is committed at most once.
//   - A failed Pebble commit or WAL sync fails the service for good:
//     memory may then be ahead of the store, so the requests waiting on
//     that batch or a later one get an error and every later request is
//     refused, even once the disk works again (restart to recover: the
//     store then holds exactly the synced batches).
//
// # Concurrency
//
// A Service is safe for concurrent use. One RWMutex (state.State.Mu, s.mu below) guards all
// in-memory state; it is never held across an fsync. A change (heartbeat,
// allocation, commit, deletion, Tick, leaving safe mode) holds it for
// writing while it validates, changes memory and builds its batch, then,
// still under it, applies the batch to Pebble without waiting for the WAL
// sync (DB.ApplyNoSyncWait: Pebble's order of batches is s.mu's order, so
// the store is always a prefix of memory) and takes the next batch
// sequence. It then releases s.mu and waits for its batch's sync; Pebble
// syncs together every batch that queued up meanwhile (group commit), so
// N concurrent requests cost about one fsync, not N. Readers hold s.mu for
// reading. Every response — a change's or a read's, an error included —
// is sent only once every batch up to the sequence its request saw is
// synced (a contiguous frontier, state/commit.go): a client never acts on state
// that a crash could undo. The /metrics gauges are the exception: they
// may show a change whose sync is under way. A failed sync fails the
// service (sticky, see Invariants). Close waits for the syncs under way.
// Batches applied and not yet synced are bounded by Pebble's commit
// pipeline (ApplyNoSyncWait blocks beyond record.SyncConcurrency) and by
// the requests in flight.
//
// Batches (AllocateMany, CommitKeys, GetKeys: the metaapi batch routes)
// hold s.mu once for all their requests: each request validates, changes
// memory and applies its own batch in order, as if it came alone, and the
// answers go out together once every one is durable; they share the sync
// (or the raft round) and the HTTP request. A refused request changes
// nothing; with one refused, the batch also waits for the frontier.
//
// Namespace and cluster manager share s.mu: an allocation reads pipelines
// and node health and changes a container and the allocation records, a
// commit changes allocations, containers and buckets, so both would need
// both locks; with the fsync outside it, s.mu is held for microseconds of
// memory work per request.
//
// The replication manager's state is memory only and changes under the
// write lock too (Tick, Heartbeat, ExitSafeMode). Reads of keys go to
// Pebble under the read lock. Start runs one goroutine for the HTTP server
// (plus its connections) and one that calls Tick every TickInterval; Close
// stops both before closing the store.
//
// # Replication
//
// With Config.Peers the service is one member of a raft group (raftgroup/member.go,
// raftgroup/raftnet.go; docs/ARCHITECTURE.md §16). Only the serving leader takes
// requests; the others answer metaapi.NotLeaderError (UNAVAILABLE, with
// the leader's address) having done nothing. Invariants:
//
//   - The log's order is memory's order: a mutation's batch is proposed
//     under s.mu (propose, instead of the store apply), numbered by the
//     stint sequence; a batch request's items are staged and proposed
//     together before s.mu is released (one proposal), and the raft
//     goroutine folds consecutive proposals into one entry (first..last).
//     Every member applies committed entries to its store in log order,
//     each whole, with the applied state in the same batch; an entry that
//     does not continue the applied state is skipped by every member.
//   - A leader serves (s.stint ≠ 0) only after applying an entry of its
//     own term, with memory reloaded from the store then; it stops at the
//     first sign of another role or term, dropping memory and overlay.
//   - Every answer waits until what it depends on is committed (its own
//     proposal: memory and the overlay hold it, the store applies it after),
//     or committed and confirmed by a ReadIndex round started after it
//     looked, or by the leader's read lease (package readlease) valid
//     after it looked (an answer that proposed nothing).
//   - The leader reads the store through s.db, an overlay of its proposals
//     in flight over Pebble; code reads records through s.db and writes
//     them only in the batch of mutate.
//   - Tick runs only on the serving leader.
//   - Snapshots (raftgroup/snapshot.go, streams of package checkpoint): the raft log is compacted only behind a
//     checkpoint of the store whose WAL was synced and whose record is in
//     the log; an installed snapshot replaces the store before the log
//     records it, atomically across a crash (finishStoreInstall at open).
//   - Membership (raftgroup/raftconf.go): the member set is replicated state,
//     changed one ConfChange at a time, in the store with its entry's
//     batch and checkpointed at once; raft restarts from the store's set.
//   - Commit IDs (namespace/commitid.go): a commit named by its client is recorded
//     in its own batch; a commit refused on the usual path whose ID is
//     known answers the recorded version and changes nothing.
//
// Concurrency: the raft goroutine owns the RawNode; an append worker
// writes the log (group commit) and installs received snapshots, an apply
// worker applies to the store and takes checkpoints; they hand each other
// raft messages through locked queues. Lock order: Member.StoreMu
// (held by the apply worker for a round, and by a snapshot install, which
// replaces the store) → s.mu → Member.wmu (the wait state),
// Member.in.mu (the raft goroutine's inbox) and Member.pmu (the
// member set); the raft goroutine and the apply worker take s.mu (to
// start or end a stint) and never hold wmu or in.mu while doing so; no
// one holding s.mu waits for them. The transport (raftgroup/raftnet.go) runs one
// sender goroutine per peer, each writing to one open stream (whose
// request runs in a goroutine of its own), and one HTTP handler per
// stream received; they reach the raft goroutine through its inbox.
//
// # Filesystem
//
// The store does all its file operations through Config.FS (internal/vfs;
// the OS by default), so that tests run it on the crashable MemFS and
// inject faults. Open creates Dir durably and syncs it once the store
// exists (Pebble syncs only its own directory).
package meta
