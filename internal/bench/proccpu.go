package bench

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/procfs"
)

// CPU charged to Spindle: every bench reports the CPU time (user + system,
// all threads) that Spindle's processes used during its measured loop —
// this process (the load generator, and whatever the bench runs in it: an
// embedded meta service, the engine of --local) plus every process the
// bench started (datanodes, a follower) — read from /proc/<pid>/stat at
// the start and at the end of the loop. On a shared machine this is the
// figure that holds still when the throughput does not.
//
// Two readings of each process: the sum of its threads' time on a CPU in
// nanoseconds (/proc/<pid>/task/*/schedstat, first field), precise but
// blind to threads that exited meanwhile, and utime + stime of
// /proc/<pid>/stat, which keeps exited threads' time but counts in USER_HZ
// ticks (10 ms). The precise figure is used unless the ticks say more
// time went by than their resolution explains (a thread exited). A
// process that was not running at one end of the loop (restarted,
// killed) is left out of the total and named in CPUPartial.

// Proc is a process whose CPU a bench charges to Spindle.
type Proc struct {
	Name string
	PID  int
}

// SelfProcName names this process in CPUByProcess.
const SelfProcName = "bench"

// CPUUse is the CPU time of a measured loop. Its fields are inlined in
// Result's JSON (cpu_seconds, cpu_us_per_op, cpu_seconds_per_gb, ...).
type CPUUse struct {
	// CPUSeconds: user + system time of every process measured.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUUsPerOp: CPUSeconds per operation of the loop, in µs.
	CPUUsPerOp float64 `json:"cpu_us_per_op"`
	// CPUSecondsPerGB: CPUSeconds per 10^9 payload bytes (absent when the
	// loop moved no bytes).
	CPUSecondsPerGB float64 `json:"cpu_seconds_per_gb,omitempty"`
	// CPUByProcess: each process's share, by name ("bench" is this one).
	CPUByProcess map[string]float64 `json:"cpu_seconds_by_process,omitempty"`
	// CPUPartial names the processes that could not be read at one end
	// of the loop (left out of CPUSeconds); empty when all were.
	CPUPartial string `json:"cpu_partial,omitempty"`
}

// CPUMeter measures the CPU time of a set of processes between Start and
// Stop. Not safe for concurrent use.
type CPUMeter struct {
	procs []Proc
	start []procCPU // ok false: could not be read
	stat  func(pid int) (procCPU, error)
}

// procCPU is one reading of a process: ticks from /proc/<pid>/stat and
// the sum of its threads' schedstat (both in seconds), with the number of
// threads summed.
type procCPU struct {
	ticks, precise float64
	threads        int
	ok             bool
}

// since returns the CPU seconds from a to b.
func (b procCPU) since(a procCPU) (float64, bool) {
	if !a.ok || !b.ok || b.ticks < a.ticks {
		return 0, false
	}
	dt, dp := b.ticks-a.ticks, b.precise-a.precise
	if a.precise < 0 || b.precise < 0 {
		return dt, true // no schedstat
	}
	// Each reading of ticks is up to one tick short per thread.
	slack := float64(max(a.threads, b.threads)+1) / userHz
	if dp < 0 || dt > dp+slack {
		return dt, true // a thread exited: only the ticks kept its time
	}
	return dp, true
}

// StartCPU reads the CPU time of this process and of procs now. procs with
// a PID <= 0 are skipped (a member not running).
func StartCPU(procs []Proc) *CPUMeter {
	return startCPU(procs, procCPUSeconds)
}

func startCPU(procs []Proc, stat func(int) (procCPU, error)) *CPUMeter {
	m := &CPUMeter{stat: stat}
	m.procs = append(m.procs, Proc{Name: SelfProcName, PID: os.Getpid()})
	for _, p := range procs {
		if p.PID > 0 && p.PID != os.Getpid() {
			m.procs = append(m.procs, p)
		}
	}
	m.start = make([]procCPU, len(m.procs))
	for i, p := range m.procs {
		m.start[i], _ = m.stat(p.PID)
	}
	return m
}

// AddStarted adds processes started after StartCPU (and after nothing
// else of theirs ran): their whole CPU time so far counts from zero, so a
// window that opens before their start (a cluster restart) charges them
// everything they did in it. procs with a PID <= 0 are skipped.
func (m *CPUMeter) AddStarted(procs []Proc) {
	for _, p := range procs {
		if p.PID > 0 && p.PID != os.Getpid() {
			m.procs = append(m.procs, p)
			m.start = append(m.start, procCPU{ok: true})
		}
	}
}

// Stop reads the processes again and returns the CPU time used since
// StartCPU, per operation (ops) and per GB (bytes).
func (m *CPUMeter) Stop(ops, bytes int64) CPUUse {
	u := CPUUse{CPUByProcess: make(map[string]float64, len(m.procs))}
	var missed []string
	for i, p := range m.procs {
		end, err := m.stat(p.PID)
		d, ok := end.since(m.start[i])
		if err != nil || !ok {
			missed = append(missed, p.Name)
			continue
		}
		u.CPUByProcess[p.Name] = roundTo(d, 1e3)
		u.CPUSeconds += d
	}
	if len(missed) > 0 {
		slices.Sort(missed)
		u.CPUPartial = "not measured (not running at the start or the end of the loop): " + strings.Join(missed, ", ")
	}
	u.setRates(ops, bytes)
	return u
}

func (u *CPUUse) setRates(ops, bytes int64) {
	u.CPUSeconds = roundTo(u.CPUSeconds, 1e3)
	u.CPUUsPerOp, u.CPUSecondsPerGB = 0, 0
	if ops > 0 {
		u.CPUUsPerOp = roundTo(u.CPUSeconds*1e6/float64(ops), 1e2)
	}
	if bytes > 0 {
		u.CPUSecondsPerGB = roundTo(u.CPUSeconds*1e9/float64(bytes), 1e3)
	}
}

// Add sums two measurements (two loops of one bench, e.g. its phases);
// the rates are recomputed for ops and bytes, the totals of both.
func (u CPUUse) Add(v CPUUse, ops, bytes int64) CPUUse {
	out := CPUUse{CPUSeconds: u.CPUSeconds + v.CPUSeconds, CPUByProcess: maps.Clone(u.CPUByProcess)}
	if out.CPUByProcess == nil {
		out.CPUByProcess = map[string]float64{}
	}
	for k, s := range v.CPUByProcess {
		out.CPUByProcess[k] = roundTo(out.CPUByProcess[k]+s, 1e3)
	}
	out.CPUPartial = strings.Trim(u.CPUPartial+"; "+v.CPUPartial, "; ")
	out.setRates(ops, bytes)
	return out
}

// SetCPU attaches a loop's CPU use to r.
func (r *Result) SetCPU(u CPUUse) { r.CPUUse = &u }

// procFS is /proc, read through procfs (github.com/prometheus/procfs).
var procFS = sync.OnceValues(func() (procfs.FS, error) { return procfs.NewFS(procfs.DefaultMountPoint) })

// procStatCPU returns a process's utime + stime of /proc/<pid>/stat in
// seconds (procfs's ProcStat.CPUTime: the same ticks over USER_HZ as the
// hand parser it replaced; TestProcfsSameFigures).
func procStatCPU(pid int) (float64, error) {
	fs, err := procFS()
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of process %d: %w", pid, err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of process %d: %w", pid, err)
	}
	return st.CPUTime(), nil
}

// procCPUSeconds reads a process's CPU time both ways (see procCPU).
func procCPUSeconds(pid int) (procCPU, error) {
	ticks, err := procStatCPU(pid)
	if err != nil {
		return procCPU{}, err
	}
	r := procCPU{ticks: ticks, precise: -1, ok: true}
	fs, _ := procFS() // procStatCPU succeeded: it is there
	threads, err := fs.AllThreads(pid)
	if err != nil {
		return r, nil // the ticks alone
	}
	var ns uint64
	for _, t := range threads {
		ss, err := t.Schedstat() // /proc/<pid>/task/<tid>/schedstat
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited meanwhile: the ticks will say so
		}
		if err != nil {
			return r, nil // unreadable: the ticks alone
		}
		ns += ss.RunningNanoseconds
		r.threads++
	}
	r.precise = float64(ns) / 1e9
	return r, nil
}
