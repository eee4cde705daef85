package datanode

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/wal"
)

// countingLog keeps a datanode's log lines for the test to count.
type countingLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *countingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *countingLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestStartOnFullVolume is issue 31's "a full volume at start", on a real
// full filesystem: a 32 MiB tmpfs (mounted here: root only; skipped
// otherwise) holding a CLOSED and an OPEN container, filled to the last
// byte. The datanode becomes ready, says once that the volume is
// read-only (log, heartbeat, metric), serves the CLOSED container's bytes
// and refuses writes with ErrVolumeFull, and its log stays short. Before
// the fix it never got ready (Pebble's Open retried the flush of its WAL
// forever) and logged ~2,600 lines a second.
func TestStartOnFullVolume(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", data).CombinedOutput(); err != nil {
		t.Skipf("mounts a 32 MiB tmpfs (root only): %v: %s", err, out)
	}
	defer func() {
		if out, err := exec.Command("umount", "-l", data).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", data, err, out)
		}
	}()
	logDir := filepath.Join(dir, "log")
	e, err := engine.Open(engine.Config{DataDirs: []string{data}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("spindle!"), 512)
	sums := engine.ComputeChecksums(nil, block, 512)
	for c := engine.ContainerID(1); c <= 2; c++ {
		if err := e.CreateContainer(c); err != nil {
			t.Fatal(err)
		}
		for l := uint64(1); l <= 50; l++ {
			b := engine.BlockID{Container: c, Local: l}
			if err := e.WriteChunk(b, 0, block, 512, sums); err != nil {
				t.Fatal(err)
			}
			bd := &engine.BlockData{ID: b, Length: uint64(len(block)), BytesPerChecksum: 512, Chunks: []engine.ChunkInfo{{Length: uint64(len(block)), Checksums: sums}}}
			if err := e.PutBlock(bd, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.CloseContainer(1); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wl, err := wal.Open(wal.Config{Dir: logDir, SegmentSizeBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := wl.Close(); err != nil {
		t.Fatal(err)
	}
	fillFS(t, filepath.Join(data, "filler"))

	lg := &countingLog{}
	p, _ := ParsePipeline("1:1=127.0.0.1:0,2=127.0.0.1:2,3=127.0.0.1:3")
	f := newFakeMeta()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Config{ListenAddr: "127.0.0.1:0", DataDirs: []string{data}, LogDir: logDir, LogSegmentSizeBytes: 2 << 20,
			Pipelines: []pipeline.PipelineConfig{p}, Meta: f, HeartbeatInterval: 10 * time.Millisecond, MetricsListen: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(lg, nil))})
	}()
	var url string
	waitFor(t, "a heartbeat reporting the read-only volume", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range f.reports {
			if len(r.ReadOnlyVolumes) == 1 && r.ReadOnlyVolumes[0].Dir == data && len(r.Containers) == 2 {
				url = r.MetricsURL
				return true
			}
		}
		return false
	})
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"spindle_datanode_read_only_volumes 1", "spindle_datanode_full_volumes 1", "spindle_datanode_failed_volumes 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	logText := lg.text()
	if n := strings.Count(logText, "opened read-only"); n != 1 {
		t.Errorf("%d log lines say the volume is read-only, want 1", n)
	}
	if n := strings.Count(logText, "background error"); n > 1 {
		t.Errorf("%d lines of Pebble background errors, want at most 1", n)
	}
	if n := strings.Count(logText, "\n"); n > 50 {
		t.Errorf("%d log lines for one start and stop, want a few:\n%.3000s", n, logText)
	}
	// Offline, as the datanode left it: reads of the CLOSED container
	// work, writes are refused.
	e, err = engine.Open(engine.Config{DataDirs: []string{data}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	}()
	got, err := e.ReadChunk(engine.BlockID{Container: 1, Local: 7}, 0, uint64(len(block)), nil)
	if err != nil || !bytes.Equal(got, block) {
		t.Fatalf("read of a CLOSED container's block on the full volume: %v", err)
	}
	if err := e.WriteChunk(engine.BlockID{Container: 2, Local: 51}, 0, block, 512, sums); !errors.Is(err, engine.ErrVolumeFull) {
		t.Fatalf("write on the full volume: %v, want ErrVolumeFull", err)
	}
}

// fillFS writes path until its filesystem is full (ENOSPC).
func fillFS(t *testing.T, path string) {
	t.Helper()
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err = fh.Write(chunk); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the volume: %v", err)
	}
	// Down to the last page: tmpfs takes a smaller write after a refused big one.
	for _, err = fh.Write(chunk[:4096]); err == nil; _, err = fh.Write(chunk[:4096]) {
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
}
