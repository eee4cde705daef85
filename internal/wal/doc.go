// Package wal is a datanode's raft log: one segmented write-ahead log in
// the log directory (--log-dir), shared by every raft group (pipeline) the
// datanode belongs to, with group commit (one write and one fdatasync for
// everything appended meanwhile), preallocated segments rolled crash-safely,
// recovery that truncates a torn tail and refuses real corruption, per-group
// indexes for the reads raft.Storage needs, and compaction that deletes
// segments no group needs any more. All file I/O goes through vfs.FS.
//
// # Model
//
// A record belongs to one group and is one of: a log entry (term, index,
// raft entry type, data: for a WriteChunk only its header, never chunk
// bytes), a HardState (term, vote, commit), a snapshot installed (the
// group's log restarts after its index), a local snapshot's metadata, or a
// compaction marker (entries at or below its index are no longer needed).
// Every record gets a log-wide sequence number, 1, 2, 3, …, in append
// order. Per group the log keeps in memory: the live entries (index, term,
// where the record is, and the data of recent ones), the compaction point
// (index and term), the latest HardState and the latest snapshot metadata.
// An entry appended at an index at or below the group's last index replaces
// that entry and all later ones (a raft log conflict): the later record
// wins, on append as on replay.
//
// # On-disk format
//
// The log directory holds LOCK (flock while open) and the segment files
// <first seq as 16 hex digits>.wal, e.g. 0000000000000001.wal; a name with
// ".tmp" appended exists only during a roll. A segment is a file of fixed
// size (Config.SegmentSizeBytes, default 64 MiB, preallocated and zero) that
// starts with a segment header, followed by records back to back; after the
// last record the file is zero to its end. All integers are little-endian.
//
// Segment header (32 bytes):
//
//	| offset | size | field                                              |
//	|--------|------|----------------------------------------------------|
//	| 0      | 8    | magic "SPNDLWAL"                                   |
//	| 8      | 4    | format version = 1                                 |
//	| 12     | 8    | log ID (random at creation, same in every segment) |
//	| 20     | 8    | sequence number of the segment's first record      |
//	| 28     | 4    | CRC32C (Castagnoli) of bytes 0..27                 |
//
// Record (48-byte header + payload):
//
//	| offset | size | field                                                    |
//	|--------|------|----------------------------------------------------------|
//	| 0      | 4    | CRC32C of bytes 4 .. end of payload                      |
//	| 4      | 4    | payload length n (≤ 16 MiB − 48; Config.MaxRecordBytes)  |
//	| 8      | 1    | type: 1 entry, 2 hard state, 3 snapshot installed,       |
//	|        |      | 4 compaction marker, 5 snapshot metadata                 |
//	| 9      | 1    | raft entry type (entries only; 0 otherwise)              |
//	| 10     | 2    | reserved, 0                                              |
//	| 12     | 4    | batch position: seq − first seq of its write batch       |
//	| 16     | 8    | seq: log-wide sequence number (≥ 1)                      |
//	| 24     | 8    | group ID                                                 |
//	| 32     | 8    | term (hard state: its term)                              |
//	| 40     | 8    | index (hard state: the commit index)                     |
//	| 48     | n    | payload: entry data; hard state: vote (u64, n = 8);      |
//	|        |      | snapshot (3, 5): caller's metadata; marker (4): n = 0    |
//
// A write batch is what one group-commit round writes; the batch position
// lets recovery know, for every record, which records were durable when it
// was written (all before its batch start).
//
// # Invariants
//
//   - Records carry consecutive sequence numbers across the segments in
//     name order; a segment's name and header give its first one.
//   - One round at a time writes and then fdatasyncs; only the last round's
//     records can be undurable, so only the end of the last segment can be
//     torn.
//   - A segment is complete and fdatasynced before the next one is created;
//     a segment's header and size are durable before its name is, and its
//     name is durable before a record in it is acknowledged. The log never
//     refers to a segment whose name is not durable (seed 002).
//   - A record is acknowledged (WaitDurable returns) only after the
//     fdatasync of its round returned; after any failed write, fdatasync,
//     roll or deletion the log is failed (ErrFailed) and acknowledges
//     nothing more.
//   - Per group: the live entries are contiguous, starting one past the
//     compaction point (at 1 without one), in index order and in sequence
//     order.
//   - A segment is deleted only when no group needs any record in it, only
//     the oldest segments are, never the last one, and only once every
//     record that made it unnecessary is durable.
//   - Every record is checked against its CRC32C when recovered and when
//     read back; a length is checked against the limit before it is used.
//
// # Recovery (Open)
//
// Leftover temporary files of a roll are removed. Segments are read in
// order, each whole; their headers must be valid, share the log ID and
// chain (each starts one past where the previous ends). Every segment but
// the last must hold valid records from its start and zeros after them:
// anything else is ErrCorrupt. In the last segment, the first record that
// does not decode (or non-zero bytes after a zero header) at offset X is a
// torn tail unless a record further on with a valid CRC proves X durable:
// its batch start is past the sequence number expected at X (it was written
// after a sync that covered X), or it repeats an earlier sequence number.
// A torn tail is zeroed from X on; damage is ErrCorrupt. Recovery replays
// the records into the groups (entries may start anywhere for a group whose
// older records were in deleted segments), then checks that every group's
// entries start right after its compaction point. Finally it fdatasyncs the
// last segment and syncs the directory, so that nothing it read is still
// only in the page cache (after a kill -9) when new records build on it.
// Limit: damage confined to the very last write batch looks exactly like a
// torn write and is truncated (so is any tail: nothing after it proves it).
//
// # Segment roll and deletion
//
// A round that reaches a record Append placed in a new segment fdatasyncs
// the current segment, then: creates <seq>.wal.tmp, preallocates and
// truncates it to the segment size, writes the header, fdatasyncs it,
// renames it to <seq>.wal, syncs the directory, and only then adds it to
// the log and writes to it. Compact deletes segments oldest first, each
// removal followed by a directory sync. The steps and what a crash after
// each leaves are in docs/CRASH_SAFETY.md.
//
// # Concurrency
//
// A Log is safe for concurrent use. Log.mu guards all state; it is never
// held across a write, an fdatasync, a segment read or a file deletion.
// Group commit is leader/follower without background goroutines: a caller
// of WaitDurable (or Sync, or an Append that hits the buffer limit) that
// finds no round in flight takes every pending record and runs a round
// (encode, one WriteAt per segment touched, one fdatasync; a roll adds its
// own steps) with Log.mu released; callers whose records it covers wait on
// a condition variable, and the first one not covered runs the next round,
// for everything appended meanwhile. At most one round is in flight.
// Appended bytes waiting for a round are bounded by MaxBufferedBytes
// (Append blocks, or runs a round itself); one round holds at most what
// was pending when it started. Reads copy what they need from the index
// under Log.mu, take a reference on the segments they must read (a deleted
// segment's file stays open until its last reader is done) and read with
// the lock released. Compact calls (and segment deletion) are serialised by
// Log.gcMu; lock order gcMu → mu.
//
// # Use with etcd raft
//
// A raft.Storage for one group maps directly: InitialState → HardState and
// the ConfState decoded from Snapshot's metadata; Entries(lo, hi, maxSize)
// → Entries (ErrCompacted and ErrUnavailable map to raft's);
// Term/FirstIndex/LastIndex → the same; Snapshot → Snapshot's index, term
// and metadata. A Ready's (or MsgStorageAppend's) entries, HardState and
// snapshot go in one Append, acknowledged after WaitDurable; ApplySnapshot
// is a SnapshotRecord, CreateSnapshot a SnapshotMetaRecord, Compact is
// Compact.
package wal
