package scenario

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func syscallCalls(t *testing.T, res QueueDirsResult) map[string]int64 {
	t.Helper()
	got := make(map[string]int64)
	for _, q := range res.Syscalls {
		got[q.Name] = q.Calls
		if q.Calls > 0 && (q.Seconds <= 0 || q.UsecsPerCall <= 0 || q.LatencyUs.Max < q.LatencyUs.P50) {
			t.Errorf("%s: inconsistent timing %+v", q.Name, q)
		}
	}
	return got
}

func TestQueueDirsCountsAndLayout(t *testing.T) {
	dir := t.TempDir()
	const files, size = 50, 1000
	res, err := RunQueueDirs(context.Background(), QueueDirsConfig{
		Dir: dir, Senders: 4, Dirs: 3, Files: files, SizeBytes: size, Progress: io.Discard, keepFiles: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scenario != "queue-dirs" || res.Ops != files || res.Bytes != files*size || res.QueueFilesFound != files {
		t.Fatalf("result %+v", res.Result)
	}
	want := map[string]int64{"openat": files, "write": files, "fsync": files, "close": files, "renameat": files}
	got := syscallCalls(t, res)
	if len(got) != len(want) {
		t.Errorf("syscalls %v, want %v (no unlinkat without Unlink)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d calls, want %d", k, got[k], v)
		}
	}
	// Round-robin: file N in q(N mod 3), renamed to qfN, size bytes of
	// non-zero payload.
	var total float64
	for _, q := range res.Syscalls {
		total += q.PercentTime
	}
	if total < 99.9 || total > 100.1 {
		t.Errorf("percent_time adds up to %v", total)
	}
	for d, wantFiles := range []int{17, 17, 16} {
		qdir := filepath.Join(res.RunDir, []string{"q000", "q001", "q002"}[d])
		entries, err := os.ReadDir(qdir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != wantFiles {
			t.Errorf("%s holds %d files, want %d", qdir, len(entries), wantFiles)
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "qf") {
				t.Errorf("%s/%s: not renamed to a queue file", qdir, e.Name())
			}
			data, err := os.ReadFile(filepath.Join(qdir, e.Name()))
			if err != nil || len(data) != size || bytes.IndexByte(data, 0) >= 0 {
				t.Errorf("%s: %d bytes (err %v), want %d non-zero bytes", e.Name(), len(data), err, size)
			}
		}
	}
	if m, ok := res.Extra["syscalls"].(map[string]QueueSyscall); !ok || m["fsync"].Calls != files {
		t.Errorf("extra.syscalls %v", res.Extra["syscalls"])
	}
	if res.Params["senders"] != 4 || res.Params["dirs"] != 3 || res.Params["dir_assignment"] != "round-robin" {
		t.Errorf("params %v", res.Params)
	}
}

func TestQueueDirsUnlinkAndCleanup(t *testing.T) {
	dir := t.TempDir()
	res, err := RunQueueDirs(context.Background(), QueueDirsConfig{
		Dir: dir, Senders: 3, Dirs: 2, Files: 30, SizeBytes: 100, Unlink: true, Progress: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := syscallCalls(t, res)
	for _, k := range []string{"openat", "write", "fsync", "close", "renameat", "unlinkat"} {
		if got[k] != 30 {
			t.Errorf("%s: %d calls, want 30", k, got[k])
		}
	}
	if res.QueueFilesFound != 0 {
		t.Errorf("%d queue files found after unlinking each", res.QueueFilesFound)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("left in %s: %v (%v)", dir, entries, err)
	}
	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil || !strings.Contains(table.String(), "unlinkat") {
		t.Errorf("table %q, %v", table.String(), err)
	}
}

func TestQueueDirsCreatesAndRemovesMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	res, err := RunQueueDirs(context.Background(), QueueDirsConfig{Dir: dir, Files: 5, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 5 || res.Params["size_bytes"] != int64(DefaultQueueFileSizeBytes) {
		t.Errorf("defaults: %+v", res.Result)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s created by the bench still exists (%v)", dir, err)
	}
}

func TestQueueDirsInterruptedCleansUp(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RunQueueDirs(ctx, QueueDirsConfig{Dir: dir, Senders: 2, Files: 1000, Progress: io.Discard})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

func TestQueueDirsDurationBound(t *testing.T) {
	// Bounded by duration only: it stops, and what it counted is consistent.
	res, err := RunQueueDirs(context.Background(), QueueDirsConfig{Dir: t.TempDir(), Duration: time.Millisecond, Unlink: true, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range res.Syscalls {
		if q.Calls != res.Ops {
			t.Errorf("%s: %d calls for %d files", q.Name, q.Calls, res.Ops)
		}
	}
}

func TestQueueDirsRejectsBadConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []QueueDirsConfig{
		{Dir: t.TempDir()},                        // unbounded
		{Dir: t.TempDir(), Files: 1, Senders: -1}, // senders
		{Dir: t.TempDir(), Files: 1, Dirs: MaxQueueDirs + 1},
		{Dir: t.TempDir(), Files: 1, SizeBytes: MaxQueueFileSizeBytes + 1},
		{Dir: t.TempDir(), Files: MaxQueueFiles + 1, Unlink: true},
		{Dir: t.TempDir(), Files: 1 << 20, SizeBytes: 1 << 20}, // 1 TiB left on disk
		{Dir: t.TempDir(), Files: 1, Duration: -time.Second},
		{Dir: file, Files: 1}, // not a directory
	} {
		cfg.Progress = io.Discard
		if _, err := RunQueueDirs(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "queue-dirs") {
			t.Errorf("config %+v: err %v", cfg, err)
		}
	}
}
