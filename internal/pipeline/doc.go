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
//     closed container). A failure of this replica alone is never
//     acknowledged: the group stops here, the container is marked UNHEALTHY
//     first, and the heartbeat reports it (replica_failure.go).
//   - A failed fdatasync, a dead listener or an append/apply round running
//     past DiskStallThreshold fails the whole node (Err, Stopped): nothing
//     more is acknowledged.
//   - The event loop does no disk work: groups are opened by AddPipeline's
//     caller, storage by the append and apply workers.
//   - A peer's address is the newest one given (Start, AddPipeline,
//     UpdatePeers); its writer redials when it changes.
//
// # Concurrency
//
// The loop goroutine owns every group's RawNode, payload cache, pending
// proposals and member list (the latter written under groupsMu, which
// Pipelines reads under); workers receive jobs that carry *group and may
// touch only its immutable fields (id) and atomics (applied, minMatch,
// failed, behind). One append worker, one apply worker, one reply writer,
// one writer per peer, one reader per connection, one stall watchdog; none
// per message or per group.
//
// See docs/ARCHITECTURE.md §12 for the design; the entry data format is
// drawn in command.go.
package pipeline
