package main

import (
	"os"
	"path/filepath"
	"strings"
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
		"--data-dir", data, "--log-dir", logDir, "--floor", "--json"})
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
	// --floor: the same 600 writes with none of Spindle's protocol, log or bookkeeping, and
	// Spindle's CPU per GB over the floor's.
	if fl := num2map(t, num2map(t, m, "extra"), "floor"); num(fl, "ops") != count || num(fl, "cpu_seconds_per_gb") <= 0 {
		t.Errorf("floor %v", fl)
	}
	if num(num2map(t, m, "extra"), "cpu_per_gb_over_floor") <= 0 {
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

// --placements: bad lists and flags that do not go with it are refused
// with a message naming the problem, before anything runs.
func TestBenchChunkWritePlacementsMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--placements", "tmpfs"}, `"tmpfs" is not DATA:LOG`},
		{[]string{"--placements", "tmpfs:ssd"}, `"ssd" in "tmpfs:ssd": want tmpfs, disk or an absolute directory`},
		{[]string{"--placements", "tmpfs:tmpfs,tmpfs:tmpfs"}, "tmpfs:tmpfs listed twice"},
		{[]string{"--placements", "disk:relative/dir"}, `"relative/dir"`},
		{[]string{"--placements", ","}, `"" is not DATA:LOG`},
		{[]string{"--placements", "tmpfs:tmpfs", "--data-dir", "/tmp/x"}, "takes neither --local, --data-dir nor --log-dir"},
		{[]string{"--placements", "tmpfs:tmpfs", "--local"}, "takes neither"},
		{[]string{"--dir", "/tmp"}, "--dir and --tmpfs-dir are for --placements"},
		{[]string{"--floor", "--local"}, "--floor measures three replicas; --local has one"},
		{[]string{"--placements", "disk:tmpfs", "--dir", "/nonexistent/spindle-dir"}, "/nonexistent/spindle-dir is not a directory"},
	} {
		_, _, err := run(t, append([]string{"bench", "chunk-write", "--count", "1", "--duration", "0"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to say %q", c.args, err, c.want)
		}
	}
}

// --placements runs the replicated bench once per placement and prints
// one JSON object with every run, the ratio to tmpfs:tmpfs and seed 002's
// figure where it has one; its directories are gone afterwards. (Tiny
// counts: nothing about speed is asserted.)
func TestBenchChunkWritePlacements(t *testing.T) {
	t.Setenv(asSpindleEnv, "1") // inherited by the datanode children
	disk, tmpfs := t.TempDir(), t.TempDir()
	out, stderr, err := run(t, []string{"bench", "chunk-write", "--chunk-size", "1KiB", "--clients", "2",
		"--count", "40", "--duration", "0", "--no-baseline",
		"--placements", "tmpfs:tmpfs,disk:tmpfs", "--dir", disk, "--tmpfs-dir", tmpfs, "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	runs, ok := m["placements"].([]any)
	if m["scenario"] != "chunk-write-placements" || !ok || len(runs) != 2 {
		t.Fatalf("result %v", m)
	}
	wantSeed := []float64{8900, 1400}
	for i, spec := range []string{"tmpfs:tmpfs", "disk:tmpfs"} {
		r := runs[i].(map[string]any)
		if r["spec"] != spec || r["ops"] != float64(40) || r["scenario"] != "chunk-write" {
			t.Errorf("run %d: %v", i, r)
		}
		if s := num2map(t, r, "seed"); s["ops_per_s"] != wantSeed[i] {
			t.Errorf("run %s: seed %v, want %v", spec, s, wantSeed[i])
		}
		if _, ok := r["ratio_to_tmpfs"].(float64); !ok {
			t.Errorf("run %s: no ratio_to_tmpfs: %v", spec, r)
		}
		if _, ok := r["cpu_seconds"].(float64); !ok {
			t.Errorf("run %s: no cpu_seconds: %v", spec, r)
		}
		under := map[string]string{"tmpfs": tmpfs, "disk": disk}
		data, log, _ := strings.Cut(spec, ":")
		if !strings.HasPrefix(r["data_dir"].(string), under[data]) || !strings.HasPrefix(r["log_dir"].(string), under[log]) {
			t.Errorf("run %s: data %v log %v", spec, r["data_dir"], r["log_dir"])
		}
	}
	if r := runs[0].(map[string]any); r["ratio_to_tmpfs"] != float64(1) {
		t.Errorf("tmpfs:tmpfs ratio %v", r["ratio_to_tmpfs"])
	}
	for _, d := range []string{disk, tmpfs} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("%s: %d entries left behind", d, len(left))
		}
	}
	// The table names every placement and the seed's figures.
	out, stderr, err = run(t, []string{"bench", "chunk-write", "--chunk-size", "1KiB", "--clients", "1",
		"--count", "5", "--duration", "0", "--no-baseline",
		"--placements", "tmpfs:tmpfs", "--dir", disk, "--tmpfs-dir", tmpfs})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"tmpfs:tmpfs", "ratio to tmpfs:tmpfs", "seed 002 (Ozone) ops/s", "8900", "memdisk/memdisk"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
