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
// Invariants: a shard file under its final name is complete, verified
// and durable (written to a temporary name, checked, fsynced, renamed,
// the directory fsynced); temporaries are removed at start. Memory is
// bounded by one stripe (ec.Encode) and one 4 MiB read.
//
// Concurrency: a Store may be used from any goroutine; the Worker runs
// its polls on one goroutine and each conversion on its own (at most
// one at a time per node, the meta service's choice).
package ecnode
