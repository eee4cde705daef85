package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestProcfsSameFigures: procfs (procStatCPU, procCPUSeconds) gives the
// figures the hand parsers it replaced gave, on the live /proc of this
// process: utime + stime of /proc/<pid>/stat in seconds, and the first
// field of schedstat. The figures move while the test runs (the process
// is charged CPU between two reads), so procfs's reading is compared with
// the hand parser's readings just before and just after it: it must lie
// between them (the schedstat of the main thread: at or above the one
// before).
func TestProcfsSameFigures(t *testing.T) {
	pid := os.Getpid()
	read := func() float64 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		v, err := handProcStatCPU(string(b))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	x := 0
	for i := range 20_000_000 { // some ticks, so that the figure is not 0
		x += i ^ x
	}
	before := read()
	got, err := procStatCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	after := read()
	if before <= 0 || got < before || got > after {
		t.Fatalf("%d: procfs utime+stime %v s, hand parser %v s before and %v s after", x&1, got, before, after)
	}

	// The main thread's schedstat: the hand parser's figure, then procfs's.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		t.Skipf("no schedstat here: %v", err)
	}
	want, err := handSchedstat(string(b))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := procFS()
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := p.Schedstat()
	if err != nil {
		t.Fatal(err)
	}
	if ss.RunningNanoseconds < want {
		t.Fatalf("procfs schedstat %d ns, below the hand parser's earlier %d ns", ss.RunningNanoseconds, want)
	}
	r, err := procCPUSeconds(pid)
	if err != nil || r.precise < 0 || r.threads < 1 {
		t.Fatalf("procCPUSeconds = %+v, %v: threads' schedstat not read", r, err)
	}
}

// TestHandProcStatCPU checks the reference parser of the test above.
func TestHandProcStatCPU(t *testing.T) {
	// A command name with spaces and a ')' of its own: fields are counted
	// after the last ')'. utime 250, stime 50 ticks = 3 s.
	line := "4242 (spin dle) x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 100 0 0\n"
	got, err := handProcStatCPU(line)
	if err != nil || got != 3 {
		t.Fatalf("handProcStatCPU = %v, %v; want 3 s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u 5 0"} {
		if _, err := handProcStatCPU(bad); err == nil {
			t.Errorf("handProcStatCPU(%q): no error", bad)
		}
	}
	if v, err := handSchedstat("216732393 206464336 894\n"); err != nil || v != 216732393 {
		t.Errorf("handSchedstat = %v, %v", v, err)
	}
}

// handProcStatCPU is the hand parser procStatCPU replaced: (utime +
// stime) / USER_HZ of one /proc/<pid>/stat line, fields counted after the
// command name's last ')' (state is field 3, utime 14, stime 15).
func handProcStatCPU(line string) (float64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name: %.60q", line)
	}
	f := strings.Fields(line[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want > %d", len(f), stime)
	}
	u, err := strconv.ParseUint(f[utime], 10, 64)
	if err != nil {
		return 0, err
	}
	s, err := strconv.ParseUint(f[stime], 10, 64)
	if err != nil {
		return 0, err
	}
	return float64(u+s) / userHz, nil
}

// handSchedstat is the hand parser of a schedstat line procfs replaced:
// its first field, the task's time on a CPU in nanoseconds.
func handSchedstat(line string) (uint64, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0, fmt.Errorf("empty schedstat line")
	}
	return strconv.ParseUint(f[0], 10, 64)
}
