package bench

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// CPU use of a window known only afterwards (a re-replication's copies run
// from the first command delivered to the last copy completed, as the meta
// service saw them): a CPUSampler records the machine's busy and total CPU
// time from /proc/stat every interval, and Window finds the samples around
// the window.
//
// Figures are machine-wide (every process), in USER_HZ ticks of 10 ms
// (Linux's fixed clock-tick unit for /proc/stat), read through procfs
// (github.com/prometheus/procfs; see readProcStat for its cost). Processes given to Track
// are sampled too (utime + stime of /proc/<pid>/stat, same ticks): on a
// shared machine, what the measured processes used in the window, apart
// from everybody else.

// userHz is /proc/stat's tick rate (sysconf(_SC_CLK_TCK); 100 on Linux
// for every architecture Go supports).
const userHz = 100

// MaxCPUSamples bounds a sampler's memory (at 20 ms, over 30 minutes);
// later samples are not kept.
const MaxCPUSamples = 100_000

type cpuSample struct {
	at          time.Time
	busy, total uint64 // ticks, all CPUs
	// procs: the tracked processes' CPU seconds (utime + stime), summed;
	// procsOK false when there were none yet or one could not be read.
	procs    float64
	procsOK  bool
	ntracked int // the processes summed in procs
}

// CPUSampler samples /proc/stat in the background until Stop.
type CPUSampler struct {
	fs      procfs.FS // /proc
	mu      sync.Mutex
	samples []cpuSample
	tracked []int // PIDs sampled with the machine (Track)
	stop    chan struct{}
	done    chan struct{}
}

// StartCPUSampler reads /proc/stat now (an error if it cannot) and then
// every interval until Stop.
func StartCPUSampler(interval time.Duration) (*CPUSampler, error) {
	fs, err := procFS()
	if err != nil {
		return nil, fmt.Errorf("cpu sampler: %w", err)
	}
	return startCPUSampler(fs, interval)
}

func startCPUSampler(fs procfs.FS, interval time.Duration) (*CPUSampler, error) {
	s := &CPUSampler{fs: fs, stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.sample(); err != nil {
		return nil, err
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			// A sample that cannot be read is left out: the windows are
			// made of those read (the first, by start, is checked).
			case <-s.stop:
				_ = s.sample()
				return
			case <-t.C:
				_ = s.sample()
			}
		}
	}()
	return s, nil
}

// Stop takes a last sample and ends the sampling. Idempotent.
func (s *CPUSampler) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// Track adds processes to sample from the next sample on (PIDs <= 0 are
// skipped). Windows that start before they were tracked have no process
// figures.
func (s *CPUSampler) Track(procs []Proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range procs {
		if p.PID > 0 {
			s.tracked = append(s.tracked, p.PID)
		}
	}
	// Samples before this one did not count the new processes.
	for i := range s.samples {
		s.samples[i].procsOK = false
	}
}

func (s *CPUSampler) sample() error {
	busy, total, err := readProcStat(s.fs)
	if err != nil {
		return err
	}
	c := cpuSample{at: time.Now(), busy: busy, total: total}
	s.mu.Lock()
	pids := s.tracked
	s.mu.Unlock()
	c.procsOK, c.ntracked = len(pids) > 0, len(pids)
	for _, pid := range pids {
		v, err := procStatCPU(pid)
		if err != nil {
			c.procsOK = false
			break
		}
		c.procs += v
	}
	s.add(c)
	return nil
}

func (s *CPUSampler) add(c cpuSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.ntracked != len(s.tracked) {
		c.procsOK = false // Track ran while this sample was read
	}
	if len(s.samples) < MaxCPUSamples {
		s.samples = append(s.samples, c)
	}
}

// CPUWindow is the CPU use of the machine over a window.
type CPUWindow struct {
	// BusyCPUSeconds: CPU time spent outside idle and iowait, all CPUs.
	BusyCPUSeconds float64 `json:"busy_cpu_seconds"`
	// BusyFraction: BusyCPUSeconds over all CPUs' time (1: every CPU busy
	// throughout).
	BusyFraction float64 `json:"busy_fraction"`
	// Seconds: the time between the two samples used, which contains the
	// window asked for (by at most one interval each side).
	Seconds float64 `json:"seconds"`
	// ProcessCPUSeconds: the tracked processes' CPU time over the same
	// samples (absent when they were not tracked at both).
	ProcessCPUSeconds float64 `json:"process_cpu_seconds,omitempty"`
}

// Window returns the CPU use between the last sample at or before from and
// the first at or after to; false when the samples do not cover it.
func (s *CPUSampler) Window(from, to time.Time) (CPUWindow, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, b := -1, -1
	for i, c := range s.samples {
		if !c.at.After(from) {
			a = i
		}
		if b < 0 && !c.at.Before(to) {
			b = i
		}
	}
	if a < 0 || b < 0 || b <= a {
		return CPUWindow{}, false
	}
	sa, sb := s.samples[a], s.samples[b]
	busy, total := sb.busy-sa.busy, sb.total-sa.total
	if total == 0 || sb.busy < sa.busy || sb.total < sa.total {
		return CPUWindow{}, false
	}
	w := CPUWindow{BusyCPUSeconds: float64(busy) / userHz, BusyFraction: float64(busy) / float64(total),
		Seconds: sb.at.Sub(sa.at).Seconds()}
	if sa.procsOK && sb.procsOK && sb.procs >= sa.procs {
		w.ProcessCPUSeconds = roundTo(sb.procs-sa.procs, 1e3)
	}
	return w, true
}

// readProcStat sums the aggregate "cpu" line of fs's stat file: busy is
// user + nice + system + irq + softirq + steal, total adds idle and iowait
// (guest time is already inside user and nice). Every kernel Go runs on
// (3.2 and later) writes all of them. The figures are procfs's
// Stat().CPUTotal, seconds (ticks over USER_HZ, as float64) turned back
// into ticks: exact, a tick count below 2^52 surviving the division and
// the product (TestProcStatSameFigures compares them with the hand parser
// this replaced).
//
// Cost: procfs parses the whole file (every cpuN line with fmt.Sscanf, the
// intr line's counters) where the hand parser stopped at the first line.
// BenchmarkProcStat on a shared 2 vCPU VM (AMD EPYC, Linux, a 1.2 kB
// /proc/stat, load 10-15 from other work): procfs 55-63 µs of CPU a
// sample (cpu-ns/op; 94 allocations, 27 kB), the hand parser 19-20 µs
// (6 allocations); wall time 70-280 µs and 29-42 µs, stretched by the
// wait for a CPU. At one sample every 20 ms procfs costs 0.3 % of one
// core, under the 1 % we allow the sampler (the hand parser 0.1 %), so
// procfs it is. The cost grows with the machine: on a stat file of 64
// CPUs and 512 IRQs (the benchmark's 64cpus case) procfs takes 310-350 µs
// of CPU a sample (the hand parser 9 µs), 1.6-1.7 % of one core, which
// is 0.03 % of the 64 the sampler measures.
func readProcStat(fs procfs.FS) (busy, total uint64, err error) {
	st, err := fs.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("cpu sampler: %w", err)
	}
	c := st.CPUTotal
	ticks := func(seconds float64) uint64 { return uint64(math.Round(seconds * userHz)) }
	busy = ticks(c.User) + ticks(c.Nice) + ticks(c.System) + ticks(c.IRQ) + ticks(c.SoftIRQ) + ticks(c.Steal)
	total = busy + ticks(c.Idle) + ticks(c.Iowait)
	if total == 0 {
		// procfs leaves CPUTotal zero when the file has no aggregate cpu
		// line; no machine that has one spent no time at all.
		return 0, 0, errors.New("cpu sampler: stat has no aggregate cpu line (or nothing but zeros on it)")
	}
	return busy, total, nil
}
