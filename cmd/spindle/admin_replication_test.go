package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// admin replication and admin safemode against a meta service alone (no
// datanodes: it stays in safe mode, having no ticker, until told).
func TestAdminReplicationAndSafeMode(t *testing.T) {
	srv, err := meta.Start(meta.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, srv) })
	addr := srv.Addr()
	run := func(args ...string) string {
		t.Helper()
		out, _, err := runIn(t, nil, append(args, "--meta", addr, "--insecure")...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out
	}
	out := run("admin", "replication")
	for _, want := range []string{"safe mode:", "ON (", "replication factor:  3", "under-replicated:", "pending:", "over-replicated:     0 containers; 0 extra replicas being deleted, 0 deleted", "behind:              0 replicas", "in flight:"} {
		if !strings.Contains(out, want) {
			t.Errorf("admin replication: %q lacks %q", out, want)
		}
	}
	var st metaapi.ReplicationStatus
	if err := json.Unmarshal([]byte(run("admin", "replication", "--json")), &st); err != nil || !st.SafeMode {
		t.Fatalf("admin replication --json: %+v, %v", st, err)
	}
	if out := run("admin", "safemode", "status"); !strings.HasPrefix(out, "safe mode: ON (") {
		t.Errorf("safemode status: %q", out)
	}
	if out := run("admin", "safemode", "exit"); out != "safe mode: off (exited)\n" {
		t.Errorf("safemode exit: %q", out)
	}
	if out := run("admin", "safemode", "status"); out != "safe mode: off\n" {
		t.Errorf("safemode status after the exit: %q", out)
	}
	_, _, err = runIn(t, nil, "admin", "safemode", "--meta", addr)
	wantExit(t, err, cli.ExitUsage, "needs a command: exit, status")
	_, _, err = runIn(t, nil, "admin", "replication", "--watch", "-1s", "--meta", addr)
	wantExit(t, err, cli.ExitUsage, "--watch")
}

func TestAdminContainerGetNeedsItsFlags(t *testing.T) {
	t.Setenv(asSpindleEnv, "1")
	_, stderr, err := run(t, []string{"admin", "container-get", "--datanode", "127.0.0.1:1"})
	if err == nil || !strings.Contains(stderr, "needs --datanode, --container and --out") {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
}
