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

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// startMeta runs `spindle meta` as a child process and waits (bounded) for
// its ready file.
func startMeta(t *testing.T, dir string, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "meta.ready")
	cmd := exec.Command(exe, append([]string{"meta", "--insecure", "--listen", "127.0.0.1:0", "--dir", dir, "--ready-file", ready, "--log-level", "warn"}, extra...)...)
	cmd.Env = append(os.Environ(), asSpindleEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			killT(t, cmd.Process)
			_ = cmd.Wait() // killed just above: "signal: killed" expected
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
		killT(t, cmd.Process)
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
	_, _, err := run(t, []string{"meta", "--insecure", "--listen", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "--dir") {
		t.Fatalf("meta without --dir: %v", err)
	}
}

// --listen-fd takes a listening socket (localcluster and the server's meta
// group hand theirs so): stdin, stdout and stderr are refused.
func TestListenFDIsChecked(t *testing.T) {
	for _, args := range [][]string{
		{"meta", "--insecure", "--dir", t.TempDir()},
		{"datanode", "--insecure", "--data-dir", t.TempDir(), "--log-dir", t.TempDir(), "--id", "1", "--pipeline", "1:1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3"},
	} {
		_, _, err := run(t, append(args, "--listen-fd", "2"))
		wantExit(t, err, cli.ExitUsage, "--listen-fd 2: want a descriptor ≥ 3")
	}
}

// The replication flags reach the service (GET /v1/replication shows the
// limits in force; admin replication prints them), and the defaults are
// meta's.
func TestMetaCommandReplicationFlags(t *testing.T) {
	cmd, addr := startMeta(t, filepath.Join(t.TempDir(), "meta"), "--max-copies-per-source", "7", "--max-copies-per-target", "5",
		"--max-inflight-copies", "9", "--copy-retry-after", "45s", "--copy-timeout", "3m", "--safe-mode-min-nodes", "2", "--safe-mode-fraction", "0.5")
	cl, err := metaapi.NewClient(addr, metaapi.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, err := cl.Replication(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := metaapi.ReplicationLimits{MaxCopiesPerSource: 7, MaxCopiesPerTarget: 5, MaxInflightCopies: 9, CopyRetryAfterMs: 45000,
		CopyTimeoutMinMs: 180000, SafeModeMinNodes: 2, SafeModeContainerFraction: 0.5}
	if st.Limits != want {
		t.Fatalf("limits %+v, want %+v", st.Limits, want)
	}
	out, _, err := runIn(t, nil, "admin", "replication", "--meta", addr, "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"7 copies per source, 5 per target, 9 in all", "after 45s", "after 3m0s", "2 datanodes heard and 0.5 of the containers"} {
		if !strings.Contains(out, w) {
			t.Errorf("admin replication: %q lacks %q", out, w)
		}
	}
	stop(t, cmd)

	cmd, addr = startMeta(t, filepath.Join(t.TempDir(), "meta"))
	if cl, err = metaapi.NewClient(addr, metaapi.ClientOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if st, err = cl.Replication(context.Background()); err != nil {
		t.Fatal(err)
	}
	want = metaapi.ReplicationLimits{MaxCopiesPerSource: meta.DefaultMaxCopiesPerSource, MaxCopiesPerTarget: meta.DefaultMaxCopiesPerTarget,
		MaxInflightCopies: meta.DefaultMaxInflightCopies, CopyRetryAfterMs: meta.DefaultCopyRetryAfter.Milliseconds(),
		CopyTimeoutMinMs: meta.DefaultCopyTimeoutMin.Milliseconds(), SafeModeContainerFraction: meta.DefaultSafeModeContainerFraction}
	if st.Limits != want {
		t.Fatalf("default limits %+v, want %+v", st.Limits, want)
	}
	stop(t, cmd)
}

// Bad replication flags are usage errors, on spindle meta and spindle
// server alike, before anything starts.
func TestReplicationFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-copies-per-source", "0"}, "--max-copies-per-source 0: want at least 1"},
		{[]string{"--max-copies-per-target", "-1"}, "--max-copies-per-target -1: want at least 1"},
		{[]string{"--max-inflight-copies", "0"}, "--max-inflight-copies 0: want at least 1"},
		{[]string{"--copy-retry-after", "0s"}, "--copy-retry-after 0s: want a positive duration"},
		{[]string{"--copy-timeout", "-1m"}, "--copy-timeout -1m0s: want a positive duration"},
		{[]string{"--safe-mode-min-nodes", "-2"}, "--safe-mode-min-nodes -2"},
		{[]string{"--safe-mode-fraction", "0"}, "--safe-mode-fraction 0: want more than 0, at most 1"},
		{[]string{"--safe-mode-fraction", "1.5"}, "--safe-mode-fraction 1.5"},
	} {
		for _, sub := range []string{"meta", "server"} {
			dir := t.TempDir()
			_, _, err := runIn(t, nil, append([]string{sub, "--dir", dir}, c.args...)...)
			wantExit(t, err, cli.ExitUsage, c.want)
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("%s %v wrote %d entries in --dir", sub, c.args, len(ents))
			}
		}
	}
	_, _, err := runIn(t, nil, "server", "--dir", t.TempDir(), "--max-copies", "0")
	wantExit(t, err, cli.ExitUsage, "--max-copies 0: want at least 1")
}
