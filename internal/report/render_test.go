package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/bench"
)

func baselineResult(step, kind string, opsPerS, mbPerS float64) bench.Result {
	r := bench.Baseline{OpsPerS: opsPerS, MBPerS: mbPerS, Ops: 100, Bytes: int64(mbPerS * 1e6), Seconds: 1}.Result()
	r.SetParam("step", step)
	r.SetParam("role", "data")
	r.SetParam("dir", "/data")
	r.SetParam("kind", kind)
	return r
}

func TestWriteRunReport(t *testing.T) {
	run := reportRun("quick-1",
		baselineResult("baseline-seq-write@data", "sequential write + fdatasync", 500, 500),
		baselineResult("baseline-sync-4KiB@data", "small write + fdatasync", 4000, 16.4),
		chunkResult("chunk-write-local-1KiB", 10000),
		queueResult("queue-dirs-1x1", 1300, 380),
		queueResult("queue-dirs-10x1", 3700, 1490),
		followerResult(18),
	)
	run.Suite = "quick"
	run.Command = []string{"spindle", "report", "run", "--suite=quick"}
	run.Environment = &Environment{CPUModel: "Test CPU", Cores: 2, MemoryBytes: 1 << 30, Kernel: "Linux 6.1", GoVersion: "go1.26",
		VMDirty: map[string]string{"dirty_ratio": "20"}, Dirs: []DirInfo{{Path: "/data", FSType: "ext4", MountPoint: "/", Source: "/dev/vda", Device: "254:0"}}}
	run.Tracer = &Tracer{Reason: "strace is not on PATH"}
	run.Steps = []Step{
		{Name: "chunk-write-local-1KiB", Scenario: "chunk-write", Status: StepDone, Seconds: 6},
		{Name: "chunk-write-1KiB", Scenario: "chunk-write", Status: StepFailed, Reason: "datanode did not start", Seconds: 1},
		{Name: "follower-append-b10", Scenario: "follower-append", Status: StepSkipped, Reason: "the run was interrupted before this step"},
	}
	run.Interrupted = true
	dir := t.TempDir()
	if err := Save(dir, run, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteRunReport(dir, run, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	md := string(data)
	for _, want := range []string{
		"# Spindle report: quick-1",
		"`spindle report run --suite=quick`",
		"**This run was interrupted**",
		"| CPU | Test CPU, 2 cores |",
		"| vm.dirty_* | dirty_ratio=20 |",
		"| `/data` | ext4 | / | /dev/vda (254:0) |",
		"| chunk-write-1KiB |  | **failed**: datanode did not start | 1.000 |",
		"**skipped**: the run was interrupted before this step",
		"## Baselines",
		"| baseline-sync-4KiB@data | `/data` | 4,000 | 16.40 |",
		// the bench, its own baseline ratio, and its data dir's: 10000/4000
		"| chunk-write-local-1KiB | 10,000 | 10.24 | 1,000 | 5,000 | — | — | 0.500 | ops/s ÷ 4 KiB fdatasync 4,000/s | 2.500 |",
		// 1 MiB messages against the sequential bandwidth: 524/500
		"| follower-append-b1 | 500.0 | 524.0 |",
		"MB/s ÷ sequential write 500.0 MB/s | 1.048 |",
		"No tracer in this run: strace is not on PATH.",
		"### follower-append-b1",
		"18,000 calls for 1,000 messages: **18.00 per message**",
		"fdatasync + fsync: 0.500 per message",
		"Top system calls by count:",
		"Top system calls by time:",
		"![queue-dirs: average time of one call](syscalls-queue-dirs-avg.svg)",
		"![Each bench over the raw baselines measured in the same run](ratios.svg)",
		"![queue-dirs: files per second](queue-dirs-throughput.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	svgs := checkSVGs(t, dir)
	for _, line := range strings.Split(md, "\n") {
		if i := strings.Index(line, "]("); strings.HasPrefix(line, "![") && i > 0 {
			f := strings.TrimSuffix(line[i+2:], ")")
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("report.md shows %s: %v", f, err)
			}
		}
	}
	if len(svgs) < 8 {
		t.Errorf("%d charts: %v", len(svgs), svgs)
	}
	// The run loads back with everything report run records.
	l, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l.Environment == nil || l.Environment.CPUModel != "Test CPU" || l.Tracer == nil || len(l.Steps) != 3 || !l.Interrupted {
		t.Errorf("loaded run %+v", l)
	}
}

func TestValidateSteps(t *testing.T) {
	r := reportRun("x")
	r.Steps = []Step{{Name: "a", Status: "maybe"}}
	if err := r.Validate(); err == nil {
		t.Error("unknown step status accepted")
	}
	r.Steps = nil
	r.Scale = -1
	if err := r.Validate(); err == nil {
		t.Error("negative scale accepted")
	}
}
