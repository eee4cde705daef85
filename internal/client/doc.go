// Package client is Spindle's pipeline client: it writes chunks and commits
// blocks through a pipeline (a Raft group of datanodes) and reads them back
// from any of its members, over the transport package's frames.
//
// A Client knows the members' addresses and the pipeline ID. Writes
// (WriteChunk, PutBlock) go to the leader: the Client remembers the last
// member that acknowledged one, follows StatusNotLeader redirects
// (Response.Leader), and retries StatusUnavailable, connection errors, dial
// failures and per-attempt timeouts on the same or the next member, with
// exponential backoff. Reads (ReadChunk, GetBlock) are served by any member
// from its local engine: addressed to one member they go there only (the way
// to check every replica); with no address they go to the leader if known,
// else to any member. ReadChunk verifies the CRC32C of every piece it
// returns against the checksums the datanode sent with it.
//
// # Retries
//
// Every operation is bounded by Options.MaxAttempts attempts and by
// Options.RetryTimeout of total time (and by its context); one attempt by
// Options.AttemptTimeout; a write by Options.LeaderlessTimeout from its
// first failed attempt (every retried failure is one without a usable
// leader), after which it fails with ErrNoLeader: a pipeline that cannot
// elect a leader is left to the caller to replace, not waited on. Between attempts that found no usable leader the
// Client sleeps a backoff doubling from Options.MinBackoff to
// Options.MaxBackoff (jittered, never past the operation's deadline).
// A redirect to a named leader is followed at once, without backoff.
// A member that leaves requests unanswered for Options.ProbeAfter is
// probed (a transport Ping on a connection of its own, probe.go); one that
// leaves the probe unanswered too (a stopped or frozen process) has its
// requests failed with ErrUnresponsive and retried on the next member, and
// is skipped until a probe is answered.
// A status other than NotLeader and Unavailable (Invalid, Overlap,
// ChecksumMismatch, ...) is final and returned as is (a
// *transport.StatusError in the chain). Retrying a write is safe: the
// datanode accepts an identical replay of a chunk already written at its
// offset, and a PutBlock of the same block data.
//
// # Invariants
//
//   - An operation makes at most MaxAttempts attempts and returns within
//     about RetryTimeout + AttemptTimeout (a dial counts as part of its
//     attempt); its error wraps the last attempt's error.
//   - A nil error from WriteChunk or PutBlock means a datanode answered OK:
//     by the datanode's contract, the write is committed by a quorum of the
//     pipeline, durable on each replica of that quorum.
//   - Bytes returned by ReadChunk matched their checksums; a mismatch is an
//     error wrapping ErrCorrupt, never data.
//   - At most Options.ConnsPerMember connections per member address, each
//     with at most Options.Window requests in flight. A block's writes
//     (WriteChunk, PutBlock) always use the same connection slot of a
//     member, so they reach it in the order they were queued on it;
//     WriteChunkQueued tells its caller when that happened. Writes of one
//     block each started once the previous one's request was queued reach
//     the leader in that order unless one of them is retried.
//
// # Concurrency
//
// A Client is safe for concurrent use by any number of goroutines; that is
// how it is meant to be used: many goroutines share few connections, each
// connection pipelining up to its window of requests (transport.Client).
// Reads and other blocks' writes spread over a member's connections round
// robin. Connections are dialled lazily, one dial at a time per connection slot,
// and a broken connection is dropped and redialled by the next request that
// needs it. The remembered leader is an atomic value. Close closes every
// connection; calls in flight fail and later calls return ErrClosed.
package client
