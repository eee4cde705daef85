// Package ecmeta is the meta service's part of erasure coding (issue 37):
// the policies (the cluster default, a bucket's own or its S3 tag
// ecapi.TagName), the conversions of CLOSED containers it schedules on the
// datanodes' polls (POST /v1/ec/work), the switch of a container to EC
// when its converter reports every shard durable, and the layouts readers
// ask for. Routes: package metaapi/ecapi. Records: record.go,
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
//   - The replication manager skips EC containers (Coded): their replicas
//     are neither copied nor waited for.
//
// Memory (the EC containers, conversions in flight, the containers'
// buckets) is rebuilt from the store whenever the State's stint changes
// (a new leader term), so that a member serving again never trusts what
// another leader may have changed meanwhile.
//
// Concurrency: Manager.mu is taken after state.State.Mu (read or write)
// and guards the memory above; Coded runs under State.Mu held by its
// caller; the other methods take State.Mu through state.Read/Mutate.
package ecmeta
