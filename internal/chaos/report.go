package chaos

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"

	"github.com/spindle-store/spindle/internal/bench"
)

// noFault is the row of operations that started while no fault was in
// force.
const noFault = "none"

// FaultStats are the figures of the operations that started while one
// kind of fault was in force (or none).
type FaultStats struct {
	Kind     string `json:"kind"`
	Injected int    `json:"injected"`
	Ops      int64  `json:"ops"`
	Acked    int64  `json:"acked"`
	Failed   int64  `json:"failed"`
	// FailedByClass: meta_unavailable, no_pipeline, pipeline_failed,
	// timeout, corrupt (detected by the client), block_not_found (a get
	// of a version replaced or deleted meanwhile), unknown_outcome (a
	// put's CommitKey or a delete got no answer), other.
	FailedByClass map[string]int64 `json:"failed_by_class,omitempty"`
	// Lost: acknowledged puts (begun in such a window) missing or wrong
	// at the end; WrongReads: reads (begun in such a window) that
	// returned wrong bytes without an error.
	Lost       int `json:"lost"`
	WrongReads int `json:"wrong_reads"`
	// LongestNoPutSeconds: the longest stretch, inside such windows,
	// without a successful put.
	LongestNoPutSeconds float64 `json:"longest_no_put_s"`
	// ReplicationSettleSeconds: the longest time, from the end of a heal,
	// to full replication among the windows where it came before the
	// next fault; NotSettled counts the windows where it did not.
	ReplicationSettleSeconds float64 `json:"replication_settle_s"`
	NotSettled               int     `json:"not_settled"`
}

// Report is the result of a run: the common bench fields and the chaos
// figures. JSON: one line, the bench fields at the top level.
type Report struct {
	bench.Result
	Seed      int64    `json:"seed"`
	Faults    []string `json:"faults"`
	Datanodes int      `json:"datanodes"`
	Writers   int      `json:"writers"`
	Readers   int      `json:"readers"`
	HotKeys   int      `json:"hot_keys"`
	// Keys written once (cold) and their outcomes.
	Keys        int          `json:"keys"`
	ByFault     []FaultStats `json:"by_fault"`
	Lost        int          `json:"lost"`
	Unreadable  int          `json:"unreadable"`
	PartialPuts int          `json:"partial_puts"`
	// ReplicaKeysChecked acknowledged keys whose blocks were asked of
	// every healthy replica after the heal, ReplicaBlocksChecked the
	// block replicas asked, ReplicasMissing those that did not hold
	// their block as the others do (each a violation).
	ReplicaKeysChecked   int64  `json:"replica_keys_checked"`
	ReplicaBlocksChecked int64  `json:"replica_blocks_checked"`
	ReplicasMissing      int64  `json:"replicas_missing"`
	WrongReads           int    `json:"wrong_reads"`
	Linearizable         string `json:"linearizable"`
	HistoryOps           int    `json:"history_ops"`
	// LongestNoPutSeconds over the whole workload.
	LongestNoPutSeconds float64 `json:"longest_no_put_s"`
	// MaxBytesReachedSeconds: when --max-bytes of values were put (then
	// only hot keys; without hot keys, no puts at all); 0: not reached.
	MaxBytesReachedSeconds float64 `json:"max_bytes_reached_s,omitempty"`
	// ReplicationSettleSeconds: from the heal to full replication; -1
	// when it did not settle within the bound.
	ReplicationSettleSeconds float64 `json:"replication_settle_s"`
	// Bitrot probes: reads of the damaged piece from the damaged replica,
	// right after the flip: refused as corrupt (as they must be), served
	// (wrong bytes: counted in WrongReads too), or another outcome.
	BitrotDetected int64 `json:"bitrot_detected"`
	BitrotServed   int64 `json:"bitrot_served"`
	BitrotOther    int64 `json:"bitrot_other"`
	// ReplicaFailures: "replica failed" lines in the datanodes' logs
	// (a replica that left a pipeline, ARCHITECTURE §12.3), -1 unknown.
	ReplicaFailures int      `json:"replica_failures"`
	Events          []string `json:"events"`
	// ErrorSamples: the first error of each class.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Violations   []string          `json:"violations,omitempty"`
	// Load1: the machine's one-minute load average when the report was
	// made; 0 when /proc/loadavg could not be read (an event says why).
	Load1 float64 `json:"load1"`
	Dir   string  `json:"dir"`
}

// Failed reports whether the run found a loss, a wrong byte, a partial
// put or a history not shown linearizable: a violation, or a check that
// did not finish (or broke another invariant).
func (r *Report) Failed() bool {
	return r.Lost > 0 || r.Unreadable > 0 || r.WrongReads > 0 || r.PartialPuts > 0 || r.ReplicasMissing > 0 ||
		r.Linearizable != string(linOK) || len(r.Violations) > 0
}

func (r *Report) violation(format string, args ...any) {
	if len(r.Violations) < maxViolations {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// report computes the figures from the recorded operations and windows.
func (r *run) report(runSeconds float64, lost, partial, unreadable []int, lin linResult, settle time.Duration) *Report {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{
		Seed: r.cfg.Seed, Faults: r.cfg.Faults, Datanodes: r.cfg.Datanodes, Writers: r.cfg.Writers,
		Readers: r.cfg.Readers, HotKeys: r.cfg.HotKeys, Keys: len(w.cold),
		Lost: len(lost), Unreadable: len(unreadable), PartialPuts: len(partial), WrongReads: len(w.wrongReads),
		Linearizable: string(lin), HistoryOps: len(w.history),
		ReplicationSettleSeconds: -1, ErrorSamples: maps.Clone(w.samples),
		BitrotDetected: r.bitrot.detected.Load(), BitrotServed: r.bitrot.served.Load(), BitrotOther: r.bitrot.otherErr.Load(),
	}
	if l, err := load1(); err == nil {
		rep.Load1 = l
	} else {
		rep.Events = append(rep.Events, err.Error()) // Load1 stays 0
	}
	rep.MaxBytesReachedSeconds = round2(float64(w.budgetSpentNs.Load()) / 1e9)
	if settle > 0 {
		rep.ReplicationSettleSeconds = round2(settle.Seconds())
	}
	kindAt := func(ns int64) string {
		for _, win := range r.windows {
			if ns >= win.startNs && ns <= win.endNs {
				return win.kind
			}
		}
		return noFault
	}
	stats := map[string]*FaultStats{noFault: {Kind: noFault}}
	for _, k := range r.cfg.Faults {
		stats[k] = &FaultStats{Kind: k}
	}
	for _, win := range r.windows {
		stats[win.kind].Injected++
		if win.settleNs < 0 {
			stats[win.kind].NotSettled++
		} else {
			stats[win.kind].ReplicationSettleSeconds = max(stats[win.kind].ReplicationSettleSeconds, round2(float64(win.settleNs)/1e9))
		}
	}
	var putDone []int64
	var bytes int64
	for _, op := range w.ops {
		s := stats[kindAt(op.startNs)]
		s.Ops++
		if op.class == "" {
			s.Acked++
			bytes += op.bytes
			if op.kind == opPut {
				putDone = append(putDone, op.endNs)
			}
			continue
		}
		s.Failed++
		if s.FailedByClass == nil {
			s.FailedByClass = map[string]int64{}
		}
		s.FailedByClass[op.class]++
	}
	for _, i := range append(slices.Clone(lost), unreadable...) {
		stats[kindAt(w.cold[i].startNs)].Lost++
	}
	for _, wr := range w.wrongReads {
		stats[kindAt(wr.atNs)].WrongReads++
		rep.violation("wrong read at %.1fs: %s", float64(wr.atNs)/1e9, wr.msg)
	}
	for _, v := range w.violations {
		rep.violation("%s", v)
	}
	switch lin {
	case linIllegal:
		rep.violation("the history of the hot keys is not linearizable")
	case linUnknown:
		rep.violation("the history of the hot keys is inconclusive: porcupine's search did not end within %v (%d operations), so nothing shows it linearizable", linearizabilityTimeout, len(w.history))
	}
	sort.Slice(putDone, func(i, j int) bool { return putDone[i] < putDone[j] })
	runEnd := int64(runSeconds * 1e9)
	rep.LongestNoPutSeconds = round2(float64(longestGap(putDone, 0, runEnd)) / 1e9)
	for _, win := range r.windows {
		s := stats[win.kind]
		gap := round2(float64(longestGap(putDone, win.startNs, win.endNs)) / 1e9)
		s.LongestNoPutSeconds = max(s.LongestNoPutSeconds, gap)
		rep.Events = append(rep.Events, fmt.Sprintf("%.1fs-%.1fs %s; longest no put %.2f s", float64(win.startNs)/1e9, float64(win.endNs)/1e9, win.desc, gap))
	}
	for _, k := range append([]string{noFault}, r.cfg.Faults...) {
		rep.ByFault = append(rep.ByFault, *stats[k])
	}
	var ops int64
	for _, s := range stats {
		ops += s.Ops
	}
	rep.Scenario = "chaos"
	rep.Ops = ops
	rep.Seconds = round2(runSeconds)
	rep.OpsPerS = round2(float64(ops) / runSeconds)
	rep.Bytes = bytes
	rep.MBPerS = round2(float64(bytes) / runSeconds / 1e6)
	rep.LatencyUs = w.lat.Summary()
	rep.Params = map[string]any{"seed": r.cfg.Seed, "duration": r.cfg.Duration.String(), "datanodes": r.cfg.Datanodes,
		"writers": r.cfg.Writers, "readers": r.cfg.Readers, "faults": strings.Join(r.cfg.Faults, ","), "max_bytes": r.cfg.MaxBytes}
	return rep
}

// longestGap is the longest stretch of [from, to] without a time of done
// (sorted).
func longestGap(done []int64, from, to int64) int64 {
	i := sort.Search(len(done), func(i int) bool { return done[i] >= from })
	last, gap := from, int64(0)
	for ; i < len(done) && done[i] <= to; i++ {
		gap = max(gap, done[i]-last)
		last = done[i]
	}
	return max(gap, to-last)
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// load1 is the machine's one-minute load average, from /proc/loadavg.
func load1() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, fmt.Errorf("load average: %w", err)
	}
	return load1In(fs)
}

// load1In reads loadavg under fs through procfs (its first field, as the
// hand parser it replaced: TestLoad1SameFigures).
func load1In(fs procfs.FS) (float64, error) {
	l, err := fs.LoadAvg()
	if err != nil {
		return 0, fmt.Errorf("load average: %w", err)
	}
	return l.Load1, nil
}

// WriteTable prints the report for people: the bench line, one row per
// fault kind, the verdicts, the events and the violations.
func (r *Report) WriteTable(w io.Writer) error {
	if err := r.Result.WriteTable(w); err != nil {
		return err
	}
	bw := bufio.NewWriter(w) // keeps the first write error, for Flush
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nfault\tinjected\tops\tacked\tfailed\tlost\twrong reads\tlongest no put s\tsettle s\tunsettled\tfailed by class\t")
	for _, s := range r.ByFault {
		var cls []string
		for _, k := range slices.Sorted(maps.Keys(s.FailedByClass)) {
			cls = append(cls, fmt.Sprintf("%s=%d", k, s.FailedByClass[k]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.1f\t%d\t%s\t\n", s.Kind, s.Injected, s.Ops, s.Acked, s.Failed, s.Lost, s.WrongReads, s.LongestNoPutSeconds, s.ReplicationSettleSeconds, s.NotSettled, strings.Join(cls, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	settle := "not settled"
	if r.ReplicationSettleSeconds >= 0 {
		settle = fmt.Sprintf("%.1f s", r.ReplicationSettleSeconds)
	}
	fmt.Fprintf(bw, "\nseed %d; keys %d; lost %d; unreadable %d; partial puts %d; block replicas missing %d of %d (%d keys); wrong reads %d; history (%d ops) linearizable: %s; longest without a put %.2f s; full replication after the heal: %s; bitrot probes: %d refused as corrupt, %d served, %d other; replicas that left a pipeline: %d; load %.2f\n",
		r.Seed, r.Keys, r.Lost, r.Unreadable, r.PartialPuts, r.ReplicasMissing, r.ReplicaBlocksChecked, r.ReplicaKeysChecked, r.WrongReads, r.HistoryOps, r.Linearizable, r.LongestNoPutSeconds, settle, r.BitrotDetected, r.BitrotServed, r.BitrotOther, r.ReplicaFailures, r.Load1)
	for _, e := range r.Events {
		fmt.Fprintf(bw, "  event %s\n", e)
	}
	for _, k := range slices.Sorted(maps.Keys(r.ErrorSamples)) {
		fmt.Fprintf(bw, "  first %s: %s\n", k, r.ErrorSamples[k])
	}
	for _, v := range r.Violations {
		fmt.Fprintf(bw, "  VIOLATION %s\n", v)
	}
	return bw.Flush()
}
