package datanode

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/readyfile"
)

func TestParsePipeline(t *testing.T) {
	p, err := ParsePipeline("7:1=127.0.0.1:7001,2=127.0.0.1:7002,3=[::1]:7003")
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != 7 || len(p.Members) != 3 || p.Members[2] != (pipeline.Member{ID: 3, Addr: "[::1]:7003"}) {
		t.Fatalf("parsed %+v", p)
	}
	for _, bad := range []string{"", "7", "0:1=127.0.0.1:1", "x:1=127.0.0.1:1", "7:1", "7:0=127.0.0.1:1", "7:1=localhost", "7:a=127.0.0.1:1"} {
		if _, err := ParsePipeline(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRefusesEmptyLogWithContainers: a datanode whose volumes hold
// containers must not start on an empty log directory (it would forget its
// votes and acknowledged entries).
func TestRefusesEmptyLogWithContainers(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	e, err := engine.Open(engine.Config{DataDirs: []string{data}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateContainer(1); err != nil {
		t.Fatal(err)
	}
	closeT(t, e)
	p, _ := ParsePipeline("1:1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3")
	err = Run(context.Background(), Config{ID: 1, ListenAddr: "127.0.0.1:0", DataDirs: []string{data}, LogDir: filepath.Join(dir, "log"),
		Pipelines: []pipeline.PipelineConfig{p}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "refusing to start with an empty log") {
		t.Fatalf("Run: %v", err)
	}
}

// TestRunServesAndStops: the ready file appears with the address and pid,
// and cancelling the context stops the datanode cleanly.
func TestRunServesAndStops(t *testing.T) {
	dir := t.TempDir()
	p, _ := ParsePipeline("1:1=127.0.0.1:0,2=127.0.0.1:2,3=127.0.0.1:3")
	ready := filepath.Join(dir, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Config{ID: 1, ListenAddr: "127.0.0.1:0", DataDirs: []string{filepath.Join(dir, "data")}, LogDir: filepath.Join(dir, "log"),
			Pipelines: []pipeline.PipelineConfig{p}, ReadyFile: ready, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	var addr string
	var pid int
	for i := 0; i < 2000; i++ {
		var err error
		if addr, pid, err = readyfile.Read(ready); err == nil {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("Run returned before ready: %v", err)
		default:
		}
		if i == 1999 {
			t.Fatal("no ready file")
		}
		<-timeAfterMs(5)
	}
	if pid != os.Getpid() || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("ready file: %s %d", addr, pid)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

func timeAfterMs(ms int) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }

// TestMetricsServed: /metrics answers with the datanode's metrics.
func TestMetricsServed(t *testing.T) {
	dir := t.TempDir()
	p, _ := ParsePipeline("1:1=127.0.0.1:0,2=127.0.0.1:2,3=127.0.0.1:3")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	f := newFakeMeta()
	go func() {
		errc <- Run(ctx, Config{ID: 0, ListenAddr: "127.0.0.1:0", DataDirs: []string{filepath.Join(dir, "data")}, LogDir: filepath.Join(dir, "log"),
			Pipelines: []pipeline.PipelineConfig{p}, Meta: f, HeartbeatInterval: 10 * time.Millisecond, MetricsListen: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	var url string
	waitFor(t, "a heartbeat with the metrics URL", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range f.reports {
			url = r.MetricsURL
		}
		return url != ""
	})
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	closeT(t, resp.Body)
	for _, want := range []string{"spindle_datanode_chunk_writes_total", "spindle_datanode_wal_syncs_total", "spindle_datanode_pipelines 1", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
