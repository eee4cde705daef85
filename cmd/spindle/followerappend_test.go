package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/syscallprof"
)

// TestBenchFollowerAppend runs the bench against a real datanode: this
// test binary, acting as spindle (see TestMain), started as a child.
func TestBenchFollowerAppend(t *testing.T) {
	t.Setenv(asSpindleEnv, "1") // inherited by the datanode child
	dir := t.TempDir()
	data, logDir := filepath.Join(dir, "data"), filepath.Join(dir, "log")
	out, stderr, err := run(t, []string{"bench", "follower-append", "--messages", "200", "--batch", "10",
		"--chunk-size", "64KiB", "--data-dir", data, "--log-dir", logDir, "--timeout", "2m", "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	num := func(k string) float64 {
		v, ok := m[k].(float64)
		if !ok {
			t.Fatalf("JSON field %q missing or not a number: %v", k, m)
		}
		return v
	}
	if m["scenario"] != "follower-append" || num("messages") != 200 || num("ops") != 200 || num("batch") != 10 ||
		num("append_entries") != 20 || num("bytes") != 200*64<<10 || num("chunk_size_bytes") != 64<<10 {
		t.Errorf("result %v", m)
	}
	if num("seconds") <= 0 || num("ops_per_s") <= 0 || num("mb_per_s") <= 0 {
		t.Errorf("rates %v %v %v", m["seconds"], m["ops_per_s"], m["mb_per_s"])
	}
	lat, _ := m["latency_us"].(map[string]any)
	if p50, _ := lat["p50"].(float64); p50 <= 0 || lat["p99"].(float64) < p50 || lat["max"].(float64) < lat["p99"].(float64) {
		t.Errorf("latency_us %v", lat)
	}
	base, _ := m["baseline"].(map[string]any)
	if ops, _ := base["ops_per_s"].(float64); ops <= 0 || base["writes_per_sync"] != float64(10) {
		t.Errorf("baseline %v", base)
	}
	if _, ok := m["ratio_to_baseline"].(float64); !ok {
		t.Errorf("no ratio_to_baseline: %v", m)
	}
	if def, _ := m["message_definition"].(string); !strings.Contains(def, "WriteChunk") {
		t.Errorf("message_definition %q", def)
	}
	if _, ok := m["syscalls"]; ok {
		t.Errorf("syscalls reported without --profile-syscalls: %v", m["syscalls"])
	}
	// The directories were created by the bench, and removed by it.
	for _, d := range []string{data, logDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", d, err)
		}
	}

	if _, err := exec.LookPath("strace"); err != nil {
		syscallprof.NoStrace(t, "strace not on PATH (make deps installs it): the --profile-syscalls part is skipped")
	}
	out, stderr, err = run(t, []string{"bench", "follower-append", "--messages", "100", "--chunk-size", "64KiB",
		"--data-dir", data, "--log-dir", logDir, "--timeout", "2m", "--no-baseline", "--profile-syscalls", "--json"})
	if err != nil && strings.Contains(err.Error(), "cannot trace here") {
		syscallprof.NoStrace(t, "strace cannot trace in this environment: %v", err)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m = lastJSON(t, out)
	sc, ok := m["syscalls"].(map[string]any)
	if !ok {
		t.Fatalf("no syscalls object with --profile-syscalls: %v", m)
	}
	total, _ := sc["total"].(float64)
	by, _ := sc["by_name"].(map[string]any)
	var sum float64
	for _, v := range by {
		sum += v.(float64)
	}
	if total <= 0 || sum != total {
		t.Errorf("syscalls total %v, by_name adds up to %v", total, sum)
	}
	if per, _ := sc["per_message"].(float64); per <= 0 || per != sc["per_append_entries"] {
		t.Errorf("per_message %v, per_append_entries %v at batch 1", sc["per_message"], sc["per_append_entries"])
	}
	// Every chunk is written and made durable by the datanode.
	if p, _ := by["pwrite64"].(float64); p < 100 {
		t.Errorf("pwrite64 %v for 100 chunks", by["pwrite64"])
	}
	if f, _ := sc["fdatasync_per_message"].(float64); f <= 0 {
		t.Errorf("fdatasync_per_message %v", sc["fdatasync_per_message"])
	}
	if _, ok := sc["threads_created"].(float64); !ok {
		t.Errorf("no threads_created: %v", sc)
	}
}
