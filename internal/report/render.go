package report

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/chart"
	"github.com/spindle-store/spindle/internal/units"
)

// Files a report run writes beside results.json.
const (
	ReportFile  = "report.md"
	CompareFile = "compare.md"
	// TopSyscalls is how many syscalls a profile table and chart show.
	TopSyscalls = 15
	// smallOpBytes: benches moving less per operation are judged against
	// the small write + fdatasync rate, larger ones against the sequential
	// write bandwidth.
	smallOpBytes = 64 << 10
)

// RenderOptions tune the written report.
type RenderOptions struct {
	PNG bool // also write every chart as PNG
}

// WriteRunReport writes dir/report.md and the charts it shows (dir/*.svg)
// for run. Every figure in it comes from run.
func WriteRunReport(dir string, run Run, opts RenderOptions) error {
	profiles, err := run.Profiles()
	if err != nil {
		return err
	}
	charts := runCharts(run, profiles)
	refs, err := writeCharts(dir, charts, opts.PNG)
	if err != nil {
		return err
	}
	md := runMarkdown(run, profiles, refs)
	return writeFileAtomic(filepath.Join(dir, ReportFile), []byte(md))
}

// dirBaselines finds the raw baselines of a report run by role.
type dirBaselines struct {
	seq, sync map[string]*bench.Result // by role
	tcp       *bench.Result
}

func findBaselines(run Run) dirBaselines {
	d := dirBaselines{seq: map[string]*bench.Result{}, sync: map[string]*bench.Result{}}
	for i := range run.Results {
		r := &run.Results[i]
		role, _ := r.Params["role"].(string)
		key := ResultKey(*r)
		switch {
		case r.Scenario == "tcp-loopback" && d.tcp == nil:
			d.tcp = r
		case r.Scenario == "baseline" && strings.HasPrefix(key, "baseline-seq-write"):
			if d.seq[role] == nil {
				d.seq[role] = r
			}
		case r.Scenario == "baseline" && strings.HasPrefix(key, "baseline-sync"):
			if d.sync[role] == nil {
				d.sync[role] = r
			}
		}
	}
	return d
}

// dirRatio is a bench's figure over its data directory's raw baseline:
// small operations against the small write + fdatasync rate, large ones
// against the sequential bandwidth. ok is false when there is none.
func (d dirBaselines) dirRatio(r bench.Result) (ratio float64, what string, ok bool) {
	if r.Scenario == "baseline" || r.Scenario == "tcp-loopback" || r.Ops == 0 {
		return 0, "", false
	}
	if r.Bytes/r.Ops >= smallOpBytes {
		if b := d.seq["data"]; b != nil && b.MBPerS > 0 {
			return r.MBPerS / b.MBPerS, fmt.Sprintf("MB/s ÷ sequential write %s MB/s", fmtNum(b.MBPerS)), true
		}
		return 0, "", false
	}
	if b := d.sync["data"]; b != nil && b.OpsPerS > 0 {
		return r.OpsPerS / b.OpsPerS, fmt.Sprintf("ops/s ÷ 4 KiB fdatasync %s/s", fmtNum(b.OpsPerS)), true
	}
	return 0, "", false
}

func isBaselineResult(r bench.Result) bool {
	return r.Scenario == "baseline" || r.Scenario == "tcp-loopback"
}

// runCharts are the charts of one run: each bench over its baselines,
// throughput per scenario with several steps (seed 003's queue-directory
// matrix among them), and per scenario the syscall profiles side by side.
func runCharts(run Run, profiles []Profile) []chartFile {
	var out []chartFile
	base := findBaselines(run)
	var cats []string
	var own, dir []float64
	for _, r := range run.Results {
		if isBaselineResult(r) {
			continue
		}
		o := math.NaN()
		if r.RatioToBaseline != nil {
			o = *r.RatioToBaseline
		}
		d, _, ok := base.dirRatio(r)
		if !ok {
			d = math.NaN()
		}
		if math.IsNaN(o) && math.IsNaN(d) {
			continue
		}
		cats = append(cats, ResultKey(r))
		own = append(own, o)
		dir = append(dir, d)
	}
	if len(cats) > 0 && len(cats) <= chart.MaxCategories {
		out = append(out, chartFile{name: "ratios", bars: chart.Bars{
			Title:      "Each bench over the raw baselines measured in the same run",
			ValueLabel: "ratio (1 = as fast as the raw OS loop)",
			Categories: cats,
			Series: []chart.Series{
				{Name: "÷ its own raw baseline (the same writes without Spindle, right after it)", Values: own},
				{Name: "÷ the data dir's baseline (4 KiB fdatasync/s; sequential MB/s for ops ≥ 64 KiB)", Values: dir},
			},
		}})
	}

	// Throughput of the steps of each scenario.
	for _, scen := range scenariosOf(run.Results) {
		var cats []string
		var vals []float64
		var labels []string
		for _, r := range run.Results {
			if r.Scenario != scen {
				continue
			}
			cats = append(cats, ResultKey(r))
			vals = append(vals, r.OpsPerS)
			labels = append(labels, fmt.Sprintf("%s %s/s", chart.FormatValue(r.OpsPerS), OpUnit(scen)+"s"))
		}
		if len(cats) < 2 || len(cats) > chart.MaxCategories {
			continue
		}
		out = append(out, chartFile{name: fileName(scen) + "-throughput", bars: chart.Bars{
			Title:      scen + ": " + OpUnit(scen) + "s per second",
			ValueLabel: OpUnit(scen) + "s/s",
			Categories: cats,
			Series:     []chart.Series{{Name: run.Name, Values: vals, Labels: labels}},
		}})
	}

	// Syscall profiles of each scenario, side by side.
	byScen := map[string][]Profile{}
	var order []string
	for _, p := range profiles {
		k := p.Scenario
		if k == "" {
			k = "run"
		}
		if _, ok := byScen[k]; !ok {
			order = append(order, k)
		}
		byScen[k] = append(byScen[k], p)
	}
	for _, scen := range order {
		ps := byScen[scen]
		if len(ps) > chart.MaxSeries {
			ps = ps[:chart.MaxSeries]
		}
		names := make([]string, len(ps))
		sys := make([]*Syscalls, len(ps))
		for i, p := range ps {
			names[i], sys[i] = p.Key, p.Syscalls
		}
		out = append(out, syscallCharts(fileName(scen), scen, names, sys, ps[0].OpUnit)...)
	}
	return out
}

// scenariosOf lists the scenarios of results in first-seen order, bench
// scenarios only.
func scenariosOf(results []bench.Result) []string {
	var out []string
	for _, r := range results {
		if !isBaselineResult(r) && !slices.Contains(out, r.Scenario) {
			out = append(out, r.Scenario)
		}
	}
	return out
}

// syscallCharts draws the three charts of seed 003 for profiles side by
// side: calls (per operation when every profile knows its operations),
// total time and average time per syscall, each over the union of every
// profile's top TopSyscalls by that measure.
func syscallCharts(file, title string, names []string, profiles []*Syscalls, unit string) []chartFile {
	perOp := true
	for _, s := range profiles {
		if s.Ops <= 0 {
			perOp = false
		}
	}
	type measure struct {
		suffix, title, label string
		value                func(s *Syscalls, name string) float64
	}
	count := measure{"calls", "system calls by count", "calls", func(s *Syscalls, n string) float64 {
		if c, ok := s.ByName[n]; ok {
			return float64(c.Calls)
		}
		return math.NaN()
	}}
	if perOp {
		count = measure{"calls", "system calls per " + unit, "calls per " + unit, func(s *Syscalls, n string) float64 { return s.PerOpCalls(n) }}
	}
	measures := []measure{
		count,
		{"time", "total time in each system call", "seconds", func(s *Syscalls, n string) float64 {
			if c, ok := s.ByName[n]; ok {
				return c.Seconds
			}
			return math.NaN()
		}},
		{"avg", "average time of one call", "µs per call", func(s *Syscalls, n string) float64 { return s.AvgUs(n) }},
	}
	var out []chartFile
	for _, m := range measures {
		var cats []string
		for _, s := range profiles {
			for _, n := range s.TopBy(TopSyscalls, func(n string) float64 { return m.value(s, n) }) {
				if !slices.Contains(cats, n) {
					cats = append(cats, n)
				}
			}
		}
		if len(cats) == 0 {
			continue
		}
		// Largest first, by the largest value over the profiles.
		top := func(n string) float64 {
			v := 0.0
			for _, s := range profiles {
				if x := m.value(s, n); !math.IsNaN(x) {
					v = max(v, x)
				}
			}
			return v
		}
		slices.SortStableFunc(cats, func(a, b string) int {
			switch va, vb := top(a), top(b); {
			case va > vb:
				return -1
			case va < vb:
				return 1
			}
			return strings.Compare(a, b)
		})
		cats = cats[:min(len(cats), chart.MaxCategories, 2*TopSyscalls)]
		series := make([]chart.Series, len(profiles))
		for i, s := range profiles {
			vals := make([]float64, len(cats))
			for j, n := range cats {
				vals[j] = m.value(s, n)
			}
			series[i] = chart.Series{Name: names[i], Values: vals}
		}
		out = append(out, chartFile{name: "syscalls-" + file + "-" + m.suffix, bars: chart.Bars{
			Title: title + ": " + m.title, ValueLabel: m.label, Categories: cats, Series: series,
		}})
	}
	return out
}

// runMarkdown is report.md of one run.
func runMarkdown(run Run, profiles []Profile, charts map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Spindle report: %s\n\n", run.Name)
	how := run.Source
	if len(run.Command) > 0 {
		how = "`" + strings.Join(run.Command, " ") + "`"
	}
	fmt.Fprintf(&b, "Made by %s on %s", how, run.CreatedAt.Format(time.RFC3339))
	if run.CreatedBy != "" {
		fmt.Fprintf(&b, " with %s", run.CreatedBy)
	}
	if run.Seconds > 0 {
		fmt.Fprintf(&b, "; the run took %s", time.Duration(run.Seconds*float64(time.Second)).Round(time.Second))
	}
	b.WriteString(".")
	if run.Suite != "" {
		fmt.Fprintf(&b, " Suite: %s", run.Suite)
		if run.Scale != 0 && run.Scale != 1 {
			fmt.Fprintf(&b, ", every duration and count scaled by %v", run.Scale)
		}
		b.WriteString(".")
	}
	b.WriteString(" Every figure below was measured in this run, by Spindle itself.\n\n")
	if run.Interrupted {
		b.WriteString("**This run was interrupted**: only the steps marked done below have figures; the others were stopped or never started.\n\n")
	}

	writeEnvironment(&b, run.Environment)
	writeSteps(&b, run.Steps)
	writeBaselines(&b, run)
	writeBenches(&b, run, charts)
	writeProfiles(&b, run, profiles, charts)

	var notes []string
	notes = append(notes, run.Notes...)
	for _, r := range run.Results {
		for _, n := range r.Notes {
			notes = append(notes, ResultKey(r)+": "+n)
		}
	}
	if len(notes) > 0 {
		b.WriteString("## Notes\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		b.WriteString("\n")
	}
	b.WriteString("The raw figures (every parameter, latency percentile and syscall row) are in [results.json](results.json).\n")
	return b.String()
}

func writeEnvironment(b *strings.Builder, e *Environment) {
	if e == nil {
		return
	}
	b.WriteString("## Environment\n\n")
	t := newTable("", "").left(0, 1)
	t.add("CPU", fmt.Sprintf("%s, %d cores", orDash(e.CPUModel), e.Cores))
	t.add("Memory", units.FormatBytes(int64(e.MemoryBytes)))
	t.add("Kernel", orDash(e.Kernel))
	t.add("Go", orDash(e.GoVersion))
	t.add("Spindle", fmt.Sprintf("%s, commit %s", orDash(e.SpindleVersion), orDash(e.Commit)))
	t.add("vm.dirty_*", strings.Join(e.SortedVMDirty(), ", "))
	t.write(b)
	if len(e.Dirs) > 0 {
		d := newTable("directory", "filesystem", "mounted on", "device", "rotational", "journal", "mount options").left(0, 1, 2, 3, 4, 5, 6)
		for _, x := range e.Dirs {
			rot := "unknown"
			if x.Rotational != nil {
				rot = map[bool]string{true: "yes", false: "no"}[*x.Rotational]
			}
			journal := "—"
			if x.Journal != nil {
				journal = map[bool]string{true: "yes", false: "**no**: creates and renames reach the disk in no order"}[*x.Journal]
			}
			d.add("`"+x.Path+"`", x.FSType, x.MountPoint, fmt.Sprintf("%s (%s)", x.Source, x.Device), rot, journal, x.Options)
		}
		d.write(b)
	}
	for _, m := range e.Missing {
		fmt.Fprintf(b, "- not found: %s\n", m)
	}
	if len(e.Missing) > 0 {
		b.WriteString("\n")
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func writeSteps(b *strings.Builder, steps []Step) {
	if len(steps) == 0 {
		return
	}
	b.WriteString("## Steps\n\n")
	t := newTable("step", "what", "status", "seconds").left(0, 1, 2)
	for _, s := range steps {
		status := s.Status
		if s.Reason != "" {
			status += ": " + s.Reason
		}
		if s.Status != StepDone {
			status = "**" + s.Status + "**" + strings.TrimPrefix(status, s.Status)
		}
		t.add(s.Name, s.What, status, fmtNum(s.Seconds))
	}
	t.write(b)
}

func writeBaselines(b *strings.Builder, run Run) {
	t := newTable("baseline", "directory", "ops/s", "MB/s", "p50 µs", "p99 µs", "what").left(0, 1, 6)
	for _, r := range run.Results {
		if !isBaselineResult(r) {
			continue
		}
		dir, _ := r.Params["dir"].(string)
		if r.Scenario == "tcp-loopback" {
			dir = "127.0.0.1"
		}
		what, _ := r.Params["kind"].(string)
		if what == "" {
			what = describeParams(r)
		}
		t.add(ResultKey(r), "`"+dir+"`", fmtNum(r.OpsPerS), fmtNum(r.MBPerS), fmtNum(r.LatencyUs.P50), fmtNum(r.LatencyUs.P99), what)
	}
	if len(t.rows) == 0 {
		return
	}
	b.WriteString("## Baselines\n\nWhat the operating system and the hardware deliver without Spindle, measured by Spindle in this run on the directories the benches used: raw `pwrite` + `fdatasync` on a bare file descriptor, and a TCP stream over loopback. Latencies run from the start of a write to the end of the `fdatasync` that made it durable (for TCP, of the `write` call).\n\n")
	t.write(b)
}

// describeParams prints a result's params as k=v, sorted, without the
// step and the directories.
func describeParams(r bench.Result) string {
	var kv []string
	for _, k := range sortedKeys(r.Params) {
		switch k {
		case "step", "dir", "data_dir", "data_dirs", "log_dir", "datanode":
			continue
		}
		kv = append(kv, fmt.Sprintf("%s=%v", k, r.Params[k]))
	}
	return strings.Join(kv, " ")
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func writeBenches(b *strings.Builder, run Run, charts map[string]string) {
	base := findBaselines(run)
	t := newTable("bench", "ops/s", "MB/s", "p50 µs", "p99 µs", "own raw baseline ops/s", "MB/s", "ratio", "data dir baseline", "ratio").left(0, 8)
	for _, r := range run.Results {
		if isBaselineResult(r) {
			continue
		}
		bo, bm, ratio := "—", "—", "—"
		if r.Baseline != nil {
			bo, bm = fmtNum(r.Baseline.OpsPerS), fmtNum(r.Baseline.MBPerS)
		}
		if r.RatioToBaseline != nil {
			ratio = fmtNum(*r.RatioToBaseline)
		}
		dr, dwhat := "—", "—"
		if x, what, ok := base.dirRatio(r); ok {
			dr, dwhat = fmtNum(x), what
		}
		t.add(ResultKey(r), fmtNum(r.OpsPerS), fmtNum(r.MBPerS), fmtNum(r.LatencyUs.P50), fmtNum(r.LatencyUs.P99), bo, bm, ratio, dwhat, dr)
	}
	if len(t.rows) == 0 {
		return
	}
	b.WriteString("## Benches against their baselines\n\n")
	b.WriteString("Each bench next to the raw loop that does the same writes without Spindle (its own baseline, measured right after it on the same directory; the ratio is of MB/s, or of ops/s when no bytes move) and next to the data directory's baseline from the table above.\n\n")
	t.write(b)
	if ref, ok := charts["ratios"]; ok {
		b.WriteString(ref)
	}
	for _, scen := range scenariosOf(run.Results) {
		if ref, ok := charts[fileName(scen)+"-throughput"]; ok {
			b.WriteString(ref)
		}
	}
	// What each bench was: its params.
	p := newTable("bench", "scenario", "parameters").left(0, 1, 2)
	for _, r := range run.Results {
		if !isBaselineResult(r) {
			p.add(ResultKey(r), r.Scenario, describeParams(r))
		}
	}
	p.write(b)
}

func writeProfiles(b *strings.Builder, run Run, profiles []Profile, charts map[string]string) {
	if len(profiles) == 0 && run.Tracer == nil {
		return
	}
	b.WriteString("## System-call profiles\n\n")
	if tr := run.Tracer; tr != nil {
		if tr.Tool != "" {
			fmt.Fprintf(b, "Tracer of the processes traced in this run: `%s` (%s).", tr.Tool, tr.Version)
		} else {
			fmt.Fprintf(b, "No tracer in this run: %s. The benches that would have been traced ran untraced; no syscall figure is given for them.", tr.Reason)
		}
		b.WriteString(" Each profile below names what measured it.\n\n")
	}
	lastScen := ""
	for i, p := range profiles {
		s := p.Syscalls
		fmt.Fprintf(b, "### %s\n\n", p.Key)
		fmt.Fprintf(b, "Measured by `%s`", s.Tool)
		if p.Scope != "" {
			fmt.Fprintf(b, ": %s", p.Scope)
		}
		b.WriteString(". ")
		fmt.Fprintf(b, "%s calls", fmtInt(s.Total))
		if s.Ops > 0 {
			fmt.Fprintf(b, " for %s %ss: **%s per %s**", fmtInt(s.Ops), p.OpUnit, fmtNum(float64(s.Total)/float64(s.Ops)), p.OpUnit)
		}
		fmt.Fprintf(b, "; %s errors; %s s in system calls.", fmtInt(s.Errors), fmtNum(s.Seconds))
		if s.Ops > 0 && s.Tool != ToolInProcess {
			fsyncs := s.ByName["fdatasync"].Calls + s.ByName["fsync"].Calls
			fmt.Fprintf(b, " Threads created (clone, clone3, fork, vfork): %s per %s; fdatasync + fsync: %s per %s.",
				fmtNum(float64(s.ThreadsCreated())/float64(s.Ops)), p.OpUnit, fmtNum(float64(fsyncs)/float64(s.Ops)), p.OpUnit)
		}
		if s.Truncated {
			fmt.Fprintf(b, " The table is truncated: %s calls of the total are in rows not shown.", fmtInt(s.Total-s.Rows.Calls))
		}
		b.WriteString("\n\n")
		writeSyscallTable(b, "Top system calls by count", s, p.OpUnit, s.TopBy(TopSyscalls, s.CallsOf))
		writeSyscallTable(b, "Top system calls by time", s, p.OpUnit, s.TopBy(TopSyscalls, s.SecondsOf))

		scen := p.Scenario
		if scen == "" {
			scen = "run"
		}
		lastOfScen := i == len(profiles)-1 || profiles[i+1].Scenario != p.Scenario
		if lastOfScen && scen != lastScen {
			for _, m := range []string{"calls", "time", "avg"} {
				if ref, ok := charts["syscalls-"+fileName(scen)+"-"+m]; ok {
					b.WriteString(ref)
				}
			}
			lastScen = scen
		}
	}
}

func writeSyscallTable(b *strings.Builder, title string, s *Syscalls, unit string, names []string) {
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(b, "%s:\n\n", title)
	t := newTable("syscall", "calls", "per "+unit, "errors", "seconds", "µs/call", "% time")
	total := s.Seconds
	for _, n := range names {
		c := s.ByName[n]
		pct := c.PercentTime
		if pct == 0 && total > 0 {
			pct = c.Seconds / total * 100
		}
		t.add(n, fmtInt(c.Calls), fmtNum(s.PerOpCalls(n)), fmtInt(c.Errors), fmtNum(c.Seconds), fmtNum(s.AvgUs(n)), fmtNum(pct))
	}
	t.write(b)
}
