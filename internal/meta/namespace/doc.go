// Package namespace is the meta service's namespace over state.State:
// Namespace (namespace.go: buckets, keys and their block lists or inline
// values, commits and batched commits, gets, deletions, listings;
// commitid.go: commit IDs, so that a retried commit is answered once),
// Multipart (multipart.go: the S3 gateway's multipart uploads and parts)
// and S3Users (users.go: S3 users, bucket owners and ACLs; a user's secret
// stored sealed with the key encryption key, State.Cfg.KEK, package kek,
// and opened only for the gateway's lookup by access key); versions.go and
// lifecycle.go: S3 object versions, and the S3 lifecycle runner's scan and
// apply (an action applies only to versions still as planned).
//
// Invariants: see "Namespace" and "Deleting blocks, garbage" in package
// meta's comment, and the rules of a commit in package metaapi's. In
// short: a commit is one batch (the key record, the consumed allocations,
// the bucket's counts, the containers' committed bytes, the deletion of a
// replaced version's blocks), so a key is visible whole or not at all; a
// block is committed at most once; a malformed request changes nothing; a
// commit ID is recorded in its commit's batch.
//
// Concurrency: none of its own. Every request goes through state.Mutate
// (State.Mu held for writing while it validates, changes memory and
// builds its batch) or state.Read (held for reading; keys are read from
// the store through state.Store), and its answer waits for durability
// outside State.Mu. Batched requests take State.Mu once for all their
// items: CommitKeys through state.ApplyEach, GetKeys in one state.Read.
package namespace
