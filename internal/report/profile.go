package report

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/syscallprof"
)

// RunProfileKey is the key of a run's own profile (an import's), as
// opposed to the profiles bench results carry.
const RunProfileKey = "(whole run)"

// Tools that measure system calls, as results and reports name them.
const (
	ToolStraceF   = "strace -f -c"
	ToolInProcess = "in-process timing"
)

// keyParams are the params that tell results of one scenario apart when a
// result has no params.step (bench output saved by hand).
var keyParams = []string{"mode", "chunk_size_bytes", "batch", "clients", "senders", "dirs", "streams", "writers", "writes_per_sync", "size_bytes", "role"}

// ResultKey names a result for matching across runs: params.step when the
// result comes from a report run, else its scenario and distinguishing
// params.
func ResultKey(r bench.Result) string {
	if s, ok := r.Params["step"].(string); ok && s != "" {
		return s
	}
	parts := []string{r.Scenario}
	for _, k := range keyParams {
		if v, ok := r.Params[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

// OpUnit is what one operation of a scenario is, for "per …" columns.
func OpUnit(scenario string) string {
	switch scenario {
	case "follower-append":
		return "message"
	case "queue-dirs":
		return "file"
	case "chunk-write", "baseline":
		return "write"
	case "tcp-loopback":
		return "write"
	}
	return "op"
}

// Profile is one system-call profile of a run: the run's own (an import)
// or that of one bench result.
type Profile struct {
	Key      string // ResultKey of the result, or RunProfileKey
	Scenario string // the result's scenario; "" for the run's own
	Scope    string // what was counted, when said
	OpUnit   string // what Syscalls.Ops counts
	Syscalls *Syscalls
}

// Profiles returns the run's profiles: its own first, then its results'
// in order (a repeated step contributes one profile per repeat).
func (r *Run) Profiles() ([]Profile, error) {
	var out []Profile
	if r.Syscalls != nil {
		out = append(out, Profile{Key: RunProfileKey, OpUnit: "op", Syscalls: r.Syscalls})
	}
	for _, res := range r.Results {
		s, ok, err := ResultSyscalls(res)
		if err != nil {
			return nil, fmt.Errorf("report: run %q: %w", r.Name, err)
		}
		if !ok {
			continue
		}
		scope, _ := res.Extra["syscall_scope"].(string)
		out = append(out, Profile{Key: ResultKey(res), Scenario: res.Scenario, Scope: scope, OpUnit: OpUnit(res.Scenario), Syscalls: s})
	}
	return out, nil
}

// ResultSyscalls reads the profile a result carries in extra (see the
// package doc); ok is false when it has none.
func ResultSyscalls(res bench.Result) (s *Syscalls, ok bool, err error) {
	raw, has := res.Extra["syscalls"]
	if !has || raw == nil {
		return nil, false, nil
	}
	var byName map[string]SyscallStat
	if err := roundTrip(raw, &byName); err != nil {
		return nil, false, fmt.Errorf("result %s: extra.syscalls: %w", ResultKey(res), err)
	}
	if len(byName) == 0 {
		return nil, false, nil
	}
	s = &Syscalls{Tool: "unknown", ByName: byName}
	if t, ok := res.Extra["syscall_tool"].(string); ok && t != "" {
		s.Tool = t
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		c := byName[name]
		if c.Calls < 0 || c.Errors < 0 || !finiteNonNeg(c.Seconds, c.UsecsPerCall, c.PercentTime) {
			return nil, false, fmt.Errorf("result %s: syscall %q: negative or non-finite figures", ResultKey(res), name)
		}
		s.Rows.Calls += c.Calls
		s.Rows.Errors += c.Errors
		s.Rows.Seconds += c.Seconds
	}
	s.Rows.Seconds = roundMicro(s.Rows.Seconds)
	s.Total, s.Errors, s.Seconds = s.Rows.Calls, s.Rows.Errors, s.Rows.Seconds
	if raw, has := res.Extra["syscall_total"]; has {
		var tot syscallprof.Counts
		if err := roundTrip(raw, &tot); err != nil {
			return nil, false, fmt.Errorf("result %s: extra.syscall_total: %w", ResultKey(res), err)
		}
		if tot.Calls < s.Rows.Calls || tot.Errors < 0 || !finiteNonNeg(tot.Seconds) {
			return nil, false, fmt.Errorf("result %s: extra.syscall_total %+v below the rows' %+v", ResultKey(res), tot, s.Rows)
		}
		s.Total, s.Errors, s.Seconds = tot.Calls, tot.Errors, tot.Seconds
	}
	s.Truncated = s.Total > s.Rows.Calls
	s.Ops = res.Ops
	if v, has := res.Extra["syscall_ops"]; has {
		var ops int64
		if err := roundTrip(v, &ops); err != nil || ops < 0 {
			return nil, false, fmt.Errorf("result %s: extra.syscall_ops %v", ResultKey(res), v)
		}
		s.Ops = ops
	}
	if s.Ops > 0 {
		s.PerOp = math.Round(float64(s.Total)/float64(s.Ops)*1e3) / 1e3
	}
	return s, true, nil
}

// roundTrip converts v (a Go value, or what encoding/json decoded) to out.
func roundTrip(v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// PerOp returns calls of name per operation, NaN when the profile does not
// know its operations or does not show name.
func (s *Syscalls) PerOpCalls(name string) float64 {
	c, ok := s.ByName[name]
	if !ok || s.Ops <= 0 {
		return math.NaN()
	}
	return float64(c.Calls) / float64(s.Ops)
}

// AvgUs returns the average time of one call of name in microseconds: the
// row's seconds over its calls (NaN when not shown or never called).
func (s *Syscalls) AvgUs(name string) float64 {
	c, ok := s.ByName[name]
	if !ok || c.Calls == 0 {
		return math.NaN()
	}
	return c.Seconds * 1e6 / float64(c.Calls)
}

// TopBy returns up to n syscall names, largest value first (ties by name),
// skipping NaN values.
func (s *Syscalls) TopBy(n int, value func(name string) float64) []string {
	names := make([]string, 0, len(s.ByName))
	for name := range s.ByName {
		if v := value(name); !math.IsNaN(v) {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		va, vb := value(a), value(b)
		switch {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names[:min(n, len(names))]
}

// SecondsOf and CallsOf are TopBy's usual value functions.
func (s *Syscalls) SecondsOf(name string) float64 { return s.ByName[name].Seconds }

// CallsOf returns the calls of name as a float.
func (s *Syscalls) CallsOf(name string) float64 { return float64(s.ByName[name].Calls) }

// ThreadsCreated counts clone, clone3, fork and vfork calls.
func (s *Syscalls) ThreadsCreated() int64 {
	var n int64
	for _, name := range []string{"clone", "clone3", "fork", "vfork"} {
		n += s.ByName[name].Calls
	}
	return n
}
