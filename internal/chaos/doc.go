// Package chaos is `spindle bench chaos`: a real cluster (the meta service
// and N datanodes, each a child process in a process group of its own,
// under one directory) under a seeded nemesis, with writers and readers
// going through the real key client in this process, and the verdict of
// what survived.
//
// # The run
//
//  1. Start the meta service (MetaReplicas `spindle meta` members, default
//     3, package metagroup; --dead-after 10 s scaled as
//     the holds below, at least 4 s, and --stale-after half of it, so that
//     about half the kills and pauses outlast it: the node is DEAD, its
//     pipelines closed and its containers copied elsewhere) and the
//     datanodes (internal/localcluster, ProcessGroup), every connection
//     mutual TLS unless Insecure, under a directory on $TMPDIR's disk by
//     default; wait for a pipeline.
//  2. Writers put values of mixed sizes (log-uniform, 1 KiB .. 4 MiB) under
//     keys written once ("cold/N"), and puts (≤ 256 KiB, a quarter above the
//     64 KiB inline limit) and deletes of a few
//     hot keys ("hot/NN"); readers get hot keys and acknowledged cold keys.
//     Values are regenerated from (seed, key, version), never kept: a
//     value's first 32 bytes name it (values.go), so a read says which put
//     it returns, and every byte is compared with the regenerated value.
//     Per cold key the run keeps its size, CRC32C, outcome and first block.
//  3. The nemesis (nemesis in run.go, kinds in faults.go) injects one fault
//     at a time, on a schedule drawn from the seed, each healed before the
//     next: kill -9 of one datanode (a minority of every pipeline) and its
//     restart on the same directories (kill2: two at once, a majority of
//     some pipeline, both restarted); SIGSTOP/SIGCONT of one; kill -9 of
//     the meta leader and its restart on the same directory and port; a
//     byte flipped on disk in the committed part of a block file of one
//     replica (only ever one replica per container, so a good copy of every
//     block remains); (root) one datanode's data volume, a tmpfs of its
//     own (volumes.go), filled to ENOSPC and freed. After each heal,
//     until the next fault, a poll waits for full replication (step 4's
//     test) and times it. Holds are 5-20 s (meta: 1-5 s), scaled by
//     duration/2 min (at least 0.25) for short runs.
//  4. Heal: SIGCONT every datanode, restart whatever is down. Wait (bounded
//     by SettleTimeout) until every datanode is HEALTHY, the meta service is
//     out of safe mode, no copy is needed or in flight, and every container
//     has ReplicationFactor replicas OPEN or CLOSED and not behind.
//  5. Verify: every cold key is read back (up to verifyAttempts times each),
//     every hot key once more, and the hot keys' history is checked by
//     porcupine (linearizable.go).
//
// # Invariants checked (a violation makes Report.Failed true)
//
//   - Every acknowledged put reads back byte for byte (else lost, or
//     unreadable when it cannot be read at all after the heal).
//   - A put that failed is absent or complete, never partial; a put whose
//     outcome is unknown (its CommitKey was sent and got no answer) may be
//     either.
//   - No read returns wrong bytes without an error: the client's own
//     checksum errors are failures of the read, not wrong reads.
//   - The history of puts, gets and deletes of each hot key is that of a
//     register: operations whose outcome is unknown may take effect at any
//     time after their call until 60 s (the operation timeout) after they
//     failed — a stated assumption about the meta service, which applies a
//     request while its client waits or never; failed gets and puts that
//     failed before their CommitKey are left out (they had no effect).
//
// # Bounds
//
// Every loop is bounded in time (Duration, opTimeout per operation,
// healTimeout, SettleTimeout, linearizabilityTimeout) and in count
// (MaxOps operations, MaxWorkers workers), and the space it takes by
// MaxBytes of cold values (past it, a writer retires an acknowledged cold
// key, read back and deleted, before each new one; only when none can be
// retired are the hot keys alone written). Memory is
// O(operations): a few words per operation and per cold key, never a
// value.
//
// # Concurrency
//
// Run owns everything it starts and returns after every goroutine and
// process it started has stopped. Writers and readers share the workload
// under its mutex (records, history, latencies); the nemesis runs on Run's
// goroutine and alone signals processes, only those the run started, by
// process group. One Run at a time per directory.
package chaos
