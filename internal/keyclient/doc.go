// Package keyclient is the Go client of Spindle's key store: what the
// command line and the benches use to put and get keys. The namespace
// (buckets, keys → ordered block lists, block allocation) lives in the meta
// service, reached through the Meta interface (metaapi.Client in
// production, an in-memory fake in tests); the bytes go straight to the
// pipelines' datanodes through internal/client.
//
// # Put
//
// A value is read from an io.Reader once, in chunks (Options.ChunkSize,
// default 4 MiB) that fill blocks (Options.BlockSize, default 256 MiB).
// Every chunk carries the CRC32C of each 16 KiB piece (engine.ComputeChecksums)
// and the whole value's CRC32C is computed as it streams. Up to
// Options.InFlight chunks (default 8) are written at once through the
// block's pipeline: a datanode acknowledges a WriteChunk only once a quorum
// has it fsynced, so one writer reaches disk speed only with depth (the
// lesson of seed 001, where Ozone's single-stream client was the
// bottleneck). While the pipeline client knows no leader (a new pipeline,
// or its leader just failed) one chunk goes at a time, so that writes do
// not reach the leader in redirect order. A block's chunks reach the leader
// in offset order, one ordered stream end to end: each write's request is
// queued on the connection only once the previous write's request is
// (client.WriteChunkQueued: the transport tells when a request is queued,
// and frames leave in queue order); a block's writes share one connection
// (client pins it by block); the datanode reads a connection's frames on
// one goroutine and proposes them in arrival order. Only a retried write
// (a leader change, a broken connection) can arrive after a later one; the
// leader then refuses the one that overtook (StatusHole: blocks are written
// contiguously) and the writes after it, which are sent again once the
// earlier ones are on their way (a chunk refused twice: once they are
// acknowledged, so progress is certain). PutResult.Holes counts them (0
// without retries; before the stream was ordered, 4-20 % of 64 KiB writes
// were refused so).
//
// Blocks are committed with PutBlock whose BlockData lists exactly the
// acknowledged chunks, contiguous from offset 0: every Options.CommitEvery
// bytes of a block (a checkpoint, default 16 MiB) and when the block is
// complete. The key is committed (CommitKey: size, ordered blocks, CRC32C of
// the value) only after the last PutBlock of every block succeeded; an
// interrupted or failed Put commits nothing, so it leaves no key (its
// blocks are unreferenced and the meta service deletes them).
// PutOptions.Commit replaces that CommitKey by the caller's own commit of
// the same size, blocks and CRC32C (the S3 gateway: a key with its object
// metadata, or a part of a multipart upload).
//
// # Small values inline
//
// A Put first reads up to Options.InlineMaxBytes + 1 bytes (default
// DefaultInlineMaxBytes, 64 KiB; the buffer grows from 8 KiB as the value
// does). A value that ends within the limit is committed inline: one
// CommitKey carrying the value (metaapi.InlineContentType on the wire), no
// allocation, no chunk write, no PutBlock; the meta service stores it in
// the key's record (its durability: the meta store's, fsynced, and with a
// replicated meta service the raft log of a majority of its members). A
// longer value goes to blocks as below, the bytes already read first.
// PutOptions.NoInline forces blocks (a multipart part: its record holds
// blocks only). A Get of an inline key writes KeyInfo.Inline after
// checking its CRC32C: one request to the meta service, no datanode.
//
// # Pipeline failure in the middle of a block
//
// When a write or PutBlock fails after the pipeline client's bounded retries
// (no leader, members unreachable, storage failed, container closed), the
// current block is ENDED at its last successful PutBlock (its checkpoint)
// and becomes a short block of the key; the bytes after that checkpoint,
// which the stream still holds, are written again from offset 0 of a NEW
// block allocated on another pipeline (Allocate with ExcludePipelines
// naming every pipeline that failed during this Put). No byte is lost
// (everything after the checkpoint is still buffered) and none is
// duplicated (the key's old block ends exactly where the new one starts).
// A block whose failure came before its first checkpoint is dropped from
// the key entirely. Chunks acknowledged on the failed pipeline past its
// checkpoint stay there, unreferenced. The bytes a stream holds are bounded
// by MaxBufferedChunks (InFlight + 2·CommitEvery/ChunkSize, at most a
// block): reading the source waits while they are all unconfirmed. At most
// Options.MaxFailovers pipelines fail per Put before it gives up with
// ErrPipelineFailed.
//
// An allocation the meta service answers with ErrNoPipeline (every
// pipeline excluded or leaderless, or its datanodes dead and their
// pipelines not yet replaced) is asked again with a jittered backoff
// (50-500 ms) for up to Options.NoPipelineWait (default 8 s) before the
// Put fails with it, the second time excluding none (a pipeline that
// failed under this Put on a timeout or an election may be back; one that
// fails again counts against MaxFailovers); the pipeline client gives up a write on a pipeline
// that elects no leader after its LeaderlessTimeout (client.ErrNoLeader),
// which fails the block over like any pipeline failure.
//
// # Get
//
// Reads go to any replica listed in the key's metadata (KeyBlock.Members):
// up to Options.ReadInFlight ranges of at most Options.ReadSize bytes in
// flight, delivered to the writer in order. Every piece read is verified by
// the datanode's engine against the stored checksums and by the pipeline
// client against the checksums that travel with it; a range that fails on
// one replica (unreachable, missing, corrupt) is read from the next one.
// A whole-value Get also checks the value's CRC32C and fails with
// ErrCorrupt when it does not match (the bytes already written to the
// writer must then be discarded by the caller). GetRange reads any range,
// across block boundaries, with the per-piece checks only.
//
// # Invariants
//
//   - A key is committed only if every one of its blocks had its PutBlock
//     acknowledged for at least the length the key records, and the blocks'
//     lengths add up to the value's size.
//   - A block's PutBlock lists acknowledged chunks only, contiguous from 0;
//     a block never receives two different chunks at the same offset (a
//     failed block's remaining bytes go to a new block).
//   - Every wait is bounded: each datanode call by the pipeline client's
//     retry bounds, each Put by MaxFailovers failovers and
//     MaxHoleRetries resends per chunk, each Get range by one attempt per
//     replica (each bounded by ReadTimeout).
//   - A Put or Get returns only after every goroutine it started has
//     returned; no buffer it used is referenced afterwards.
//
// # Concurrency
//
// A Client is safe for concurrent use; each Put and Get is one stream whose
// state is owned by the calling goroutine, with worker goroutines (at most
// InFlight, plus those of failed blocks being cancelled) reporting to it over
// a channel. Pipeline clients are shared by all streams (a pool keyed by
// pipeline, reference counted, at most MaxPipelineClients idle ones kept).
// Progress callbacks are called from the stream's goroutine.
package keyclient
