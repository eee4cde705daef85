package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sys/unix"

	"github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/netlab"
)

// Defaults and limits of Config.
const (
	DefaultDatanodes = 5
	// DefaultMetaReplicas: a raft group of three, as an operator runs it
	// (meta-kill then kills its leader).
	DefaultMetaReplicas = 3
	DefaultWriters      = 8
	DefaultReaders      = 4
	// DefaultHotKeys is the hot keys of a run of up to a minute; longer
	// runs get HotKeysPerMinute per minute (at most MaxHotKeys), so that
	// each key's history stays small enough for porcupine's search (4 keys
	// over 10 minutes: 68,000 operations each, and the search timed out).
	DefaultHotKeys       = 4
	HotKeysPerMinute     = 4
	MaxHotKeys           = 64
	DefaultDuration      = 60 * time.Second
	DefaultSettleTimeout = 3 * time.Minute
	DefaultMaxOps        = 1_000_000
	// MaxOpsPerSecond scales the default bound of operations with the
	// duration: a quiet 2-core machine ran 2,439 ops/s, and a 10-minute
	// run ended at 410 s on the fixed 1,000,000 (a few words of memory
	// per operation).
	MaxOpsPerSecond = 4000
	MaxWorkers      = 256
	MaxDuration     = 24 * time.Hour
	// warmupFraction of the run passes before the first fault.
	warmupFraction = 0.1
	// verifyWorkers read the keys back after the heal.
	verifyWorkers = 8
	// verifyAttempts bounds the reads of one key in the final check.
	verifyAttempts = 3
	// maxDeadAfter and minDeadAfter bound the meta service's
	// --dead-after (scaled as the holds; --stale-after is half of it).
	maxDeadAfter = 10 * time.Second
	minDeadAfter = 4 * time.Second
	// freeSpaceShare of the run filesystem's free space, divided by
	// replicationFactor, is the default MaxBytes.
	freeSpaceShare    = 0.25
	replicationFactor = 3
	// replicaFailedLog is what a datanode logs when one of its replicas
	// leaves a pipeline (internal/pipeline/replica_failure.go).
	replicaFailedLog = `msg="replica failed: not acknowledging, leaving the pipeline"`
	// settlePoll is how often full replication is asked for.
	settlePoll = 500 * time.Millisecond
	// settleLogEvery: how often the wait for full replication says why.
	settleLogEvery = 10 * time.Second
	// healTimeout bounds bringing everything back.
	healTimeout = 2 * time.Minute
)

// linearizabilityTimeout bounds porcupine's search: past it the check is
// inconclusive, and the run fails (a var: a test shortens it).
var linearizabilityTimeout = 2 * time.Minute

// Config configures a chaos run.
type Config struct {
	// Binary is the spindle executable run as the meta service and the
	// datanodes. Required.
	Binary string
	// Dir holds the cluster (default: a new directory under $TMPDIR, on
	// its disk as an operator's data; /dev/shm is memory), removed at the
	// end unless Keep.
	Dir  string
	Keep bool
	// MetaReplicas: meta members, each a process (default 3; 1..5, odd).
	MetaReplicas int
	// Insecure runs every process in plaintext; by default every
	// connection is mutual TLS, with certificates the run makes.
	Insecure bool
	// Datanodes (default 5, at least 4: one down must leave a pipeline).
	Datanodes int
	// Writers and Readers run at once (defaults 8 and 4).
	Writers, Readers int
	// HotKeys are the keys whose history is checked for linearizability
	// (0: DefaultHotKeys, HotKeysPerMinute of Duration for longer runs;
	// negative: none).
	HotKeys int
	// Duration of the workload under faults (default 60 s).
	Duration time.Duration
	// Seed of the schedule, the sizes and the values (0: from the clock;
	// the report names it).
	Seed int64
	// Faults are the fault kinds injected (default DefaultFaults).
	Faults []string
	// SettleTimeout bounds the wait for full replication after the heal.
	SettleTimeout time.Duration
	// MaxOps bounds the operations of the run (0: DefaultMaxOps, or
	// MaxOpsPerSecond of Duration when that is more).
	MaxOps int
	// VolumeBytes is the tmpfs of each datanode's data directory when the
	// run injects `full` (default DefaultVolumeBytes).
	VolumeBytes int64
	// MaxBytes bounds the bytes of the values put (before replication);
	// once reached, writers only put and delete hot keys (which replace
	// their own bytes). 0: a quarter of the free space of the run's
	// filesystem divided by the replication factor (on /dev/shm that is
	// memory: a run must not starve the machine).
	MaxBytes int64
	// Progress receives progress lines (nil: none).
	Progress io.Writer
}

func (c *Config) setDefaults() error {
	if c.Binary == "" {
		return errors.New("chaos: no spindle binary")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Datanodes, DefaultDatanodes)
	def(&c.MetaReplicas, DefaultMetaReplicas)
	def(&c.Writers, DefaultWriters)
	def(&c.Readers, DefaultReaders)
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.HotKeys == 0 {
		c.HotKeys = min(max(DefaultHotKeys, int(c.Duration/time.Minute)*HotKeysPerMinute), MaxHotKeys)
	}
	c.HotKeys = max(c.HotKeys, 0)
	def(&c.MaxOps, max(DefaultMaxOps, int(c.Duration.Seconds()*MaxOpsPerSecond)))
	if c.SettleTimeout == 0 {
		c.SettleTimeout = DefaultSettleTimeout
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano() & (1<<62 - 1)
	}
	if c.Faults == nil {
		c.Faults = DefaultFaults
	}
	if c.VolumeBytes == 0 {
		c.VolumeBytes = DefaultVolumeBytes
	}
	switch {
	case c.MetaReplicas < 1 || c.MetaReplicas > 5 || c.MetaReplicas%2 == 0:
		return fmt.Errorf("chaos: %d meta members, want 1, 3 or 5", c.MetaReplicas)
	case c.Datanodes < 4 || c.Datanodes > 9:
		return fmt.Errorf("chaos: %d datanodes, want 4..9 (one down must leave 3 for a pipeline)", c.Datanodes)
	case c.Writers < 1 || c.Writers > MaxWorkers || c.Readers < 0 || c.Readers > MaxWorkers:
		return fmt.Errorf("chaos: %d writers, %d readers: want 1..%d writers and 0..%d readers", c.Writers, c.Readers, MaxWorkers, MaxWorkers)
	case c.HotKeys < 0 || c.HotKeys > MaxHotKeys:
		return fmt.Errorf("chaos: %d hot keys, want 0..%d", c.HotKeys, MaxHotKeys)
	case c.VolumeBytes != 0 && c.VolumeBytes < MinVolumeBytes:
		return fmt.Errorf("chaos: volume of %d bytes, want at least %d MiB", c.VolumeBytes, MinVolumeBytes>>20)
	case c.Duration < time.Second || c.Duration > MaxDuration:
		return fmt.Errorf("chaos: duration %v, want 1s..%v", c.Duration, MaxDuration)
	}
	for _, f := range c.Faults {
		if _, err := ParseFaults(f); err != nil {
			return err
		}
	}
	return nil
}

// window is the time a fault was in force: from its injection to the end
// of its heal.
type window struct {
	kind           string
	desc           string
	startNs, endNs int64
	// settleNs: from the end of the heal to full replication (as
	// waitSettled sees it); -1: not before the next fault or the end of
	// the workload.
	settleNs int64
}

// run is one chaos run's state.
type run struct {
	cfg    Config
	cl     *cluster
	lab    *netlab.Net // the datanodes' namespaces (partition), or nil
	vols   *volumes    // the datanodes' data volumes (full), or nil
	w      *workload
	root   string
	rotted map[uint64]int // container → the node whose replica was damaged
	// exitSeen: datanodes found down on their own (reported once).
	exitSeen map[int]bool
	log      func(string, ...any)

	// bitrot counts what the damaged replicas answered to the probe read
	// of the damaged piece.
	bitrot struct{ detected, served, otherErr atomic.Int64 }

	mu      sync.Mutex
	windows []window
}

// Run starts the cluster, runs the workload under the nemesis, heals,
// waits for re-replication, verifies, and reports. An error means the
// run could not be made; a run that found a violation returns its
// Report with Failed() true.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if cfg.Progress != nil {
			_, _ = fmt.Fprintf(cfg.Progress, "chaos: "+format+"\n", args...) // progress only: no run fails for it
		}
	}
	root, made, err := runDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	var rep *Report
	defer func() {
		// A run that found a violation keeps its directory: the logs of
		// every process, the data, the history's visualisation.
		if !cfg.Keep && made != "" && (rep == nil || !rep.Failed()) {
			warnIf("removing the run's directory", os.RemoveAll(made))
		}
	}()
	var vols *volumes
	if slices.Contains(cfg.Faults, FaultFull) {
		// A full volume needs a volume per datanode: filling the run's
		// filesystem (memory, on /dev/shm) would starve the machine.
		if vols, err = mountVolumes(root, cfg.Datanodes, cfg.VolumeBytes); err != nil {
			return nil, fmt.Errorf("chaos: fault %s needs a data volume per datanode: %w", FaultFull, err)
		}
		defer func() {
			// A kept run keeps its volumes mounted: the datanodes' data
			// is there (the report's note says how to unmount them).
			if rep == nil || !(cfg.Keep || rep.Failed()) {
				warnIf("unmounting the data volumes", vols.Close())
			}
		}()
		// The values stay within half of the volumes (×3 replicas),
		// whatever the run's filesystem has free.
		share := int64(float64(cfg.VolumeBytes) * float64(cfg.Datanodes) * volumeValueShare / replicationFactor)
		if cfg.MaxBytes <= 0 || cfg.MaxBytes > share {
			cfg.MaxBytes = share
		}
		logf("each datanode's data directory on a tmpfs of %d MiB of its own (fault %s)", cfg.VolumeBytes>>20, FaultFull)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("chaos: free space of %s: %w", root, err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		logf("%s is a tmpfs: the cluster's data is in memory, not on a disk (--dir DIR on a disk for that)", root)
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = int64(float64(st.Bavail) * float64(st.Bsize) * freeSpaceShare / replicationFactor)
	}
	logf("at most %d MiB of values (×%d replicas)", cfg.MaxBytes>>20, replicationFactor)
	logf("seed %d, %d meta members, %d datanodes, TLS %v, %d writers, %d readers, faults %v, %v, in %s", cfg.Seed, cfg.MetaReplicas, cfg.Datanodes, !cfg.Insecure, cfg.Writers, cfg.Readers, cfg.Faults, cfg.Duration, root)
	// A node silent deadAfter is DEAD: its pipelines are closed and its
	// containers copied elsewhere, also within a short run, where about
	// half the kills and pauses outlast it.
	deadAfter := min(max(time.Duration(float64(maxDeadAfter)*holdScale(cfg.Duration)), minDeadAfter), maxDeadAfter)
	var lab *netlab.Net
	if slices.Contains(cfg.Faults, FaultPartition) || slices.Contains(cfg.Faults, FaultDelay) {
		// Partitions and delays need each datanode on a host of its own:
		// a network namespace on a bridge (root only); without, the run
		// cannot inject them and says so.
		names := make([]string, cfg.Datanodes)
		for i := range names {
			names[i] = fmt.Sprintf("dn%d", i+1)
		}
		if lab, err = netlab.New(names); err != nil {
			return nil, fmt.Errorf("chaos: faults %s and %s need a network namespace per datanode: %w", FaultPartition, FaultDelay, err)
		}
		defer func() { warnIf("removing the network namespaces", lab.Close()) }()
		logf("datanodes in network namespaces: %v on bridge %s", names, lab.BridgeAddr())
	}
	cl, err := startCluster(ctx, &cfg, root,
		[]string{"--dead-after", deadAfter.String(), "--stale-after", (deadAfter / 2).String(), "--copy-retry-after", "5s"}, lab)
	if err != nil {
		return nil, err
	}
	// The verdict is made before: a member killed or failing at the stop
	// is no finding of the run.
	defer func() { _ = cl.stop() }()
	if err := cl.waitPipeline(ctx, processReadyTimeout); err != nil {
		return nil, err
	}
	// The key client's failovers (and with --log-level debug its
	// retries) go to client.log when the run is kept: they are how a
	// stretch without a put is explained.
	var clientLog io.Writer = io.Discard
	if cfg.Keep {
		f, err := os.Create(filepath.Join(root, "client.log"))
		if err != nil {
			return nil, err
		}
		defer func() { warnIf("closing client.log", f.Close()) }()
		clientLog = f
	}
	level := slog.LevelInfo
	if slog.Default().Enabled(ctx, slog.LevelDebug) {
		level = slog.LevelDebug
	}
	kc, err := keyclient.New(trackingMeta{cl.meta}, keyclient.Options{Logger: slog.New(slog.NewTextHandler(clientLog, &slog.HandlerOptions{Level: level}))})
	if err != nil {
		return nil, err
	}
	defer func() { _ = kc.Close() }() // always nil (keyclient.Client.Close)
	if _, err := kc.CreateBucket(ctx, bucket); err != nil && !errors.Is(err, metaapi.ErrExists) {
		return nil, fmt.Errorf("chaos: create bucket: %w", err)
	}
	r := &run{cfg: cfg, cl: cl, lab: lab, vols: vols, root: root, rotted: map[uint64]int{}, exitSeen: map[int]bool{}, log: logf,
		w: &workload{cfg: &cfg, kc: kc, t0: time.Now(), lat: bench.NewLatency(), log: logf}}
	rep = r.execute(ctx)
	if ctx.Err() != nil {
		// Interrupted (SIGINT, SIGTERM): what the cut-short verification
		// found says nothing about the cluster. No verdict; the directory
		// and the volumes go as after a run that passed.
		rep = nil
		return nil, fmt.Errorf("chaos: interrupted after %.0fs: %w", time.Since(r.w.t0).Seconds(), ctx.Err())
	}
	rep.Dir = root
	if cfg.Keep || rep.Failed() {
		ops := filepath.Join(root, "ops.tsv")
		if err := r.w.writeOps(ops); err != nil {
			rep.AddNote("writing the operations to %s: %v", ops, err)
		}
		rep.AddNote("cluster kept in %s (process logs: meta<i>.log, datanodes/dn<i>.log; operations: ops.tsv)", root)
		if vols != nil {
			rep.AddNote("the datanodes' data volumes stay mounted: umount %s/vols/dn* when done", root)
		}
	}
	return rep, nil
}

// runDir returns the run's directory and what to remove at the end.
func runDir(dir string) (root, remove string, err error) {
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("chaos: %w", err)
	}
	d, err := os.MkdirTemp(dir, "spindle-chaos-")
	if err != nil {
		return "", "", fmt.Errorf("chaos: %w", err)
	}
	return d, d, nil
}

func (r *run) execute(ctx context.Context) *Report {
	cfg := &r.cfg
	w := r.w
	end := w.t0.Add(cfg.Duration)
	var wg sync.WaitGroup
	for i := range cfg.Writers {
		wg.Go(func() { w.writer(ctx, i, end) })
	}
	for i := range cfg.Readers {
		wg.Go(func() { w.reader(ctx, cfg.Writers+i, end) })
	}
	nemesisErrs := r.nemesis(ctx, end)
	wg.Wait()
	runSeconds := time.Since(w.t0).Seconds()
	r.log("workload done after %.1fs: %d operations; healing", runSeconds, len(w.ops))

	healErr := r.healAll(ctx)
	settle, settleErr := r.waitSettled(ctx)
	lost, partial, unreadable := r.verifyCold(ctx)
	rc, rcErr := r.checkReplicas(ctx) // replicas.go
	r.finalHotReads(ctx)
	lin := r.checkHistory()

	rep := r.report(runSeconds, lost, partial, unreadable, lin, settle)
	rep.ReplicaKeysChecked, rep.ReplicaBlocksChecked, rep.ReplicasMissing = rc.keys, rc.replicas, rc.missing
	if rcErr != nil {
		rep.violation("%v", rcErr)
	}
	if rc.skipped > 0 {
		rep.AddNote("replica check: %d acknowledged keys not reached in %v", rc.skipped, replicaCheckTimeout)
	}
	var err error
	if rep.ReplicaFailures, err = r.cl.countInLogs(replicaFailedLog); err != nil {
		rep.ReplicaFailures = -1
		rep.AddNote("%v", err)
	}
	for _, e := range nemesisErrs {
		rep.AddNote("nemesis: %v", e)
	}
	if healErr != nil {
		rep.AddNote("heal: %v", healErr)
		rep.violation("could not heal the cluster: %v", healErr)
	}
	if settleErr != nil {
		rep.AddNote("replication: %v", settleErr)
	}
	return rep
}

// nemesis injects faults on the seeded schedule until the run's end, one
// at a time, each healed before the next.
func (r *run) nemesis(ctx context.Context, end time.Time) []error {
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0xfa17))
	scale := holdScale(r.cfg.Duration)
	var errs []error
	sleep := func(d time.Duration) bool { return backoff.Sleep(ctx, d) }
	if !sleep(time.Duration(float64(r.cfg.Duration) * warmupFraction)) {
		return errs
	}
	kinds := slices.Clone(r.cfg.Faults)
	watch := &settleWatch{}
	defer func() { watch.stop() }()
	for round := 0; ; round++ {
		if round%len(kinds) == 0 {
			rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		}
		name := kinds[round%len(kinds)]
		fk := faultKinds[name]
		hold := fk.hold(rng, scale)
		gap := time.Duration(float64(2*time.Second+time.Duration(rng.Int64N(int64(4*time.Second)))) * scale)
		if time.Until(end) < hold+gap || r.w.stop.Load() {
			return errs
		}
		watch.stop()
		start := r.w.now()
		desc, heal, err := fk.inject(ctx, r, rng)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			if !sleep(gap) {
				return errs
			}
			continue
		}
		r.log("%5.1fs %s (for %v)", float64(start)/1e9, desc, hold.Round(time.Millisecond))
		sleep(hold)
		if heal != nil {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healTimeout)
			if err := heal(hctx); err != nil {
				errs = append(errs, fmt.Errorf("heal %s: %w", desc, err))
			}
			cancel()
		}
		r.mu.Lock()
		r.windows = append(r.windows, window{kind: name, desc: desc, startNs: start, endNs: r.w.now(), settleNs: -1})
		i := len(r.windows) - 1
		r.mu.Unlock()
		watch = r.watchSettle(ctx, i)
		if !sleep(gap) {
			return errs
		}
	}
}

// settleWatch is the poll, after one fault's heal, for full replication;
// the nemesis stops it before the next fault (the zero value is stopped).
type settleWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *settleWatch) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
		s.cancel = nil
	}
}

// watchSettle polls, until stopped, for full replication after window i's
// heal, and records the time it took in the window.
func (r *run) watchSettle(ctx context.Context, i int) *settleWatch {
	ctx, cancel := context.WithCancel(ctx)
	s := &settleWatch{cancel: cancel, done: make(chan struct{})}
	healed := time.Now()
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			if r.unsettled(ctx, healed) == "" {
				d := time.Since(healed)
				r.mu.Lock()
				r.windows[i].settleNs = int64(d)
				r.mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(settlePoll):
			}
		}
	}()
	return s
}

// holdScale shortens the holds and gaps of short runs: duration / 2 min,
// within [0.25, 1].
func holdScale(d time.Duration) float64 { return min(max(d.Seconds()/120, 0.25), 1) }

// healAll brings every process back: SIGCONT to every datanode, a
// restart of whatever is down.
func (r *run) healAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healTimeout)
	defer cancel()
	var errs []error
	for id := range r.cl.metas.Size() {
		if !r.cl.metas.Running(id + 1) {
			errs = append(errs, r.cl.metas.Start(ctx, id+1))
		}
	}
	for _, n := range r.cl.dns.Nodes() {
		if r.cl.dns.Running(n.ID) {
			errs = append(errs, r.cl.dns.Resume(n.ID))
			continue
		}
		err := r.cl.restartDatanode(ctx, n.ID)
		if moved := (*portMovedError)(nil); errors.As(err, &moved) {
			r.log("%v", err)
			err = nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitSettled waits (bounded by SettleTimeout) until every datanode is
// HEALTHY, the meta service is out of safe mode, no copy is in flight or
// needed, and every container has ReplicationFactor healthy replicas.
func (r *run) waitSettled(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(r.cfg.SettleTimeout)
	why, lastLog := "not asked yet", start
	for {
		if why = r.unsettled(ctx, start); why == "" {
			d := time.Since(start)
			r.log("fully replicated %.1fs after the heal", d.Seconds())
			return d, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("not fully replicated %v after the heal: %s", r.cfg.SettleTimeout, why)
		}
		if time.Since(lastLog) >= settleLogEvery {
			r.log("%.0fs after the heal: %s", time.Since(start).Seconds(), why)
			lastLog = time.Now()
		}
		time.Sleep(settlePoll)
	}
}

// unsettled says why the cluster is not fully replicated ("" if it is),
// from reports all sent after healed (the same clock: one machine).
func (r *run) unsettled(ctx context.Context, healed time.Time) string {
	m := r.cl.meta
	nodes, err := m.Nodes(ctx)
	if err != nil {
		return err.Error()
	}
	healthy := 0
	for _, n := range nodes {
		if n.Health == "HEALTHY" && n.LastHeartbeat.After(healed) {
			healthy++
		}
	}
	if healthy < r.cfg.Datanodes {
		return fmt.Sprintf("%d of %d datanodes HEALTHY and heard from since the heal", healthy, r.cfg.Datanodes)
	}
	st, err := m.Replication(ctx)
	if err != nil {
		return err.Error()
	}
	switch {
	case st.SafeMode:
		return "safe mode: " + st.SafeModeReason
	case st.UnderReplicated > 0 || st.Unrecoverable > 0 || len(st.Inflight) > 0 || st.BehindReplicas > 0:
		return fmt.Sprintf("%d under-replicated, %d unrecoverable, %d copies in flight, %d replicas behind",
			st.UnderReplicated, st.Unrecoverable, len(st.Inflight), st.BehindReplicas)
	}
	cs, err := m.Containers(ctx)
	if err != nil {
		return err.Error()
	}
	return unreplicated(cs, st.ReplicationFactor)
}

// healthyReplica: a replica the meta service counts healthy (OPEN or
// CLOSED, not behind its container's BCSID).
func healthyReplica(rd metaapi.ReplicaInfo) bool {
	return (rd.State == "OPEN" || rd.State == "CLOSED") && !rd.Behind
}

// unreplicated says which container has fewer than rf healthy replicas
// (OPEN or CLOSED, not behind), "" when none has.
func unreplicated(cs []metaapi.ContainerInfo, rf int) string {
	for _, c := range cs {
		if c.State == "CLOSED" && c.CommittedBytes == 0 && len(c.Replicas) == 0 {
			// its pipeline closed before a write reached it: nothing to
			// lose, nothing to copy (the meta service's rule,
			// CHAOS_FINDINGS §3)
			continue
		}
		good := 0
		for _, rd := range c.ReplicaDetails {
			if healthyReplica(rd) {
				good++
			}
		}
		if good < rf {
			return fmt.Sprintf("container %d (%s) has %d healthy replicas of %d", c.ID, c.State, good, rf)
		}
	}
	return ""
}

// verifyCold reads every cold key back and returns the indexes of those
// lost (acknowledged, then missing or wrong), partial (a failed put left
// wrong bytes) and unreadable (an acknowledged key that could not be read).
func (r *run) verifyCold(ctx context.Context) (lost, partial, unreadable []int) {
	w := r.w
	w.mu.Lock()
	n := len(w.cold)
	w.mu.Unlock()
	r.log("reading back %d keys", n)
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	for range verifyWorkers {
		wg.Go(func() {
			for i := range next {
				var why string
				var err error
				for attempt := 1; attempt <= verifyAttempts; attempt++ {
					if why, err = w.checkCold(ctx, i, false); why != "unreadable" {
						break
					}
					time.Sleep(time.Second)
				}
				if why == "" {
					continue
				}
				mu.Lock()
				out := w.cold[i].out
				switch {
				case why == "unreadable" && out == outAcked:
					unreadable = append(unreadable, i)
				case out == outAcked:
					lost = append(lost, i)
				case why == "wrong":
					partial = append(partial, i)
				}
				mu.Unlock()
				if out == outAcked || why == "wrong" {
					w.violation("%s (put %s): %s: %v", coldName(i), outName(out), why, err)
				}
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	sort.Ints(lost)
	sort.Ints(partial)
	sort.Ints(unreadable)
	return lost, partial, unreadable
}

func outName(o outcome) string {
	switch o {
	case outAcked:
		return "acknowledged"
	case outFailed:
		return "failed"
	case outUnknown:
		return "outcome unknown"
	case outRetired:
		return "acknowledged, read back and deleted"
	}
	return "never finished"
}

// finalHotReads reads every hot key once after the heal, into the history.
func (r *run) finalHotReads(ctx context.Context) {
	for k := range r.cfg.HotKeys {
		call := r.w.now()
		got, found, err := r.w.get(ctx, hotName(k), uint64(k), false)
		if err != nil {
			if !errors.Is(err, errWrongBytes) {
				r.w.violation("final read of %s: %v", hotName(k), err)
			}
			continue
		}
		r.w.addHistory(-1, hotInput{key: k, op: opGet}, hotOutput{version: got.version * b2u(found)}, call, r.w.now())
	}
}

// linResult is porcupine's verdict.
type linResult string

const (
	linOK      linResult = "ok"
	linIllegal linResult = "violation"
	linUnknown linResult = "inconclusive (checker timed out)"
)

func (r *run) checkHistory() linResult {
	r.w.mu.Lock()
	h := slices.Clone(r.w.history)
	r.w.mu.Unlock()
	for i := range h {
		if h[i].ClientId < 0 {
			h[i].ClientId = r.cfg.Writers + r.cfg.Readers
		}
	}
	r.log("checking the history of %d hot key operations", len(h))
	res, info := checkLinearizable(h, linearizabilityTimeout)
	if res != linOK {
		path := filepath.Join(r.root, "linearizability.html")
		if err := porcupine.VisualizePath(hotModel, info, path); err != nil {
			r.log("visualising the history: %v", err)
		} else {
			r.log("the history, visualised: %s", path)
		}
	}
	return res
}
