// Package scenario holds Spindle's benchmark scenarios (`spindle bench …`):
// each drives a real component with the bounded, timed worker loops of
// package bench and returns a bench.Result with, where one exists, the raw
// baseline measured in the same run on the same directory:
//
//   - chunk-write: the engine in this process (--local), or three datanode
//     processes forming one Raft pipeline, written through the pipeline
//     client (seed 002);
//   - follower-append: a datanode as a Raft follower of this process
//     (seed 000); queue-dirs: a mail queue's file pattern (seed 003);
//   - teragen, key-write, key-read: keys through the key client
//     (internal/keyclient) on a whole cluster, either an embedded
//     `spindle server` started in a directory of the bench (ClusterConfig.Dir)
//     or a running cluster (ClusterConfig.Meta); teragen writes Hadoop
//     TeraGen's rows (internal/teragen) from N writers (seed 001);
//   - meta: allocations and key commits through the meta service's HTTP
//     API by N clients (internal/meta in this process, datanodes as
//     heartbeats only), next to the disk's fsync rate.
//
// Invariants: every scenario is bounded in time and in operations, and in
// the disk space it uses; every figure it reports was measured in this run;
// a scenario that cannot run returns an error saying why, never a zero
// figure. Scenarios clean up what they create: files and directories, the
// processes they start (stopped before they return, also on error), and,
// on a running cluster, the keys they wrote (unless told to keep them).
// The key benches never hold a value in memory: values are generated as
// they are sent and checked as they are read.
//
// Concurrency: a scenario runs its own goroutines and returns when they have
// all stopped; callers run one scenario at a time.
package scenario
