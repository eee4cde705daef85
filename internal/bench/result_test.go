package bench

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func sampleResult() Result {
	r := Result{
		Scenario: "chunk-write", Ops: 1000, Seconds: 2, OpsPerS: 500, Bytes: 1000 << 20, MBPerS: 524.288,
		LatencyUs: LatencySummary{P50: 10, P99: 20, Max: 30},
	}
	r.SetParam("chunk_size_bytes", 1<<20)
	r.AddNote("durable: fdatasync per op")
	return r
}

func decode(t *testing.T, line []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("output %q is not a JSON object: %v", line, err)
	}
	return m
}

func TestResultJSONFieldNames(t *testing.T) {
	r := sampleResult()
	r.SetBaseline(Baseline{OpsPerS: 400, MBPerS: 419.4304, Bytes: 1})
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	if bytes.Count(out, []byte("\n")) != 1 || !bytes.HasSuffix(out, []byte("\n")) {
		t.Fatalf("WriteJSON printed %q, want exactly one line", out)
	}
	m := decode(t, out)
	for _, k := range []string{"scenario", "ops", "seconds", "ops_per_s", "bytes", "mb_per_s", "latency_us", "baseline", "ratio_to_baseline", "params", "notes"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks key %q: %s", k, out)
		}
	}
	lat := m["latency_us"].(map[string]any)
	for _, k := range []string{"p50", "p99", "max"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_us lacks %q", k)
		}
	}
	base := m["baseline"].(map[string]any)
	for _, k := range []string{"ops_per_s", "mb_per_s"} {
		if _, ok := base[k]; !ok {
			t.Errorf("baseline lacks %q", k)
		}
	}
	if got := m["ratio_to_baseline"].(float64); got != 1.25 {
		t.Errorf("ratio_to_baseline = %v, want 1.25 (MB/s ratio)", got)
	}
	if m["scenario"] != "chunk-write" || m["ops"].(float64) != 1000 || m["bytes"].(float64) != 1000<<20 {
		t.Errorf("values not carried: %s", out)
	}
}

func TestResultJSONOmitsAbsentBaseline(t *testing.T) {
	var buf bytes.Buffer
	if err := (Result{Scenario: "x"}).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	m := decode(t, buf.Bytes())
	for _, k := range []string{"baseline", "ratio_to_baseline", "params", "notes", "extra"} {
		if _, ok := m[k]; ok {
			t.Errorf("key %q present without a value: %s", k, buf.Bytes())
		}
	}
	want := []string{"bytes", "latency_us", "mb_per_s", "ops", "ops_per_s", "scenario", "seconds"}
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
}

func TestSetBaselineOpsRatio(t *testing.T) {
	r := Result{OpsPerS: 300}
	r.SetBaseline(Baseline{OpsPerS: 200})
	if r.RatioToBaseline == nil || *r.RatioToBaseline != 1.5 {
		t.Errorf("ops ratio %v, want 1.5", r.RatioToBaseline)
	}
	r.SetBaseline(Baseline{})
	if r.RatioToBaseline != nil {
		t.Errorf("ratio against a zero baseline = %v, want nil", *r.RatioToBaseline)
	}
}

func TestEmbeddedResultInlinesFields(t *testing.T) {
	out := struct {
		Result
		Messages int `json:"messages"`
	}{Result{Scenario: "follower-append", Ops: 3}, 3}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, out); err != nil {
		t.Fatal(err)
	}
	m := decode(t, buf.Bytes())
	if m["messages"].(float64) != 3 || m["scenario"] != "follower-append" {
		t.Errorf("embedded result not inlined: %s", buf.Bytes())
	}
}

func TestWriteTable(t *testing.T) {
	r := sampleResult()
	r.SetBaseline(Baseline{OpsPerS: 400, MBPerS: 419.4304, Bytes: 1})
	var buf bytes.Buffer
	if err := WriteTable(&buf, r, Result{Scenario: "baseline", Ops: 7}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("table %q has fewer than header + 2 rows", out)
	}
	for _, want := range []string{"ops/s", "MB/s", "p50 µs", "p99 µs", "max µs", "baseline ops/s", "ratio"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %q", lines[0], want)
		}
	}
	for _, want := range []string{"chunk-write", "500", "524.29", "1.25", "419.43"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %q", lines[1], want)
		}
	}
	if !strings.Contains(lines[2], "baseline") || !strings.Contains(lines[2], "-") {
		t.Errorf("row without baseline %q should show '-'", lines[2])
	}
	if !strings.Contains(out, "chunk_size_bytes=1048576") || !strings.Contains(out, "note: durable") {
		t.Errorf("params/notes missing: %q", out)
	}
	// Columns are aligned: the header and rows have the same width.
	if utf8.RuneCountInString(lines[0]) != utf8.RuneCountInString(lines[1]) {
		t.Errorf("unaligned table:\n%s", out)
	}
}
