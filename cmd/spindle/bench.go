package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/units"
)

// jsonFlag is the persistent flag of `spindle bench`: print the result as
// one line of JSON instead of a table.
const jsonFlag = "json"

// newBenchCmd returns the parent of all load generators. Scenarios are
// added here (chunk-write, follower-append, teragen, queue-dirs,
// rereplicate, meta, ...); each prints its result with printResult.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load generators and measurements (one JSON line with --json, a table otherwise)",
		Args:  cobra.NoArgs,
	}
	cmd.PersistentFlags().Bool(jsonFlag, false, "print the result as one line of JSON on stdout")
	cmd.AddCommand(newBenchBaselineCmd(), newBenchChunkWriteCmd(), newBenchFollowerAppendCmd(), newBenchQueueDirsCmd(),
		newBenchTeraGenCmd(), newBenchKeyWriteCmd(), newBenchKeyReadCmd(), newBenchS3Cmd(), newBenchRereplicateCmd(), newBenchMetaCmd(), newBenchFloodCmd(), newBenchChaosCmd(),
		cli.BenchECCmd(func(c *cobra.Command) bool { j, _ := c.Flags().GetBool(jsonFlag); return j }))
	return cmd
}

// printResult writes r to stdout: as JSON with --json, as a table otherwise.
// jsonValue, when non-nil, is what gets encoded instead of r (a struct
// embedding r with scenario-specific top-level fields).
func printResult(cmd *cobra.Command, r bench.Result, jsonValue any) error {
	asJSON, err := cmd.Flags().GetBool(jsonFlag)
	if err != nil {
		return err
	}
	if !asJSON {
		return r.WriteTable(cmd.OutOrStdout())
	}
	if jsonValue == nil {
		jsonValue = r
	}
	return bench.WriteJSON(cmd.OutOrStdout(), jsonValue)
}

func newBenchBaselineCmd() *cobra.Command {
	cfg := bench.BaselineConfig{}
	chunkSize := units.ByteSize(units.MiB)
	fileSize := units.ByteSize(bench.DefaultBaselineFileSizeBytes)
	cmd := &cobra.Command{
		Use:   "baseline",
		Short: "Raw OS write baseline: pwrite + fdatasync on bare file descriptors",
		Long: `Measures what the operating system and the device deliver without Spindle:
--writers goroutines each pwrite --chunk-size bytes sequentially into their
own file baseline-<i>.dat in --dir (wrapping at --file-size), with an
fdatasync after every --writes-per-sync writes. Runs for --duration or
--max-ops writes, whichever comes first, then deletes its files. Engine
benches report their figures as a ratio to this one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.ChunkSizeBytes = chunkSize.Int64()
			cfg.FileSizeBytes = fileSize.Int64()
			b, err := bench.RunBaseline(cmd.Context(), cfg)
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			r := b.Result()
			if err != nil {
				r.AddNote("interrupted: %v", err)
			}
			if perr := printResult(cmd, r, nil); perr != nil {
				return perr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory for the baseline files (created if missing; default: a temporary directory)")
	f.Var(&chunkSize, "chunk-size", "bytes per pwrite (e.g. 1KiB, 1MiB)")
	f.IntVar(&cfg.Writers, "writers", 16, "concurrent writers, one file each")
	f.IntVar(&cfg.WritesPerSync, "writes-per-sync", 1, "fdatasync after every N pwrites of a writer")
	f.StringVar(&cfg.Pattern, "pattern", bench.PatternOverwrite, "at the wrap: overwrite (rewrite allocated space in place) or append (truncate first: every write goes to new space)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "run time bound (0: none)")
	f.Int64Var(&cfg.MaxOps, "max-ops", 0, "bound on the total number of writes (0: none)")
	f.Var(&fileSize, "file-size", "size at which each writer's file wraps to offset 0")
	return cmd
}
