package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReadProcStat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stat")
	os.WriteFile(p, []byte("cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\nintr 1 2 3\n"), 0o644)
	busy, total, err := readProcStat(p)
	if err != nil || busy != 100+5+50+3+2+1 || total != busy+1000+20 {
		t.Fatalf("busy %d total %d err %v", busy, total, err)
	}
	os.WriteFile(p, []byte("cpu0 1 2 3 4 5 6 7 8\n"), 0o644)
	if _, _, err := readProcStat(p); err == nil {
		t.Fatal("a file without the aggregate cpu line was accepted")
	}
	os.WriteFile(p, []byte("cpu 1 2 x 4 5 6 7 8\n"), 0o644)
	if _, _, err := readProcStat(p); err == nil {
		t.Fatal("a bad number was accepted")
	}
	s, err := StartCPUSampler(time.Hour)
	if err != nil {
		t.Fatalf("this machine's /proc/stat: %v", err)
	}
	s.Stop()
	s.Stop()
	if len(s.samples) != 2 {
		t.Fatalf("%d samples after a start and a stop, want 2", len(s.samples))
	}
}

func TestCPUSamplerWindow(t *testing.T) {
	s := &CPUSampler{}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, c := range []struct{ busy, total uint64 }{{0, 0}, {150, 200}, {250, 400}, {450, 600}} {
		s.add(cpuSample{at: t0.Add(time.Duration(i) * time.Second), busy: c.busy, total: c.total})
	}
	// [1.5 s, 2.5 s] is measured over the samples at 1 s and 3 s.
	w, ok := s.Window(t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond))
	if !ok || w.BusyCPUSeconds != 3 || w.BusyFraction != 0.75 || w.Seconds != 2 {
		t.Fatalf("window %+v %v, want 3 CPU-s, 0.75 busy over 2 s", w, ok)
	}
	// Exactly on samples.
	if w, ok := s.Window(t0, t0.Add(time.Second)); !ok || w.BusyCPUSeconds != 1.5 || w.Seconds != 1 {
		t.Fatalf("window %+v %v", w, ok)
	}
	// Not covered: before the first sample, after the last.
	if _, ok := s.Window(t0.Add(-time.Second), t0.Add(time.Second)); ok {
		t.Fatal("a window starting before the first sample was measured")
	}
	if _, ok := s.Window(t0.Add(time.Second), t0.Add(4*time.Second)); ok {
		t.Fatal("a window ending after the last sample was measured")
	}
}
