// Package raftgroup is one member of the meta raft group (Config.Peers):
// Member (member.go: proposals folded into entries, the Ready loop, the
// append and apply workers, waits for commit and ReadIndex, serving
// stints), its membership changes (raftconf.go), the raft transport
// between members (raftnet.go) and snapshots: checkpoints taken, streamed
// and installed (snapshot.go). It is the state.Group of a replicated
// state.State: the State proposes its batches to the Member in
// State.Mu order and waits on it for their commit.
//
// Invariants: see "Replication" in package meta's comment and
// docs/ARCHITECTURE.md §16. In short: the log's order is memory's order;
// every member applies committed entries in log order, each whole with
// its applied state, skipping an entry that does not continue it; a
// leader serves only after applying an entry of its own term, and stops
// (memory and overlay dropped) at the first sign of another role or term;
// every answer waits until what it depends on is committed; the log is
// compacted only behind a synced checkpoint recorded in it; an installed
// snapshot replaces the store atomically across a crash; the member set
// changes one ConfChange at a time, in the store with its entry's batch.
//
// Concurrency (the full rules: "Concurrency" at the end of "Replication"
// in package meta's comment). Goroutines: the raft goroutine (run) owns
// the RawNode; the append worker writes the log (group commit) and
// fetches and installs received snapshots; the apply worker applies
// entries to the store and takes checkpoints; they hand each other raft
// messages through locked queues. The transport runs one sender goroutine
// per peer, each writing one open stream, and one HTTP handler per stream
// received (StreamHandler); all reach the raft goroutine through its
// inbox. Locks, in this order: Member.StoreMu (held by the apply worker
// for a round and by a snapshot install, which replaces the store) →
// state.State.Mu → Member.wmu (the wait state), Member.in.mu (the raft
// goroutine's inbox) and Member.pmu (the member set). The raft goroutine
// and the apply worker take State.Mu (to start or end a stint) and never
// hold wmu or in.mu while doing so; no one holding State.Mu waits for
// them. Close is called without State.Mu.
package raftgroup
