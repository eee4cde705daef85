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

func TestParseProcStatCPU(t *testing.T) {
	// A command name with spaces and a ')' of its own: fields are counted
	// after the last ')'. utime 250, stime 50 ticks = 3 s.
	line := "4242 (spin dle) x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 100 0 0\n"
	got, err := parseProcStatCPU(line)
	if err != nil || got != 3 {
		t.Fatalf("parseProcStatCPU = %v, %v; want 3 s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u 5 0"} {
		if _, err := parseProcStatCPU(bad); err == nil {
			t.Errorf("parseProcStatCPU(%q): no error", bad)
		}
	}
}

func TestCPUMeter(t *testing.T) {
	self := os.Getpid()
	now := map[int]float64{self: 1, 100: 10, 200: 5}
	stat := func(pid int) (float64, error) {
		s, ok := now[pid]
		if !ok {
			return 0, errors.New("gone")
		}
		return s, nil
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

// The loop measures its own process: a CPU-bound loop reports CPU time,
// inlined in the JSON and shown in the table.
func TestLoopReportsCPU(t *testing.T) {
	st, err := Loop(context.Background(), LoopConfig{Workers: 1, MaxOps: 200, Progress: nopWriter{}},
		func(context.Context, int, int64) (int, error) {
			x := 0
			for i := range 2_000_000 {
				x += i ^ x
			}
			return 1 + x&0, nil
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
