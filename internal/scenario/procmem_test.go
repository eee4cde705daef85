package scenario

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

// TestProcMemorySameFigures: procfs gives the VmRSS and VmHWM the hand
// parser it replaced gave, on the same bytes: this process's live
// /proc/self/status, copied once to a directory laid out as /proc is.
func TestProcMemorySameFigures(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	root := t.TempDir()
	pid := os.Getpid()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := procMemoryIn(fs, pid)
	if err != nil {
		t.Fatal(err)
	}
	want := handProcMemory(t, string(b))
	if got != want || want.RSS <= 0 || want.HWM < want.RSS {
		t.Fatalf("procfs %+v, hand parser %+v (bytes)", got, want)
	}
	if _, err := procMemory(pid); err != nil {
		t.Fatalf("the live /proc: %v", err)
	}
}

// handProcMemory is the hand parser procMemoryIn replaced.
func handProcMemory(t *testing.T, status string) procMem {
	var m procMem
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if k == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
	}
	return m
}
