package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchQueueDirsCmd() *cobra.Command {
	var cfg scenario.QueueDirsConfig
	size := units.ByteSize(scenario.DefaultQueueFileSizeBytes)
	cmd := &cobra.Command{
		Use:   "queue-dirs",
		Short: "Mail-queue file churn over N senders × D directories, per-syscall times",
		Long: `Queues files as a mail transfer agent does: each of --senders goroutines
creates a temporary file in one of --dirs queue directories under --dir,
writes --size bytes, fsyncs, closes and renames it to its queue name in the
same directory (and, with --unlink, removes it). File N goes to directory
N mod --dirs (round-robin). Stops after --files files or --duration,
whichever comes first.

Every system call (openat, write, fsync, close, renameat, unlinkat) is timed
in-process: calls, total and average time, p50/p99/max, share of time;
files/s overall. All files are removed at the end. The performance lab runs
1×1, 10×1 and 10×10 senders × directories.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.SizeBytes = size.Int64()
			res, err := scenario.RunQueueDirs(cmd.Context(), cfg)
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			if err != nil {
				res.AddNote("interrupted: %v", err)
			}
			asJSON, ferr := cmd.Flags().GetBool(jsonFlag)
			if ferr != nil {
				return ferr
			}
			if asJSON {
				ferr = printResult(cmd, res.Result, nil)
			} else {
				ferr = res.WriteTable(cmd.OutOrStdout())
			}
			if ferr != nil {
				return ferr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "where to make the queue directories (created if missing; default: the temporary directory)")
	f.IntVar(&cfg.Senders, "senders", 1, "concurrent senders")
	f.IntVar(&cfg.Dirs, "dirs", 1, "queue directories")
	f.Int64Var(&cfg.Files, "files", 1000, "bound on the number of files (0: none; then --duration is required)")
	f.DurationVar(&cfg.Duration, "duration", 0, "run time bound (0: none)")
	f.Var(&size, "size", "bytes per file (e.g. 4096, 4KiB)")
	f.BoolVar(&cfg.Unlink, "unlink", false, "remove each queue file right after its rename")
	return cmd
}
