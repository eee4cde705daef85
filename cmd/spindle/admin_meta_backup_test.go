package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/server"
)

// The meta store's backup and restore as docs/OPERATIONS.md tells an
// operator: keys are written, spindle admin meta backup DIR copies the
// store while the cluster serves, the cluster stops, its meta store is
// wiped and replaced by DIR, and once it starts again every key reads back
// (and a new put works). Without the restore the keys are unknown: the
// check that they read back fails.
func TestAdminMetaBackupRestore(t *testing.T) {
	dir := t.TempDir()
	start := func() *server.Server {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := server.Start(ctx, server.Config{Dir: dir, MetaListen: "127.0.0.1:0", DatanodeEnv: []string{asSpindleEnv + "=1"}, Logger: quietLogger(), ClientProfile: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := runIn(t, []byte(stdin), args...)
		if err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	s := start()
	t.Setenv("SPINDLE_META", s.MetaAddr())
	run("", "bucket", "create", "photos")
	const keys = 20
	for i := range keys {
		run(strings.Repeat(fmt.Sprint(i), 1000+i), "put", fmt.Sprintf("photos/k%02d", i), "-")
	}
	// admin meta itself (not only its backup subcommand) runs: the
	// members as the service describes them.
	if st := run("", "admin", "meta", "--json"); !strings.Contains(st, `"leader_id":`) {
		t.Errorf("admin meta --json printed %q", st)
	}
	backup := filepath.Join(t.TempDir(), "meta-backup")
	out := run("", "admin", "meta", "backup", backup)
	if !strings.HasPrefix(out, backup+"\t") {
		t.Errorf("backup printed %q", out)
	}
	if _, err := os.Stat(filepath.Join(backup, "pebble", "MANIFEST-000001")); err != nil {
		if ms, _ := filepath.Glob(filepath.Join(backup, "pebble", "MANIFEST-*")); len(ms) == 0 {
			t.Fatalf("the backup holds no Pebble MANIFEST: %v", err)
		}
	}
	// A second backup into the same directory is refused.
	_, _, err := runIn(t, nil, "admin", "meta", "backup", backup)
	wantExit(t, err, cli.ExitUsage, "exists")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Wipe the meta store and restore the backup in its place.
	metaDir := filepath.Join(dir, "meta")
	if err := os.RemoveAll(metaDir); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", "-a", backup, metaDir).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, b)
	}
	s = start()
	defer testutil.CloseT(t, s)
	t.Setenv("SPINDLE_META", s.MetaAddr())
	for i := range keys {
		if got, want := run("", "get", fmt.Sprintf("photos/k%02d", i)), strings.Repeat(fmt.Sprint(i), 1000+i); got != want {
			t.Errorf("photos/k%02d after the restore: %d bytes, want %d", i, len(got), len(want))
		}
	}
	run("after", "put", "photos/new", "-")
	if got := run("", "get", "photos/new"); got != "after" {
		t.Errorf("a put after the restore reads back %q", got)
	}
}
