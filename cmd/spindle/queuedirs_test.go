package main

import (
	"os"
	"strings"
	"testing"
)

func TestBenchQueueDirsJSON(t *testing.T) {
	dir := t.TempDir()
	out, _, err := run(t, []string{"bench", "queue-dirs", "--dir", dir, "--senders", "3", "--dirs", "2", "--files", "40", "--size", "1KiB", "--unlink", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	m := lastJSON(t, out)
	if m["scenario"] != "queue-dirs" || m["ops"] != float64(40) || m["bytes"] != float64(40*1024) {
		t.Errorf("result %v", m)
	}
	for _, k := range []string{"seconds", "ops_per_s", "mb_per_s", "latency_us"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	extra, _ := m["extra"].(map[string]any)
	sc, _ := extra["syscalls"].(map[string]any)
	for _, name := range []string{"openat", "write", "fsync", "close", "renameat", "unlinkat"} {
		s, _ := sc[name].(map[string]any)
		if s["calls"] != float64(40) {
			t.Errorf("extra.syscalls.%s = %v, want 40 calls", name, s)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("queue-dirs left files: %v", entries)
	}
}

func TestBenchQueueDirsTable(t *testing.T) {
	out, _, err := run(t, []string{"bench", "queue-dirs", "--dir", t.TempDir(), "--files", "5"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"queue-dirs", "fsync", "renameat", "avg µs"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q: %s", want, out)
		}
	}
}
