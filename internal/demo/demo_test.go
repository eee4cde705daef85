package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var spindleBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) (code int) {
	dir, err := os.MkdirTemp("", "spindle-demo-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "removing the test directory: %v\n", err)
			code = max(code, 1)
		}
	}()
	spindleBin = filepath.Join(dir, "spindle")
	// go test puts its own GOROOT/bin first on the PATH of the tests.
	cmd := exec.Command("go", "build", "-o", spindleBin, "github.com/spindle-store/spindle/cmd/spindle")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building spindle: %v\n", err)
		return 1
	}
	return m.Run()
}

func left(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("demo left %d entries behind in %s", len(entries), dir)
	}
}

// The whole demo, small: every step runs and says ok, nothing is left.
func TestDemoSmall(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := Run(ctx, Config{Dir: dir, Binary: spindleBin, DataBytes: 8 << 20, TeraGenBytes: 4 << 20, Writers: 2, BenchDuration: 200 * time.Millisecond, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"engine: read back", "engine: reopen + read back", "engine: close + scan containers",
		"server: start", "keys: put + stat + get files", "keys: ranged get + list", "keys: delete",
		"bench teragen x2 (validated)", "bench key-write", "bench key-read", "server: stop",
		"bench baseline", "bench chunk-write --local 1.0 KiB x16", "bench chunk-write 1.0 KiB x16, 3 replicas",
		"bench follower-append", "bench queue-dirs", "every step ok",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "FAILED") {
		t.Errorf("output says FAILED:\n%s", out.String())
	}
	left(t, dir)
}

func TestDemoEngineOnly(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := Run(context.Background(), Config{Dir: dir, EngineOnly: true, DataBytes: 8 << 20, Out: &out}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "engine: reopen + read back") || strings.Contains(out.String(), "server: start") {
		t.Errorf("output:\n%s", out.String())
	}
	left(t, dir)
}

// A step that fails makes Run fail, the summary say so, and everything
// still goes: here the "datanodes" are a program that exits at once.
func TestDemoFailureStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	bin, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1)")
	}
	err = Run(context.Background(), Config{Dir: dir, Binary: bin, DataBytes: 4 << 20, Out: &out})
	if err == nil {
		t.Fatalf("demo with broken datanodes succeeded:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "FAILED") || !strings.Contains(out.String(), "engine: write") {
		t.Errorf("output:\n%s", out.String())
	}
	left(t, dir)
}

// The cluster part needs the spindle binary for its datanodes.
func TestRunRequiresBinary(t *testing.T) {
	if err := Run(context.Background(), Config{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Errorf("no binary: %v", err)
	}
}
