package report

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/chart"
)

// CompareOptions tune a comparison.
type CompareOptions struct {
	// Profile is the key (step) of the profile to compare, in runs that
	// have several, with runs that have only their own (imports). ""
	// means the first follower-append profile (seed 000's experiment),
	// else the first profile.
	Profile string
	// PNG also writes every chart as PNG.
	PNG bool
}

// MaxCompareSides bounds the distinct runs of one comparison (the
// colours of a chart).
const MaxCompareSides = chart.MaxSeries

// side is one configuration being compared: the runs of one name, pooled
// as repeats.
type side struct {
	name     string
	runs     []*Run
	results  map[string][]bench.Result // by ResultKey, in run order
	keys     []string                  // result keys in first-seen order
	profiles map[string][]Profile      // by key
	pkeys    []string
}

// metric is a figure of a bench result that compare tabulates and charts.
type metric struct {
	id, label     string
	higherBetter  bool
	better, worse string // verdict words
	get           func(r bench.Result) (float64, bool)
}

var metrics = []metric{
	{"ops_per_s", "ops/s", true, "faster", "slower", func(r bench.Result) (float64, bool) { return r.OpsPerS, r.Ops > 0 }},
	{"mb_per_s", "MB/s", true, "faster", "slower", func(r bench.Result) (float64, bool) { return r.MBPerS, r.Bytes > 0 }},
	{"p50_us", "p50 latency µs", false, "faster", "slower", func(r bench.Result) (float64, bool) { return r.LatencyUs.P50, r.LatencyUs.P50 > 0 }},
	{"p99_us", "p99 latency µs", false, "faster", "slower", func(r bench.Result) (float64, bool) { return r.LatencyUs.P99, r.LatencyUs.P99 > 0 }},
	{"ratio_to_baseline", "ratio to own raw baseline", true, "closer to the raw OS", "further from the raw OS", func(r bench.Result) (float64, bool) {
		if r.RatioToBaseline == nil {
			return 0, false
		}
		return *r.RatioToBaseline, true
	}},
	{"cpu_us_per_op", "CPU µs per op, Spindle's processes", false, "cheaper", "costlier", func(r bench.Result) (float64, bool) {
		if r.CPUUse == nil || r.Ops <= 0 {
			return 0, false
		}
		return r.CPUUsPerOp, true
	}},
	{"syscalls_per_op", "syscalls per op", false, "fewer", "more", func(r bench.Result) (float64, bool) {
		s, ok, err := ResultSyscalls(r)
		if err != nil || !ok || s.Ops <= 0 {
			return 0, false
		}
		return float64(s.Total) / float64(s.Ops), true
	}},
}

// Comparison is the outcome of Compare: Markdown and the charts it shows.
type Comparison struct {
	Markdown string
	Charts   []string // file names written (SVG, and PNG when asked)
}

// Compare compares runs (two or more) and writes dir/compare.md and its
// charts: side-by-side tables of every bench figure with deltas against
// the first run and a verdict per figure, grouped bar charts per figure
// and, per matched syscall profile, per syscall (calls, total time,
// average time). Runs with the same name are pooled as repeats; a verdict
// says better or worse only when repeats on both sides put the difference
// beyond noise (Welch's t-test, 95%), and "single run" otherwise.
func Compare(dir string, runs []Run, opts CompareOptions) (Comparison, error) {
	if len(runs) < 2 {
		return Comparison{}, errors.New("report: compare needs two runs or more")
	}
	sides, err := makeSides(runs)
	if err != nil {
		return Comparison{}, err
	}
	if len(sides) < 2 {
		return Comparison{}, fmt.Errorf("report: every run is named %q: compare needs two names (runs of one name are repeats)", sides[0].name)
	}
	if len(sides) > MaxCompareSides {
		return Comparison{}, fmt.Errorf("report: %d distinct runs, at most %d", len(sides), MaxCompareSides)
	}
	var b strings.Builder
	var charts []chartFile
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.name
	}
	fmt.Fprintf(&b, "# Comparison: %s\n\n", strings.Join(names, " vs "))
	fmt.Fprintf(&b, "Deltas are against **%s**. Runs of one name are pooled as repeats: a verdict says better or worse only when repeats on both sides put the difference beyond noise (Welch's t-test at 95%%); with one run on either side it says \"%s\" and gives the difference alone.\n\n", sides[0].name, VerdictSingle)
	writeSidesTable(&b, sides)

	benchMD, benchCharts := compareBenches(sides)
	b.WriteString(benchMD)
	charts = append(charts, benchCharts...)

	profMD, profCharts := compareProfiles(sides, opts.Profile)
	b.WriteString(profMD)
	charts = append(charts, profCharts...)

	refs, err := writeCharts(dir, charts, opts.PNG)
	if err != nil {
		return Comparison{}, err
	}
	md := b.String()
	for _, c := range charts {
		md = strings.ReplaceAll(md, chartPlaceholder(c.name), refs[c.name])
	}
	if err := writeFileAtomic(filepath.Join(dir, CompareFile), []byte(md)); err != nil {
		return Comparison{}, err
	}
	out := Comparison{Markdown: md}
	for _, c := range charts {
		out.Charts = append(out.Charts, c.name+".svg")
		if opts.PNG {
			out.Charts = append(out.Charts, c.name+".png")
		}
	}
	return out, nil
}

func chartPlaceholder(name string) string { return "\x00chart:" + name + "\x00" }

func makeSides(runs []Run) ([]*side, error) {
	var sides []*side
	byName := map[string]*side{}
	for i := range runs {
		r := &runs[i]
		s := byName[r.Name]
		if s == nil {
			s = &side{name: r.Name, results: map[string][]bench.Result{}, profiles: map[string][]Profile{}}
			byName[r.Name] = s
			sides = append(sides, s)
		}
		s.runs = append(s.runs, r)
		for _, res := range r.Results {
			k := ResultKey(res)
			if _, ok := s.results[k]; !ok {
				s.keys = append(s.keys, k)
			}
			s.results[k] = append(s.results[k], res)
		}
		ps, err := r.Profiles()
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if _, ok := s.profiles[p.Key]; !ok {
				s.pkeys = append(s.pkeys, p.Key)
			}
			s.profiles[p.Key] = append(s.profiles[p.Key], p)
		}
	}
	return sides, nil
}

func writeSidesTable(b *strings.Builder, sides []*side) {
	t := newTable("run", "runs", "source", "made", "machine", "data directory").left(0, 2, 3, 4, 5)
	var machines []string
	for _, s := range sides {
		r := s.runs[0]
		src := r.Source
		if r.Suite != "" {
			src += ", suite " + r.Suite
		}
		if r.ImportedFrom != "" {
			src += " of `" + filepath.Base(r.ImportedFrom) + "`"
		}
		machine, dir := "—", "—"
		if e := r.Environment; e != nil {
			machine = fmt.Sprintf("%s, %d cores, %s", e.CPUModel, e.Cores, e.Kernel)
			if len(e.Dirs) > 0 {
				d := e.Dirs[0]
				dir = fmt.Sprintf("%s on %s", d.FSType, d.Source)
			}
			if !slices.Contains(machines, machine) {
				machines = append(machines, machine)
			}
		}
		t.add(s.name, fmt.Sprint(len(s.runs)), src, r.CreatedAt.Format("2006-01-02 15:04"), machine, dir)
	}
	t.write(b)
	if len(machines) > 1 {
		b.WriteString("**The runs were made on different machines or kernels**: differences may be the machine's, not Spindle's.\n\n")
	}
}

// compareBenches tabulates every bench figure present on two sides or more.
func compareBenches(sides []*side) (string, []chartFile) {
	var keys []string
	for _, s := range sides {
		for _, k := range s.keys {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	var b strings.Builder
	// per metric: categories (keys) and per-side samples, for the charts
	type row struct {
		key     string
		samples []sample
	}
	perMetric := map[string][]row{}
	any := false
	for _, k := range keys {
		// The sides that ran this bench; deltas are against the first.
		var idx []int
		for i, s := range sides {
			if len(s.results[k]) > 0 {
				idx = append(idx, i)
			}
		}
		if len(idx) < 2 {
			continue
		}
		head := []string{"figure"}
		for n, i := range idx {
			head = append(head, sides[i].name)
			if n > 0 {
				head = append(head, "Δ "+sides[i].name)
			}
		}
		head = append(head, "verdict")
		t := newTable(head...).left(0, len(head)-1)
		scenario := sides[idx[0]].results[k][0].Scenario
		for _, m := range metrics {
			samples := make([]sample, len(sides))
			present := 0
			for _, i := range idx {
				for _, r := range sides[i].results[k] {
					if v, ok := m.get(r); ok && !math.IsNaN(v) {
						samples[i] = append(samples[i], v)
					}
				}
				if len(samples[i]) > 0 {
					present++
				}
			}
			if present < 2 {
				continue
			}
			label := m.label
			if m.id == "syscalls_per_op" {
				label = "syscalls per " + OpUnit(scenario)
			}
			cells := []string{label}
			var verdicts []string
			ref := samples[idx[0]]
			for n, i := range idx {
				cells = append(cells, fmtSample(samples[i]))
				if n == 0 {
					continue
				}
				cells = append(cells, fmtDelta(ref.mean(), samples[i].mean()))
				if len(ref) > 0 && len(samples[i]) > 0 {
					verdicts = append(verdicts, verdictText(m, sides[i].name, ref, samples[i]))
				}
			}
			cells = append(cells, strings.Join(verdicts, "; "))
			t.add(cells...)
			perMetric[m.id] = append(perMetric[m.id], row{k, samples})
		}
		if len(t.rows) == 0 {
			continue
		}
		if !any {
			b.WriteString("## Bench figures\n\n")
			any = true
		}
		fmt.Fprintf(&b, "### %s\n\n", k)
		t.write(&b)
		// Say so when the runs did not measure the same thing.
		var params []string
		differ := false
		for _, i := range idx {
			p := describeParams(sides[i].results[k][0])
			if len(params) > 0 && p != params[0] {
				differ = true
			}
			params = append(params, p)
		}
		if differ {
			b.WriteString("**Parameters differ**:\n\n")
			for n, i := range idx {
				fmt.Fprintf(&b, "- %s: %s\n", sides[i].name, params[n])
			}
			b.WriteString("\n")
		}
	}
	var charts []chartFile
	for _, m := range metrics {
		// The reference is the first run that has this figure for some
		// bench; the benches it lacks are left out of the chart.
		ref := -1
		for i := range sides {
			for _, r := range perMetric[m.id] {
				if ref < 0 && len(r.samples[i]) > 0 {
					ref = i
				}
			}
		}
		var rows []row
		for _, r := range perMetric[m.id] {
			if ref >= 0 && len(r.samples[ref]) > 0 && len(rows) < chart.MaxCategories {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		cats := make([]string, len(rows))
		var series []chart.Series
		for i, s := range sides {
			sr := chart.Series{Name: s.name, Values: make([]float64, len(rows)), Labels: make([]string, len(rows))}
			has := false
			for j, r := range rows {
				cats[j] = r.key
				base, v := r.samples[ref].mean(), r.samples[i].mean()
				if math.IsNaN(v) || base == 0 {
					sr.Values[j] = math.NaN()
					continue
				}
				sr.Values[j] = v / base * 100
				sr.Labels[j] = chart.FormatValue(v)
				has = true
			}
			if has { // a run without any of these figures gets no colour
				series = append(series, sr)
			}
		}
		if len(series) < 2 {
			continue
		}
		dir := "higher is better"
		if !m.higherBetter {
			dir = "lower is better"
		}
		name := "compare-" + m.id
		charts = append(charts, chartFile{name: name, bars: chart.Bars{
			Title:      fmt.Sprintf("%s (%s), %% of %s", m.label, dir, sides[ref].name),
			ValueLabel: fmt.Sprintf("%% of %s (bar labels: the figures)", sides[ref].name),
			Categories: cats, Series: series,
		}})
	}
	if len(charts) > 0 {
		b.WriteString("### Charts\n\nEach bar is a run's figure as a percentage of the first run's that has it (named in the title); the label at its end is the figure itself.\n\n")
		for _, c := range charts {
			b.WriteString(chartPlaceholder(c.name))
		}
	}
	return b.String(), charts
}

func verdictText(m metric, name string, a, b sample) string {
	v, half := verdict(a, b, m.higherBetter)
	d := fmtDelta(a.mean(), b.mean())
	switch v {
	case VerdictBetter:
		return fmt.Sprintf("%s: %s (%s, beyond noise ±%.1f%%)", name, m.better, d, half*100)
	case VerdictWorse:
		return fmt.Sprintf("%s: %s (%s, beyond noise ±%.1f%%)", name, m.worse, d, half*100)
	case VerdictSame:
		return fmt.Sprintf("%s: same within noise (%s, noise ±%.1f%%)", name, d, half*100)
	}
	return fmt.Sprintf("%s: %s, %s", name, VerdictSingle, d)
}

// profileGroup is one profile compared across sides.
type profileGroup struct {
	key      string
	profiles []*Profile // per side; nil where the side has none
	from     []string   // per side: the key the profile came from, when matched by choice
}

// compareProfiles matches the sides' syscall profiles and compares each
// group: by key, and a side that has only its own profile (an import)
// joins the group of the profile chosen by want (see CompareOptions).
func compareProfiles(sides []*side, want string) (string, []chartFile) {
	var keys []string
	for _, s := range sides {
		for _, k := range s.pkeys {
			if k != RunProfileKey && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	// The group that sides with only their own profile join.
	chosen := want
	if chosen == "" {
		for _, s := range sides {
			for _, k := range s.pkeys {
				if chosen == "" && k != RunProfileKey && s.profiles[k][0].Scenario == "follower-append" {
					chosen = k
				}
			}
		}
	}
	if chosen == "" && len(keys) > 0 {
		chosen = keys[0]
	}
	var groups []*profileGroup
	group := func(k string) *profileGroup {
		for _, g := range groups {
			if g.key == k {
				return g
			}
		}
		g := &profileGroup{key: k, profiles: make([]*Profile, len(sides)), from: make([]string, len(sides))}
		groups = append(groups, g)
		return g
	}
	for i, s := range sides {
		own, hasOwn := s.profiles[RunProfileKey]
		for _, k := range s.pkeys {
			if k != RunProfileKey {
				group(k).profiles[i] = &s.profiles[k][0]
			}
		}
		if hasOwn {
			k := chosen
			if k == "" || len(s.pkeys) > 1 {
				k = RunProfileKey // nothing to match with, or the side has others
			}
			g := group(k)
			g.profiles[i] = &own[0]
			if k != RunProfileKey {
				g.from[i] = "imported"
			}
		}
	}
	var b strings.Builder
	var charts []chartFile
	first := true
	for gi, g := range groups {
		var idx []int
		for i, p := range g.profiles {
			if p != nil {
				idx = append(idx, i)
			}
		}
		if len(idx) < 2 {
			continue
		}
		if first {
			b.WriteString("## System-call profiles\n\n")
			if want == "" && chosen != "" {
				fmt.Fprintf(&b, "A run with only a profile of its own (an import) is compared with the profile **%s** of the other runs (choose another with --profile).\n\n", chosen)
			}
			first = false
		}
		fmt.Fprintf(&b, "### %s\n\n", g.key)
		unit := g.profiles[idx[0]].OpUnit
		for _, i := range idx {
			if g.profiles[i].Scenario != "" {
				unit = g.profiles[i].OpUnit
			}
		}
		// Summary per side.
		t := newTable("run", "measured by", "calls", "operations", "calls per "+unit, "Δ", "errors", "seconds", "threads created per "+unit, "fdatasync+fsync per "+unit).left(0, 1)
		ref := g.profiles[idx[0]].Syscalls
		for _, i := range idx {
			p := g.profiles[i]
			s := p.Syscalls
			tool := s.Tool
			if g.from[i] != "" {
				tool += "; " + g.from[i]
			}
			if s.Truncated {
				tool += "; table truncated"
			}
			perOp, ops, thr, fs := math.NaN(), "—", math.NaN(), math.NaN()
			if s.Ops > 0 {
				n := float64(s.Ops)
				perOp, ops = float64(s.Total)/n, fmtInt(s.Ops)
				fs = float64(s.ByName["fdatasync"].Calls+s.ByName["fsync"].Calls) / n
				if s.Tool != ToolInProcess { // in-process timing sees only the calls it times
					thr = float64(s.ThreadsCreated()) / n
				}
			}
			refPerOp := math.NaN()
			if ref.Ops > 0 {
				refPerOp = float64(ref.Total) / float64(ref.Ops)
			}
			delta := "—"
			if i != idx[0] {
				delta = fmtDelta(refPerOp, perOp)
			}
			t.add(sides[i].name, tool, fmtInt(s.Total), ops, fmtNum(perOp), delta, fmtInt(s.Errors), fmtNum(s.Seconds), fmtNum(thr), fmtNum(fs))
		}
		t.write(&b)
		if ref.Ops > 0 {
			m := metric{label: "calls per " + unit, higherBetter: false, better: "fewer", worse: "more"}
			var verdicts []string
			a := perOpSample(sides[idx[0]], g, idx[0])
			for _, i := range idx[1:] {
				if x := perOpSample(sides[i], g, i); len(x) > 0 {
					verdicts = append(verdicts, verdictText(m, sides[i].name, a, x))
				}
			}
			if len(verdicts) > 0 {
				fmt.Fprintf(&b, "Verdict on system calls per %s: %s.\n\n", unit, strings.Join(verdicts, "; "))
			}
		}

		// Per syscall, side by side.
		var names []string
		for _, i := range idx {
			s := g.profiles[i].Syscalls
			for _, n := range s.TopBy(TopSyscalls, s.CallsOf) {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
		maxCalls := func(n string) float64 {
			v := 0.0
			for _, i := range idx {
				v = max(v, g.profiles[i].Syscalls.CallsOf(n))
			}
			return v
		}
		slices.SortStableFunc(names, func(a, c string) int {
			switch va, vc := maxCalls(a), maxCalls(c); {
			case va > vc:
				return -1
			case va < vc:
				return 1
			}
			return strings.Compare(a, c)
		})
		allOps := true
		for _, i := range idx {
			allOps = allOps && g.profiles[i].Syscalls.Ops > 0
		}
		countHead := "calls"
		if allOps {
			countHead = "per " + unit
		}
		head := []string{"syscall"}
		for k, i := range idx {
			head = append(head, sides[i].name+" "+countHead)
			if k > 0 {
				head = append(head, "Δ")
			}
		}
		for _, i := range idx {
			head = append(head, sides[i].name+" µs/call")
		}
		for _, i := range idx {
			head = append(head, sides[i].name+" s")
		}
		pt := newTable(head...)
		count := func(s *Syscalls, n string) float64 {
			if allOps {
				return s.PerOpCalls(n)
			}
			if c, ok := s.ByName[n]; ok {
				return float64(c.Calls)
			}
			return math.NaN()
		}
		for _, n := range names {
			cells := []string{n}
			r0 := count(g.profiles[idx[0]].Syscalls, n)
			for k, i := range idx {
				v := count(g.profiles[i].Syscalls, n)
				cells = append(cells, fmtNum(v))
				if k > 0 {
					cells = append(cells, fmtDelta(r0, v))
				}
			}
			for _, i := range idx {
				cells = append(cells, fmtNum(g.profiles[i].Syscalls.AvgUs(n)))
			}
			for _, i := range idx {
				sec := math.NaN()
				if c, ok := g.profiles[i].Syscalls.ByName[n]; ok {
					sec = c.Seconds
				}
				cells = append(cells, fmtNum(sec))
			}
			pt.add(cells...)
		}
		fmt.Fprintf(&b, "The top %d system calls by count of each run (— where a run's table does not show the call):\n\n", TopSyscalls)
		pt.write(&b)

		sNames := make([]string, len(idx))
		sProfiles := make([]*Syscalls, len(idx))
		for k, i := range idx {
			sNames[k], sProfiles[k] = sides[i].name, g.profiles[i].Syscalls
		}
		gc := syscallCharts(fmt.Sprintf("%d-%s", gi+1, fileName(g.key)), g.key, sNames, sProfiles, unit)
		for _, c := range gc {
			c.name = "compare-" + c.name
			charts = append(charts, c)
			b.WriteString(chartPlaceholder(c.name))
		}
	}
	return b.String(), charts
}

// perOpSample is the calls per operation of every repeat of group g's
// profile on side s (i is the side's index).
func perOpSample(s *side, g *profileGroup, i int) sample {
	p := g.profiles[i]
	if p == nil {
		return nil
	}
	var out sample
	for _, q := range s.profiles[p.Key] {
		if q.Syscalls.Ops > 0 {
			out = append(out, float64(q.Syscalls.Total)/float64(q.Syscalls.Ops))
		}
	}
	return out
}
