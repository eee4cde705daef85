package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/report"
	"github.com/spindle-store/spindle/internal/units"
)

func newReportEnvCmd() *cobra.Command {
	var dirs []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Show the environment a report records: CPU, memory, kernel, filesystems and devices of --dir, vm.dirty_*, versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env := report.CaptureEnvironment(dirs)
			out := cmd.OutOrStdout()
			if asJSON {
				b, err := json.Marshal(env)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(out, string(b))
				return err
			}
			bw := bufio.NewWriter(out) // Flush, returned, has the first write error
			fmt.Fprintf(bw, "cpu      %s, %d cores\n", env.CPUModel, env.Cores)
			fmt.Fprintf(bw, "memory   %s\n", units.FormatBytes(int64(env.MemoryBytes)))
			fmt.Fprintf(bw, "kernel   %s\n", env.Kernel)
			fmt.Fprintf(bw, "versions spindle %s (commit %s), %s\n", env.SpindleVersion, env.Commit, env.GoVersion)
			fmt.Fprintf(bw, "vm       %s\n", strings.Join(env.SortedVMDirty(), " "))
			for _, d := range env.Dirs {
				rot := "unknown"
				if d.Rotational != nil {
					rot = map[bool]string{true: "rotational", false: "non-rotational"}[*d.Rotational]
				}
				journal := ""
				if d.Journal != nil {
					journal = map[bool]string{true: ", journaled", false: ", NO JOURNAL: namespace changes not ordered"}[*d.Journal]
				}
				fmt.Fprintf(bw, "dir      %s: %s on %s (%s, device %s, %s%s) options %s\n", d.Path, d.FSType, d.MountPoint, d.Source, d.Device, rot, journal, d.Options)
			}
			for _, m := range env.Missing {
				fmt.Fprintf(bw, "missing  %s\n", m)
			}
			return bw.Flush()
		},
	}
	cmd.Flags().StringSliceVar(&dirs, "dir", nil, "directory to describe (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one line of JSON")
	return cmd
}
