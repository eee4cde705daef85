package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/report"
	"github.com/spindle-store/spindle/internal/scenario"
)

// Suites.
const (
	SuiteQuick  = "quick"
	SuiteFull   = "full"
	SuiteCustom = "custom"
)

// Step groups usable in --scenarios besides step names.
const (
	GroupBaselines = "baselines"
)

// step is one measurement of a report run.
type step struct {
	name     string
	scenario string
	what     string        // one line: what it measures, with its size
	estimate time.Duration // for progress and ETA; not a bound
	// run measures and returns the results; env gives the directories,
	// the binary and the tracer.
	run func(ctx context.Context, env *stepEnv) ([]bench.Result, error)
}

// stepEnv is what steps share: set up by Run, read-only to steps.
type stepEnv struct {
	dataDir, logDir string // where benches write (each step in a subdirectory)
	binary          string // spindle, for datanode children
	strace          string // "" when no tracer could run; then tracerWhy says why
	tracerWhy       string
}

// scenarioProgress is where a scenario's own progress line goes: nowhere,
// the run shows its own (one line per step, or bars on a terminal).
func (e *stepEnv) scenarioProgress() io.Writer { return io.Discard }

// sized is the size of one suite: durations and counts before scaling.
type sized struct {
	baseline      time.Duration // each raw baseline
	tcp           time.Duration
	chunkLocal    time.Duration
	chunkPipeline time.Duration
	queueFiles    int64
	faMessages    int64
	overwrite     bool // chunk-write --local also measures the overwrite baseline
	pipeline1MiB  bool // the replicated chunk-write at 1 MiB too
}

var sizes = map[string]sized{
	SuiteQuick: {
		baseline: 2 * time.Second, tcp: 2 * time.Second,
		chunkLocal: 3 * time.Second, chunkPipeline: 3 * time.Second,
		queueFiles: 3000, faMessages: 1000,
	},
	SuiteFull: {
		baseline: 10 * time.Second, tcp: 5 * time.Second,
		chunkLocal: 10 * time.Second, chunkPipeline: 10 * time.Second,
		queueFiles: 20000, faMessages: 30000,
		overwrite: true, pipeline1MiB: true,
	},
}

// scaleDur and scaleCount apply the run's scale, with floors that keep a
// step meaningful.
func scaleDur(d time.Duration, f float64) time.Duration {
	return max(time.Duration(float64(d)*f), 100*time.Millisecond)
}

func scaleCount(n int64, f float64) int64 {
	return max(int64(math.Round(float64(n)*f)), 10)
}

// dirRole is a directory the benches use, by role.
type dirRole struct{ role, path string }

// buildSteps returns the steps of suite (quick or full; the step catalogue
// is the full suite's set plus the quick one's), filtered by names when
// given. Baselines come first, for every directory role.
func buildSteps(suite string, names []string, scale float64, dirs []dirRole) ([]step, error) {
	sz, ok := sizes[suite]
	if !ok {
		return nil, fmt.Errorf("lab: suite %q, want %s or %s", suite, SuiteQuick, SuiteFull)
	}
	var all []step
	for _, d := range dirs {
		all = append(all, seqWriteStep(d, scaleDur(sz.baseline, scale)), syncStep(d, scaleDur(sz.baseline, scale)))
	}
	all = append(all, tcpStep(scaleDur(sz.tcp, scale)))
	all = append(all,
		chunkLocalStep("chunk-write-local-1KiB", 1<<10, scaleDur(sz.chunkLocal, scale), sz.overwrite),
		chunkLocalStep("chunk-write-local-1MiB", 1<<20, scaleDur(sz.chunkLocal, scale), sz.overwrite),
	)
	for _, m := range [][2]int{{1, 1}, {10, 1}, {10, 10}} {
		all = append(all, queueStep(m[0], m[1], scaleCount(sz.queueFiles, scale)))
	}
	for _, b := range []int{1, 10} {
		all = append(all, followerStep(b, scaleCount(sz.faMessages, scale)))
	}
	all = append(all, pipelineStep("chunk-write-1KiB", 1<<10, scaleDur(sz.chunkPipeline, scale)))
	if sz.pipeline1MiB {
		all = append(all, pipelineStep("chunk-write-1MiB", 1<<20, scaleDur(sz.chunkPipeline, scale)))
	}
	if len(names) == 0 {
		return all, nil
	}
	return selectSteps(all, names)
}

// selectSteps keeps the steps named (in suite order): a step name, a
// scenario (every step of it), "baselines" (the raw baselines and the TCP
// one). The baselines are always kept: every bench figure sits next to
// one measured in the same run.
func selectSteps(all []step, names []string) ([]step, error) {
	want := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		found := n == GroupBaselines
		for _, s := range all {
			if s.name == n || s.scenario == n {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("lab: no step or scenario %q; steps: %s", n, strings.Join(StepNames(all), ", "))
		}
		want[n] = true
	}
	var out []step
	for _, s := range all {
		if isBaseline(s) || want[s.name] || want[s.scenario] {
			out = append(out, s)
		}
	}
	return out, nil
}

func isBaseline(s step) bool { return s.scenario == "baseline" || s.scenario == "tcp-loopback" }

// StepNames lists the names of steps.
func StepNames(steps []step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.name
	}
	return out
}

// Catalogue returns "name: what" for every step of suite with the default
// directory, for help texts.
func Catalogue(suite string) ([]string, error) {
	steps, err := buildSteps(suite, nil, 1, []dirRole{{"data", "DIR"}})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.name + ": " + s.what
	}
	return out, nil
}

// stepDir is the private subdirectory of a step under dir.
func stepDir(dir, name string) string {
	return filepath.Join(dir, strings.NewReplacer("@", "-", "/", "-").Replace(name))
}

func roleDir(env *stepEnv, role string) string {
	if role == "log" {
		return env.logDir
	}
	return env.dataDir
}

func seqWriteStep(d dirRole, dur time.Duration) step {
	name := "baseline-seq-write@" + d.role
	return step{
		name: name, scenario: "baseline",
		what:     fmt.Sprintf("raw sequential write bandwidth of the %s dir: 1 writer, 1 MiB pwrites to new space, fdatasync every 64 MiB, %v", d.role, dur),
		estimate: dur + 500*time.Millisecond,
		run: func(ctx context.Context, env *stepEnv) ([]bench.Result, error) {
			b, err := bench.RunBaseline(ctx, bench.BaselineConfig{
				Dir: stepDir(roleDir(env, d.role), name), Writers: 1, ChunkSizeBytes: 1 << 20, WritesPerSync: 64,
				Duration: dur, FileSizeBytes: 1 << 30, Pattern: bench.PatternAppend, Progress: env.scenarioProgress(),
			})
			if err != nil {
				return nil, err
			}
			r := b.Result()
			r.SetParam("role", d.role)
			r.SetParam("dir", roleDir(env, d.role))
			r.SetParam("kind", "sequential write + fdatasync")
			return []bench.Result{r}, nil
		},
	}
}

func syncStep(d dirRole, dur time.Duration) step {
	name := "baseline-sync-4KiB@" + d.role
	return step{
		name: name, scenario: "baseline",
		what:     fmt.Sprintf("raw small durable write rate and latency of the %s dir: 1 writer, 4 KiB pwrite + fdatasync each, %v", d.role, dur),
		estimate: dur + 500*time.Millisecond,
		run: func(ctx context.Context, env *stepEnv) ([]bench.Result, error) {
			b, err := bench.RunBaseline(ctx, bench.BaselineConfig{
				Dir: stepDir(roleDir(env, d.role), name), Writers: 1, ChunkSizeBytes: 4 << 10, WritesPerSync: 1,
				Duration: dur, FileSizeBytes: 64 << 20, Pattern: bench.PatternAppend, Progress: env.scenarioProgress(),
			})
			if err != nil {
				return nil, err
			}
			r := b.Result()
			r.SetParam("role", d.role)
			r.SetParam("dir", roleDir(env, d.role))
			r.SetParam("kind", "small write + fdatasync")
			return []bench.Result{r}, nil
		},
	}
}

func tcpStep(dur time.Duration) step {
	return step{
		name: "tcp-loopback", scenario: "tcp-loopback",
		what:     fmt.Sprintf("loopback TCP bandwidth: 1 stream to 127.0.0.1 in this process, 1 MiB writes, %v", dur),
		estimate: dur + 200*time.Millisecond,
		run: func(ctx context.Context, env *stepEnv) ([]bench.Result, error) {
			r, err := bench.RunLoopbackTCP(ctx, bench.TCPConfig{Streams: 1, Duration: dur, Progress: env.scenarioProgress()})
			if err != nil {
				return nil, err
			}
			return []bench.Result{r}, nil
		},
	}
}

func chunkLocalStep(name string, size int64, dur time.Duration, overwrite bool) step {
	est := 2*dur + time.Second
	if overwrite {
		est += dur
	}
	return step{
		name: name, scenario: "chunk-write",
		what:     fmt.Sprintf("durable %s chunk writes into the storage engine in this process (--local), 16 clients, %v, then its raw baseline", sizeName(size), dur),
		estimate: est,
		run: func(ctx context.Context, env *stepEnv) ([]bench.Result, error) {
			r, err := scenario.RunChunkWriteLocal(ctx, scenario.ChunkWriteLocalConfig{
				DataDirs: []string{stepDir(env.dataDir, name)}, ChunkSizeBytes: size, Clients: 16, Duration: dur,
				NoOverwriteBaseline: !overwrite, Progress: env.scenarioProgress(),
			})
			if err != nil {
				return nil, err
			}
			return []bench.Result{r}, nil
		},
	}
}

func queueStep(senders, dirs int, files int64) step {
	name := fmt.Sprintf("queue-dirs-%dx%d", senders, dirs)
	return step{
		name: name, scenario: "queue-dirs",
		what:     fmt.Sprintf("mail-queue churn (seed 003): %d sender(s) × %d dir(s), %d files of 4 KiB created, written, fsynced, renamed", senders, dirs, files),
		estimate: time.Duration(files)*time.Second/1500 + 300*time.Millisecond,
		run: func(ctx context.Context, env *stepEnv) ([]bench.Result, error) {
			r, err := scenario.RunQueueDirs(ctx, scenario.QueueDirsConfig{
				Dir: stepDir(env.dataDir, name), Senders: senders, Dirs: dirs, Files: files, Progress: env.scenarioProgress(),
			})
			if err != nil {
				return nil, err
			}
			res := r.Result
			res.Extra["syscall_tool"] = report.ToolInProcess
			res.Extra["syscall_scope"] = "each system call of the senders timed around the call, in this process"
			return []bench.Result{res}, nil
		},
	}
}

func followerStep(batch int, messages int64) step {
	name := fmt.Sprintf("follower-append-b%d", batch)
	// ~300 MB/s untraced here, the baseline, then the traced run.
	est := time.Duration(float64(messages)*(1<<20)/250e6*float64(time.Second))*3 + 3*time.Second
	return step{
		name: name, scenario: "follower-append",
		what:     fmt.Sprintf("seed 000: a real datanode as Raft follower, %d messages of one 1 MiB WriteChunk, %d per AppendEntries; raw baseline; a second run under strace -f -c when strace can trace here", messages, batch),
		estimate: est,
		run: func(ctx context.Context, env *stepEnv) ([]bench.Result, error) {
			cfg := scenario.FollowerAppendConfig{
				Binary: env.binary, Messages: messages, Batch: batch,
				DataDir: stepDir(env.dataDir, name), LogDir: stepDir(env.logDir, name+"-log"),
				ProfileSyscalls: env.strace != "", Strace: env.strace,
				Timeout:  10*est + time.Minute,
				Progress: env.scenarioProgress(),
			}
			r, err := scenario.RunFollowerAppend(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return []bench.Result{followerResult(r, env)}, nil
		},
	}
}

// followerResult flattens the bench's own top-level fields into the
// result: params batch and chunk size, extra messages and the profile in
// the keys of the report package doc.
func followerResult(r scenario.FollowerAppendResult, env *stepEnv) bench.Result {
	res := r.Result
	res.SetParam("batch", r.Batch)
	res.SetParam("chunk_size_bytes", r.ChunkSizeBytes)
	if res.Extra == nil {
		res.Extra = map[string]any{}
	}
	res.Extra["messages"] = r.Messages
	res.Extra["append_entries"] = r.AppendEntries
	res.Extra["message_definition"] = r.MessageDefinition
	s := r.Syscalls
	if s == nil {
		res.AddNote("no syscall profile: %s", env.tracerWhy)
		return res
	}
	byName := make(map[string]report.SyscallStat, len(s.Rows))
	for _, c := range s.Rows {
		byName[c.Name] = report.SyscallStat{Calls: c.Calls, Errors: c.Errors, Seconds: c.Seconds, UsecsPerCall: c.UsecsPerCall, PercentTime: c.PercentTime}
	}
	res.Extra["syscalls"] = byName
	res.Extra["syscall_tool"] = s.Tool
	res.Extra["syscall_scope"] = s.Scope
	res.Extra["syscall_total"] = map[string]any{"calls": s.Total, "errors": s.Errors, "seconds": s.Seconds}
	res.Extra["syscall_ops"] = r.Messages
	res.Extra["syscalls_per_message"] = s.PerMessage
	res.Extra["syscalls_per_append_entries"] = s.PerAppendEntries
	res.Extra["threads_created"] = s.ThreadsCreated
	res.Extra["fdatasync_per_message"] = s.FdatasyncPerMessage
	res.Extra["traced_run"] = s.TracedRun
	return res
}

func pipelineStep(name string, size int64, dur time.Duration) step {
	return step{
		name: name, scenario: "chunk-write",
		what:     fmt.Sprintf("durable %s chunk writes through a 3-datanode Raft pipeline on 127.0.0.1 (3 processes), 16 clients, %v, then its raw baseline", sizeName(size), dur),
		estimate: 2*dur + 3*time.Second,
		run: func(ctx context.Context, env *stepEnv) ([]bench.Result, error) {
			r, err := scenario.RunChunkWritePipeline(ctx, scenario.ChunkWritePipelineConfig{
				Binary: env.binary, DataDir: stepDir(env.dataDir, name), LogDir: stepDir(env.logDir, name+"-log"),
				ChunkSizeBytes: size, Clients: 16, Duration: dur, Progress: env.scenarioProgress(),
			})
			if err != nil {
				return nil, err
			}
			res := r.Result
			res.SetParam("placement", r.Placement.Label)
			return []bench.Result{res}, nil
		},
	}
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// hasScenario reports whether steps include one of scenario.
func hasScenario(steps []step, scen string) bool {
	return slices.ContainsFunc(steps, func(s step) bool { return s.scenario == scen })
}
