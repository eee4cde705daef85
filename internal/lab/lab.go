// Package lab runs `spindle report run`: a suite of Spindle's benches and
// the raw baselines they are judged against, all measured in one run on
// one machine, written as a run directory (results.json, report.md and SVG
// charts; see package report).
//
// A run is a list of steps. Baselines come first, for every directory the
// benches use (raw sequential write + fdatasync bandwidth, small write +
// fdatasync rate and latency) and for loopback TCP; then the benches
// (chunk-write --local, queue-dirs, follower-append with its strace
// profile, chunk-write through a 3-datanode pipeline), each in a private
// subdirectory of the data (or log) directory, which the bench removes.
//
// Invariants: every figure in a run directory was measured by that run; a
// step that fails, or cannot run (no strace for a profile), is recorded
// with its reason and the report says so, never with a made-up figure; an
// interrupted run (its context cancelled, e.g. by SIGINT) still writes the
// run directory with the steps that finished, and marks the rest. Every
// step is bounded by its own duration or count (and follower-append by a
// timeout); the run's time is their sum, estimated before it starts.
//
// Concurrency: Run runs one step at a time on the caller's goroutine (the
// steps run their own workers); progress bars are redrawn by mpb's
// goroutine and one ticker goroutine per running step, both stopped before
// Run returns.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/report"
)

// Options configure a report run.
type Options struct {
	// Out is the run directory (required); it must not hold a run yet
	// unless Replace.
	Out     string
	Replace bool
	// Name labels the run in comparisons (default: Out's base name).
	Name string
	// Suite is quick (default) or full; Scenarios, when not empty, keeps
	// only the steps named (step names, scenario names, "baselines") at
	// the suite's sizes; the baselines are always kept.
	Suite     string
	Scenarios []string
	// DataDir is where the benches write (each step in its own
	// subdirectory); "" means a new temporary directory, removed at the
	// end. LogDir is where the Raft logs go ("": DataDir); when it differs,
	// its baselines are measured too.
	DataDir, LogDir string
	// Scale multiplies every step's duration and count (default 1), for
	// quick smoke runs (0.05) or longer ones (4).
	Scale float64
	// Binary is the spindle executable started as datanodes ("": this
	// executable).
	Binary string
	// Strace is the strace binary ("": strace on PATH); NoTrace skips
	// syscall profiles.
	Strace  string
	NoTrace bool
	// Progress receives progress (nil: none); Bars draws mpb bars there
	// (for a terminal) instead of one line per step.
	Progress io.Writer
	Bars     bool
	// Command is the command line, recorded in the report.
	Command []string
	// PNG also writes every chart as PNG beside its SVG.
	PNG bool
	// Logger reports diagnostics (nil: discard).
	Logger *slog.Logger
}

// ErrStepsFailed is returned (wrapped) when the run directory was written
// but one or more steps failed.
var ErrStepsFailed = errors.New("steps failed")

// Run runs the suite and writes the run directory. On interruption it
// writes what finished and returns the context's error (wrapped); when
// steps failed it returns ErrStepsFailed (wrapped); the run is returned in
// both cases.
func Run(ctx context.Context, opts Options) (report.Run, error) {
	if opts.Out == "" {
		return report.Run{}, errors.New("lab: no run directory (--out)")
	}
	if opts.Suite == "" {
		opts.Suite = SuiteQuick
	}
	if opts.Scale == 0 {
		opts.Scale = 1
	}
	if opts.Scale < 0 || opts.Scale > 1000 {
		return report.Run{}, fmt.Errorf("lab: scale %v, want (0, 1000]", opts.Scale)
	}
	if opts.Name == "" {
		abs, err := filepath.Abs(opts.Out)
		if err != nil {
			return report.Run{}, fmt.Errorf("lab: %w", err)
		}
		opts.Name = filepath.Base(abs)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	// Refuse to overwrite a run before spending minutes measuring.
	if !opts.Replace {
		if _, err := os.Lstat(report.ResultsPath(opts.Out)); err == nil {
			return report.Run{}, fmt.Errorf("lab: %s: %w (use --replace to overwrite)", opts.Out, report.ErrRunExists)
		}
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return report.Run{}, fmt.Errorf("lab: the spindle binary for datanodes: %w", err)
		}
		opts.Binary = exe
	}

	env := &stepEnv{binary: opts.Binary}
	cleanup, err := prepareDirs(&opts, env)
	if err != nil {
		return report.Run{}, err
	}
	defer cleanup()
	roles := []dirRole{{"data", env.dataDir}}
	if env.logDir != env.dataDir {
		roles = append(roles, dirRole{"log", env.logDir})
	}
	steps, err := buildSteps(opts.Suite, opts.Scenarios, opts.Scale, roles)
	if err != nil {
		return report.Run{}, err
	}
	suite := opts.Suite
	if len(opts.Scenarios) > 0 {
		suite = SuiteCustom + " (" + opts.Suite + " sizes)"
	}

	run := report.NewRun(opts.Name, report.SourceReportRun)
	run.Suite, run.Command, run.Scale = suite, opts.Command, opts.Scale
	paths := []string{env.dataDir}
	if env.logDir != env.dataDir {
		paths = append(paths, env.logDir)
	}
	e := report.CaptureEnvironment(paths)
	run.Environment = &e
	if hasScenario(steps, "follower-append") {
		run.Tracer = findTracer(ctx, opts, env)
	}

	start := time.Now()
	runSteps(ctx, &run, steps, env, opts)
	run.Seconds = time.Since(start).Round(time.Millisecond).Seconds()

	// The run directory is written whatever happened, without the
	// (possibly cancelled) context.
	if err := report.Save(opts.Out, run, opts.Replace); err != nil {
		return run, err
	}
	if err := report.WriteRunReport(opts.Out, run, report.RenderOptions{PNG: opts.PNG}); err != nil {
		return run, err
	}
	var failed []string
	for _, s := range run.Steps {
		if s.Status == report.StepFailed {
			failed = append(failed, s.Name)
		}
	}
	switch {
	case run.Interrupted:
		return run, fmt.Errorf("lab: interrupted; %s holds what finished: %w", opts.Out, context.Cause(ctx))
	case len(failed) > 0:
		return run, fmt.Errorf("lab: %w: %s (see %s)", ErrStepsFailed, strings.Join(failed, ", "), filepath.Join(opts.Out, "report.md"))
	}
	return run, nil
}

// runSteps runs the steps in order, recording each one's outcome in run.
func runSteps(ctx context.Context, run *report.Run, steps []step, env *stepEnv, opts Options) {
	var prog progress = &lineProgress{w: opts.Progress, start: time.Now()}
	if opts.Bars {
		prog = newBarProgress(opts.Progress, len(steps))
	}
	defer prog.close()
	est := eta{estimates: make([]time.Duration, len(steps))}
	for i, s := range steps {
		est.estimates[i] = s.estimate
	}
	for i, s := range steps {
		rec := report.Step{Name: s.name, Scenario: s.scenario, What: s.what}
		if ctx.Err() != nil {
			rec.Status, rec.Reason = report.StepSkipped, "the run was interrupted before this step"
			run.Steps = append(run.Steps, rec)
			continue
		}
		prog.begin(i, len(steps), s, est.left(i))
		t0 := time.Now()
		results, err := s.run(ctx, env)
		took := time.Since(t0)
		est.finished(i, took)
		rec.Seconds = took.Round(time.Millisecond).Seconds()
		switch {
		case err != nil && ctx.Err() != nil:
			rec.Status, rec.Reason = report.StepInterrupted, "stopped before it finished: no figure kept"
			run.Interrupted = true
		case err != nil:
			rec.Status, rec.Reason = report.StepFailed, err.Error()
			if opts.Logger != nil {
				opts.Logger.Warn("report run: step failed", "step", s.name, "err", err)
			}
		default:
			rec.Status = report.StepDone
			for _, r := range results {
				r.SetParam("step", s.name)
				run.Results = append(run.Results, r)
			}
		}
		prog.end(i, len(steps), s, rec.Status, rec.Reason, took)
		run.Steps = append(run.Steps, rec)
	}
	if ctx.Err() != nil {
		run.Interrupted = true
	}
}

// prepareDirs sets env's data and log directories: given ones are created
// when missing (and then removed at the end), "" is a new temporary
// directory. The returned cleanup removes what was created.
func prepareDirs(opts *Options, env *stepEnv) (func(), error) {
	var made []string
	cleanup := func() {
		for i := len(made) - 1; i >= 0; i-- {
			_ = os.RemoveAll(made[i]) // created by this run: all ours; best effort, after the run
		}
	}
	mk := func(dir, what string) (string, error) {
		if dir == "" {
			d, err := os.MkdirTemp("", "spindle-report-"+what+"-")
			if err != nil {
				return "", fmt.Errorf("lab: %s dir: %w", what, err)
			}
			made = append(made, d)
			return d, nil
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("lab: %s dir: %w", what, err)
		}
		st, err := os.Stat(abs)
		switch {
		case errors.Is(err, os.ErrNotExist):
			top := abs
			for {
				parent := filepath.Dir(top)
				if _, err := os.Stat(parent); err == nil || parent == top {
					break
				}
				top = parent
			}
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return "", fmt.Errorf("lab: %s dir: %w", what, err)
			}
			made = append(made, top)
		case err != nil:
			return "", fmt.Errorf("lab: %s dir: %w", what, err)
		case !st.IsDir():
			return "", fmt.Errorf("lab: %s dir %s is not a directory", what, dir)
		}
		return abs, nil
	}
	var err error
	if env.dataDir, err = mk(opts.DataDir, "data"); err != nil {
		cleanup()
		return nil, err
	}
	env.logDir = env.dataDir
	if opts.LogDir != "" {
		if env.logDir, err = mk(opts.LogDir, "log"); err != nil {
			cleanup()
			return nil, err
		}
	}
	return cleanup, nil
}

// findTracer checks that strace can trace the datanode binary here (ptrace
// may be forbidden in a container) and sets env.strace, or says why not.
func findTracer(ctx context.Context, opts Options, env *stepEnv) *report.Tracer {
	none := func(why string) *report.Tracer {
		env.tracerWhy = why
		return &report.Tracer{Reason: why}
	}
	if opts.NoTrace {
		return none("syscall profiles not asked for (--no-trace)")
	}
	path := opts.Strace
	if path == "" {
		p, err := exec.LookPath("strace")
		if err != nil {
			return none("strace is not on PATH (make deps, or apt-get install strace)")
		}
		path = p
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(tctx, path, "-V").Output()
	if err != nil {
		return none(fmt.Sprintf("%s -V failed: %v", path, err))
	}
	version, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	probe := exec.CommandContext(tctx, path, "-f", "-c", "-o", os.DevNull, "--", opts.Binary, "--version")
	if b, err := probe.CombinedOutput(); err != nil {
		return none(fmt.Sprintf("%s cannot trace here (%v): %s", path, err, strings.TrimSpace(string(b))))
	}
	env.strace = path
	return &report.Tracer{Tool: "strace -f -c", Version: version}
}
