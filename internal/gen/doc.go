// Package gen is the offline data generator (`spindle gen`, like Ozone's
// freon cgdn/cgscm/cgom): it writes a whole cluster state straight to disk,
// at disk speed, without running a cluster — CLOSED containers with their
// block files and block metadata on N datanodes (3 replicas of each), and
// the matching meta store (nodes, CLOSED pipelines, CLOSED containers, one
// bucket and its keys) — so that `spindle server --dir D --datanodes N`
// starts on it and every key reads back byte for byte.
//
// # Layout (the embedded server's, internal/server)
//
//	D/meta/pebble/            the meta store (meta.CreateOffline)
//	D/datanodes/dn<i>/        datanode i's volume (engine data directory)
//	D/datanodes/log/dn<i>/    its log directory: an empty WAL (a datanode
//	                          refuses an empty log next to containers) and
//	                          DATANODE.json {"uuid", "node_id": i}, so that it
//	                          starts as node i without registering
//
// No server.json: the server picks fresh ports and the datanodes' first
// heartbeats replace the placeholder address the meta store holds
// (PlaceholderAddr).
//
// What is generated: keys KeyName(0..K-1) of KeySizeBytes (the last one
// shorter) totalling SizeBytes, laid end to end in one byte stream; the
// stream is cut into containers of ContainerSizeBytes (IDs 1..C), and each
// key into blocks of at most BlockSizeBytes that never cross a container
// (so a key's blocks may span containers). Container c is on nodes c, c+1,
// c+2 (mod N, 1-based), so each node holds 3 of every N containers; one
// CLOSED pipeline per distinct member set. Blocks are written as the key
// client writes them: chunks of ChunkSizeBytes, a CRC32C per
// BytesPerChecksum piece. A key's content is Content(Seed, key, offset);
// its whole-value CRC32C is in its key record. Each container's 3 replicas
// have the same BCSID (engine.ContainerInfo.BCSID), its number of blocks,
// as if block i had been committed at sequence i: none is behind.
//
// # How it goes fast
//
// Containers are independent units of work for a bounded pool of Workers.
// A worker generates each block once into its reused buffer (memory:
// Workers × the longest block), computes its piece checksums once, and
// streams the same bytes to the container's 3 replicas through
// engine.Importer (which verifies them again and writes them with large
// pwrites); there is no fsync per block: each Importer.Commit syncs its
// files in parallel, then renames and commits the metadata once. The
// block's and the key's CRC32C are combined from the piece checksums
// (crc.go), never computed over the bytes again.
//
// # Invariants
//
//   - Run writes only into a D that holds no meta/, datanodes/ or
//     server.json (it refuses otherwise, before writing anything); when it
//     fails or is cancelled it removes the meta/ and datanodes/ it made.
//   - Order of durability: every container is committed (synced) on its 3
//     datanodes, then the log directories are written, and the meta store
//     is written last, its final commit synced. A meta store without that
//     final commit is refused by meta.Open, so a crash of gen never leaves
//     a state that looks complete (docs/CRASH_SAFETY.md, "Offline
//     generator").
//   - Every limit is named: MaxWorkers, MaxKeys, MaxBaselineBytes, the
//     header bound of the key client (keyclient.MaxPutBlockHeader) and the
//     meta service's MaxBlocksPerKey.
//
// # Concurrency
//
// Run uses Workers goroutines plus one for progress and returns after
// they have all ended. Content and KeyName are pure and safe for
// concurrent use.
package gen
