package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/demo"
	"github.com/spindle-store/spindle/internal/units"
)

func newDemoCmd() *cobra.Command {
	var cfg demo.Config
	size := units.ByteSize(demo.DefaultDataBytes)
	teragenSize := units.ByteSize(demo.DefaultTeraGenBytes)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run Spindle end to end in a temporary directory and print a summary",
		Long: `Runs Spindle end to end in a temporary directory, in about half a minute:

 1. the storage engine on two volumes: --size of blocks written durably and
    read back with checksum verification, containers closed and scanned, the
    engine reopened and everything verified again;
 2. spindle server (the meta service and 3 datanode processes on 127.0.0.1):
    files from 0 bytes to many blocks put, stat-ed, listed, got back and
    compared byte for byte, a ranged get across blocks, a delete;
 3. short runs of every bench: teragen (--teragen-size, validated), key-write
    and key-read on that server; then the raw baseline, chunk-write (engine
    only, and through a 3-replica pipeline), follower-append and queue-dirs.

Prints a summary table of every step and the benches' results, stops
everything and removes the directory. Exits non-zero on any mismatch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: finding the spindle binary for the datanodes: %w", err)
			}
			cfg.Binary = bin
			cfg.DataBytes = size.Int64()
			cfg.TeraGenBytes = teragenSize.Int64()
			cfg.Out = cmd.OutOrStdout()
			return demo.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "where the temporary directory goes (default: the system temp dir)")
	f.Var(&size, "size", "data the engine part writes and reads back")
	f.Var(&teragenSize, "teragen-size", "size of the short teragen")
	f.IntVar(&cfg.Writers, "writers", 4, "parallel writers of the engine part")
	f.DurationVar(&cfg.BenchDuration, "bench-duration", demo.DefaultBenchDuration, "length of each short timed bench")
	f.BoolVar(&cfg.EngineOnly, "engine-only", false, "only the storage engine part (no processes started)")
	return cmd
}
