package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"
)

// TestLoad1SameFigures: procfs gives the one-minute load average the hand
// parser it replaced gave (fmt.Sscanf "%f" of /proc/loadavg), on the same
// bytes: this machine's /proc/loadavg, copied once to a directory laid out
// as /proc is. A loadavg procfs cannot read is an error, not a 0.
func TestLoad1SameFigures(t *testing.T) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "loadavg"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := load1In(fs)
	if err != nil {
		t.Fatal(err)
	}
	var want float64
	if _, err := fmt.Sscanf(string(b), "%f", &want); err != nil {
		t.Fatalf("hand parser: %v", err)
	}
	if got != want {
		t.Fatalf("%q: procfs load1 %v, hand parser %v", b, got, want)
	}
	if _, err := load1(); err != nil {
		t.Fatalf("the live /proc: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "loadavg"), []byte("x 1 2 3/4 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err := load1In(fs); err == nil {
		t.Fatalf("a bad loadavg read as %v", l)
	}
}
