package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportImportStraceSeed000(t *testing.T) {
	for i, tc := range []struct {
		file  string
		total float64
	}{
		{"seed000-batch1.txt", 2727877},
		{"seed000-batch10.txt", 1691167},
		{"seed000-batch1-repeat.txt", 2738788},
	} {
		out := filepath.Join(t.TempDir(), "run")
		file := filepath.Join("..", "..", "internal", "syscallprof", "testdata", tc.file)
		name := "seed000-" + string(rune('0'+i))
		stdout, _, err := run(t, []string{"report", "import-strace", file, "--name", name, "--out", out})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stdout, "truncated") {
			t.Errorf("%s: stdout %q should note the truncated table", tc.file, stdout)
		}
		data, err := os.ReadFile(filepath.Join(out, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		sc, _ := d["syscalls"].(map[string]any)
		if d["name"] != name || d["source"] != "strace -c import" || d["imported_from"] != file || sc["total"] != tc.total {
			t.Errorf("%s: results.json %v", tc.file, d)
		}
		if res, ok := d["results"].([]any); !ok || len(res) != 0 {
			t.Errorf("%s: results %v, want []", tc.file, d["results"])
		}
	}
}

func TestReportImportStraceErrors(t *testing.T) {
	dir := t.TempDir()
	_, stderr, err := run(t, []string{"report", "import-strace", filepath.Join(dir, "absent.txt"), "--out", filepath.Join(dir, "r1")})
	if err == nil || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing file: err %v, stderr %q", err, stderr)
	}
	prose := filepath.Join(dir, "prose.txt")
	if err := os.WriteFile(prose, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = run(t, []string{"report", "import-strace", prose, "--out", filepath.Join(dir, "r2")})
	if err == nil || !strings.Contains(stderr, "no strace -c summary table") {
		t.Errorf("no table: err %v, stderr %q", err, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "r2")); !os.IsNotExist(err) {
		t.Errorf("failed import created its run directory (%v)", err)
	}
	file := filepath.Join("..", "..", "internal", "syscallprof", "testdata", "local-dd-f.txt")
	if _, stderr, err = run(t, []string{"report", "import-strace", file}); err == nil || !strings.Contains(stderr, "--out") {
		t.Errorf("no --out: err %v, stderr %q", err, stderr)
	}
	out := filepath.Join(dir, "r3")
	if _, _, err := run(t, []string{"report", "import-strace", file, "--out", out}); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err = run(t, []string{"report", "import-strace", file, "--out", out}); err == nil || !strings.Contains(stderr, "--replace") {
		t.Errorf("second import into one directory: err %v, stderr %q", err, stderr)
	}
	if _, _, err := run(t, []string{"report", "import-strace", file, "--out", out, "--replace", "--name", "again"}); err != nil {
		t.Errorf("--replace: %v", err)
	}
}
