package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBaselineBoundedByOps(t *testing.T) {
	for _, perSync := range []int{1, 3} {
		dir := t.TempDir()
		b, err := RunBaseline(context.Background(), BaselineConfig{
			Dir: dir, Writers: 4, ChunkSizeBytes: 4096, WritesPerSync: perSync,
			MaxOps: 200, FileSizeBytes: 64 << 10, Progress: io.Discard,
		})
		if err != nil {
			t.Fatalf("writes per sync %d: %v", perSync, err)
		}
		if b.Ops != 200 || b.Bytes != 200*4096 {
			t.Errorf("writes per sync %d: ops %d bytes %d, want 200 and %d", perSync, b.Ops, b.Bytes, 200*4096)
		}
		if perSync == 1 && b.Syncs != 200 {
			t.Errorf("syncs %d, want one per write", b.Syncs)
		}
		// Every writer syncs its remainder at the end: ceil(ops_i/3) per writer.
		if perSync == 3 && (b.Syncs < 200/3 || b.Syncs > 200/3+4) {
			t.Errorf("syncs %d with 3 writes per sync over 4 writers", b.Syncs)
		}
		if b.Seconds <= 0 || b.OpsPerS <= 0 || b.MBPerS <= 0 || b.LatencyUs.P50 <= 0 || b.LatencyUs.Max < b.LatencyUs.P99 {
			t.Errorf("inconsistent figures %+v", b)
		}
		if want := float64(b.Bytes) / 1e6 / b.Seconds; b.MBPerS < want*0.99 || b.MBPerS > want*1.01 {
			t.Errorf("mb_per_s %v, want bytes/1e6/seconds = %v", b.MBPerS, want)
		}
		if b.Writers != 4 || b.ChunkSizeBytes != 4096 || b.WritesPerSync != perSync || b.Dir != dir {
			t.Errorf("config not echoed: %+v", b)
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 0 {
			t.Errorf("files left behind in %s: %v %v", dir, entries, err)
		}
	}
}

func TestBaselineCreatesAndRemovesMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	b, err := RunBaseline(context.Background(), BaselineConfig{Dir: dir, ChunkSizeBytes: 512, MaxOps: 5, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if b.Ops != 5 || b.Writers != 1 || b.WritesPerSync != 1 || b.FileSizeBytes != DefaultBaselineFileSizeBytes {
		t.Errorf("defaults not applied: %+v", b)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s created by the run still exists (%v)", dir, err)
	}
}

func TestBaselineWriterWrapsAtFileSize(t *testing.T) {
	cfg, err := BaselineConfig{ChunkSizeBytes: 100, FileSizeBytes: 350, MaxOps: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	bw, err := openBaselineWriter(t.TempDir(), 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := bw.close(); err != nil {
			t.Error(err)
		}
	}()
	lat := NewLatency()
	for i := range 10 {
		if _, err := bw.write(lat); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		fi, err := os.Stat(bw.path)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(min(i+1, 3) * 100); fi.Size() != want {
			t.Fatalf("after %d writes the file is %d bytes, want %d (3 chunks fit in 350)", i+1, fi.Size(), want)
		}
	}
	data, err := os.ReadFile(bw.path)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range data {
		if c == 0 {
			t.Fatalf("payload byte %d is zero", i)
		}
	}
	if lat.Count() != 10 || bw.syncs != 10 {
		t.Errorf("latency count %d syncs %d, want 10", lat.Count(), bw.syncs)
	}
}

func TestBaselineErrorsCarryContext(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RunBaseline(context.Background(), BaselineConfig{Dir: file, MaxOps: 1}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("dir is a file: err %v", err)
	}
	if _, err := RunBaseline(context.Background(), BaselineConfig{Dir: filepath.Join(file, "sub"), MaxOps: 1}); err == nil || !strings.Contains(err.Error(), "baseline") {
		t.Errorf("dir under a file: err %v", err)
	}
	bad := []BaselineConfig{
		{Dir: t.TempDir()},                         // unbounded
		{Dir: t.TempDir(), MaxOps: 1, Writers: -1}, // bad writers
		{Dir: t.TempDir(), MaxOps: 1, ChunkSizeBytes: 2 << 30},
		{Dir: t.TempDir(), MaxOps: 1, ChunkSizeBytes: 4096, FileSizeBytes: 1024},
		{Dir: t.TempDir(), MaxOps: 1, WritesPerSync: -2},
	}
	for _, c := range bad {
		if _, err := RunBaseline(context.Background(), c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

func TestBaselineResult(t *testing.T) {
	b := Baseline{Ops: 10, Bytes: 10240, Seconds: 1, OpsPerS: 10, MBPerS: 0.01024, Writers: 2, ChunkSizeBytes: 1024, WritesPerSync: 1, Syncs: 10}
	r := b.Result()
	if r.Scenario != "baseline" || r.Ops != 10 || r.Bytes != 10240 || r.Params["writers"] != 2 || r.Baseline != nil {
		t.Errorf("Result() = %+v", r)
	}
}
