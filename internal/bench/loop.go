package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of a load loop.
const (
	// MaxWorkers bounds the number of worker goroutines of one loop.
	MaxWorkers = 4096
	// progressInterval is how often the progress line is refreshed.
	progressInterval = time.Second
)

// WorkerFunc performs operation op (0, 1, 2, ... per worker) of worker
// worker and returns the payload bytes it moved. ctx is cancelled when
// another worker fails or the caller cancels; it is NOT cancelled when the
// duration or op bound is reached, so the operation in flight completes.
type WorkerFunc func(ctx context.Context, worker int, op int64) (bytes int, err error)

// LoopConfig bounds a load loop. At least one of Duration and MaxOps must be
// positive; the loop stops at whichever bound is reached first.
type LoopConfig struct {
	Workers  int           // goroutines, 1..MaxWorkers
	Duration time.Duration // 0: no time bound
	MaxOps   int64         // total over all workers; 0: no count bound
	// Label prefixes the progress line.
	Label string
	// Progress receives a one-line progress update at most once a second.
	// nil means TerminalProgress() (stderr when it is a terminal, else
	// nothing); io.Discard disables it.
	Progress io.Writer
	// Processes, when set, names the processes the bench started (besides
	// this one, always measured) whose CPU time is charged to the loop;
	// called at its start. Stats.CPU is measured in every case.
	Processes func() []Proc
}

// Stats is the outcome of a load loop.
type Stats struct {
	Workers int
	Ops     int64 // operations that succeeded
	Bytes   int64 // payload bytes of those operations
	Elapsed time.Duration
	Latency *Latency // merged over all workers; Count() == Ops
	// CPU: the CPU time of this process and of LoopConfig.Processes
	// during the loop (nil: not measured).
	CPU *CPUUse
}

// Add sums two loops of one measurement (rounds, phases): operations,
// bytes and elapsed time add up, the latencies merge, the CPU adds (nil
// when either is unmeasured). The zero Stats is the identity.
func (s Stats) Add(o Stats) Stats {
	if s.Ops == 0 && s.Elapsed == 0 && s.Latency == nil && s.CPU == nil {
		return o
	}
	out := Stats{Workers: max(s.Workers, o.Workers), Ops: s.Ops + o.Ops, Bytes: s.Bytes + o.Bytes, Elapsed: s.Elapsed + o.Elapsed, Latency: NewLatency()}
	for _, l := range []*Latency{s.Latency, o.Latency} {
		if l != nil {
			out.Latency.Merge(l)
		}
	}
	if s.CPU != nil && o.CPU != nil {
		c := s.CPU.Add(*o.CPU, out.Ops, out.Bytes)
		out.CPU = &c
	}
	return out
}

// Seconds returns the elapsed wall time in seconds.
func (s Stats) Seconds() float64 { return s.Elapsed.Seconds() }

// OpsPerS returns operations per second; 0 for an empty run.
func (s Stats) OpsPerS() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// MBPerS returns payload throughput in MB/s, MB = 10^6 bytes.
func (s Stats) MBPerS() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Bytes) / 1e6 / s.Elapsed.Seconds()
}

// Result turns s into a Result for scenario.
func (s Stats) Result(scenario string) Result {
	lat := s.Latency
	if lat == nil {
		lat = NewLatency()
	}
	return Result{
		Scenario:  scenario,
		Ops:       s.Ops,
		Seconds:   roundTo(s.Seconds(), 1e6),
		OpsPerS:   roundTo(s.OpsPerS(), 1e3),
		Bytes:     s.Bytes,
		MBPerS:    roundTo(s.MBPerS(), 1e3),
		LatencyUs: lat.Summary(),
		CPUUse:    s.CPU,
	}
}

// roundTo rounds x to 1/scale (scale 1e3: three decimals); NaN and Inf become 0.
func roundTo(x, scale float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*scale) / scale
}

// RunWorkers runs fn on n goroutines until duration has passed or maxOps
// operations (in total) have been issued, whichever comes first, timing each
// call into a per-worker histogram merged at the end. The first error stops
// all workers (their ctx is cancelled) and is returned, wrapped with the
// worker and op; Stats are returned in every case. Progress goes to stderr
// when it is a terminal.
func RunWorkers(ctx context.Context, n int, duration time.Duration, maxOps int64, fn WorkerFunc) (Stats, error) {
	return Loop(ctx, LoopConfig{Workers: n, Duration: duration, MaxOps: maxOps}, fn)
}

// Loop is RunWorkers with a progress label and destination.
func Loop(ctx context.Context, cfg LoopConfig, fn WorkerFunc) (Stats, error) {
	return runLoop(ctx, cfg, func(ctx context.Context, w *worker, op int64) (int, error) {
		start := time.Now()
		n, err := fn(ctx, w.id, op)
		if err == nil {
			w.lat.Record(time.Since(start))
		}
		return n, err
	}, nil)
}

// worker is the per-goroutine state of a loop. ops and bytes are written by
// the worker only and read by the progress printer; the padding keeps
// workers' counters on separate cache lines.
type worker struct {
	id    int
	lat   *Latency
	ops   atomic.Int64
	bytes atomic.Int64
	_     [112]byte
}

// body performs one operation and records its latency into w.lat itself
// (self-timed, so that an operation may be completed later, e.g. by a
// group sync). flush, when non-nil, runs once per worker after its last
// operation, to complete what is pending.
type body func(ctx context.Context, w *worker, op int64) (int, error)
type flushFunc func(ctx context.Context, w *worker) error

// check says what is wrong with cfg's workers and bounds (nil: nothing):
// a loop refuses them, and so does a bench that sets up per worker
// before its loop, ahead of that work.
func (cfg LoopConfig) check() error {
	if cfg.Workers < 1 || cfg.Workers > MaxWorkers {
		return fmt.Errorf("%d workers, want 1..%d", cfg.Workers, MaxWorkers)
	}
	if cfg.Duration < 0 || cfg.MaxOps < 0 {
		return fmt.Errorf("negative bound (duration %v, max ops %d)", cfg.Duration, cfg.MaxOps)
	}
	if cfg.Duration == 0 && cfg.MaxOps == 0 {
		return errors.New("unbounded loop: set a duration, a maximum number of ops, or both")
	}
	return nil
}

func runLoop(ctx context.Context, cfg LoopConfig, do body, flush flushFunc) (Stats, error) {
	if err := cfg.check(); err != nil {
		return Stats{}, fmt.Errorf("bench: %w", err)
	}
	progress := cfg.Progress
	if progress == nil {
		progress = TerminalProgress()
	}

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stop atomic.Bool
	stopOnCancel := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer stopOnCancel()
	if cfg.Duration > 0 {
		timer := time.AfterFunc(cfg.Duration, func() { stop.Store(true) })
		defer timer.Stop()
	}

	var (
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		stop.Store(true)
		cancel()
	}

	workers := make([]*worker, cfg.Workers)
	for i := range workers {
		workers[i] = &worker{id: i, lat: NewLatency()}
	}
	var claimed atomic.Int64 // ops issued so far, against MaxOps
	var procs []Proc
	if cfg.Processes != nil {
		procs = cfg.Processes()
	}
	cpu := StartCPU(procs)
	start := time.Now()
	var pw *progressWriter
	if progress != io.Discard {
		pw = startProgress(progress, cfg.Label, workers, start, progressInterval)
	}

	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bounded by MaxOps (when set) and by stop, which the duration
			// timer, the first error or the caller's cancellation sets.
			for op := int64(0); cfg.MaxOps == 0 || op < cfg.MaxOps; op++ {
				if stop.Load() {
					break
				}
				if cfg.MaxOps > 0 && claimed.Add(1) > cfg.MaxOps {
					break
				}
				n, err := do(ctx, w, op)
				if err != nil {
					fail(fmt.Errorf("bench: worker %d op %d: %w", w.id, op, err))
					break
				}
				w.ops.Add(1)
				w.bytes.Add(int64(n))
			}
			if flush != nil {
				if err := flush(ctx, w); err != nil {
					fail(fmt.Errorf("bench: worker %d: %w", w.id, err))
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if pw != nil {
		pw.stop()
	}

	st := Stats{Workers: cfg.Workers, Elapsed: elapsed, Latency: NewLatency()}
	for _, w := range workers {
		st.Ops += w.ops.Load()
		st.Bytes += w.bytes.Load()
		st.Latency.Merge(w.lat)
	}
	u := cpu.Stop(st.Ops, st.Bytes)
	st.CPU = &u
	if firstErr != nil {
		return st, firstErr
	}
	if err := parent.Err(); err != nil {
		return st, fmt.Errorf("bench: interrupted after %d ops: %w", st.Ops, err)
	}
	return st, nil
}
