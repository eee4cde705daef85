package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

func TestReadProcStat(t *testing.T) {
	root := t.TempDir()
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	write := func(stat string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\nintr 1 2 3\n")
	busy, total, err := readProcStat(fs)
	if err != nil || busy != 100+5+50+3+2+1 || total != busy+1000+20 {
		t.Fatalf("busy %d total %d err %v", busy, total, err)
	}
	write("cpu0 1 2 3 4 5 6 7 8\n")
	if _, _, err := readProcStat(fs); err == nil {
		t.Fatal("a file without the aggregate cpu line was accepted")
	}
	write("cpu 1 2 x 4 5 6 7 8\n")
	if _, _, err := readProcStat(fs); err == nil {
		t.Fatal("a bad number was accepted")
	}
	if err := os.Remove(filepath.Join(root, "stat")); err != nil {
		t.Fatal(err)
	}
	if _, err := startCPUSampler(fs, time.Hour); err == nil {
		t.Fatal("a sampler started without a stat file")
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
	if w.ProcessCPUSeconds != 0 {
		t.Fatalf("process CPU %v without tracked processes", w.ProcessCPUSeconds)
	}
	// Not covered: before the first sample, after the last.
	if _, ok := s.Window(t0.Add(-time.Second), t0.Add(time.Second)); ok {
		t.Fatal("a window starting before the first sample was measured")
	}
	if _, ok := s.Window(t0.Add(time.Second), t0.Add(4*time.Second)); ok {
		t.Fatal("a window ending after the last sample was measured")
	}
}

// Tracked processes are summed from the sample after Track; a window that
// starts before has no process figure.
func TestCPUSamplerTrack(t *testing.T) {
	s, err := StartCPUSampler(time.Hour)
	if err != nil {
		t.Fatalf("this machine's /proc/stat: %v", err)
	}
	defer s.Stop()
	t0 := time.Now()
	s.Track([]Proc{{Name: "self", PID: os.Getpid()}, {Name: "down", PID: 0}})
	if err := s.sample(); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	x := 0
	for i := range 50_000_000 { // about 0.05 CPU-s or more: ticks of 10 ms
		x += i ^ x
	}
	t2 := time.Now()
	s.Stop() // a last sample after t2
	w, ok := s.Window(t1, t2)
	if !ok || w.ProcessCPUSeconds <= 0 || x == -1 {
		t.Fatalf("window after Track: %+v %v; want this process's CPU time", w, ok)
	}
	if w, ok := s.Window(t0, t2); !ok || w.ProcessCPUSeconds != 0 {
		t.Fatalf("window from before Track: %+v %v; want no process figure", w, ok)
	}
}

// Each limit reports the CPU its passes measured, summed, and per GB.
func TestRepeatRateCPU(t *testing.T) {
	r, err := repeatRate(time.Hour, func() (Rate, error) {
		r := rateOf(5e8, time.Second)
		r.CPUSeconds = 0.25
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != MaxLimitPasses*5e8 || r.CPUSeconds != MaxLimitPasses*0.25 || r.CPUSecondsPerGB != 0.5 {
		t.Fatalf("rate %+v; want %d passes of 0.25 CPU-s each, 0.5 CPU-s/GB", r, MaxLimitPasses)
	}
}

// The three limits measure this process's CPU during their timed part.
func TestCopyLimitsCPU(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.blk")
	if err := os.WriteFile(p, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := MeasureCopyLimits(context.Background(), dir, []string{p}, 8<<20, 0, SocketTuning{})
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]Rate{"disk_read": l.DiskRead, "disk_write": l.DiskWrite, "loopback": l.Loopback} {
		if r.Bytes != 8<<20 || r.CPUSeconds <= 0 || r.CPUSecondsPerGB <= 0 {
			t.Errorf("%s: %+v; want 8 MiB and this process's CPU time", name, r)
		}
	}
}
