package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/lab"
	"github.com/spindle-store/spindle/internal/report"
)

func newReportRunCmd() *cobra.Command {
	var opts lab.Options
	var list bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a suite of benches and their baselines; write results.json, report.md and SVG charts",
		Long: `Runs the benches of a suite, and before them the baselines they are judged
against, all measured in this run by Spindle itself: for every directory used
(--dir, and --log-dir when it differs) the raw sequential write + fdatasync
bandwidth and the small (4 KiB) write + fdatasync rate and latency, and the
loopback TCP bandwidth. Then writes --out/results.json (every figure),
--out/report.md (environment: CPU, memory, kernel, filesystem and device of
each directory, vm.dirty_*, versions, the command; every bench's figures
next to its baselines as ratios; syscall profiles: per-operation counts, top
syscalls by time and by count, the tracer used) and --out/*.svg charts.

--suite quick finishes in about a minute and a half on a 2-core VM; full runs
each bench for longer (follower-append with 30000 messages) and
takes about a quarter of an hour. --scenarios keeps only the steps named (a
step, a scenario such as queue-dirs, or "baselines"); the baselines always
run. --list prints the steps of the suite.

Progress goes to stderr: bars on a terminal, one line per step otherwise.
An interrupted run (Ctrl-C) still writes the report of the steps that
finished, and exits non-zero; so does a run where a step failed (the report
says which and why).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				steps, err := lab.Catalogue(opts.Suite)
				if err != nil {
					return err
				}
				w := bufio.NewWriter(cmd.OutOrStdout())
				for _, s := range steps {
					fmt.Fprintln(w, s)
				}
				return w.Flush()
			}
			if opts.Out == "" {
				opts.Out = "spindle-report-" + time.Now().Format("20060102-150405")
			}
			opts.Command = commandLine(cmd)
			opts.Progress = cmd.ErrOrStderr()
			opts.Bars = cmd.ErrOrStderr() == os.Stderr && bench.StderrIsTerminal()
			run, err := lab.Run(cmd.Context(), opts)
			if run.Name != "" {
				done := 0
				for _, s := range run.Steps {
					if s.Status == report.StepDone {
						done++
					}
				}
				if werr := printf(cmd.OutOrStdout(), "%s: %d of %d steps done in %.1f s -> %s, %s\n", run.Name, done, len(run.Steps), run.Seconds,
					report.ResultsPath(opts.Out), filepath.Join(opts.Out, report.ReportFile)); werr != nil {
					return errors.Join(err, werr)
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Out, "out", "", "run directory to write (default: spindle-report-YYYYMMDD-HHMMSS)")
	f.StringVar(&opts.Name, "name", "", "name of the run in comparisons (default: the base name of --out)")
	f.StringVar(&opts.Suite, "suite", lab.SuiteQuick, "quick or full")
	f.StringSliceVar(&opts.Scenarios, "scenarios", nil, "only these steps or scenarios (comma-separated; the baselines always run); see --list")
	f.StringVar(&opts.DataDir, "dir", "", "where the benches write, each step in its own subdirectory (default: a temporary directory)")
	f.StringVar(&opts.LogDir, "log-dir", "", "where the datanodes' Raft logs go (default: --dir); its baselines are measured too")
	f.Float64Var(&opts.Scale, "scale", 1, "multiply every step's duration and count (e.g. 0.1 for a smoke run, 4 for a longer one)")
	f.BoolVar(&opts.Replace, "replace", false, "overwrite a run already in --out")
	f.BoolVar(&opts.NoTrace, "no-trace", false, "take no syscall profile (no strace run)")
	f.StringVar(&opts.Strace, "strace", "", "the strace binary (default: strace on PATH)")
	f.BoolVar(&opts.PNG, "png", false, "also write every chart as PNG")
	f.BoolVar(&list, "list", false, "list the steps of --suite and exit")
	return cmd
}

// commandLine rebuilds the command as run: its path and the flags set
// (with their values as parsed, so that config-file and environment
// settings show too).
func commandLine(cmd *cobra.Command) []string {
	parts := strings.Fields(cmd.CommandPath())
	cmd.Flags().Visit(func(f *pflag.Flag) {
		parts = append(parts, "--"+f.Name+"="+f.Value.String())
	})
	return parts
}

func newReportRenderCmd() *cobra.Command {
	var opts report.RenderOptions
	cmd := &cobra.Command{
		Use:   "render RUN_DIR",
		Short: "Write report.md and the charts of a run directory again from its results.json",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := report.Load(args[0])
			if err != nil {
				return err
			}
			if err := report.WriteRunReport(args[0], run, opts); err != nil {
				return err
			}
			return printf(cmd.OutOrStdout(), "%s\n", filepath.Join(args[0], report.ReportFile))
		},
	}
	cmd.Flags().BoolVar(&opts.PNG, "png", false, "also write every chart as PNG")
	return cmd
}

func newReportCompareCmd() *cobra.Command {
	var opts report.CompareOptions
	var out string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "compare RUN_A RUN_B [RUN_C...]",
		Short: "Compare runs: side-by-side Markdown tables with deltas and verdicts, grouped bar charts (SVG)",
		Long: `Compares two or more runs (run directories or results.json files, from
report run, or imported with report import-strace) against the first:

- every bench figure (ops/s, MB/s, p50 and p99 latency, ratio to its raw
  baseline, syscalls per operation) side by side with its delta and a
  verdict: faster, slower or same within noise when each side has repeats
  (runs with the same name are pooled as repeats; Welch's t-test at 95%),
  "single run" otherwise;
- one grouped bar chart per figure (each run's value as a percentage of the
  first run's, the figure itself at the bar's end);
- per system-call profile found on two runs or more: totals, calls per
  operation, threads created and fdatasyncs per operation, a side-by-side
  table of the top syscalls, and charts of calls, total time and average
  time per syscall (first run green, second red,
  third yellow). An imported profile is compared with the follower-append
  profile of the other runs (the follower syscall-profile experiment), or the one --profile
  names.

Writes --out/compare.md and --out/*.svg, and prints the Markdown.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			runs := make([]report.Run, 0, len(args))
			for _, a := range args {
				r, err := report.Load(a)
				if err != nil {
					return err
				}
				runs = append(runs, r)
			}
			if out == "" {
				out = "spindle-compare-" + time.Now().Format("20060102-150405")
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("compare: %w", err)
			}
			c, err := report.Compare(out, runs, opts)
			if err != nil {
				return err
			}
			if !quiet {
				if _, err := io.WriteString(cmd.OutOrStdout(), c.Markdown); err != nil {
					return err
				}
			}
			return printf(cmd.ErrOrStderr(), "compare: wrote %s and %d charts in %s\n", filepath.Join(out, report.CompareFile), len(c.Charts), out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "directory for compare.md and the charts (default: spindle-compare-YYYYMMDD-HHMMSS)")
	f.StringVar(&opts.Profile, "profile", "", "the profile (step) of the runs that have several to compare with imported profiles (default: the first follower-append one)")
	f.BoolVar(&opts.PNG, "png", false, "also write every chart as PNG")
	f.BoolVarP(&quiet, "quiet", "q", false, "do not print the Markdown")
	return cmd
}
