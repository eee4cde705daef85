package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionCommands: bucket versioning, ls --versions and get
// --version-id against an embedded cluster: every put of a versioned
// bucket is kept and read back by its version ID, a delete leaves a
// marker, rm of a version by the S3 route is not needed to see them.
func TestVersionCommands(t *testing.T) {
	t.Setenv("SPINDLE_META", startEmbedded(t))
	must := func(stdin []byte, args ...string) string {
		t.Helper()
		out, errOut, err := runIn(t, stdin, args...)
		if err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	must(nil, "bucket", "create", "vers")
	if out := must(nil, "bucket", "versioning", "vers"); out != "never versioned\n" {
		t.Fatalf("versioning of a new bucket: %q", out)
	}
	must(nil, "bucket", "versioning", "vers", "enable")
	if out := must(nil, "bucket", "versioning", "vers"); out != "Enabled\n" {
		t.Fatalf("versioning after enable: %q", out)
	}
	big := strings.Repeat("0123456789", 50000) // 500 kB: in blocks
	for _, v := range []string{"first", big, "third"} {
		must([]byte(v), "put", "vers/k", "-")
	}
	must(nil, "rm", "vers/k")
	lines := strings.Split(strings.TrimSpace(must(nil, "ls", "--versions", "vers")), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "latest marker") {
		t.Fatalf("ls --versions:\n%s", strings.Join(lines, "\n"))
	}
	want := []string{"third", big, "first"}
	dir := t.TempDir()
	for i, line := range lines[1:] {
		id := strings.Fields(line)[3]
		if got := must(nil, "get", "--version-id", id, "vers/k"); got != want[i] {
			t.Fatalf("get --version-id %s: %d bytes, want %d", id, len(got), len(want[i]))
		}
		dst := filepath.Join(dir, id)
		must(nil, "get", "--version-id", id, "vers/k", dst)
		if got, err := os.ReadFile(dst); err != nil || string(got) != want[i] {
			t.Fatalf("get --version-id %s to a file: %d bytes, %v", id, len(got), err)
		}
	}
	_, _, err := runIn(t, nil, "get", "--version-id", strings.Fields(lines[0])[3], "vers/k")
	wantExit(t, err, 3, "delete marker")
	_, _, err = runIn(t, nil, "get", "--version-id", "bad_id", "vers/k")
	wantExit(t, err, 2, "version ID")
	if out := must(nil, "ls", "vers"); out != "" {
		t.Fatalf("ls after the delete: %q", out)
	}
}
