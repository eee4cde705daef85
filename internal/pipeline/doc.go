// Package pipeline is Spindle's replicated write path: a datanode's
// multi-raft node (one event loop driving every pipeline the datanode is a
// member of, with go.etcd.io/raft/v3 RawNodes and asynchronous storage
// writes), its append worker (chunk bytes into block files, headers into the
// shared WAL, both made durable before a replica acknowledges), its apply
// worker, and the peer transport of raft messages.
//
// Client requests of one connection are proposed in the order they
// arrived: the connection's one goroutine decodes them and posts them to the
// loop's event channel in that order, and the loop queues and proposes them
// per pipeline in that order. A block's chunks, which the engine takes only
// contiguously, are proposed in offset order when the client sends them so
// on one connection (the key client's ordered stream, ARCHITECTURE §12).
//
// # Invariants
//
//   - A replica acknowledges an entry (its MsgAppResp, or on the leader its
//     own append towards the commit) only after every chunk the entry
//     carries is written and fsynced here and the entry's header record is
//     fsynced in the WAL — data before log record — or the chunk was refused
//     for a reason every replica shares (checksum, invalid, hole, full or
//     closed container). A small chunk (Config.LogInlineMaxBytes) travels
//     in its entry, so the WAL's fsync makes it durable; its block file is
//     written (verified) but synced only at its PutBlock or at the
//     checkpoint before the log is compacted past it (engine.SyncLogged),
//     and replayed from the log at a restart. A failure of this replica alone is never
//     acknowledged: the group stops here, the container is marked UNHEALTHY
//     first, and the heartbeat reports it (replica_failure.go).
//   - A failed fdatasync, a dead listener or an append/apply round running
//     past DiskStallThreshold fails the whole node (Err, Stopped): nothing
//     more is acknowledged.
//   - The event loop does no disk work: groups are opened by AddPipeline's
//     caller, storage by the append and apply workers.
//   - A peer's address is the newest one given (Start, AddPipeline,
//     UpdatePeers); its writer redials when it changes.
//   - A new pipeline's first election: the member its ID designates
//     (voters[id % len]) campaigns at every tick while no leader is known,
//     for at most eagerCampaignElections election timeouts; Followers and
//     PreCandidates only (PreVote: a dropped campaign raises no term).
//   - Proposals are never forwarded (DisableProposalForwarding): chunk bytes
//     travel beside an entry, not in a MsgProp; a stepped-down leader's
//     forwarded entry reached its successor without them (all replicas failed).
//
// # Concurrency
//
// The loop goroutine owns every group's RawNode, payload cache, pending
// proposals and member list (the latter written under groupsMu, which
// Pipelines reads under); workers receive jobs that carry *group and may
// touch only its immutable fields (id), its atomics (applied, minMatch,
// failed, behind) and its mutex-guarded record of applied deletes (gone).
// One append worker, one apply worker, one writer per peer, one reader and
// one reply writer per connection, one stall watchdog; none per message or
// per group. A group removed from the node is marked failed: its workers'
// jobs stop at their next entry and create no container.
//
// # Memory: payloads admitted before they are allocated
//
// Chunk bytes arriving in a frame are admitted against a byte budget
// before their buffer is allocated (Node.payloadAlloc, the transport
// Server's PayloadAlloc hook, called once the frame's header is read;
// buffers come from transport.NewPayload, reused only once the garbage
// collector found nothing referencing them, the free ones at most a
// quarter of the two budgets, ≤ 128 MiB): a connection whose payload does
// not fit waits, unread (TCP pushes back on its sender), until the bytes
// fit or the connection or the node closes.
// Every admission is released exactly once, on every path: a client write
// when it is answered (replyResult, replyErr: committed, refused, dropped,
// leadership lost, node stopping) or refused before it is proposed; a raft
// message when the append that makes its entries durable here is done
// (its cached copies dropped: a peer writer reads them back from the
// engine), or at once when raft took nothing of it (unknown or failed
// group, bad payload, rejected or duplicate entries, no append in the
// next Ready), or when its group is removed; a payload not
// read in full (the connection closed or broke mid-frame) by the transport
// Server; a client write whose CRC32C pieces fail as they arrive (they are
// verified a step of whole pieces at a time, ≤ 256 KiB, by the check
// payloadAlloc gives the Server: chunkCheck) by the Server too, at its
// first bad piece, before the rest of it is read. A payload refused
// whatever its bytes (a write to a pipeline not served or not led here, a
// raft message of a group not served here) is not admitted at all: it is
// read through the connection's buffer and dropped
// (transport.ErrSkipPayload), so a flood of them costs CPU, not memory;
// the rest of a write refused at a bad piece is dropped the same way.
// Both are read at the connection's skip rate
// (transport.DefaultSkipBytesPerSecond past a first burst). Two budgets,
// each a Config limit:
//
//   - the client budget (MaxInflightPayloadBytes, 512 MiB): WriteChunk
//     payloads, from arrival until answered;
//   - the raft budget (MaxInflightRaftPayloadBytes, 256 MiB): RaftMessage
//     payloads from peers, from arrival until appended here.
//
// In each, a payload over 1/8 of the budget is admitted only while a
// quarter of it stays free for smaller ones (byteBudget), so that a few
// senders of maximum-size frames do not make every small write wait.
//
// Why there is no deadlock. A budget's bytes come back when the work
// holding them completes, so a wait can only deadlock if that work waits,
// directly or not, on a wait for the same budget. Raft bytes are released
// by the append worker's fsyncs and the loop's handling of their result:
// neither takes a budget nor waits for a connection to be read, nor for
// any other node — an append needs no commit and no reply. So the raft
// budget always drains, and a connection waiting for it (a peer's stream,
// with the heartbeats and commit indexes behind the waiting frame) is read
// again. Client bytes are released when their write commits, which needs
// the followers' appends, which need only the followers' raft budgets. If
// both kinds shared one budget, this cycle could form across pipelines:
// node A leads pipeline 1 and follows pipeline 2, node B the other way;
// A's budget full of pipeline-1 client writes waiting for B's append, B's
// full of pipeline-2 client writes waiting for A's; each node's reader of
// the other's MsgApps waits for its own full budget: neither commits,
// neither releases. With a raft budget of its own that no client write
// can hold, every MsgApp is admitted once appends done elsewhere release
// it, so every client write commits (or fails) and releases its bytes.
// Frames without payload (heartbeats, responses, votes) take no budget.
//
// With TLS, a raft message is taken only from the certificate its sender
// member is bound to (Member.CertName), client requests only from roles
// that may use the data path, and a client's chunk reads and writes only
// with a block token covering them (Config.BlockTokens; auth.go); a
// refused raft message is dropped before it reaches the loop.
//
// See docs/ARCHITECTURE.md §12 for the design; the entry data format is
// drawn in command.go.
package pipeline
