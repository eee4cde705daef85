package main

import (
	"bufio"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/report"
)

// newReportCmd returns the parent of the performance-lab commands: run
// directories (results.json, see internal/report), imports and comparisons.
func newReportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Performance lab: run directories, syscall profiles, comparisons",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newReportRunCmd(), newReportCompareCmd(), newReportRenderCmd(), newReportImportStraceCmd(), newReportEnvCmd())
	return cmd
}

func newReportImportStraceCmd() *cobra.Command {
	var opts report.ImportOptions
	var out string
	var replace bool
	cmd := &cobra.Command{
		Use:   "import-strace FILE",
		Short: "Turn an strace -c summary into a run directory that compare accepts",
		Long: `Reads the summary table that strace -c (or strace -f -c, -w, -U ...) prints,
anywhere in FILE (lines around it are skipped; a truncated table keeps its
printed total line as the authoritative total), and writes --out/results.json:
a run named --name whose "syscalls" section holds the total calls, errors and
seconds and, per syscall shown, calls, errors, seconds and usecs/call.

The table cannot tell whether -f or -w was given: say so with --tool.
--ops, when the number of operations the trace covers is known (the follower-append
bench's 30000 messages), adds per-operation figures.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if out == "" {
				return errors.New("import-strace: --out DIR is required")
			}
			run, err := report.ImportStrace(opts)
			if err != nil {
				return err
			}
			if err := report.Save(out, run, replace); err != nil {
				if errors.Is(err, report.ErrRunExists) {
					return fmt.Errorf("%w (use --replace to overwrite)", err)
				}
				return err
			}
			s := run.Syscalls
			w := bufio.NewWriter(cmd.OutOrStdout()) // Flush, returned, has the first write error
			fmt.Fprintf(w, "%s: %d syscalls shown, total %d calls, %d errors, %.6f s -> %s\n",
				run.Name, len(s.ByName), s.Total, s.Errors, s.Seconds, report.ResultsPath(out))
			for _, n := range run.Notes {
				fmt.Fprintf(w, "note: %s\n", n)
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Name, "name", "", "name of the run (default: FILE's base name)")
	f.StringVar(&out, "out", "", "run directory to write results.json into (created if missing)")
	f.StringVar(&opts.Tool, "tool", "strace -c", `how the table was made, e.g. "strace -f -c -w"`)
	f.Int64Var(&opts.Ops, "ops", 0, "operations the trace covers, for per-operation figures (0: unknown)")
	f.BoolVar(&replace, "replace", false, "overwrite an existing results.json in --out")
	return cmd
}
