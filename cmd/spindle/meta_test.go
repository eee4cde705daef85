package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// startMeta runs `spindle meta` as a child process and waits (bounded) for
// its ready file.
func startMeta(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "meta.ready")
	cmd := exec.Command(exe, "meta", "--listen", "127.0.0.1:0", "--dir", dir, "--ready-file", ready, "--log-level", "warn")
	cmd.Env = append(os.Environ(), asSpindleEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) != 2 || lines[1] != strconv.Itoa(cmd.Process.Pid) {
				t.Fatalf("ready file %q, child pid %d", b, cmd.Process.Pid)
			}
			return cmd, lines[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready file within 20 s; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func stop(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("spindle meta after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("spindle meta did not stop within 20 s of SIGTERM")
	}
}

func TestMetaCommandServesStopsAndKeepsState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	cmd, addr := startMeta(t, dir)
	ctx := context.Background()
	cl, err := metaapi.NewClient(addr, metaapi.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	hb, err := cl.Heartbeat(ctx, &metaapi.Heartbeat{UUID: "dn-one", Addr: "127.0.0.1:7001"})
	if err != nil || hb.NodeID != 1 {
		t.Fatalf("registration: %+v, %v", hb, err)
	}
	stop(t, cmd)
	if _, err := cl.ListBuckets(ctx); !errors.Is(err, metaapi.ErrUnavailable) {
		t.Fatalf("after stop: %v, want ErrUnavailable", err)
	}

	cmd, addr = startMeta(t, dir)
	cl, err = metaapi.NewClient(addr, metaapi.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := cl.ListBuckets(ctx)
	if err != nil || len(l.Buckets) != 1 || l.Buckets[0].Name != "bkt" {
		t.Fatalf("buckets after restart: %+v, %v", l, err)
	}
	nodes, err := cl.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].UUID != "dn-one" || nodes[0].NodeID != 1 {
		t.Fatalf("nodes after restart: %+v, %v", nodes, err)
	}
	stop(t, cmd)
}

func TestMetaCommandNeedsDir(t *testing.T) {
	_, _, err := run(t, []string{"meta", "--listen", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "--dir") {
		t.Fatalf("meta without --dir: %v", err)
	}
}
