package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is what every bench prints: one JSON object with --json (WriteJSON),
// a table otherwise (WriteTable). MB is 10^6 bytes: MBPerS = Bytes/1e6/Seconds.
//
// Scenario-specific top-level fields (e.g. follower-append's messages, batch,
// syscalls) are added by embedding Result in a struct and passing that to the
// package-level WriteJSON; encoding/json inlines the embedded fields:
//
//	out := struct {
//		bench.Result
//		Messages int `json:"messages"`
//	}{res, n}
//	bench.WriteJSON(w, out)
//
// For that reason Result must not get a MarshalJSON method.
type Result struct {
	Scenario  string         `json:"scenario"`
	Ops       int64          `json:"ops"`
	Seconds   float64        `json:"seconds"`
	OpsPerS   float64        `json:"ops_per_s"`
	Bytes     int64          `json:"bytes"`
	MBPerS    float64        `json:"mb_per_s"`
	LatencyUs LatencySummary `json:"latency_us"`
	// Baseline is the raw-OS figure measured in the same run, when the bench
	// has one; set it with SetBaseline so that RatioToBaseline follows.
	Baseline        *Baseline      `json:"baseline,omitempty"`
	RatioToBaseline *float64       `json:"ratio_to_baseline,omitempty"`
	Params          map[string]any `json:"params,omitempty"`
	Notes           []string       `json:"notes,omitempty"`
	Extra           map[string]any `json:"extra,omitempty"`
	// CPUUse: the CPU time of Spindle's processes during the measured loop
	// (SetCPU); its fields are inlined (cpu_seconds, cpu_us_per_op,
	// cpu_seconds_per_gb, cpu_seconds_by_process, cpu_partial).
	*CPUUse
}

// SetBaseline attaches b and sets RatioToBaseline to MBPerS/b.MBPerS, or to
// OpsPerS/b.OpsPerS when either side moved no bytes. The ratio stays nil when
// the baseline's rate is zero.
func (r *Result) SetBaseline(b Baseline) {
	r.Baseline = &b
	r.RatioToBaseline = nil
	var ratio float64
	switch {
	case r.Bytes > 0 && b.Bytes > 0 && b.MBPerS > 0:
		ratio = r.MBPerS / b.MBPerS
	case b.OpsPerS > 0:
		ratio = r.OpsPerS / b.OpsPerS
	default:
		return
	}
	ratio = math.Round(ratio*1e4) / 1e4
	r.RatioToBaseline = &ratio
}

// AddNote appends a human-readable remark (e.g. "interrupted").
func (r *Result) AddNote(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// SetParam records an input of the run (chunk size, writers, ...).
func (r *Result) SetParam(key string, value any) {
	if r.Params == nil {
		r.Params = make(map[string]any)
	}
	r.Params[key] = value
}

// WriteJSON prints r as one line of JSON.
func (r Result) WriteJSON(w io.Writer) error { return WriteJSON(w, r) }

// WriteJSON prints v as ONE line of JSON followed by a newline (the checks
// take the last stdout line that parses as a JSON object).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w) // no indentation: one line
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("bench: write JSON result: %w", err)
	}
	return nil
}

// WriteTable prints r as a human-readable table.
func (r Result) WriteTable(w io.Writer) error { return WriteTable(w, r) }

// WriteTable prints results as an aligned table, one row per result, followed
// by their params and notes.
func WriteTable(w io.Writer, results ...Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tops\tseconds\tops/s\tMB/s\tp50 µs\tp99 µs\tmax µs\tCPU s\tCPU µs/op\tCPU s/GB\tbaseline ops/s\tbaseline MB/s\tratio\t")
	for _, r := range results {
		base := "-\t-"
		if r.Baseline != nil {
			base = fmt.Sprintf("%.0f\t%.2f", r.Baseline.OpsPerS, r.Baseline.MBPerS)
		}
		ratio := "-"
		if r.RatioToBaseline != nil {
			ratio = fmt.Sprintf("%.2f", *r.RatioToBaseline)
		}
		cpu := "-\t-\t-"
		if u := r.CPUUse; u != nil {
			perGB := "-"
			if u.CPUSecondsPerGB > 0 {
				perGB = fmt.Sprintf("%.2f", u.CPUSecondsPerGB)
			}
			cpu = fmt.Sprintf("%.2f\t%.1f\t%s", u.CPUSeconds, u.CPUUsPerOp, perGB)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t\n",
			r.Scenario, r.Ops, r.Seconds, r.OpsPerS, r.MBPerS,
			r.LatencyUs.P50, r.LatencyUs.P99, r.LatencyUs.Max, cpu, base, ratio)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	var b strings.Builder
	for _, r := range results {
		prefix := ""
		if len(results) > 1 {
			prefix = r.Scenario + " "
		}
		if len(r.Params) > 0 {
			kv := make([]string, 0, len(r.Params))
			for _, k := range slices.Sorted(maps.Keys(r.Params)) {
				kv = append(kv, fmt.Sprintf("%s=%v", k, r.Params[k]))
			}
			fmt.Fprintf(&b, "%sparams: %s\n", prefix, strings.Join(kv, " "))
		}
		if u := r.CPUUse; u != nil && len(u.CPUByProcess) > 0 {
			kv := make([]string, 0, len(u.CPUByProcess))
			for _, k := range slices.Sorted(maps.Keys(u.CPUByProcess)) {
				kv = append(kv, fmt.Sprintf("%s=%.2f", k, u.CPUByProcess[k]))
			}
			fmt.Fprintf(&b, "%scpu seconds by process: %s\n", prefix, strings.Join(kv, " "))
		}
		if u := r.CPUUse; u != nil && u.CPUPartial != "" {
			fmt.Fprintf(&b, "%scpu: %s\n", prefix, u.CPUPartial)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "%snote: %s\n", prefix, n)
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	return nil
}
