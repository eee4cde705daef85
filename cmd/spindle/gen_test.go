package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/cli"
)

// TestGenJSON: spindle gen prints the benches' JSON (scenario, ops = keys,
// bytes = replica bytes, latency, baseline and ratio) plus keys,
// containers and key bytes; a second run on the same directory is refused;
// --size is required (a usage error).
func TestGenJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	args := []string{"gen", "--dir", dir, "--size", "12MiB", "--container-size", "4MiB", "--key-size", "3MiB", "--json"}
	out, _, err := run(t, args)
	if err != nil {
		t.Fatal(err)
	}
	m := lastJSON(t, out)
	if m["scenario"] != "gen" || m["ops"].(float64) != 4 || m["keys"].(float64) != 4 || m["containers"].(float64) != 3 ||
		m["key_bytes"].(float64) != 12<<20 || m["bytes"].(float64) != 3*12<<20 {
		t.Errorf("result %v", m)
	}
	for _, k := range []string{"seconds", "ops_per_s", "mb_per_s", "latency_us", "baseline", "ratio_to_baseline"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, out)
		}
	}
	if b, _ := m["baseline"].(map[string]any); b == nil || b["mb_per_s"].(float64) <= 0 {
		t.Errorf("baseline %v", m["baseline"])
	}
	if _, stderr, err := run(t, args); err == nil || !strings.Contains(stderr, "already holds") {
		t.Errorf("second run on %s: err %v, stderr %q", dir, err, stderr)
	}
	_, _, err = run(t, []string{"gen", "--dir", t.TempDir()})
	if err == nil || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("no --size: err %v (exit code %d)", err, cli.ExitCode(err))
	}
}
