// Package ec erasure-codes a closed container's bytes into k data and m
// parity shards (Reed-Solomon, github.com/klauspost/reedsolomon) and reads
// any range of them back, from the data shards alone when they are whole
// and from any k shards when some are missing or corrupt.
//
// Layout: the container's logical bytes are cut into stripes of k cells
// (Policy.CellBytes each; the last stripe zero-padded); shard i < k holds
// cell i of every stripe, shards k..k+m-1 the parity cells. A shard is a
// self-describing stream (shard.go, docs/FORMAT.md §16): a header, the
// cells, and a CRC32C of every 16 KiB of the cells with a CRC of that
// table, so that every byte read is verified, and a damaged 16 KiB of one
// shard costs a reconstruction of that stripe only.
//
// Invariants: Encode writes every shard of a container from one pass over
// its bytes; a shard's header names its policy, index, container, its
// generation (0 for a conversion's shards, the next for each compaction's)
// and logical size, and Open refuses a set whose headers disagree; ReadAt
// returns only bytes whose 16 KiB chunks matched their CRC32C (directly, or
// after a reconstruction from shards that matched theirs), else an error
// (ErrUnrecoverable when fewer than k shards of a stripe are good).
//
// Concurrency: Encode runs on the caller's goroutine (reedsolomon may use
// more); a Set may be read by several goroutines at once (its shards are
// io.ReaderAt, its state is read-only after Open).
package ec
