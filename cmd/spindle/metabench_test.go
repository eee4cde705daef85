package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/meta"
)

// bench meta: the JSON contract with the fsync rate next to the ops, the
// keys really committed in the store (--keep, then read back from it),
// and, without --keep, nothing left in --dir.
func TestBenchMeta(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	out, stderr, err := run(t, []string{"bench", "meta", "--keys", "40", "--clients", "4", "--size", "1KiB",
		"--dir", dir, "--baseline-duration", "300ms", "--keep", "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m := lastJSON(t, out)
	if m["scenario"] != "meta" || num(t, m, "ops") != 40 || num(t, m, "bytes") != 40<<10 || num(t, m, "clients") != 4 {
		t.Errorf("result %v", m)
	}
	for _, k := range []string{"seconds", "ops_per_s", "mb_per_s", "fsync_per_s", "ops_per_fsync", "wal_syncs", "commits_per_wal_sync", "wal_sync_us_mean"} {
		if num(t, m, k) <= 0 {
			t.Errorf("%s = %v, want > 0", k, m[k])
		}
	}
	lat := num2map(t, m, "latency_us")
	if num(t, lat, "p50") <= 0 || num(t, lat, "p99") < num(t, lat, "p50") || num(t, lat, "max") < num(t, lat, "p99") {
		t.Errorf("latency %v", lat)
	}
	s, err := meta.Open(meta.Config{Dir: filepath.Join(dir, "meta"), TickInterval: -1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, s)
	kl, err := s.List("bench-meta", meta.ListOptions{})
	if err != nil || len(kl.Keys) != 40 {
		t.Fatalf("the store holds %d keys (%v), want 40", len(kl.Keys), err)
	}
	for _, k := range kl.Keys {
		if k.Size != 1<<10 {
			t.Errorf("key %s: %d bytes", k.Key, k.Size)
		}
	}

	dir2 := filepath.Join(t.TempDir(), "data")
	out, stderr, err = run(t, []string{"bench", "meta", "--keys", "10", "--clients", "2", "--dir", dir2, "--no-baseline", "--json"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m = lastJSON(t, out)
	if num(t, m, "ops") != 10 || m["fsync_per_s"] != nil || m["baseline"] != nil {
		t.Errorf("--no-baseline: %v", m)
	}
	if _, err := os.Stat(dir2); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", dir2, err)
	}
}
