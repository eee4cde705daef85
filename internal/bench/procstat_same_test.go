package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// TestProcStatSameFigures: readProcStat (procfs) gives the busy and total
// ticks the hand parser it replaced (handProcStat) gave. On the same
// bytes, this machine's /proc/stat copied once, they are equal. On the
// live /proc/stat, where the counters move between two reads, procfs's
// reading lies between the hand parser's readings just before and just
// after it.
func TestProcStatSameFigures(t *testing.T) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	copied, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	busy, total, err := readProcStat(copied)
	if err != nil {
		t.Fatal(err)
	}
	wantBusy, wantTotal, err := handProcStat(filepath.Join(root, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	if busy != wantBusy || total != wantTotal || busy == 0 || total <= busy {
		t.Fatalf("the same bytes: procfs busy %d total %d, hand parser busy %d total %d (ticks)", busy, total, wantBusy, wantTotal)
	}

	live, err := procFS()
	if err != nil {
		t.Fatal(err)
	}
	b0, t0, err := handProcStat("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	busy, total, err = readProcStat(live)
	if err != nil {
		t.Fatal(err)
	}
	b1, t1, err := handProcStat("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	if busy < b0 || busy > b1 {
		t.Fatalf("live: procfs busy %d ticks, hand parser %d before and %d after", busy, b0, b1)
	}
	if t0 > t1 {
		// idle + iowait may step back on some kernels (iowait's
		// accounting); the sampler's Window allows for it, and here
		// there is no interval to compare with.
		t.Logf("live: total went back from %d to %d ticks between the hand parser's reads", t0, t1)
	} else if total < t0 || total > t1 {
		t.Fatalf("live: procfs total %d ticks, hand parser %d before and %d after", total, t0, t1)
	}
}

// TestHandProcStat checks the reference parser of the test above.
func TestHandProcStat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stat")
	for _, c := range []struct {
		stat        string
		busy, total uint64
		ok          bool
	}{
		{"cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\nintr 1 2 3\n", 161, 1181, true},
		{"cpu0 1 2 3 4 5 6 7 8\n", 0, 0, false},
		{"cpu 1 2 x 4 5 6 7 8\n", 0, 0, false},
		{"cpu 1 2 3 4 5 6 7\n", 0, 0, false},
	} {
		if err := os.WriteFile(p, []byte(c.stat), 0o644); err != nil {
			t.Fatal(err)
		}
		busy, total, err := handProcStat(p)
		if (err == nil) != c.ok || busy != c.busy || total != c.total {
			t.Errorf("%q: busy %d total %d err %v; want %d %d ok %v", c.stat, busy, total, err, c.busy, c.total, c.ok)
		}
	}
}

// handProcStat is the hand parser readProcStat replaced: the aggregate
// "cpu" line's busy (user + nice + system + irq + softirq + steal) and
// total (busy + idle + iowait) ticks.
func handProcStat(path string) (busy, total uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "cpu" {
			continue
		}
		if len(fields) < 9 {
			return 0, 0, fmt.Errorf("%s: %d fields on the cpu line, want at least 8 values", path, len(fields))
		}
		var v [8]uint64 // user nice system idle iowait irq softirq steal
		for i := range v {
			if v[i], err = strconv.ParseUint(fields[i+1], 10, 64); err != nil {
				return 0, 0, fmt.Errorf("%s: %w", path, err)
			}
		}
		busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		return busy, busy + v[3] + v[4], nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	return 0, 0, errors.New(path + " has no cpu line")
}

// BenchmarkProcStat: the cost of one CPUSampler sample of the machine,
// procfs (readProcStat) against the hand parser it replaced, on the live
// /proc/stat and on a stat file of 64 CPUs and 512 IRQs (a larger
// machine's, parsing only). Besides ns/op (wall time, which a shared
// machine inflates with the time waiting for a CPU) it reports
// cpu-ns/op, this process's user + system time (getrusage, GC included)
// per sample. The figures are in readProcStat's comment.
func BenchmarkProcStat(b *testing.B) {
	live, err := procFS()
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	var sb strings.Builder
	sb.WriteString("cpu  8627548 0 2567616 4716960 82272 0 76512 23680 0 0\n")
	for i := range 64 {
		fmt.Fprintf(&sb, "cpu%d 134805 0 40119 73702 1285 0 1195 370 0 0\n", i)
	}
	sb.WriteString("intr 123456789")
	for i := range 512 {
		fmt.Fprintf(&sb, " %d", i*1000)
	}
	sb.WriteString("\nctxt 123456789\nbtime 1760000000\nprocesses 24318\nprocs_running 3\nprocs_blocked 0\nsoftirq 1 2 3 4 5 6 7 8 9 10 11\n")
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	big, err := procfs.NewFS(root)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		fs   procfs.FS
		path string
	}{{"live", live, "/proc/stat"}, {"64cpus", big, filepath.Join(root, "stat")}} {
		b.Run(c.name+"/procfs", func(b *testing.B) {
			defer reportCPUPerOp(b)()
			for b.Loop() {
				if _, _, err := readProcStat(c.fs); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/hand", func(b *testing.B) {
			defer reportCPUPerOp(b)()
			for b.Loop() {
				if _, _, err := handProcStat(c.path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportCPUPerOp reports allocations and, when the returned function runs
// after the loop, the process's CPU time per op as cpu-ns/op.
func reportCPUPerOp(b *testing.B) func() {
	b.ReportAllocs()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
