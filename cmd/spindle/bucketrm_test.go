package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
)

// bucket rm --force deletes a bucket with its keys: on a terminal only once
// the bucket's name is typed back, elsewhere (scripts) at once.
func TestBucketRmForce(t *testing.T) {
	t.Setenv("SPINDLE_META", startEmbedded(t))
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := runIn(t, []byte(stdin), args...)
		if err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	for _, b := range []string{"asked", "script"} {
		run("", "bucket", "create", b)
		for i := range 3 {
			run("v", "put", fmt.Sprintf("%s/k%d", b, i), "-")
		}
	}

	old := stdinIsTerminal
	t.Cleanup(func() { stdinIsTerminal = old })
	stdinIsTerminal = func(*cobra.Command) bool { return true }
	_, errOut, err := runIn(t, []byte("asked-not\n"), "bucket", "rm", "--force", "asked")
	wantExit(t, err, cli.ExitFailure, "bucket asked not deleted: not confirmed")
	if !strings.Contains(errOut, "Delete bucket asked with its 3 keys") {
		t.Errorf("the question: %q", errOut)
	}
	if out := run("", "ls", "asked"); strings.Count(out, "\n") != 3 {
		t.Errorf("keys after a refused confirmation: %q", out)
	}
	if out := run("asked\n", "bucket", "rm", "--force", "asked"); out != "deleted bucket asked and 3 keys\n" {
		t.Errorf("confirmed: %q", out)
	}

	stdinIsTerminal = func(*cobra.Command) bool { return false }
	if out := run("", "bucket", "rm", "--force", "script"); out != "deleted bucket script and 3 keys\n" {
		t.Errorf("without a terminal: %q", out)
	}
	if out := run("", "bucket", "ls"); strings.Contains(out, "asked") || strings.Contains(out, "script") {
		t.Errorf("buckets left: %q", out)
	}
	_, _, err = runIn(t, nil, "bucket", "rm", "--force", "gone")
	wantExit(t, err, cli.ExitNotFound, "unknown bucket gone")
}
