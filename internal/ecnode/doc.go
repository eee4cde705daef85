// Package ecnode is a datanode's part of erasure coding (issue 37): its
// shard store (store.go: <first data dir>/ec/, docs/FORMAT.md §1) served
// through the bulk server's shard ops, and the worker (worker.go) that
// polls the meta service for conversions (ecapi.Work), converts CLOSED
// containers it holds a replica of, and drops the replicas of containers
// the meta service says are erasure-coded for good.
//
// A conversion, in this order: (1) read the local CLOSED replica's blocks,
// every byte verified against its CRC32C (engine.ReadChunk), into a
// staging file, the container's logical bytes (its blocks one after
// another, in local ID order); (2) encode the k+m shards (package ec) into
// staging files; (3) store each on its datanode (bulk.PutShard: the
// target verifies it whole and fsyncs it before it answers), all of them;
// (4) report the conversion (ecapi.Converted), which switches the
// container to EC in one meta batch. The replicas are deleted only after
// that, when a later poll lists them in Drop. A crash before (4) leaves
// the replicas (the shards stored so far are garbage); after it, the
// complete shard set.
//
// Compaction (compact.go), in the same order: (1) read the live blocks
// the meta service names through the current generation's shards (every
// 16 KiB verified, each block checked whole against its CRC32C) into a
// staging file, one after another; (2) encode them as the next
// generation (its shard files have names of their own, so both
// generations coexist on a node); (3) store every shard on its target;
// (4) report it (ecapi.Compacted), which switches the record in one meta
// batch. The old generation's shards are dropped only after that (listed
// in DropShards: no record names them). A crash before (4) leaves the
// old generation, complete; after it, the new one.
//
// Repair (rebuild.go): every poll lists the node's shards (with their
// mtimes) and the rebuilds it runs; a Rebuild reads k other shards, each
// 16 KiB verified, reconstructs the shard (ec.Set.Rebuild), stores it as
// Put does and only then reports it (ecapi.Rebuilt). A DropShards entry
// is deleted only if the file still has the listed mtime. The scrubber
// (ScrubInterval > 0) verifies one shard whole per poll and quarantines a
// corrupt one (renamed .corrupt: never served or listed as held, so the
// meta service has it rebuilt, here or elsewhere; the copy is deleted by
// the rebuild here, or when a poll that lists it as quarantined is
// answered that no record names it here any more: DropQuarantined).
//
// Invariants: a shard file under its final name is complete, verified
// and durable (written to a temporary name, checked, fsynced, renamed,
// the directory fsynced); temporaries are removed at start. Memory is
// bounded by one stripe (ec.Encode) and one 4 MiB read.
//
// Concurrency: a Store may be used from any goroutine (its mutex orders
// a rename into place, a drop and a quarantine); the Worker runs its
// polls and scrubs on one goroutine and each conversion and rebuild on
// its own (the meta service bounds them).
package ecnode
