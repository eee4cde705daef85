// Package cluster is the meta service's cluster manager over state.State:
// Cluster (cluster.go: the datanode registry and health, pipelines made
// and closed, containers and their CLOSING/CLOSED life, and the views of
// a CLOSED container's replicas — healthy, behind, read members — that
// re-replication, damage and reads share), Allocator (allocate.go: block
// allocation on allocatable, then degraded, pipelines; degraded.go: a
// pipeline with a DEAD member kept OPEN while no replacement exists, and
// its containers reported under-replicated), BlockGC (gc.go:
// pending block deletions, their delivery and acknowledgement, expired
// allocations), Ops (ops.go: decommission, maintenance, failed
// volumes) and Removal (remove.go: a datanode removed for good).
//
// Invariants: see "Cluster manager", "Replicas of a CLOSED container",
// "Deleting blocks, garbage" and "Datanode operations" in package meta's
// comment. In short: a node ID, pipeline ID, container ID or block local
// ID is never handed out twice (counters persisted in the batch that uses
// them); a CLOSED pipeline never reopens; a container takes blocks only
// while OPEN; a replica counts as healthy only if it is CLOSED at the
// highest BCSID the live reports give; a committed key's blocks are never
// scheduled for deletion. Replicas, health and delivery counts are memory
// only, rebuilt from the heartbeats after a restart.
//
// Concurrency: none of its own. Every method runs under state.State.Mu,
// held by its caller (package meta's Heartbeat and Tick, or a
// state.Mutate/state.Read around it): for writing when it changes memory
// or writes to a batch, for reading otherwise. A method that changes
// state adds its records to the caller's batch; the answer waits for
// durability outside the lock (see package state).
package cluster
