package main

import (
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchMetaCmd() *cobra.Command {
	var cfg scenario.MetaBenchConfig
	size := units.ByteSize(scenario.DefaultMetaBenchSizeBytes)
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Allocate + commit of small keys through the meta service's HTTP API by N clients, next to the disk's fsync rate",
		Long: `Starts a meta service in this process (HTTP on 127.0.0.1, its Pebble store in
--dir) with 3 datanodes registered and heartbeating over HTTP (nothing else of
a datanode: no data is written), then --clients loops each allocate a block
and commit a key of --size made of it, through the meta API client, until
--keys keys or --duration. ops are keys (an allocation and a commit: two
synced store batches each); latency is per key.

Then, in the same directory, the disk's fsync rate: one writer doing pwrite
4 KiB + fdatasync (bench baseline), reported as fsync_per_s, with
ops_per_fsync = ops_per_s / fsync_per_s. wal_syncs is the syncs of the meta
store's WAL during the run (commits_per_wal_sync: how well its commits are
grouped; wal_sync_us_mean: what they cost). With --replicas 3,
raft_entries is the meta log entries the leader appended during the run
(ops_per_raft_entry: how well proposals are folded into entries).

--dir is created and removed at the end (an existing directory gets a
subdirectory); default: a temporary directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.SizeBytes = size.Int64()
			cfg.Progress = bench.TerminalProgress()
			cfg.Logger = slog.Default()
			res, err := scenario.RunMetaBench(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return printResult(cmd, res.Result, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory of the meta store and the fsync baseline (default: a temporary directory)")
	f.IntVar(&cfg.Replicas, "replicas", 1, "meta service members (3: a raft group in this process, on 127.0.0.1)")
	f.IntVar(&cfg.Clients, "clients", scenario.DefaultMetaBenchClients, "concurrent clients, each allocating and committing one key at a time")
	f.IntVar(&cfg.PreAllocate, "preallocate", 0, "the API client pre-allocates blocks this many at a time (0: one allocation request per key, batched with the concurrent ones; at most 64)")
	f.IntVar(&cfg.Keys, "keys", scenario.DefaultMetaBenchKeys, "bound on the keys committed")
	f.DurationVar(&cfg.Duration, "duration", scenario.DefaultMetaBenchDuration, "time bound of the run (0: --keys only)")
	f.Var(&size, "size", "size each key claims (one block of that length; no data is written)")
	f.BoolVar(&cfg.NoBaseline, "no-baseline", false, "skip the fsync baseline")
	f.DurationVar(&cfg.BaselineDuration, "baseline-duration", 5*time.Second, "bound of the fsync baseline")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the meta store at the end")
	f.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed phase (meta service and clients: one process) here")
	return cmd
}
