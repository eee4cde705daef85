// Package engine is the storage engine of a Spindle datanode: containers of
// blocks on a set of volumes, chunk writes with pwrite into block files that
// stay open, CRC32C per piece verified on write and on every read, block
// metadata in Pebble (one instance per volume), and a group commit that makes
// many writes durable with one fdatasync per touched file and one metadata
// sync per touched volume.
//
// # Model
//
// A volume is a data directory (one per disk). A container is a directory on
// one volume, under one of 256 hashed subdirectories, holding one file per
// block (FILE_PER_BLOCK). A block is written as contiguous chunks from offset
// 0; PutBlock commits its metadata (length, chunk list, checksums). Container
// states: OPEN → CLOSED, OPEN → UNHEALTHY (damage found), CLOSED →
// UNHEALTHY (a record that does not decode), any → DELETING → gone. Damaged
// bytes in a CLOSED container mark the block, not the container (memory
// only; RepairBlock replaces its bytes: damage.go). A volume whose probe
// fails (CheckVolumes) is taken out of use with its containers
// (volfail.go).
//
// # Invariants
//
//   - No file create, stat or rename per chunk: a block file is created (and
//     its directory synced) once, then kept open in a bounded cache.
//   - Data is verified against the writer's checksums before it is written;
//     every read verifies every piece it returns. A mismatch is ErrCorrupt
//     naming container, block and offset; wrong bytes are never returned.
//   - A block record never becomes durable before the data it describes:
//     PutBlock waits for the data's sync before it commits the record.
//   - A write is durable once a Sync that started after it returns; a
//     failed sync makes the engine refuse every later mutation (ErrFailed).
//     A logged write (WriteLoggedChunk, ReplayLoggedChunk: its bytes are
//     also in the caller's durable log) is not covered by Sync: it is
//     durable once SyncLogged, SyncLoggedBlocks naming its block, a
//     PutBlock covering it, or Close returns. Until then its file holds a
//     reference (LoggedFiles counts them). Small logged chunks that extend
//     a block's bytes are gathered in memory and reach the file in one
//     pwrite (write-behind, writebehind.go): before any read of the file,
//     any sync of it, and its leaving the file cache; a failed gathered
//     write fails that sync.
//   - Every record on disk carries a CRC32C and its own identity (container
//     and block IDs), checked on decode.
//   - A container's BCSID (block commit sequence ID, ContainerInfo.BCSID)
//     is the sequence of the last PutBlock applied to it. A PutBlock that
//     raises it writes the container record in the same Pebble batch as its
//     block record, so on disk the BCSID is never ahead of or behind the
//     block records it covers, across any crash. It never goes down: a put
//     below it is a replay (it succeeds without a change, or gets the
//     refusal it got the first time) or, when it would change a block, is
//     refused with ErrSequence (applied out of order). DeleteBlock and
//     CloseContainer leave it alone; an import keeps the source's.
//
// # On-disk records
//
// Pebble keys (big-endian, so that iteration is in ID order):
//
//	'C' | containerID u64                 → container record
//	'B' | containerID u64 | localID u64   → block record
//	'G' | containerID u64 | localID u64   → gone mark: D u64 LE | CRC32C u32 LE (gone.go)
//	'X' | containerID u64 | localID u64   → damage mark: the error, UTF-8 (damage.go)
//
// A gone mark says that the block is deleted by the committed DeleteBlock at
// pipeline log index D, not applied here yet: until then PutBlock of it below
// D only moves the BCSID (MarkGone; synced before it returns, deleted with
// the block or the container).
//
// Container record (38 bytes, little-endian):
//
//	| offset | size | field                                         |
//	|--------|------|-----------------------------------------------|
//	| 0      | 1    | record version = 2                            |
//	| 1      | 1    | state: 1 OPEN, 2 CLOSED, 3 UNHEALTHY, 4 DELETING |
//	| 2      | 8    | container ID                                  |
//	| 10     | 8    | max size, bytes                               |
//	| 18     | 8    | created, Unix ms                              |
//	| 26     | 8    | BCSID: sequence of the last PutBlock applied  |
//	| 34     | 4    | CRC32C of bytes 0..33                         |
//
// A version 1 record (30 bytes: the same without the BCSID, CRC32C at 26)
// is still read, with BCSID 0; every write of a record writes version 2.
//
// Block record (33 + Σ(4 + 4·pieces) + 4 bytes, little-endian):
//
//	| offset | size    | field                                        |
//	|--------|---------|----------------------------------------------|
//	| 0      | 1       | record version = 1                           |
//	| 1      | 8       | container ID                                 |
//	| 9      | 8       | local block ID                               |
//	| 17     | 4       | bytes per checksum (bpc)                     |
//	| 21     | 8       | block length, bytes                          |
//	| 29     | 4       | chunk count n                                |
//	| 33     | …       | n × { chunk length u32, ⌈length/bpc⌉ × CRC32C u32 } |
//	| end-4  | 4       | CRC32C of every byte before                  |
//
// Chunk offsets are not stored: chunks are contiguous from 0.
//
// Volume identity file SPINDLE_VOLUME (40 bytes):
//
//	| offset | size | field                          |
//	|--------|------|--------------------------------|
//	| 0      | 8    | magic "SPNDLVOL"               |
//	| 8      | 4    | format version = 1             |
//	| 12     | 16   | volume UUID (random)           |
//	| 28     | 8    | created, Unix ms               |
//	| 36     | 4    | CRC32C of bytes 0..35          |
//
// Block files hold raw chunk bytes at their offsets, nothing else.
//
// # Whole-container export and import
//
// ExportContainer reads a CLOSED container (only then are its block files
// immutable) block by block, in local ID order, handing out each block's
// record and its file opened read-only, so that a re-replication source or
// a client download streams the file with sendfile (vfs.OSFile); it pages
// through the block records (exportPageBlocks at a time) and skips blocks
// deleted meanwhile. The source does not verify checksums; the importer
// does.
//
// ImportContainer builds a container in a staging directory of one volume,
// <volume>/tmp/import-<cid>-<random>/, laid out like a container directory
// (<local>.blk files). AddBlock reads each block's bytes through one
// ImportBufferBytes buffer per importer (memory does not depend on the
// container's or the block's size), verifies every piece before writing it,
// and writes each buffer with one pwrite. Commit fdatasyncs the files,
// fsyncs the staging directory, renames it to the container's directory,
// fsyncs both parents, then commits the CLOSED container record and every
// block record in one synced Pebble batch: the commit point. Until then the
// container ID is reserved (ErrExists for CreateContainer and a second
// import) but the container is invisible.
//
// Import invariants:
//
//   - A container record never becomes durable before its directory and
//     every byte of its block files (all synced before the Pebble commit).
//   - After a crash at any point the container is absent (no directory, no
//     record) or present with every block verified: Open removes every
//     staging directory and every container directory without a container
//     record on its volume (sweepVolume), and never one with a record.
//   - Nothing but the volume's tmp/ directory is written before Commit; a
//     failed or aborted import leaves nothing visible (Abort removes the
//     staging directory).
//
// Staging layout (see volume.go and docs/FORMAT.md):
//
//	| path                              | content                                   |
//	|-----------------------------------|-------------------------------------------|
//	| <vol>/tmp/                        | staging directories only; emptied at Open |
//	| <vol>/tmp/import-<cid>-<16 hex>/  | one import in progress (cid in decimal)   |
//	| <vol>/tmp/import-…/<local>.blk    | a block file, as in a container directory |
//
// # Concurrency
//
// An Engine is safe for concurrent use. Engine.mu guards the container map;
// each container's mutex guards its state and its blocks' write state. Lock
// order: Engine.mu → container.mu → committer.mu; file and record caches
// have leaf locks. No lock is held across a pwrite, a pread or a group
// commit round: writers reserve their range under the container lock,
// pwrite outside it, and mark the chunk done under it again.
//
// An Export or an Importer is used by one goroutine at a time; many may run
// at once. An Importer takes Engine.mu only to reserve its ID and to insert
// the committed container; it holds no lock across its file I/O or its
// Pebble commit. Close the engine only after every Importer has committed
// or aborted.
package engine
