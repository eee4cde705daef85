// Package repair keeps CLOSED containers whole: Rerepl (rerepl.go: the
// replication manager — copies of under-replicated containers scheduled
// and followed, surplus and unhealthy replicas trimmed — and safe mode)
// and Damage (damage.go: the blocks the datanodes' scrubbers and reads
// report damaged, lost blocks, block repairs). Both decide from the
// replica views of package cluster (Cluster.ReplicaIndex, ClosedIndex,
// ReplicasOf).
//
// Invariants: see "Replication manager", "Safe mode" and "Damage" below
// (moved from package meta's comment with the code). In short: no replication decision in safe mode;
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
//
// # Replication manager
//
// At each Tick, outside safe mode, every CLOSED container with fewer
// healthy replicas than ReplicationFactor (default PipelineSize) and at
// least one gets a copy scheduled, in container ID order (deterministic),
// one copy per container at a time (a container missing two replicas
// gets its second copy after the first completes):
//
//   - target: a HEALTHY node heard from since the start that does not
//     hold the container in any state and does not serve its pipeline
//     while that is OPEN (a member back from the dead gets the container
//     by replaying the pipeline's log: a copy would race the replay), with
//     fewer than MaxCopiesPerTarget copies to it; the fewest copies in flight to it, then the fewest
//     containers reported, then the lowest ID;
//   - source: one of its healthy replicas that is HEALTHY (not STALE),
//     with fewer than MaxCopiesPerSource copies from it; the fewest, then
//     the lowest ID;
//     a replica a copy of this container failed from within
//     CopyRetryAfter is chosen only when no other HEALTHY replica exists;
//   - at most MaxInflightCopies copies in flight in the cluster.
//
// The target gets replicate_container in every heartbeat response while
// the copy is in flight (Sources: the chosen source, then the other
// healthy replicas, those that failed lately last; SizeBytes: the largest
// size a replica reports), lists it in Heartbeat.Copying while it runs,
// and reports the container CLOSED when done: the copy is complete
// (counted, logged with its MB/s). It ends as failed, to be scheduled
// again, when the target reports a CopyFailure for it (and no longer
// lists it in Copying), when the target is DEAD or reports the container
// in another state, when no healthy replica is left to copy from, when
// the target has not listed it in Copying for CopyStartTimeout (default 3
// heartbeat intervals + 10 s; a restarted target gets the repeated
// command and lists it again), or when it is older than both
// CopyTimeoutMin (10 minutes) and its size at MinCopyBytesPerS (20 MB/s).
// A copy that ends in a heartbeat frees its slots at once: the same
// response can carry the next copy. The state (copies in flight,
// attempts, recent failures, totals) is memory only: after a restart the
// reports say again which replicas exist, and a copy a target finishes
// meanwhile simply shows up as a replica. Progress: GET /v1/replication,
// the spindle_meta_replication_* metrics, `spindle admin replication`.
//
// Replicas that do not count go first (the lowest BCSID first, an
// UNHEALTHY one before a CLOSED one of the same BCSID): an UNHEALTHY or
// behind replica is deleted once its container has ReplicationFactor
// healthy replicas, all HEALTHY, when its node is HEALTHY and does not
// serve the pipeline; or, with fewer healthy replicas (at least one), to
// make room when no node could take a copy (every HEALTHY node holds the
// container in some state): the freed node then gets a whole copy. An
// UNHEALTHY replica above the highest CLOSED BCSID is never deleted: it
// holds block commits no counted replica holds.
//
// Over-replication (a DEAD node that comes back with its replicas after
// they were copied) is trimmed at the same Tick, one replica per
// container at a time, at most MaxTrims in flight: a CLOSED container
// with more healthy replicas than ReplicationFactor, no copy and no
// deletion of it in flight, no pipeline member undecided and every holder
// HEALTHY (a STALE report may be stale) loses its smallest replica
// (fewest bytes, then blocks: a short replica is never kept while a
// complete one goes), then one on a node not serving its pipeline, then
// the fullest node's, then the highest ID's — and nothing while that
// replica is on a node serving the pipeline, whose raft group may still
// write to it. The node gets
// delete_container once (in its next heartbeat response); the deletion is
// done when a later report lacks the container, dropped when the node is
// DEAD, and decided again after CopyStartTimeout without it. The count
// never goes below ReplicationFactor by a deletion of ours: a replica
// being deleted still counts until its node's report drops it, and only
// one is deleted per container at a time.
//
// # Damage
//
// Datanodes report the damaged blocks of their CLOSED replicas
// (ContainerReport.DamagedBlocks: found by their scrubbers or by reads).
// Per container, among its CLOSED replicas at the highest BCSID on live
// nodes, the blocks damaged on every one are lost (no good copy is known)
// and do not make a replica unhealthy; a replica damaged beyond them is not
// healthy (not counted, read or copied from) and is repaired block by
// block (repair_blocks, sources: the good replicas) when at most
// MaxRepairBlocks and half of its blocks are damaged and tries are left,
// else deleted like an UNHEALTHY replica once replaced by a copy. GET
// /v1/damaged lists the lost blocks, the keys holding them (a scan of the
// namespace, only when a block is lost), the repairable blocks, the
// repairs and every node's scrubber report. Memory only (damage.go).
//
// # Safe mode
//
// After a start the meta service is in safe mode: no replication
// decision (everything else runs) until (a) SafeModeMinNodes datanodes
// (default min(3, registered)) have reported since the start and (b)
// SafeModeContainerFraction (default 0.99) of the CLOSED containers have
// a healthy replica reported — so that a cold start, with reports still
// missing, does not schedule a storm of copies. A store without CLOSED
// containers needs (a) only. An operator can leave it at once (POST
// /v1/safemode/exit, `spindle admin safemode exit`; logged). Once left,
// it stays left until the next start. DisableSafeMode starts without it
// (tests). The status says which condition is missing ("2/3 datanodes
// reported", "812/1000 containers have a replica (990 needed)");
// spindle_meta_safe_mode is 1 while in it.
package repair
