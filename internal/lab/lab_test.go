package lab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/report"
)

func fakeStep(name string, fn func(ctx context.Context) ([]bench.Result, error)) step {
	return step{name: name, scenario: "fake", what: "a fake step", estimate: time.Second,
		run: func(ctx context.Context, _ *stepEnv) ([]bench.Result, error) { return fn(ctx) }}
}

func TestRunStepsRecordsOutcomes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := []step{
		fakeStep("ok", func(context.Context) ([]bench.Result, error) {
			return []bench.Result{{Scenario: "fake", Ops: 1}}, nil
		}),
		fakeStep("broken", func(context.Context) ([]bench.Result, error) {
			return nil, errors.New("no disk")
		}),
		fakeStep("stopped", func(ctx context.Context) ([]bench.Result, error) {
			cancel() // as SIGINT does, mid-step
			<-ctx.Done()
			return []bench.Result{{Scenario: "fake", Ops: 99}}, ctx.Err()
		}),
		fakeStep("never", func(context.Context) ([]bench.Result, error) {
			t.Error("a step ran after the interruption")
			return nil, nil
		}),
	}
	var progress bytes.Buffer
	run := report.NewRun("t", report.SourceReportRun)
	runSteps(ctx, &run, steps, &stepEnv{}, Options{Progress: &progress})
	want := []struct{ name, status, reason string }{
		{"ok", report.StepDone, ""},
		{"broken", report.StepFailed, "no disk"},
		{"stopped", report.StepInterrupted, "stopped before it finished: no figure kept"},
		{"never", report.StepSkipped, "the run was interrupted before this step"},
	}
	if len(run.Steps) != len(want) {
		t.Fatalf("steps %+v", run.Steps)
	}
	for i, w := range want {
		if s := run.Steps[i]; s.Name != w.name || s.Status != w.status || s.Reason != w.reason {
			t.Errorf("step %d: %+v, want %+v", i, s, w)
		}
	}
	if !run.Interrupted || len(run.Results) != 1 || run.Results[0].Params["step"] != "ok" {
		t.Errorf("interrupted %v, results %+v: want only the done step's, named", run.Interrupted, run.Results)
	}
	out := progress.String()
	for _, w := range []string{"report run: [1/4] ok: a fake step (about 4s left", "[2/4] broken: failed in", ": no disk", "[3/4] stopped: interrupted"} {
		if !strings.Contains(out, w) {
			t.Errorf("progress lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "[4/4]") {
		t.Errorf("progress announces a skipped step:\n%s", out)
	}
}

func TestETA(t *testing.T) {
	e := eta{estimates: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}}
	if got := e.left(0); got != 6*time.Second {
		t.Errorf("left before any step: %v", got)
	}
	e.finished(0, 2*time.Second) // took twice its estimate
	if got := e.left(1); got != 10*time.Second {
		t.Errorf("left after a slow step: %v, want 2 × 5s", got)
	}
	e.finished(1, 100*time.Second) // the factor is bounded
	if got := e.left(2); got != 12*time.Second {
		t.Errorf("left after a very slow step: %v, want 4 × 3s", got)
	}
}

func TestSelectSteps(t *testing.T) {
	dirs := []dirRole{{"data", "/d"}, {"log", "/l"}}
	all, err := buildSteps(SuiteQuick, nil, 1, dirs)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Join(StepNames(all), " ")
	for _, w := range []string{"baseline-seq-write@data", "baseline-sync-4KiB@log", "tcp-loopback", "chunk-write-local-1KiB",
		"queue-dirs-1x1", "queue-dirs-10x1", "queue-dirs-10x10", "follower-append-b1", "follower-append-b10", "chunk-write-1KiB"} {
		if !strings.Contains(names, w) {
			t.Errorf("quick suite lacks %s: %s", w, names)
		}
	}
	some, err := buildSteps(SuiteQuick, []string{"queue-dirs", "follower-append-b10"}, 1, dirs)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(StepNames(some), " "); got != "baseline-seq-write@data baseline-sync-4KiB@data baseline-seq-write@log baseline-sync-4KiB@log tcp-loopback queue-dirs-1x1 queue-dirs-10x1 queue-dirs-10x10 follower-append-b10" {
		t.Errorf("selected %s", got)
	}
	if _, err := buildSteps(SuiteQuick, []string{"nope"}, 1, dirs); err == nil || !strings.Contains(err.Error(), "queue-dirs-10x10") {
		t.Errorf("unknown step: %v (should list the steps)", err)
	}
	if _, err := buildSteps("medium", nil, 1, dirs); err == nil {
		t.Error("unknown suite accepted")
	}
	var quick, full time.Duration
	for _, s := range all {
		quick += s.estimate
	}
	fs, _ := buildSteps(SuiteFull, nil, 1, dirs)
	for _, s := range fs {
		full += s.estimate
	}
	if quick > 3*time.Minute || full <= quick {
		t.Errorf("estimates: quick %v (budget: well under 5 min), full %v", quick, full)
	}
	if scaleDur(time.Second, 0.001) != 100*time.Millisecond || scaleCount(3000, 0.001) != 10 || scaleCount(3000, 0.5) != 1500 {
		t.Error("scale floors")
	}
}

// A tiny report run end to end: baselines, loopback TCP and one
// queue-dirs step, written as a run directory.
func TestRunTiny(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	data := filepath.Join(t.TempDir(), "data", "deeper")
	var progress bytes.Buffer
	run, err := Run(context.Background(), Options{Out: out, Scenarios: []string{"queue-dirs-10x1"}, Scale: 0.05, DataDir: data, Progress: &progress, NoTrace: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if run.Name != "run" || run.Suite != "custom (quick sizes)" || run.Interrupted || run.Environment == nil || len(run.Steps) != 4 {
		t.Errorf("run %+v", run)
	}
	for _, s := range run.Steps {
		if s.Status != report.StepDone {
			t.Errorf("step %+v", s)
		}
	}
	if run.Tracer != nil {
		t.Errorf("a tracer was looked for without a traced step: %+v", run.Tracer)
	}
	l, err := report.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Results) != 4 || l.Results[3].Scenario != "queue-dirs" || l.Results[3].Ops != 150 {
		t.Errorf("results %+v", l.Results)
	}
	md, err := os.ReadFile(filepath.Join(out, report.ReportFile))
	if err != nil || !strings.Contains(string(md), "| queue-dirs-10x1 |") {
		t.Errorf("report.md: %v", err)
	}
	if svgs, _ := filepath.Glob(filepath.Join(out, "*.svg")); len(svgs) == 0 {
		t.Error("no charts")
	}
	// The data directory was created by the run, and removed by it.
	if _, err := os.Stat(filepath.Dir(data)); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", filepath.Dir(data), err)
	}
	// A second run refuses to overwrite the first before measuring.
	if _, err := Run(context.Background(), Options{Out: out, Scale: 0.05}); !errors.Is(err, report.ErrRunExists) {
		t.Errorf("second run into %s: %v", out, err)
	}
}

// An interrupted run still writes its run directory.
func TestRunInterruptedWritesReport(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "run")
	run, err := Run(ctx, Options{Out: out, Scenarios: []string{"queue-dirs-1x1"}, Scale: 0.05, NoTrace: true})
	if err == nil || !errors.Is(err, context.Canceled) || !run.Interrupted {
		t.Fatalf("err %v, interrupted %v", err, run.Interrupted)
	}
	l, err := report.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Steps {
		if s.Status != report.StepSkipped {
			t.Errorf("step %+v ran in a cancelled run", s)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, report.ReportFile))
	if err != nil || !strings.Contains(string(md), "**This run was interrupted**") {
		t.Errorf("report.md of an interrupted run: %v", err)
	}
}

// The mpb bars (on a terminal) start, show each step's end above them and
// stop with the run.
func TestBarProgress(t *testing.T) {
	var out bytes.Buffer
	steps := []step{
		fakeStep("first", func(context.Context) ([]bench.Result, error) { return nil, nil }),
		fakeStep("second", func(context.Context) ([]bench.Result, error) { return nil, errors.New("boom") }),
	}
	run := report.NewRun("t", report.SourceReportRun)
	runSteps(context.Background(), &run, steps, &stepEnv{}, Options{Progress: &out, Bars: true})
	s := out.String()
	for _, w := range []string{"[1/2] first: done in", "[2/2] second: failed in", ": boom", "report run  2/2 steps"} {
		if !strings.Contains(s, w) {
			t.Errorf("bars lack %q:\n%q", w, s)
		}
	}
}

// Bars of an interrupted run stop too.
func TestBarProgressInterrupted(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := []step{
		fakeStep("first", func(context.Context) ([]bench.Result, error) { return nil, nil }),
		fakeStep("second", func(ctx context.Context) ([]bench.Result, error) { cancel(); return nil, ctx.Err() }),
		fakeStep("third", func(context.Context) ([]bench.Result, error) { return nil, nil }),
	}
	run := report.NewRun("t", report.SourceReportRun)
	runSteps(ctx, &run, steps, &stepEnv{}, Options{Progress: &out, Bars: true})
	if s := out.String(); !strings.Contains(s, "[2/3] second: interrupted") || strings.Contains(s, "[3/3]") {
		t.Errorf("bars:\n%q", s)
	}
	if !run.Interrupted || run.Steps[2].Status != report.StepSkipped {
		t.Errorf("steps %+v", run.Steps)
	}
}
