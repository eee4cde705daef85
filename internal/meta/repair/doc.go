// Package repair keeps CLOSED containers whole: Rerepl (rerepl.go: the
// replication manager — copies of under-replicated containers scheduled
// and followed, surplus and unhealthy replicas trimmed — and safe mode)
// and Damage (damage.go: the blocks the datanodes' scrubbers and reads
// report damaged, lost blocks, block repairs). Both decide from the
// replica views of package cluster (Cluster.ReplicaIndex, ClosedIndex,
// ReplicasOf).
//
// Invariants: see "Replication manager", "Safe mode" and "Damage" in
// package meta's comment. In short: no replication decision in safe mode;
// at most one copy and one deletion per container in flight, within the
// per-source, per-target and cluster limits; a deletion never takes a
// container below ReplicationFactor healthy replicas; choices are
// deterministic (container ID order, then node ID). Everything here is
// memory only: after a restart the reports rebuild it.
//
// Concurrency: none of its own. Every method runs under state.State.Mu,
// held by its caller: for writing in Heartbeat, Tick and ExitSafeMode,
// for reading in the status views and the metrics; the answer waits for
// durability outside the lock (state.Mutate, state.Read).
package repair
