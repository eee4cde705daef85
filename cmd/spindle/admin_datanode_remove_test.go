package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// admin datanode remove against a meta service alone and one registered
// datanode (heartbeats sent by hand): refused (exit 1, the reason) while
// it is HEALTHY and IN_SERVICE; once DEAD (it holds nothing), removed: it
// leaves admin nodes, a second removal says so, --json gives the
// removal, its heartbeat is refused; a bad ID is a usage error.
func TestAdminDatanodeRemove(t *testing.T) {
	srv, err := meta.Start(meta.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quietLogger(),
		DisableSafeMode: true, StaleAfter: 100 * time.Millisecond, DeadAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close the meta service: %v", err)
		}
	})
	addr := srv.Addr()
	mc, err := metaapi.NewClient(addr, metaapi.ClientOptions{Timeout: 5 * time.Second, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hb := &metaapi.Heartbeat{UUID: "0123456789abcdef0123456789abcdef", Addr: "127.0.0.1:7001"}
	resp, err := mc.Heartbeat(ctx, hb)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.NodeID
	run := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := runIn(t, nil, append(args, "--meta", addr, "--insecure")...)
		return out, err
	}
	_, err = run("admin", "datanode", "remove", "1")
	wantExit(t, err, cli.ExitFailure, "HEALTHY and IN_SERVICE: decommission it first")
	_, err = run("admin", "datanode", "remove", "x")
	wantExit(t, err, cli.ExitUsage, "want a node ID")
	_, err = run("admin", "datanode", "remove", "9")
	wantExit(t, err, cli.ExitNotFound, "datanode 9")

	time.Sleep(400 * time.Millisecond) // DEAD
	out, err := run("admin", "datanode", "remove", "1")
	if err != nil || !strings.Contains(out, "datanode 1 (127.0.0.1:7001, DEAD IN_SERVICE) removed") {
		t.Fatalf("remove a DEAD empty datanode: %q, %v", out, err)
	}
	if out, err := run("admin", "nodes"); err != nil || strings.Contains(out, "127.0.0.1:7001") {
		t.Fatalf("admin nodes after the removal: %q, %v", out, err)
	}
	if out, err := run("admin", "datanode", "remove", "1"); err != nil || !strings.Contains(out, "was removed already") {
		t.Fatalf("second removal: %q, %v", out, err)
	}
	out, err = run("admin", "datanode", "remove", "1", "--json")
	var nr metaapi.NodeRemoval
	if err != nil || json.Unmarshal([]byte(out), &nr) != nil || nr.NodeID != id || nr.UUID != hb.UUID || !nr.AlreadyRemoved {
		t.Fatalf("removal --json: %q (%+v), %v", out, nr, err)
	}
	hb.NodeID = id
	if _, err := mc.Heartbeat(ctx, hb); !errors.Is(err, metaapi.ErrInvalid) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("heartbeat of the removed datanode: %v, want INVALID (removed)", err)
	}
}
