// Package ecmeta is the meta service's part of erasure coding (issue 37):
// the policies (the cluster default, a bucket's own or its S3 tag
// ecapi.TagName), the conversions of CLOSED containers it schedules on the
// datanodes' polls (POST /v1/ec/work), the switch of a container to EC
// when its converter reports every shard durable, the layouts readers
// ask for, and the repair of its shards (repair.go: missing or moving
// shards rebuilt from k others, leftovers dropped, GET /v1/ec/status and
// the spindle_meta_ec_* metrics) and their compaction (compact.go: an EC
// container whose live bytes fell under CompactPolicy.Below rewritten as
// its next generation without its deleted blocks). Routes: package metaapi/ecapi. Records: record.go,
// docs/FORMAT.md §13.3 ('E').
//
// Invariants:
//
//   - A container is erasure-coded exactly when its record
//     (ContainerKey) exists; the record is written in one batch, once,
//     after its converter reported every shard fsynced on its datanode,
//     and never removed here. Replicas of an EC container are dropped
//     (Work's Drop) only once that batch is durable: before it, the
//     replicas are the container; after it, the complete shard set is.
//     A crash anywhere leaves one of the two.
//   - Each shard of a container is on a different datanode; a policy the
//     cluster has too few datanodes in service for is refused when set,
//     and a conversion that cannot be placed is not scheduled (logged).
//   - A container is converted only when every bucket with keys in it
//     wants the same coded policy; mixed or unknown: it stays replicated.
//   - The replication manager skips EC containers' replicas (Coded):
//     neither copied nor waited for; it counts their shards (ShardHealth).
//   - Repair (repair.go): a shard's new datanode is recorded (the record
//     rewritten in one batch) only after that datanode reported the
//     shard rebuilt and fsynced, only for the rebuild in flight to it and
//     only if the shard is still recorded where the rebuild found it;
//     until then the old record stands. A shard stored on a datanode is
//     listed to drop only when no record, rebuild or conversion in flight
//     names it there (a report of a conversion or rebuild not in flight
//     is refused, so a dropped shard is never named afterwards), and the
//     node deletes it only if its file is the one it listed (mtime).
//   - Each shard of a container stays on its own datanode: a rebuild's
//     target holds no shard of it and no other rebuild of it.
//   - A decommission is done only when no record names the datanode
//     (Holds).
//   - Compaction (compact.go): a record names one generation of its
//     container's shards; it moves to the next in one batch, after the
//     compactor reported every shard of it fsynced, only for the
//     compaction in flight, only if the record is still the generation
//     it read and only with the blocks it was given; the same batch
//     completes the pending deletions of the blocks left out. Until then
//     the old generation stands; its shards are dropped only once no
//     record names them. The deletions of the blocks of an EC container,
//     or of one being converted, are never delivered or completed by the
//     block GC (BlockGC.Coded): the switch of a conversion or a
//     compaction completes those of the blocks its record does not hold. At most MaxCompactions in flight, one
//     conversion or compaction a datanode.
//   - The pass over the keys that learns the containers' buckets (scan.go)
//     visits at most ScanPage keys per step under the meta lock.
//
// Memory (the EC containers and their shards' datanodes, conversions and
// rebuilds in flight, the datanodes' shard inventories, the containers'
// buckets) is rebuilt from the store whenever the State's stint changes
// (a new leader term), so that a member serving again never trusts what
// another leader may have changed meanwhile.
//
// Concurrency: Manager.mu is taken after state.State.Mu (read or write)
// and guards the memory above; Coded runs under State.Mu held by its
// caller; the other methods take State.Mu through state.Read/Mutate.
package ecmeta
