package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/cli"
)

// put --recursive stores a directory tree under a prefix and get
// --recursive brings it back, byte for byte; neither replaces a file or
// stores an invalid name without saying so first.
func TestRecursivePutGet(t *testing.T) {
	t.Setenv("SPINDLE_META", startEmbedded(t))
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := runIn(t, nil, args...)
		if err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	src := t.TempDir()
	files := map[string]string{"a.txt": "alpha", "sub/b.txt": "beta", "sub/deeper/c.bin": strings.Repeat("c", 70000), "empty": ""}
	for rel, content := range files {
		p := filepath.Join(src, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("bucket", "create", "tree")
	if out := run("put", "--recursive", "tree/backup", src); strings.Count(out, "\n") != len(files) {
		t.Errorf("put -r printed %q", out)
	}
	out := run("ls", "tree/backup/")
	for rel := range files {
		if !strings.Contains(out, " backup/"+rel+"\n") {
			t.Errorf("ls lacks backup/%s: %q", rel, out)
		}
	}
	dst := filepath.Join(t.TempDir(), "restored")
	run("get", "-r", "tree/backup", dst)
	for rel, content := range files {
		got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(rel)))
		if err != nil || string(got) != content {
			t.Errorf("%s: %d bytes (%v), want %d", rel, len(got), err, len(content))
		}
	}
	// Again, as a person: every file exists, so nothing is written
	// without --force.
	asPerson(t, true)
	if err := os.WriteFile(filepath.Join(dst, "a.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runIn(t, nil, "get", "-r", "tree/backup", dst)
	wantExit(t, err, cli.ExitUsage, "exists: use --force")
	if got, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(got) != "mine" {
		t.Errorf("a.txt replaced without --force: %q", got)
	}
	run("get", "-r", "--force", "tree/backup/", dst)
	if got, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(got) != "alpha" {
		t.Errorf("a.txt after --force: %q", got)
	}
	// A file whose key would be invalid stops the put before any key is stored.
	bad := t.TempDir()
	for _, name := range []string{"ok", "tab\tname"} {
		if err := os.WriteFile(filepath.Join(bad, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = runIn(t, nil, "put", "-r", "tree/bad", bad)
	wantExit(t, err, cli.ExitUsage, "tab\tname")
	if out := run("ls", "tree/bad/"); out != "" {
		t.Errorf("keys stored before the invalid name was refused: %q", out)
	}
	_, _, err = runIn(t, nil, "put", "-r", "tree/x", filepath.Join(src, "a.txt"))
	wantExit(t, err, cli.ExitUsage, "is not a directory")
	_, _, err = runIn(t, nil, "get", "-r", "tree/backup", "-")
	wantExit(t, err, cli.ExitUsage, "--recursive: want BUCKET[/PREFIX] DIR")
}
