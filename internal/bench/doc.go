// Package bench is the measurement harness behind `spindle bench`: latency
// histograms, a bounded multi-worker load loop, the result record every bench
// prints, and the raw-OS baseline (pwrite + fdatasync straight on a file
// descriptor) that engine figures are compared with, and the loopback TCP
// baseline (RunLoopbackTCP: streams to a listener on 127.0.0.1 in this
// process) that replication is compared with. The scenarios themselves
// (chunk-write, follower-append, ...) live with the code they measure and use
// this package.
//
// Output contract (shared/checks/README.md): with --json a bench prints ONE
// line of JSON on stdout (WriteJSON), with at least scenario, ops, seconds,
// ops_per_s, bytes, mb_per_s, latency_us{p50,p99,max} and, where the bench has
// a baseline, baseline{ops_per_s,mb_per_s} and ratio_to_baseline. Progress and
// diagnostics go to stderr only, and only when stderr is a terminal.
//
// CPU: cpu_seconds is the CPU time of Spindle's processes during the
// measured loop (proccpu.go), never of the whole machine (CPUSampler's
// figures are the machine's and say so).
//
// Units: latencies are recorded in nanoseconds and reported in microseconds;
// MB is 10^6 bytes (mb_per_s = bytes / 1e6 / seconds), as fio and dd report.
//
// Invariants:
//   - Every load loop has a bound: a duration, an operation count, or both
//     (whichever comes first). A loop with neither is rejected.
//   - Stats.Ops counts operations that returned without error;
//     Stats.Latency.Count() == Stats.Ops for loops run by RunWorkers.
//   - Baseline files are deleted when RunBaseline returns, also on error.
//   - Errors are returned with context (which worker, which op, which file,
//     which offset), never swallowed; the first error stops the run.
//
// Concurrency: a Latency is NOT safe for concurrent use. The pattern is one
// Latency per worker goroutine, merged into a total with Merge after the
// workers have finished; RunWorkers does exactly that. A Result is a plain
// value. RunWorkers and RunBaseline may be called concurrently with each other
// (they share no state), although the figures would then disturb each other.
// A CPUSampler samples /proc/stat from one goroutine of its own, bounded by
// MaxCPUSamples; Window may be called from any goroutine, also while it
// samples; Stop ends it (idempotent). A CPUMeter (StartCPU, then Stop) is
// used by one goroutine; every Loop measures one around its workers (this
// process and LoopConfig.Processes), so every bench reports cpu_seconds.
package bench
