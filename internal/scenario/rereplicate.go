package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/gen"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/units"
)

// Defaults and limits of the re-replication bench.
const (
	DefaultRereplicateDatanodes = 4
	// DefaultRereplicateTimeout bounds a whole run.
	DefaultRereplicateTimeout = 60 * time.Minute
	// rereplicateCheckBytes bounds the key bytes read back before and
	// after (an even sample of the keys when they hold more).
	rereplicateCheckBytes = 1 << 30
	// copyLimitBytes bounds each pass of a copy-limit measurement, and
	// copyLimitDuration is how long each is repeated.
	copyLimitBytes    = 1 << 30
	copyLimitDuration = 2 * time.Second
	// rereplicateHeartbeat is the cluster's heartbeat period during the
	// bench: commands reach the targets within it.
	rereplicateHeartbeat = 50 * time.Millisecond
	rereplicateBucket    = "gen"
	rereplicateSeed      = 4
	// rereplicatePoll is how often the bench reads the meta service's
	// replication status.
	rereplicatePoll = 100 * time.Millisecond
)

// RereplicateConfig configures `spindle bench rereplicate` (seed 004).
type RereplicateConfig struct {
	// Dir holds every datanode's and the meta service's directories (a
	// new subdirectory when it exists; removed at the end unless Keep).
	Dir string
	// SizeBytes is the key data generated (×3 replicas on disk).
	SizeBytes int64
	// Datanodes (default 4, at least 4: one is lost, 3 replicas remain
	// possible).
	Datanodes int
	// ContainerSizeBytes (default SizeBytes/64 within [16 MiB, 1 GiB]:
	// enough containers that the last copies, running alone, are a small
	// part of the time).
	ContainerSizeBytes int64
	// MaxCopies is the copies a target runs at once (default 2) and
	// MaxCopiesPerNode what the meta service schedules per source and per
	// target (default 4: more than run, so targets never wait for the
	// next heartbeat to start the next copy).
	MaxCopies, MaxCopiesPerNode int
	// Binary is the spindle executable for the datanodes (required).
	Binary  string
	Timeout time.Duration
	Keep    bool
	// ProfileSource traces datanode 1 (a surviving source, and a target
	// too) with `strace -f` during the re-replication and reports its
	// data-moving system calls by bytes. strace slows it: the run's
	// figures are then those of a traced run (noted).
	ProfileSource bool
	// TLS runs the cluster with mutual TLS (spindle server's default):
	// the copies then go through user space (read, encrypt, write)
	// instead of sendfile; false: plaintext.
	TLS bool
	// Strace is the strace binary ("": found on PATH).
	Strace string
	// CPUProfileDir, when set, makes each datanode of the restarted
	// cluster (the copies) write a CPU profile dn<i>.pprof there, and this
	// process (the meta service) bench.pprof from the restart to full
	// replication.
	CPUProfileDir string
	// Progress receives progress lines (nil: stderr when a terminal).
	Progress io.Writer
}

// RereplicateResult is the bench's result: mb_per_s is the re-replication
// rate, baseline the slowest copy limit.
type RereplicateResult struct {
	bench.Result
	Containers  int    `json:"containers"`
	CopiedBytes uint64 `json:"copied_bytes"`
	// Limits are measured with the cluster stopped, just before the
	// restart that starts the copies.
	Limits        bench.CopyLimits `json:"copy_limits"`
	Gen           *gen.Result      `json:"gen"`
	LostNode      uint64           `json:"lost_node"`
	KeysChecked   int              `json:"keys_checked"`
	KeysTotal     int              `json:"keys_total"`
	FailedCopies  uint64           `json:"failed_copies"`
	SourceProfile *SourceProfile   `json:"source_profile,omitempty"`
	// TLS: the cluster ran with mutual TLS (copies encrypted in user
	// space, no sendfile).
	TLS bool `json:"tls"`
	// CPU is the machine's CPU use (every process, from /proc/stat) while
	// the copies ran ("copy") and during each copy limit measurement;
	// absent where it could not be sampled.
	CPU            map[string]CPUUse `json:"cpu,omitempty"`
	SourceSendfile map[string]uint64 `json:"-"`
	Dir            string            `json:"dir"`
}

// CPUUse is the machine's CPU use over one part of the run.
type CPUUse struct {
	bench.CPUWindow
	// CPUs is runtime.NumCPU(); CPUSecondsPerGB the busy CPU time per GB
	// moved (copied, or measured for a limit).
	CPUs            int     `json:"cpus"`
	CPUSecondsPerGB float64 `json:"cpu_s_per_gb"`
	// ProcessCPUSecondsPerGB: Spindle's processes' CPU time (the
	// datanodes and this one, tracked from the restart) per GB copied; for
	// the copy window only.
	ProcessCPUSecondsPerGB float64 `json:"process_cpu_s_per_gb,omitempty"`
}

// cpuSampleInterval: the copy window lasts about a second at 2 GiB on
// /dev/shm, so the samples around it must be close.
const cpuSampleInterval = 20 * time.Millisecond

func cpuUse(s *bench.CPUSampler, from, to time.Time, bytes int64) (CPUUse, bool) {
	if s == nil || bytes <= 0 {
		return CPUUse{}, false
	}
	w, ok := s.Window(from, to)
	if !ok {
		return CPUUse{}, false
	}
	u := CPUUse{CPUWindow: w, CPUs: runtime.NumCPU(), CPUSecondsPerGB: w.BusyCPUSeconds / (float64(bytes) / 1e9)}
	if w.ProcessCPUSeconds > 0 {
		u.ProcessCPUSecondsPerGB = w.ProcessCPUSeconds / (float64(bytes) / 1e9)
	}
	return u, true
}

// otherCPUsNote is the share of a CPU that other processes may use during
// the copies before the run says its ratio is not this machine's alone.
const otherCPUsNote = 0.25

// otherCPUs reports, in res.Extra, the CPUs that processes other than
// Spindle's used during the copies (machine busy time minus Spindle's
// processes') and during the loopback limit (minus this process's): the
// copies need every CPU of a small machine and the single-stream loopback
// about one, so load from elsewhere lowers the ratio, or raises it when
// the limit is the one starved.
func otherCPUs(res *RereplicateResult) {
	if u, ok := res.CPU["copy"]; ok && u.ProcessCPUSeconds > 0 && u.Seconds > 0 {
		o := max(u.BusyCPUSeconds-u.ProcessCPUSeconds, 0) / u.Seconds
		res.Extra["other_cpus_during_copies"] = o
		if o > otherCPUsNote {
			res.AddNote("other processes used %.2f of the %d CPUs during the copies: the ratio is not this machine's alone", o, u.CPUs)
		}
	}
	if u, ok := res.CPU["loopback"]; ok && u.Seconds > 0 && res.Limits.Loopback.CPUSeconds > 0 {
		o := max(u.BusyCPUSeconds-res.Limits.Loopback.CPUSeconds, 0) / u.Seconds
		res.Extra["other_cpus_during_loopback_limit"] = o
		if o > otherCPUsNote {
			res.AddNote("other processes used %.2f of the %d CPUs during the loopback limit", o, u.CPUs)
		}
	}
}

// cpuBoundLimit is what the machine's CPUs could copy if every one did
// nothing but a copy's share of work of the two single-stream limits that
// burn CPU on the same machine (loopback: sendfile and the receiver's
// read; disk write: the target's pwrite), in MB/s: NumCPU / (loopback +
// disk write CPU-s per GB). 0 when either was not measured. Where disk
// and network are the same CPUs (tmpfs and loopback on one host) a copy
// cannot beat it, whatever the single-stream limits say.
func cpuBoundLimit(l bench.CopyLimits) float64 {
	c := l.Loopback.CPUSecondsPerGB + l.DiskWrite.CPUSecondsPerGB
	if l.Loopback.CPUSecondsPerGB <= 0 || l.DiskWrite.CPUSecondsPerGB <= 0 {
		return 0
	}
	return float64(runtime.NumCPU()) * 1e3 / c
}

// Rereplicate runs the experiment: generate, start, check keys, stop,
// lose one datanode's data, restart, wait until every container has its
// replicas again, check keys; measure the copy limits in between.
func Rereplicate(ctx context.Context, cfg RereplicateConfig) (*RereplicateResult, error) {
	if cfg.SizeBytes <= 0 {
		return nil, errors.New("rereplicate: --size is required")
	}
	if cfg.Binary == "" {
		return nil, errors.New("rereplicate: no spindle binary for the datanodes")
	}
	if cfg.Datanodes == 0 {
		cfg.Datanodes = DefaultRereplicateDatanodes
	}
	if cfg.Datanodes < 4 {
		return nil, fmt.Errorf("rereplicate: %d datanodes: at least 4 (one is lost, 3 replicas must remain possible)", cfg.Datanodes)
	}
	if cfg.ContainerSizeBytes == 0 {
		cfg.ContainerSizeBytes = min(max(cfg.SizeBytes/64, 16<<20), 1<<30)
	}
	if cfg.MaxCopies <= 0 {
		cfg.MaxCopies = 2
	}
	if cfg.MaxCopiesPerNode <= 0 {
		cfg.MaxCopiesPerNode = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRereplicateTimeout
	}
	if cfg.Progress == nil {
		cfg.Progress = bench.TerminalProgress()
	}
	progress := func(format string, args ...any) {
		progressf(cfg.Progress, "rereplicate: "+format+"\n", args...)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if cfg.ProfileSource {
		s, err := findStrace(ctx, cfg.Strace, cfg.Binary)
		if err != nil {
			return nil, fmt.Errorf("rereplicate: --profile-source: %w", err)
		}
		cfg.Strace = s
	}
	root, made, err := benchRoot(cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cfg.Keep {
			return
		}
		for i := len(made) - 1; i >= 0; i-- {
			removeScratch(made[i])
		}
	}()
	cdir := filepath.Join(root, "cluster")
	res := &RereplicateResult{Dir: root}

	// 1. Generate offline.
	progress("generating %s of keys (%d replicas on %d datanodes, containers of %s) in %s",
		units.FormatBytes(cfg.SizeBytes), 3, cfg.Datanodes, units.FormatBytes(cfg.ContainerSizeBytes), cdir)
	gcfg := gen.Config{Dir: cdir, Datanodes: cfg.Datanodes, SizeBytes: uint64(cfg.SizeBytes),
		ContainerSizeBytes: uint64(cfg.ContainerSizeBytes), Bucket: rereplicateBucket, Seed: rereplicateSeed, Progress: cfg.Progress}
	g, err := gen.Run(ctx, gcfg)
	if err != nil {
		return nil, fmt.Errorf("rereplicate: generating: %w", err)
	}
	res.Gen = g
	res.TLS = cfg.TLS
	progress("generated %d keys, %d containers, %s of replicas in %.1fs (%.0f MB/s)", g.Keys, g.Containers,
		units.FormatBytes(int64(g.ReplicaBytes)), g.Seconds, g.MBPerS)

	scfg := server.Config{
		Dir: cdir, Datanodes: cfg.Datanodes, MetaListen: "127.0.0.1:0", Binary: cfg.Binary,
		Meta: meta.Config{
			HeartbeatInterval: rereplicateHeartbeat, StaleAfter: time.Second, DeadAfter: 2 * time.Second,
			MaxCopiesPerSource: cfg.MaxCopiesPerNode, MaxCopiesPerTarget: cfg.MaxCopiesPerNode,
			Logger: quietLogger(),
		},
		DatanodeArgs: []string{"--heartbeat-interval", rereplicateHeartbeat.String(), "--max-copies", fmt.Sprint(cfg.MaxCopies)},
		ReadyTimeout: clusterStartWait, Logger: quietLogger(), Insecure: !cfg.TLS,
	}

	// 2. Start the cluster on it and check keys. The first start keeps the
	// default STALE/DEAD times: a datanode slow to report (a loaded
	// machine) must not be declared DEAD and have its containers copied.
	first := scfg
	first.Meta.StaleAfter, first.Meta.DeadAfter = 0, 0
	progress("starting the cluster on the generated data")
	srv, err := server.Start(ctx, first)
	if err != nil {
		return nil, fmt.Errorf("rereplicate: starting the cluster: %w", err)
	}
	lostAddr := srv.Cluster().Nodes()[cfg.Datanodes-1].Addr
	lost, held, err := nodeByAddr(ctx, srv.Meta(), lostAddr)
	if err == nil {
		res.KeysTotal, res.KeysChecked, err = checkGenKeys(ctx, srv.Meta(), gcfg, g)
	}
	if cerr := srv.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("rereplicate: %w", err)
	}
	res.LostNode = lost
	progress("keys read back (%d of %d checked byte for byte); node %d (%s) holds %d containers", res.KeysChecked, res.KeysTotal, lost, lostAddr, held)

	// 3. Lose one datanode's data.
	lostData := filepath.Join(cdir, "datanodes", fmt.Sprintf("dn%d", cfg.Datanodes))
	lostLog := filepath.Join(cdir, "datanodes", "log", fmt.Sprintf("dn%d", cfg.Datanodes))
	if err := os.RemoveAll(lostData); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(lostLog); err != nil {
		return nil, err
	}
	progress("deleted %s and %s", lostData, lostLog)

	// 4. Copy limits, measured on the surviving block files.
	files, err := bench.FilesUnder(filepath.Join(cdir, "datanodes", "dn1"), ".blk", copyLimitBytes)
	if err != nil {
		return nil, err
	}
	limBytes := min(int64(copyLimitBytes), int64(g.ReplicaBytes)/int64(cfg.Datanodes))
	// The CPU sampler runs from the limits to the end of the copies; a
	// machine without /proc/stat gets no CPU figures, and says so.
	sampler, serr := bench.StartCPUSampler(cpuSampleInterval)
	if serr != nil {
		res.AddNote("no CPU figures: %v", serr)
	} else {
		defer sampler.Stop()
	}
	progress("measuring the copy limits (one stream each, %s): disk read, disk write, loopback sendfile", units.FormatBytes(limBytes))
	res.Limits, err = bench.MeasureCopyLimits(ctx, root, files, limBytes, copyLimitDuration,
		bench.SocketTuning{Sender: bulk.TuneSender, Receiver: bulk.TuneReceiver})
	if err != nil {
		return nil, fmt.Errorf("rereplicate: %w", err)
	}
	progress("copy limits: disk read %.0f MB/s, disk write %.0f MB/s, loopback %.0f MB/s: limit %.0f MB/s (%s)",
		res.Limits.DiskRead.MBPerS, res.Limits.DiskWrite.MBPerS, res.Limits.Loopback.MBPerS, res.Limits.Limit, res.Limits.LimitedBy)

	// 5. Restart and wait for the replicas.
	stopProf := func() {}
	if cfg.CPUProfileDir != "" {
		if err := os.MkdirAll(cfg.CPUProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("rereplicate: %w", err)
		}
		scfg.DatanodeNodeArgs = func(id int) []string {
			return []string{"--cpuprofile", filepath.Join(cfg.CPUProfileDir, fmt.Sprintf("dn%d.pprof", id))}
		}
		if stopProf, err = startCPUProfile(filepath.Join(cfg.CPUProfileDir, "bench.pprof")); err != nil {
			return nil, fmt.Errorf("rereplicate: %w", err)
		}
		defer stopProf()
	}
	progress("restarting the cluster; waiting until every container has 3 replicas again")
	// Spindle's processes (this one, with the meta service; the
	// datanodes, from their start) from the restart to full replication:
	// a window wider than the copies' (it holds the datanodes' start).
	// Copies begin before server.Start returns (it waits for a writable
	// pipeline), so the meter opens before it.
	procCPU := bench.StartCPU(nil)
	if sampler != nil {
		// The datanodes are tracked from their launch: copies may begin
		// before server.Start returns.
		sampler.Track([]bench.Proc{{Name: bench.SelfProcName, PID: os.Getpid()}})
		scfg.DatanodeOnLaunch = func(id, pid int) { sampler.Track([]bench.Proc{{Name: fmt.Sprintf("dn%d", id), PID: pid}}) }
	}
	srv, err = server.Start(ctx, scfg)
	if err != nil {
		return nil, fmt.Errorf("rereplicate: restarting the cluster: %w", err)
	}
	running := true
	defer func() {
		if running {
			_ = srv.Close() // on an early return: its error is the one
		}
	}()
	var tracer *straceTracer
	var traced uint64
	if cfg.ProfileSource {
		m := srv.Cluster().Nodes()[0]
		if traced, _, err = nodeByAddr(ctx, srv.Meta(), m.Addr); err != nil {
			return nil, fmt.Errorf("rereplicate: %w", err)
		}
		out := filepath.Join(root, "source.strace")
		if tracer, err = startSourceTrace(ctx, cfg.Strace, srv.Cluster().PID(m.ID), out); err != nil {
			return nil, fmt.Errorf("rereplicate: --profile-source: %w", err)
		}
		progress("tracing node %d (pid %d) with strace", traced, srv.Cluster().PID(m.ID))
	}
	procCPU.AddStarted(srv.Cluster().Procs())
	st, err := waitReplicated(ctx, srv.Meta(), lost, held, progress)
	stopProf()
	var procUse bench.CPUUse
	if err == nil {
		procUse = procCPU.Stop(int64(st.CopiedContainers), int64(st.CopiedBytes))
	}
	if tracer != nil {
		tracer.stop()
	}
	if sampler != nil {
		sampler.Stop()
		res.CPU = map[string]CPUUse{}
		for name, r := range map[string]bench.Rate{"disk_read": res.Limits.DiskRead, "disk_write": res.Limits.DiskWrite, "loopback": res.Limits.Loopback} {
			from, to := r.Span()
			if u, ok := cpuUse(sampler, from, to, r.Bytes); ok {
				res.CPU[name] = u
			}
		}
		if err == nil {
			if u, ok := cpuUse(sampler, st.FirstDelivered, st.LastCompleted, int64(st.CopiedBytes)); ok {
				res.CPU["copy"] = u
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("rereplicate: %w", err)
	}
	if tracer != nil {
		p, err := parseSourceTrace(tracer.out)
		if err != nil {
			return nil, fmt.Errorf("rereplicate: --profile-source: %w", err)
		}
		p.Node, p.PID = traced, srv.Cluster().PID(1)
		p.Note = "as a source the node sends block files with sendfile (headers with write); as a target it receives with read and writes block files with pwrite64"
		res.SourceProfile = p
		progress("node %d: sendfile %d calls %s; read %d calls %s; write %d calls %s; pwrite64 %d calls %s",
			traced, p.Calls["sendfile"], units.FormatBytes(p.Bytes["sendfile"]), p.Calls["read"], units.FormatBytes(p.Bytes["read"]),
			p.Calls["write"], units.FormatBytes(p.Bytes["write"]), p.Calls["pwrite64"], units.FormatBytes(p.Bytes["pwrite64"]))
	}
	// The copy window: from the first replicate_container delivered to a
	// target (a copy starts then) to the last copy completed, as the meta
	// service saw them. The wait between the decision and that delivery
	// (at most one heartbeat) is reported apart.
	secs := st.LastCompleted.Sub(st.FirstDelivered).Seconds()
	decided := st.LastCompleted.Sub(st.FirstScheduled).Seconds()
	res.Result = bench.Result{Scenario: "rereplicate", Ops: int64(st.CopiedContainers), Seconds: secs,
		OpsPerS: float64(st.CopiedContainers) / max(secs, 1e-9), Bytes: int64(st.CopiedBytes),
		MBPerS: float64(st.CopiedBytes) / 1e6 / max(secs, 1e-9)}
	res.SetCPU(procUse)
	res.AddNote("cpu_seconds: Spindle's processes from the restart to full replication (the datanodes' start included), per container copied and per GB copied; cpu: the machine's CPU during the copy window and each copy limit")
	res.Containers, res.CopiedBytes, res.FailedCopies = int(st.CopiedContainers), st.CopiedBytes, st.FailedCopies
	res.Extra = map[string]any{"seconds_from_decision": decided, "mb_per_s_from_decision": float64(st.CopiedBytes) / 1e6 / max(decided, 1e-9)}
	if lim := cpuBoundLimit(res.Limits); lim > 0 {
		res.Extra["cpu_bound_limit_mb_per_s"] = lim
		res.Extra["ratio_to_cpu_bound_limit"] = res.MBPerS / lim
		res.AddNote("extra.cpu_bound_limit_mb_per_s: NumCPU / (loopback + disk write CPU-s per GB, this process's CPU during each limit): what the CPUs could copy doing only that work, an upper bound when disk and network are the same CPUs (tmpfs, loopback); the baseline stays the slowest single-stream limit")
	}
	otherCPUs(res)
	res.Params = map[string]any{"size_bytes": cfg.SizeBytes, "datanodes": cfg.Datanodes, "container_size_bytes": cfg.ContainerSizeBytes,
		"max_copies": cfg.MaxCopies, "max_copies_per_node": cfg.MaxCopiesPerNode, "heartbeat_ms": rereplicateHeartbeat.Milliseconds()}
	if res.SourceProfile != nil {
		res.AddNote("profiled run: node %d was traced by strace during the copies, which slows them", traced)
	}
	res.AddNote("time from the first copy command delivered to a target to the last copy completed, as the meta service saw them (extra: from the first decision); copy limit: the slowest of disk read, disk write and loopback sendfile (with the copies' socket buffers), one stream each, each repeated for 2 s (rate = all bytes / all time) with the cluster stopped, just before the restart that starts the copies")
	progress("re-replicated %d containers, %s in %.2fs: %.0f MB/s",
		st.CopiedContainers, units.FormatBytes(int64(st.CopiedBytes)), secs, res.MBPerS)
	if u, ok := res.CPU["copy"]; ok {
		w := res.CPU["disk_write"]
		l := res.CPU["loopback"]
		progress("CPU, machine-wide (%d CPUs): copies %.0f %% busy, %.2f CPU-s/GB (Spindle's processes %.2f); limits alone: disk write %.0f %% busy, %.2f CPU-s/GB; loopback %.0f %%, %.2f CPU-s/GB",
			u.CPUs, 100*u.BusyFraction, u.CPUSecondsPerGB, u.ProcessCPUSecondsPerGB, 100*w.BusyFraction, w.CPUSecondsPerGB, 100*l.BusyFraction, l.CPUSecondsPerGB)
		progress("CPU of the limits' own streams: loopback %.2f CPU-s/GB, disk write %.2f, disk read %.2f: CPU-bound copy limit %.0f MB/s",
			res.Limits.Loopback.CPUSecondsPerGB, res.Limits.DiskWrite.CPUSecondsPerGB, res.Limits.DiskRead.CPUSecondsPerGB, cpuBoundLimit(res.Limits))
	}

	// 6. Keys read back after.
	if _, _, err := checkGenKeys(ctx, srv.Meta(), gcfg, g); err != nil {
		return nil, fmt.Errorf("rereplicate: after re-replication: %w", err)
	}
	running = false
	if err := srv.Close(); err != nil {
		return nil, fmt.Errorf("rereplicate: stopping the cluster: %w", err)
	}

	lim, _ := res.Limits.Slowest()
	res.SetBaseline(bench.Baseline{MBPerS: res.Limits.Limit, Bytes: lim.Bytes, Seconds: lim.Seconds, Dir: root, Writers: 1})
	progress("re-replicated at %.0f MB/s = %.2f of the copy limit", res.MBPerS, res.MBPerS/max(res.Limits.Limit, 1e-9))
	return res, nil
}

// nodeByAddr finds the node serving addr and how many containers it reports.
func nodeByAddr(ctx context.Context, mc *metaapi.Client, addr string) (uint64, int, error) {
	deadline := time.Now().Add(clusterStartWait)
	for {
		nodes, err := mc.Nodes(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, n := range nodes {
			if n.Addr == addr && n.Containers > 0 {
				return n.NodeID, n.Containers, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no node at %s reporting containers within %v", addr, clusterStartWait)
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(rereplicatePoll):
		}
	}
}

// waitReplicated polls the replication status until the lost node is
// DEAD (its replicas no longer count), no container is under-replicated,
// nothing is in flight and at least one copy is done (ctx bounds it).
// want, the containers the lost node held, is for progress only: a
// container already copied elsewhere needs no copy.
func waitReplicated(ctx context.Context, mc *metaapi.Client, lost uint64, want int, progress func(string, ...any)) (*metaapi.ReplicationStatus, error) {
	var last time.Time
	for {
		st, err := mc.Replication(ctx)
		if err != nil {
			return nil, err
		}
		if !st.SafeMode && st.UnderReplicated == 0 && len(st.Inflight) == 0 && st.CopiedContainers > 0 {
			nodes, err := mc.Nodes(ctx)
			if err != nil {
				return nil, err
			}
			for _, n := range nodes {
				if n.NodeID == lost && n.Health == metaapi.HealthDead {
					return st, nil
				}
			}
		}
		if st.Unrecoverable > 0 {
			return nil, fmt.Errorf("%d containers have no replica left", st.Unrecoverable)
		}
		if time.Since(last) >= time.Second {
			last = time.Now()
			if st.SafeMode {
				progress("safe mode: %s", st.SafeModeReason)
			} else {
				progress("%d/%d copied (%s), %d in flight, %d under-replicated, %s pending", st.CopiedContainers, want,
					units.FormatBytes(int64(st.CopiedBytes)), len(st.Inflight), st.UnderReplicated, units.FormatBytes(int64(st.PendingBytes)))
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for re-replication: %w (last status: %d/%d copied, %d under-replicated)", ctx.Err(), st.CopiedContainers, want, st.UnderReplicated)
		case <-time.After(rereplicatePoll):
		}
	}
}

// checkGenKeys lists the generated keys and reads an even sample of at
// most rereplicateCheckBytes back, comparing every byte with gen.Content.
func checkGenKeys(ctx context.Context, mc *metaapi.Client, gcfg gen.Config, g *gen.Result) (total, checked int, err error) {
	kc, err := keyclient.New(mc, keyclient.Options{Logger: quietLogger()})
	if err != nil {
		return 0, 0, err
	}
	defer closeQuietly(kc)
	var names []metaapi.KeyInfo
	if err := kc.List(ctx, gcfg.Bucket, "", func(k metaapi.KeyInfo) error { names = append(names, k); return nil }); err != nil {
		return 0, 0, fmt.Errorf("listing %s: %w", gcfg.Bucket, err)
	}
	if len(names) != g.Keys {
		return len(names), 0, fmt.Errorf("bucket %s lists %d keys, the generator wrote %d", gcfg.Bucket, len(names), g.Keys)
	}
	step := 1
	if g.KeyBytes > rereplicateCheckBytes {
		step = int((g.KeyBytes + rereplicateCheckBytes - 1) / rereplicateCheckBytes)
	}
	var buf bytes.Buffer
	for i := 0; i < g.Keys; i += step {
		buf.Reset()
		name := gen.KeyName(i)
		ki, err := kc.Get(ctx, gcfg.Bucket, name, &buf, keyclient.GetOptions{})
		if err != nil {
			return len(names), checked, fmt.Errorf("reading %s/%s: %w", gcfg.Bucket, name, err)
		}
		want := make([]byte, ki.Size)
		gen.Content(gcfg.Seed, i, 0, want)
		if !bytes.Equal(buf.Bytes(), want) {
			return len(names), checked, fmt.Errorf("%s/%s: the bytes read differ from those generated", gcfg.Bucket, name)
		}
		checked++
	}
	return len(names), checked, nil
}
