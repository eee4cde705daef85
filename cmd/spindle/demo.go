package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/demo"
	"github.com/spindle-store/spindle/internal/units"
)

func newDemoCmd() *cobra.Command {
	var cfg demo.Config
	size := units.ByteSize(256 * units.MiB)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run Spindle end to end in a temporary directory and print a summary",
		Long: `Opens a storage engine on two volumes in a temporary directory, writes
--size of blocks durably and reads every byte back with checksum
verification, closes and scans the containers, reopens the engine and
verifies again, then runs short chunk-write benches. Exits non-zero on any
mismatch; removes the directory at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.DataBytes = size.Int64()
			cfg.Out = cmd.OutOrStdout()
			return demo.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "where the temporary directory goes (default: the system temp dir)")
	f.Var(&size, "size", "data written and read back")
	f.IntVar(&cfg.Writers, "writers", 4, "parallel writers")
	f.DurationVar(&cfg.BenchDuration, "bench-duration", 2*time.Second, "length of each short bench")
	return cmd
}
