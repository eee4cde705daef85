package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// The precise reading (threads' schedstat) is used unless the ticks show
// more time than their resolution explains: a thread exited, and only the
// process's ticks kept its time.
func TestProcCPUSince(t *testing.T) {
	a := procCPU{ticks: 1.00, precise: 1.004, threads: 4, ok: true}
	for _, c := range []struct {
		name string
		b    procCPU
		want float64
	}{
		{"precise", procCPU{ticks: 1.02, precise: 1.0313, threads: 4, ok: true}, 0.0273},
		{"a thread exited", procCPU{ticks: 2.00, precise: 1.2, threads: 3, ok: true}, 1.0},
		{"no schedstat", procCPU{ticks: 1.5, precise: -1, ok: true}, 0.5},
	} {
		got, ok := c.b.since(a)
		if !ok || got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s: %v %v, want %v", c.name, got, ok, c.want)
		}
	}
	if _, ok := (procCPU{ticks: 0.5, precise: 0.5, ok: true}).since(a); ok {
		t.Error("a reading before the start (another process at that pid) accepted")
	}
	if _, ok := (procCPU{}).since(a); ok {
		t.Error("an unreadable process accepted")
	}
}

// This process's reading is precise: a CPU-bound loop of a few ms shows.
func TestProcCPUSecondsSelf(t *testing.T) {
	a, err := procCPUSeconds(os.Getpid())
	if err != nil || !a.ok || a.precise < 0 || a.threads < 1 {
		t.Fatalf("reading %+v, %v", a, err)
	}
	x := 0
	for i := range 20_000_000 {
		x += i ^ x
	}
	b, err := procCPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := b.since(a); !ok || d <= 0 {
		t.Fatalf("%d: %v s, %v after a busy loop", x&1, d, ok)
	}
}

func TestCPUMeter(t *testing.T) {
	self := os.Getpid()
	now := map[int]float64{self: 1, 100: 10, 200: 5}
	stat := func(pid int) (procCPU, error) {
		s, ok := now[pid]
		if !ok {
			return procCPU{}, errors.New("gone")
		}
		return procCPU{ticks: s, precise: s, threads: 4, ok: true}, nil
	}
	m := startCPU([]Proc{{"dn1", 100}, {"dn2", 200}, {"down", 0}}, stat)
	now[self], now[100] = 1.5, 12
	delete(now, 200) // dn2 exited during the loop
	u := m.Stop(1000, 2e9)
	if u.CPUSeconds != 2.5 || u.CPUUsPerOp != 2500 || u.CPUSecondsPerGB != 1.25 {
		t.Fatalf("use = %+v; want 2.5 s, 2500 µs/op, 1.25 s/GB", u)
	}
	if u.CPUByProcess[SelfProcName] != 0.5 || u.CPUByProcess["dn1"] != 2 || len(u.CPUByProcess) != 2 {
		t.Fatalf("by process = %v", u.CPUByProcess)
	}
	if !strings.Contains(u.CPUPartial, "dn2") {
		t.Fatalf("partial = %q; want dn2 named", u.CPUPartial)
	}
	sum := u.Add(CPUUse{CPUSeconds: 0.5, CPUByProcess: map[string]float64{"dn1": 0.5}}, 2000, 0)
	if sum.CPUSeconds != 3 || sum.CPUUsPerOp != 1500 || sum.CPUSecondsPerGB != 0 || sum.CPUByProcess["dn1"] != 2.5 {
		t.Fatalf("sum = %+v", sum)
	}
}

// A process started after the meter counts from zero: all its time so
// far is charged (a restart inside the measured window).
func TestCPUMeterAddStarted(t *testing.T) {
	self := os.Getpid()
	now := map[int]float64{self: 1}
	stat := func(pid int) (procCPU, error) {
		s, ok := now[pid]
		if !ok {
			return procCPU{}, errors.New("gone")
		}
		return procCPU{ticks: s, precise: s, threads: 4, ok: true}, nil
	}
	m := startCPU(nil, stat)
	now[300] = 3 // started, and busy, before AddStarted
	m.AddStarted([]Proc{{"dn3", 300}, {"down", 0}})
	now[self], now[300] = 1.5, 4
	u := m.Stop(1, 1e9)
	if u.CPUSeconds != 4.5 || u.CPUByProcess["dn3"] != 4 || u.CPUByProcess[SelfProcName] != 0.5 || len(u.CPUByProcess) != 2 {
		t.Fatalf("use = %+v; want dn3's 4 s from its start and 0.5 s of this process", u)
	}
}

// The loop measures its own process: a CPU-bound loop reports CPU time,
// inlined in the JSON and shown in the table.
// loopSink holds TestLoopReportsCPU's busy loop's result.
var loopSink int

func TestLoopReportsCPU(t *testing.T) {
	st, err := Loop(context.Background(), LoopConfig{Workers: 1, MaxOps: 200, Progress: nopWriter{}},
		func(context.Context, int, int64) (int, error) {
			x := 0
			for i := range 2_000_000 {
				x += i ^ x
			}
			loopSink = x // kept, so that the loop is not optimized away
			return 1, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if st.CPU == nil || st.CPU.CPUByProcess[SelfProcName] <= 0 {
		t.Fatalf("loop CPU = %+v; want this process's time", st.CPU)
	}
	r := st.Result("x")
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cpu_seconds", "cpu_us_per_op", "cpu_seconds_per_gb", "cpu_seconds_by_process"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %s: %s", k, buf.String())
		}
	}
	buf.Reset()
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "CPU s/GB") || !strings.Contains(buf.String(), "cpu seconds by process: bench=") {
		t.Errorf("table lacks the CPU figures:\n%s", buf.String())
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
