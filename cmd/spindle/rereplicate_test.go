package main

import (
	"path/filepath"
	"testing"
)

// TestBenchRereplicateEmbedded: the whole seed-004 experiment at a small
// size: generated offline, a datanode lost, every container it held
// copied again, keys read back, figures and copy limits reported.
func TestBenchRereplicateEmbedded(t *testing.T) {
	t.Setenv(asSpindleEnv, "1")
	dir := filepath.Join(t.TempDir(), "data")
	out, stderr, err := run(t, []string{"bench", "rereplicate", "--size", "48MiB", "--container-size", "4MiB", "--dir", dir, "--timeout", "5m", "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	if m["scenario"] != "rereplicate" || num(t, m, "containers") < 1 || num(t, m, "copied_bytes") < 4<<20 || num(t, m, "cpu_seconds") <= 0 {
		t.Fatalf("result %v", m)
	}
	if num(t, m, "containers") != num(t, m, "ops") || num(t, m, "mb_per_s") <= 0 || num(t, m, "ratio_to_baseline") <= 0 {
		t.Errorf("rates %v", m)
	}
	lim := num2map(t, m, "copy_limits")
	for _, k := range []string{"disk_read", "disk_write", "loopback"} {
		if num(t, num2map(t, lim, k), "mb_per_s") <= 0 {
			t.Errorf("copy limit %s: %v", k, lim[k])
		}
	}
	// CPU use, machine-wide, of the copies and of each limit (Linux has
	// /proc/stat): a busy fraction within [0, 1] and CPU time per GB.
	cpu := num2map(t, m, "cpu")
	for _, k := range []string{"copy", "disk_read", "disk_write", "loopback"} {
		u := num2map(t, cpu, k)
		if f := num(t, u, "busy_fraction"); f <= 0 || f > 1 || num(t, u, "cpus") < 1 || num(t, u, "cpu_s_per_gb") <= 0 {
			t.Errorf("cpu %s: %v", k, u)
		}
	}
	if num(t, m, "keys_checked") < 1 || num(t, m, "keys_checked") != num(t, m, "keys_total") {
		t.Errorf("keys checked %v of %v", m["keys_checked"], m["keys_total"])
	}
}
