package report

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/bench"
)

// checkSVGs parses every .svg in dir with encoding/xml, checks the root is
// <svg> with a viewBox and that it has text, and returns their names.
func checkSVGs(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(bytes.NewReader(data))
		root, texts := "", 0
		for range 1 << 20 {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", f, err)
			}
			if el, ok := tok.(xml.StartElement); ok {
				if root == "" {
					root = el.Name.Local
					vb := false
					for _, a := range el.Attr {
						vb = vb || a.Name.Local == "viewBox"
					}
					if !vb {
						t.Errorf("%s: <svg> without viewBox", f)
					}
				}
				if el.Name.Local == "text" {
					texts++
				}
			}
		}
		if root != "svg" || texts == 0 {
			t.Errorf("%s: root %q with %d texts, want an <svg> with text", f, root, texts)
		}
		names = append(names, filepath.Base(f))
	}
	return names
}

func ratio(v float64) *float64 { return &v }

// queueResult is a queue-dirs result as a report run records it.
func queueResult(step string, filesPerS, fsyncUs float64) bench.Result {
	r := bench.Result{Scenario: "queue-dirs", Ops: 1000, Seconds: 1000 / filesPerS, OpsPerS: filesPerS, Bytes: 4096000, MBPerS: filesPerS * 4096 / 1e6,
		LatencyUs: bench.LatencySummary{P50: 400, P99: 900, Max: 1000}}
	r.SetParam("step", step)
	r.SetParam("senders", 10)
	r.Extra = map[string]any{
		"syscall_tool": ToolInProcess,
		"syscalls": map[string]SyscallStat{
			"openat":   {Calls: 1000, Seconds: 0.1},
			"fsync":    {Calls: 1000, Seconds: fsyncUs * 1000 / 1e6},
			"renameat": {Calls: 1000, Seconds: 0.05},
		},
	}
	return r
}

func chunkResult(step string, opsPerS float64) bench.Result {
	r := bench.Result{Scenario: "chunk-write", Ops: 5000, Seconds: 5000 / opsPerS, OpsPerS: opsPerS, Bytes: 5000 * 1024, MBPerS: opsPerS * 1024 / 1e6,
		LatencyUs: bench.LatencySummary{P50: 1000, P99: 5000, Max: 9000}, RatioToBaseline: ratio(0.5)}
	r.SetParam("step", step)
	r.SetParam("chunk_size_bytes", 1024)
	return r
}

// followerResult is a follower-append result with a profile shaped as the
// lab writes it.
func followerResult(perMsg int64) bench.Result {
	r := bench.Result{Scenario: "follower-append", Ops: 1000, Seconds: 2, OpsPerS: 500, Bytes: 1000 << 20, MBPerS: 524, LatencyUs: bench.LatencySummary{P50: 9000, P99: 40000}}
	r.SetParam("step", "follower-append-b1")
	r.Extra = map[string]any{
		"syscall_tool":  ToolStraceF,
		"syscall_total": map[string]any{"calls": perMsg * 1000, "errors": 10, "seconds": 3.5},
		"syscall_ops":   1000,
		"syscalls": map[string]SyscallStat{
			"futex":     {Calls: perMsg * 400, Errors: 10, Seconds: 2},
			"pwrite64":  {Calls: perMsg * 300, Seconds: 1},
			"fdatasync": {Calls: 500, Seconds: 0.4},
		},
	}
	return r
}

func reportRun(name string, results ...bench.Result) Run {
	r := NewRun(name, SourceReportRun)
	r.Results = results
	return r
}

func TestCompareTwoRunsAndSeedImport(t *testing.T) {
	a := reportRun("before", chunkResult("chunk-write-local-1KiB", 8000), queueResult("queue-dirs-10x1", 2500, 1500), followerResult(25))
	b := reportRun("after", chunkResult("chunk-write-local-1KiB", 9000), queueResult("queue-dirs-10x1", 4000, 900), followerResult(18))
	ozone, err := ImportStrace(ImportOptions{File: seedPath("seed000-batch1.txt"), Name: "ozone-batch1", Ops: 30000})
	if err != nil {
		t.Fatal(err)
	}
	// Through results.json, as the command reads them.
	var runs []Run
	for _, r := range []Run{ozone, a, b} {
		dir := filepath.Join(t.TempDir(), r.Name)
		if err := Save(dir, r, false); err != nil {
			t.Fatal(err)
		}
		l, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, l)
	}
	out := t.TempDir()
	c, err := Compare(out, runs, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, CompareFile))
	if err != nil || string(md) != c.Markdown {
		t.Fatalf("compare.md %v, or not the Markdown returned", err)
	}
	for _, want := range []string{
		"# Comparison: ozone-batch1 vs before vs after",
		"| figure | before | after | Δ after | verdict |",
		"| ops/s | 8,000 | 9,000 | +12.5% | after: single run, +12.5% |",
		"### follower-append-b1",
		// The import joined the follower-append profile: seed 000's 90.93
		// calls per message against 25 and 18.
		"| ozone-batch1 | strace -c; imported; table truncated | 2,727,877 | 30,000 | 90.93 |",
		"| before | strace -f -c; table truncated | 25,000 | 1,000 | 25.00 | -72.5% | 10 | 3.500 | 0 | 0.500 |",
		"Verdict on system calls per message: before: single run, -72.5%; after: single run, -80.2%.",
		"| futex | 36.48 | 10.00 | -72.6% | 7.200 | -80.3% | 6,243 | 200.0 | 277.8 | 6,832 | 2.000 | 2.000 |",
		"### queue-dirs-10x1",
		"![",
	} {
		if !strings.Contains(c.Markdown, want) {
			t.Errorf("compare.md lacks %q", want)
		}
	}
	if strings.Contains(c.Markdown, "\x00") {
		t.Error("a chart placeholder was left in the Markdown")
	}
	svgs := checkSVGs(t, out)
	for _, want := range []string{"compare-ops_per_s.svg", "compare-syscalls_per_op.svg",
		"compare-syscalls-1-follower-append-b1-calls.svg", "compare-syscalls-1-follower-append-b1-time.svg", "compare-syscalls-1-follower-append-b1-avg.svg",
		"compare-syscalls-2-queue-dirs-10x1-avg.svg"} {
		found := false
		for _, s := range svgs {
			found = found || s == want
		}
		if !found {
			t.Errorf("no %s among %v", want, svgs)
		}
	}
	if len(c.Charts) != len(svgs) {
		t.Errorf("Compare reports %d charts, %d SVG files written", len(c.Charts), len(svgs))
	}
	// Every chart the Markdown shows exists.
	for _, line := range strings.Split(c.Markdown, "\n") {
		if i := strings.Index(line, "]("); strings.HasPrefix(line, "![") && i > 0 {
			f := strings.TrimSuffix(line[i+2:], ")")
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Errorf("Markdown shows %s: %v", f, err)
			}
		}
	}
}

func TestCompareTwoSeedImports(t *testing.T) {
	var runs []Run
	for _, f := range []string{"seed000-batch1.txt", "seed000-batch10.txt"} {
		r, err := ImportStrace(ImportOptions{File: seedPath(f), Ops: 30000})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	out := t.TempDir()
	c, err := Compare(out, runs, CompareOptions{PNG: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### " + RunProfileKey, "| seed000-batch10 | strace -c; table truncated | 1,691,167 | 30,000 | 56.37 | -38.0% |",
		"| syscall | seed000-batch1 per op | seed000-batch10 per op | Δ |"} {
		if !strings.Contains(c.Markdown, want) {
			t.Errorf("compare.md lacks %q:\n%s", want, c.Markdown)
		}
	}
	if n := len(checkSVGs(t, out)); n != 3 {
		t.Errorf("%d SVG charts, want calls, time and average time", n)
	}
	pngs, _ := filepath.Glob(filepath.Join(out, "*.png"))
	if len(pngs) != 3 {
		t.Errorf("%d PNG charts with PNG asked, want 3", len(pngs))
	}
}

func TestCompareRepeatsGiveVerdicts(t *testing.T) {
	var runs []Run
	for i, v := range []float64{1000, 1010, 990} {
		runs = append(runs, reportRun("base", chunkResult("cw", v), queueResult("q", 2000+float64(i), 1000)))
	}
	for _, v := range []float64{1500, 1490, 1510} {
		runs = append(runs, reportRun("fast", chunkResult("cw", v), queueResult("q", 2001, 1000)))
	}
	for _, v := range []float64{1000, 1500} {
		runs = append(runs, reportRun("noisy", chunkResult("cw", v)))
	}
	c, err := Compare(t.TempDir(), runs, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| ops/s | 1,000 ± 10.00 (n=3) | 1,500 ± 10.00 (n=3) | +50.0% | 1,250 ± 353.6 (n=2) | +25.0% |",
		"fast: faster (+50.0%, beyond noise",
		"noisy: same within noise (+25.0%, noise",
		"p50 latency µs", // equal everywhere: same within noise
		"fast: same within noise (+0.00%, noise ±0.0%)",
	} {
		if !strings.Contains(c.Markdown, want) {
			t.Errorf("compare.md lacks %q:\n%s", want, c.Markdown)
		}
	}
}

func TestCompareRejects(t *testing.T) {
	a := reportRun("a", chunkResult("cw", 1))
	if _, err := Compare(t.TempDir(), []Run{a}, CompareOptions{}); err == nil {
		t.Error("one run accepted")
	}
	if _, err := Compare(t.TempDir(), []Run{a, a}, CompareOptions{}); err == nil || !strings.Contains(err.Error(), "two names") {
		t.Errorf("two runs of one name: %v", err)
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		a, b   sample
		higher bool
		want   string
	}{
		{sample{10}, sample{20}, true, VerdictSingle},
		{sample{10, 11}, sample{20}, true, VerdictSingle},
		{sample{10, 11, 10.5}, sample{20, 21, 20.5}, true, VerdictBetter},
		{sample{10, 11, 10.5}, sample{20, 21, 20.5}, false, VerdictWorse},
		{sample{10, 20, 15}, sample{12, 22, 17}, true, VerdictSame},
		{sample{5, 5}, sample{5, 5}, true, VerdictSame},
		{sample{5, 5}, sample{6, 6}, true, VerdictBetter},
	} {
		if got, _ := verdict(tc.a, tc.b, tc.higher); got != tc.want {
			t.Errorf("verdict(%v, %v, higher %v) = %s, want %s", tc.a, tc.b, tc.higher, got, tc.want)
		}
	}
}

func TestResultSyscalls(t *testing.T) {
	r := followerResult(25)
	s, ok, err := ResultSyscalls(r)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if s.Total != 25000 || s.Rows.Calls != 25*700+500 || !s.Truncated || s.Ops != 1000 || s.PerOp != 25 || s.Tool != ToolStraceF {
		t.Errorf("profile %+v", s)
	}
	if got := s.PerOpCalls("fdatasync"); got != 0.5 {
		t.Errorf("fdatasync per op %v", got)
	}
	if got := s.AvgUs("fdatasync"); math.Abs(got-800) > 1e-9 {
		t.Errorf("fdatasync µs/call %v", got)
	}
	if !math.IsNaN(s.PerOpCalls("nope")) || !math.IsNaN(s.AvgUs("nope")) {
		t.Error("a syscall not shown has figures")
	}
	// A total below the rows is refused.
	r.Extra["syscall_total"] = map[string]any{"calls": 5}
	if _, _, err := ResultSyscalls(r); err == nil {
		t.Error("total below the rows accepted")
	}
	if _, ok, err := ResultSyscalls(chunkResult("x", 1)); ok || err != nil {
		t.Errorf("a result without a profile: ok %v err %v", ok, err)
	}
	// Without a total, the rows are the total.
	q := queueResult("q", 1000, 100)
	s, _, _ = ResultSyscalls(q)
	if s.Total != 3000 || s.Truncated || s.Tool != ToolInProcess {
		t.Errorf("queue profile %+v", s)
	}
}

func TestResultKey(t *testing.T) {
	r := bench.Result{Scenario: "chunk-write"}
	r.SetParam("chunk_size_bytes", 1024)
	r.SetParam("mode", "local")
	r.SetParam("data_dirs", []string{"/x"})
	if got := ResultKey(r); got != "chunk-write mode=local chunk_size_bytes=1024" {
		t.Errorf("key %q", got)
	}
	r.SetParam("step", "cw-1k")
	if got := ResultKey(r); got != "cw-1k" {
		t.Errorf("key with a step %q", got)
	}
}

func TestFormatting(t *testing.T) {
	for v, want := range map[float64]string{1234567.4: "1,234,567", -4321: "-4,321", 277.22: "277.2", 18.414: "18.41",
		5: "5.000", 0.58: "0.580", 0.0000853: "0.0000853", 0: "0", math.NaN(): "—"} {
		if got := fmtNum(v); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", v, got, want)
		}
	}
	for _, tc := range []struct {
		a, b float64
		want string
	}{{100, 112.5, "+12.5%"}, {90.93, 18.41, "-79.8%"}, {1, 1.001, "+0.10%"}, {0.0078, 1.27, "+16182%"}, {0, 1, "—"}} {
		if got := fmtDelta(tc.a, tc.b); got != tc.want {
			t.Errorf("fmtDelta(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}
