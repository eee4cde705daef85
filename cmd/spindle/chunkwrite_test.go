package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The replicated chunk-write bench end to end: three datanodes (this test
// binary acting as spindle, see TestMain), a bounded count of writes with
// PutBlocks, the baseline, the JSON contract, and nothing left behind.
func TestBenchChunkWriteReplicated(t *testing.T) {
	t.Setenv(asSpindleEnv, "1") // inherited by the datanode children
	dir := t.TempDir()
	data, logDir := filepath.Join(dir, "data"), filepath.Join(dir, "log")
	const count = 600
	out, stderr, err := run(t, []string{"bench", "chunk-write", "--chunk-size", "1KiB", "--clients", "4",
		"--count", "600", "--duration", "0", "--block-size", "16KiB",
		"--data-dir", data, "--log-dir", logDir, "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	num := func(obj map[string]any, k string) float64 {
		v, ok := obj[k].(float64)
		if !ok {
			t.Fatalf("JSON field %q missing or not a number: %v", k, obj)
		}
		return v
	}
	if m["scenario"] != "chunk-write" || num(m, "ops") != count || num(m, "bytes") != count*1024 || num(m, "replicas") != 3 {
		t.Errorf("result %v", m)
	}
	if num(m, "ops_per_s") <= 0 || num(m, "mb_per_s") <= 0 || num(m, "ratio_to_baseline") <= 0 {
		t.Errorf("rates %v", m)
	}
	if num(num2map(t, m, "baseline"), "ops_per_s") <= 0 {
		t.Errorf("baseline %v", m["baseline"])
	}
	if m["data_dir"] != data || m["log_dir"] != logDir {
		t.Errorf("dirs %v %v", m["data_dir"], m["log_dir"])
	}
	pl := num2map(t, m, "placement")
	if d := num2map(t, pl, "data"); d["fs_type"] == "" || d["path"] != data {
		t.Errorf("placement %v", pl)
	}
	if pl["same_device"] != true || pl["label"] == "" {
		t.Errorf("placement %v", pl)
	}
	// 4 writers × 16-chunk blocks over 600 writes: PutBlocks happened.
	if num(num2map(t, m, "extra"), "blocks_committed") < 4 {
		t.Errorf("extra %v", m["extra"])
	}
	// Both directories were created by the run, so both are gone.
	for _, d := range []string{data, logDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", d, err)
		}
	}
}

func num2map(t *testing.T, obj map[string]any, k string) map[string]any {
	t.Helper()
	v, ok := obj[k].(map[string]any)
	if !ok {
		t.Fatalf("JSON field %q missing or not an object: %v", k, obj)
	}
	return v
}
