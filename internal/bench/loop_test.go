package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func quiet(n int, d time.Duration, maxOps int64) LoopConfig {
	return LoopConfig{Workers: n, Duration: d, MaxOps: maxOps, Progress: io.Discard}
}

func TestLoopStopsAtMaxOps(t *testing.T) {
	var calls atomic.Int64
	st, err := Loop(context.Background(), quiet(8, 0, 1000), func(_ context.Context, w int, op int64) (int, error) {
		calls.Add(1)
		return 10, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Ops != 1000 || calls.Load() != 1000 {
		t.Errorf("ops %d, calls %d, want 1000", st.Ops, calls.Load())
	}
	if st.Bytes != 10000 {
		t.Errorf("bytes %d, want 10000", st.Bytes)
	}
	if st.Latency.Count() != st.Ops {
		t.Errorf("latency count %d != ops %d", st.Latency.Count(), st.Ops)
	}
	if st.Workers != 8 || st.Elapsed <= 0 || st.OpsPerS() <= 0 || st.MBPerS() <= 0 {
		t.Errorf("stats %+v", st)
	}
	r := st.Result("x")
	if r.Ops != 1000 || r.Bytes != 10000 || r.Scenario != "x" {
		t.Errorf("result %+v", r)
	}
}

func TestLoopPassesPerWorkerOpSequence(t *testing.T) {
	const workers = 4
	var next [workers]int64
	var bad atomic.Bool
	_, err := Loop(context.Background(), quiet(workers, 0, 400), func(_ context.Context, w int, op int64) (int, error) {
		if op != next[w] { // next[w] is touched by worker w only
			bad.Store(true)
		}
		next[w]++
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Load() {
		t.Error("op numbers are not 0, 1, 2, ... per worker")
	}
}

func TestLoopStopsAtDuration(t *testing.T) {
	// Terminates with no op bound: the only way out is the duration.
	st, err := Loop(context.Background(), quiet(2, time.Millisecond, 0), func(context.Context, int, int64) (int, error) {
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != st.Ops || st.Latency.Count() != st.Ops {
		t.Errorf("inconsistent stats: ops %d bytes %d latency count %d", st.Ops, st.Bytes, st.Latency.Count())
	}
}

var errBoom = errors.New("boom")

func TestLoopFirstErrorCancelsAll(t *testing.T) {
	st, err := Loop(context.Background(), quiet(4, 0, 1<<40), func(ctx context.Context, w int, op int64) (int, error) {
		if w == 0 && op == 10 {
			return 0, errBoom
		}
		if w != 0 {
			// Other workers block until the failure cancels them; without
			// cancellation this test would never end.
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return 1, nil
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if !strings.Contains(err.Error(), "worker 0 op 10") {
		t.Errorf("error %q lacks worker/op context", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("error %q: later cancellations must not replace the first error", err)
	}
	if st.Ops != 10 {
		t.Errorf("ops %d, want the 10 before the failure", st.Ops)
	}
}

func TestLoopCallerCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := Loop(ctx, quiet(2, 0, 1<<40), func(_ context.Context, w int, op int64) (int, error) {
		if op == 5 {
			cancel()
		}
		return 1, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if st.Ops < 6 {
		t.Errorf("ops %d: partial stats should be returned", st.Ops)
	}
}

func TestLoopRejectsBadConfig(t *testing.T) {
	fn := func(context.Context, int, int64) (int, error) { return 0, nil }
	for _, cfg := range []LoopConfig{
		quiet(0, time.Second, 0),
		quiet(MaxWorkers+1, time.Second, 0),
		quiet(1, 0, 0),
		quiet(1, -1, 10),
		quiet(1, time.Second, -1),
	} {
		if _, err := Loop(context.Background(), cfg, fn); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestRunWorkers(t *testing.T) {
	st, err := RunWorkers(context.Background(), 3, 0, 30, func(context.Context, int, int64) (int, error) { return 2, nil })
	if err != nil || st.Ops != 30 || st.Bytes != 60 {
		t.Errorf("RunWorkers: %+v, %v", st, err)
	}
}

func TestProgressLines(t *testing.T) {
	workers := []*worker{{id: 0}, {id: 1}}
	workers[0].ops.Store(30)
	workers[0].bytes.Store(3e6)
	workers[1].ops.Store(20)
	workers[1].bytes.Store(2e6)
	tick := make(chan time.Time)
	done := make(chan struct{})
	var buf bytes.Buffer
	finished := make(chan struct{})
	start := time.Unix(1000, 0)
	go func() {
		runProgress(&buf, "chunk-write", workers, start, tick, done)
		close(finished)
	}()
	tick <- start.Add(2 * time.Second)
	close(done)
	<-finished
	out := buf.String()
	for _, want := range []string{"chunk-write", "2.0s", "50 ops", "25 ops/s", "2.50 MB/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "\n") {
		t.Errorf("progress %q must stay on one line", out)
	}
	if !strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("progress %q does not erase its line at the end", out)
	}
}

// Stats.Add sums two loops: ops, bytes and time add up, the latencies
// merge, the CPU adds with its rates recomputed; the zero Stats adds
// nothing.
func TestStatsAdd(t *testing.T) {
	mk := func(ops, bytes int64, d time.Duration, cpu float64) Stats {
		l := NewLatency()
		for range ops {
			l.Record(d / time.Duration(ops))
		}
		return Stats{Workers: 2, Ops: ops, Bytes: bytes, Elapsed: d, Latency: l, CPU: &CPUUse{CPUSeconds: cpu, CPUByProcess: map[string]float64{"bench": cpu}}}
	}
	a, b := mk(10, 1000, time.Second, 0.5), mk(30, 3000, 3*time.Second, 1.5)
	sum := Stats{}.Add(a).Add(b)
	if sum.Ops != 40 || sum.Bytes != 4000 || sum.Elapsed != 4*time.Second || sum.Latency.Count() != 40 {
		t.Fatalf("sum %+v (latency count %d)", sum, sum.Latency.Count())
	}
	if sum.CPU == nil || sum.CPU.CPUSeconds != 2 || sum.CPU.CPUUsPerOp != 50000 || sum.CPU.CPUByProcess["bench"] != 2 {
		t.Fatalf("cpu %+v", sum.CPU)
	}
	if a.Latency.Count() != 10 {
		t.Fatalf("Add changed its operand: %d", a.Latency.Count())
	}
	if got := a.Add(Stats{Ops: 1, Elapsed: time.Second}); got.CPU != nil {
		t.Fatalf("cpu of a sum with an unmeasured loop: %+v, want nil", got.CPU)
	}
}
