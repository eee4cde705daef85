// Package state is the meta service's replicated state machine, shared by
// every concern of package meta: the records and their byte formats
// (records.go), the Pebble store and the leader's overlay of its
// proposals in flight (store.go), the in-memory State built from the store
// (state.go), the Config (config.go) and the commit pipeline — Mutate,
// Read, ApplyEach, the durability frontier and the proposals to the meta
// raft group (commit.go).
//
// Invariants (the full rules: "Store (Pebble, Dir/pebble)", "Invariants"
// and "Concurrency" in package meta's comment; the bytes: docs/FORMAT.md
// §13):
//
//   - A record is written only in the batch of a mutation, and that batch
//     is the whole of the mutation's change: memory and store change
//     together, in State.Mu order (the store is always a prefix of
//     memory). A refused mutation changes nothing: validation comes
//     before any change, in memory or on disk.
//   - Decoding is strict (length, version, CRC32C, field ranges, trailing
//     bytes): a record that fails is ErrCorrupt and the store is refused.
//   - IDs are never handed out twice: the counters are persisted in the
//     batch that uses them.
//   - No answer, read-only ones and errors included, goes out before every
//     batch it may have seen is synced (a group of one) or committed by
//     the meta raft group (State.Rep set); a failed commit or sync fails
//     the State for good (Usable).
//   - On a replicated member, the State serves only in a stint (Stint ≠ 0)
//     and reads the store through Store, the overlay of the stint's
//     proposals in flight over Pebble; EndStintLocked drops memory and
//     overlay. See "Replication" in package meta's comment.
//
// Concurrency: State.Mu (an RWMutex) guards all of memory, and the code of
// packages cluster, repair and namespace runs under it. A writer holds it
// for writing while it validates, changes memory and builds its batch,
// and, still under it, applies the batch (ApplyNoSyncWait) or proposes it
// to the group (Group.Propose); then it releases State.Mu and waits for
// durability outside it. Mutate and Read do exactly that around a
// function: callers never wait for an fsync or a raft round holding
// State.Mu. Durability (Dur) has its own lock. With the raft member, the
// lock order is raftgroup.Member.StoreMu → State.Mu → the member's own
// locks (see package raftgroup); no one holding State.Mu waits for the
// member's goroutines.
package state
