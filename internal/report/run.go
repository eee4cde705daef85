// Package report owns run directories: what `spindle report` writes and
// reads. A run is one directory holding results.json (and, from `report
// run`, report.md and charts beside it). Bench runs, whole report runs and
// imported syscall profiles of other systems (strace -c of an Ozone
// datanode, seed 000) share one schema, so that `spindle report compare`
// takes any mix of them.
//
// Besides the schema: CaptureEnvironment (the machine and the filesystem
// of each directory), WriteRunReport (report.md and the charts of one run:
// baselines, every bench over its baselines, syscall profiles) and Compare
// (compare.md and charts of two or more runs: deltas against the first,
// verdicts by Welch's t-test where runs of one name give repeats, "single
// run" otherwise; an imported profile is matched with the runs'
// follower-append profile). Every figure they print comes from the runs
// given; what a run lacks prints as a dash or "n/a", never as zero.
//
// # results.json, schema version 1
//
//	{
//	  "schema_version": 1,
//	  "name":           "seed000-batch1",        // label in comparisons; required
//	  "source":         "strace -c import",      // or "spindle bench", "spindle report run"; required
//	  "imported_from":  "ozone-batch1.txt",      // imports only: the file as given
//	  "created_at":     "2026-01-02T03:04:05Z",  // RFC 3339, UTC
//	  "created_by":     "spindle 0.1.0-dev (…)", // the binary that wrote the file (buildinfo)
//	  "syscalls": {                              // optional: a system-call profile
//	    "tool":      "strace -c",                // what measured it (strace -f -c, perf trace -s, in-process timing)
//	    "total":     2727877,                    // calls: the profile's printed total, authoritative
//	    "errors":    257953,
//	    "seconds":   7064.807148,                // time in system calls (strace: CPU or, with -w, wall)
//	    "by_name": {                             // one entry per syscall shown
//	      "futex": {"calls": 1094305, "errors": 131769, "seconds": 6831.961434,
//	                "usecs_per_call": 6243, "percent_time": 96.7}
//	    },
//	    "rows":      {"calls": 2726979, "errors": 257844, "seconds": 7064.799805},
//	                                             // the sum of by_name; less than the total when the
//	                                             // table was truncated (rows left out)
//	    "truncated": true,
//	    "ops":       30000,                      // optional: operations the profile covers
//	    "per_op":    90.93                       // optional: total / ops
//	  },
//	  "results": [ … ],                          // bench results (bench.Result JSON, one per
//	                                             // scenario run); [] for an import
//	  // written by `report run` (optional for every other source):
//	  "environment": { … },                      // Environment: CPU, memory, kernel, dirs, vm.dirty_*, versions
//	  "suite":       "quick",                    // or "custom" (--scenarios)
//	  "command":     ["spindle", "report", …],   // the command line
//	  "scale":       1,                          // factor applied to every step's duration and count
//	  "steps":       [{"name": "queue-dirs-10x1", "scenario": "queue-dirs", "status": "done",
//	                   "seconds": 1.2, "reason": ""}],  // status: done, failed, skipped, interrupted
//	  "interrupted": false,                      // the run was stopped (SIGINT) before its last step
//	  "seconds":     83.1,                       // wall time of the whole run
//	  "tracer":      {"tool": "strace -f -c", "version": "strace -- version 6.1"}
//	                                             // or {"tool": "", "reason": "strace is not on PATH"}
//	}
//
// A result of a report run names its step in params.step (the key by which
// compare matches results across runs; repeats of a step share it). A
// result with a system-call profile carries it in extra: "syscalls" (per
// name, below), "syscall_tool" (what measured it), optionally
// "syscall_total" ({calls, errors, seconds}: the tracer's own total line,
// authoritative over the sum of the rows), "syscall_ops" (the operations
// the profile covers, default the result's ops) and "syscall_scope".
//
// Units are last in names (seconds, usecs_per_call, percent_time); counts
// are plain integers. A bench result may carry its own per-syscall figures
// in extra.syscalls with the same per-name keys (calls, errors, seconds,
// usecs_per_call), so that compare reads both kinds alike.
//
// Compatibility: Load rejects a schema_version other than SchemaVersion and
// ignores fields it does not know, so later writers may add fields (an
// environment section, baselines) without a version bump; a change of
// meaning of an existing field bumps the version.
//
// Invariants of a Run that Save writes or Load returns: name and source are
// non-empty; results is never null; when syscalls is present, every count is
// >= 0, rows is the sum of by_name, and total >= rows.calls.
//
// Concurrency: functions have no shared state; writing the same directory
// from two goroutines leaves one writer's files (each file is written to a
// temporary name and renamed). Save writes a temporary file
// and renames it into place (or, when not replacing, links it, which fails
// if results.json exists), so a reader never sees a partial file; two
// concurrent Saves to one directory leave one of the two files.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/buildinfo"
	"github.com/spindle-store/spindle/internal/syscallprof"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Schema and file names.
const (
	SchemaVersion = 1
	ResultsFile   = "results.json"
	// MaxResultsBytes bounds the results.json that Load reads.
	MaxResultsBytes = 64 << 20
)

// Sources of runs.
const (
	SourceStraceImport = "strace -c import"
	SourceBench        = "spindle bench"
	SourceReportRun    = "spindle report run"
)

// Run is the content of a run directory's results.json.
type Run struct {
	SchemaVersion int            `json:"schema_version"`
	Name          string         `json:"name"`
	Source        string         `json:"source"`
	ImportedFrom  string         `json:"imported_from,omitempty"`
	CreatedAt     time.Time      `json:"created_at"`
	CreatedBy     string         `json:"created_by,omitempty"`
	Syscalls      *Syscalls      `json:"syscalls,omitempty"`
	Results       []bench.Result `json:"results"`
	Notes         []string       `json:"notes,omitempty"`

	Environment *Environment `json:"environment,omitempty"`
	Suite       string       `json:"suite,omitempty"`
	Command     []string     `json:"command,omitempty"`
	Scale       float64      `json:"scale,omitempty"`
	Steps       []Step       `json:"steps,omitempty"`
	Interrupted bool         `json:"interrupted,omitempty"`
	Seconds     float64      `json:"seconds,omitempty"`
	Tracer      *Tracer      `json:"tracer,omitempty"`
}

// Tracer says which system-call tracer a report run used for the benches
// that trace a process (strace -f -c), or why none.
type Tracer struct {
	Tool    string `json:"tool"`              // "strace -f -c", or "" when none
	Version string `json:"version,omitempty"` // its first line of -V
	Reason  string `json:"reason,omitempty"`  // why there is none
}

// Step statuses of a report run.
const (
	StepDone        = "done"
	StepFailed      = "failed"
	StepSkipped     = "skipped"
	StepInterrupted = "interrupted"
)

// Step is one step of a report run and what became of it. A failed or
// skipped step says why in Reason; only done steps have results.
type Step struct {
	Name     string  `json:"name"`
	Scenario string  `json:"scenario"`
	What     string  `json:"what,omitempty"`
	Status   string  `json:"status"`
	Reason   string  `json:"reason,omitempty"`
	Seconds  float64 `json:"seconds"`
}

// Syscalls is a system-call profile of a run.
type Syscalls struct {
	Tool      string                 `json:"tool"`
	Total     int64                  `json:"total"`
	Errors    int64                  `json:"errors"`
	Seconds   float64                `json:"seconds"`
	ByName    map[string]SyscallStat `json:"by_name"`
	Rows      syscallprof.Counts     `json:"rows"`
	Truncated bool                   `json:"truncated"`
	Ops       int64                  `json:"ops,omitempty"`
	PerOp     float64                `json:"per_op,omitempty"`
}

// SyscallStat is one syscall's line of a profile.
type SyscallStat struct {
	Calls        int64   `json:"calls"`
	Errors       int64   `json:"errors"`
	Seconds      float64 `json:"seconds"`
	UsecsPerCall float64 `json:"usecs_per_call"`
	PercentTime  float64 `json:"percent_time"`
}

// NewRun returns a run named name from source, stamped now.
func NewRun(name, source string) Run {
	return Run{
		SchemaVersion: SchemaVersion,
		Name:          name,
		Source:        source,
		CreatedAt:     time.Now().UTC().Truncate(time.Second),
		CreatedBy:     buildinfo.String(),
		Results:       []bench.Result{},
	}
}

// SyscallsFromProfile converts a parsed profile. tool overrides p.Tool when
// not empty (the table cannot tell -f or -w); ops > 0 sets ops and per_op.
func SyscallsFromProfile(p syscallprof.Profile, tool string, ops int64) *Syscalls {
	if tool == "" {
		tool = p.Tool
	}
	s := &Syscalls{
		Tool:      tool,
		Total:     p.Total.Calls,
		Errors:    p.Total.Errors,
		Seconds:   p.Total.Seconds,
		ByName:    make(map[string]SyscallStat, len(p.Syscalls)),
		Rows:      syscallprof.Counts{Calls: p.Rows.Calls, Errors: p.Rows.Errors, Seconds: roundMicro(p.Rows.Seconds)},
		Truncated: p.Truncated(),
	}
	for _, c := range p.Syscalls {
		s.ByName[c.Name] = SyscallStat{
			Calls: c.Calls, Errors: c.Errors, Seconds: c.Seconds,
			UsecsPerCall: c.UsecsPerCall, PercentTime: c.PercentTime,
		}
	}
	if ops > 0 {
		s.Ops = ops
		s.PerOp = math.Round(float64(s.Total)/float64(ops)*1e3) / 1e3
	}
	return s
}

// ImportOptions describe an strace -c import.
type ImportOptions struct {
	// File holds the strace -c summary (anything around it is skipped).
	File string
	// Name labels the run (default: File's base name without extension).
	Name string
	// Tool says how the table was made (default "strace -c"), e.g.
	// "strace -f -c -w": the table itself cannot tell.
	Tool string
	// Ops, when > 0, is the number of operations the profile covers
	// (seed 000: 30000 messages), for per-operation figures.
	Ops int64
}

// ImportStrace reads an strace -c summary into a run.
func ImportStrace(opts ImportOptions) (Run, error) {
	if opts.Ops < 0 {
		return Run{}, fmt.Errorf("report: import %s: ops %d, want >= 0", opts.File, opts.Ops)
	}
	p, err := syscallprof.ParseFile(opts.File)
	if err != nil {
		return Run{}, fmt.Errorf("report: import: %w", err)
	}
	name := opts.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(opts.File), filepath.Ext(opts.File))
	}
	r := NewRun(name, SourceStraceImport)
	r.ImportedFrom = opts.File
	r.Syscalls = SyscallsFromProfile(p, opts.Tool, opts.Ops)
	if p.Truncated() {
		m := p.Missing()
		r.Notes = append(r.Notes, fmt.Sprintf("table truncated: %d calls and %d errors of the total are in rows not shown", m.Calls, m.Errors))
	}
	if !p.HasTotalLine {
		r.Notes = append(r.Notes, "the table had no total line: total is the sum of the rows shown")
	}
	if p.Tables > 1 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d tables (one per personality) merged", p.Tables))
	}
	return r, r.Validate()
}

// Validate checks the invariants in the package doc.
func (r *Run) Validate() error {
	switch {
	case r.SchemaVersion != SchemaVersion:
		return fmt.Errorf("report: run %q: schema_version %d, this spindle reads %d", r.Name, r.SchemaVersion, SchemaVersion)
	case strings.TrimSpace(r.Name) == "":
		return errors.New("report: run without a name")
	case r.Source == "":
		return fmt.Errorf("report: run %q without a source", r.Name)
	}
	for i, res := range r.Results {
		if res.Scenario == "" {
			return fmt.Errorf("report: run %q: result %d has no scenario", r.Name, i)
		}
	}
	for _, st := range r.Steps {
		switch st.Status {
		case StepDone, StepFailed, StepSkipped, StepInterrupted:
		default:
			return fmt.Errorf("report: run %q: step %q has status %q", r.Name, st.Name, st.Status)
		}
	}
	if !finiteNonNeg(r.Scale, r.Seconds) {
		return fmt.Errorf("report: run %q: negative or non-finite scale or seconds", r.Name)
	}
	if s := r.Syscalls; s != nil {
		var rows syscallprof.Counts
		for name, c := range s.ByName {
			if name == "" || c.Calls < 0 || c.Errors < 0 || !finiteNonNeg(c.Seconds, c.UsecsPerCall, c.PercentTime) {
				return fmt.Errorf("report: run %q: syscall %q: negative or non-finite figures %+v", r.Name, name, c)
			}
			if rows.Calls > math.MaxInt64-c.Calls || rows.Errors > math.MaxInt64-c.Errors {
				return fmt.Errorf("report: run %q: syscall counts overflow", r.Name)
			}
			rows.Calls += c.Calls
			rows.Errors += c.Errors
			rows.Seconds += c.Seconds
		}
		switch {
		case s.Total < 0 || s.Errors < 0 || !finiteNonNeg(s.Seconds, s.PerOp) || s.Ops < 0:
			return fmt.Errorf("report: run %q: syscalls: negative or non-finite totals", r.Name)
		case rows.Calls != s.Rows.Calls || rows.Errors != s.Rows.Errors:
			return fmt.Errorf("report: run %q: syscalls: rows %+v are not the sum of by_name (%d calls, %d errors)", r.Name, s.Rows, rows.Calls, rows.Errors)
		case s.Total < rows.Calls:
			return fmt.Errorf("report: run %q: syscalls: total %d below the %d calls of by_name", r.Name, s.Total, rows.Calls)
		}
	}
	return nil
}

// roundMicro rounds a sum of printed seconds to the microseconds strace
// prints, dropping float noise.
func roundMicro(s float64) float64 { return math.Round(s*1e6) / 1e6 }

func finiteNonNeg(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return false
		}
	}
	return true
}

// SyscallNames returns the names of the profile, most calls first (ties by
// name).
func (s *Syscalls) SyscallNames() []string {
	names := make([]string, 0, len(s.ByName))
	for n := range s.ByName {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if ca, cb := s.ByName[a].Calls, s.ByName[b].Calls; ca != cb {
			if ca > cb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}

// ResultsPath returns where the run in dir keeps its results.
func ResultsPath(dir string) string { return filepath.Join(dir, ResultsFile) }

// Load reads a run: path is a run directory or a results.json file.
func Load(path string) (Run, error) {
	file := path
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		file = ResultsPath(path)
	}
	f, err := os.Open(file)
	if err != nil {
		return Run{}, fmt.Errorf("report: load run: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	data, err := io.ReadAll(io.LimitReader(f, MaxResultsBytes+1))
	if err != nil {
		return Run{}, fmt.Errorf("report: load run %s: %w", file, err)
	}
	if len(data) > MaxResultsBytes {
		return Run{}, fmt.Errorf("report: load run %s: larger than %d bytes", file, MaxResultsBytes)
	}
	var r Run
	if err := json.Unmarshal(data, &r); err != nil {
		return Run{}, fmt.Errorf("report: load run %s: %w", file, err)
	}
	if r.Results == nil {
		r.Results = []bench.Result{}
	}
	if err := r.Validate(); err != nil {
		return Run{}, fmt.Errorf("%s: %w", file, err)
	}
	return r, nil
}

// ErrRunExists is returned (wrapped) by Save when dir already holds a run
// and replace is false.
var ErrRunExists = errors.New("run directory already holds results.json")

// Save writes r to dir/results.json, creating dir when missing. With
// replace false it fails with ErrRunExists rather than overwrite a run.
// The file is written to a temporary name, synced, then moved into place,
// and the directory is synced.
func Save(dir string, r Run, replace bool) (err error) {
	if r.Results == nil {
		r.Results = []bench.Result{}
	}
	if err := r.Validate(); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("report: encode run %q: %w", r.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: save run: %w", err)
	}
	final := ResultsPath(dir)
	if !replace {
		if _, err := os.Lstat(final); err == nil {
			return fmt.Errorf("report: save run %q to %s: %w", r.Name, dir, ErrRunExists)
		}
	}
	tmp, err := os.CreateTemp(dir, ".results-*.json")
	if err != nil {
		return fmt.Errorf("report: save run: %w", err)
	}
	defer func() {
		if rerr := os.Remove(tmp.Name()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("report: remove %s: %w", tmp.Name(), rerr))
		}
	}()
	_, werr := tmp.Write(buf.Bytes())
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("report: save run: write %s: %w", tmp.Name(), werr)
	}
	if replace {
		err = os.Rename(tmp.Name(), final)
	} else {
		err = os.Link(tmp.Name(), final) // fails if results.json appeared meanwhile
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("report: save run %q to %s: %w", r.Name, dir, ErrRunExists)
		}
	}
	if err != nil {
		return fmt.Errorf("report: save run: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	if err := vfs.Default.SyncDir(dir); err != nil {
		return fmt.Errorf("report: sync %s: %w", dir, err)
	}
	return nil
}
