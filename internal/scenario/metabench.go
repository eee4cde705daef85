package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Defaults and bounds of `spindle bench meta`.
const (
	DefaultMetaBenchClients   = 32
	DefaultMetaBenchKeys      = 1_000_000
	DefaultMetaBenchDuration  = 10 * time.Second
	DefaultMetaBenchSizeBytes = 4096
	DefaultMetaBenchBucket    = "bench-meta"
	// metaBenchHeartbeat is the heartbeat interval of the bench's meta
	// service and of its datanodes (short, so that the first pipeline
	// forms within a second; 3 heartbeats per interval are noise next to
	// the commits measured).
	metaBenchHeartbeat = 250 * time.Millisecond
	// metaBenchStartWait bounds the wait for an allocatable pipeline.
	metaBenchStartWait = 30 * time.Second
	// metaBenchFsyncChunkBytes is the write of the fsync baseline: about a
	// WAL record of a few commits.
	metaBenchFsyncChunkBytes = 4096
	// metaBenchFsyncFileBytes is where the fsync baseline's file wraps:
	// small, so that after the first pass every write overwrites allocated
	// space, as Pebble's recycled WAL files do.
	metaBenchFsyncFileBytes = 64 << 10
)

// MetaBenchConfig configures `spindle bench meta`.
type MetaBenchConfig struct {
	// Dir holds the meta store and the baseline's file: created when
	// missing and then removed at the end; when it exists, the bench works
	// in a new subdirectory of it, removed at the end. "": a new temporary
	// directory.
	Dir string
	// Clients is the concurrent allocate+commit loops (default 32).
	Clients int
	// PreAllocate > 0: the API client pre-allocates blocks that many at a
	// time (metaapi.ClientOptions.PreAllocate); 0: an allocation request
	// per key (batched with the concurrent ones).
	PreAllocate int
	// Replicas is the meta service's members (default 1: a single meta
	// service; 3: a raft group in this process, on 127.0.0.1).
	Replicas int
	// Keys bounds the keys committed (default 1,000,000); Duration bounds
	// the time (default 10 s, 0 allowed when Keys bounds).
	Keys     int
	Duration time.Duration
	// SizeBytes is the size each key claims (one block of that length;
	// no data is written anywhere: default 4096).
	SizeBytes int64
	// NoBaseline skips the fsync baseline; BaselineDuration bounds it
	// (default DefaultBaselineDuration).
	NoBaseline       bool
	BaselineDuration time.Duration
	// Keep leaves the meta store in place.
	Keep bool
	// CPUProfile, when set, receives a CPU profile of the timed phase
	// (this process: the meta service and its clients).
	CPUProfile string
	// Progress receives progress lines (nil: stderr when a terminal).
	Progress io.Writer
	// Logger for the meta service (nil: discard).
	Logger *slog.Logger
}

// MetaBenchResult is the result with the meta bench's top-level fields:
// the store's fsync rate measured in the same run on the same directory
// (a raw loop of pwrite 4 KiB + fdatasync, one writer), ops per such
// fsync, and the WAL syncs the store actually did during the timed phase.
type MetaBenchResult struct {
	bench.Result
	Clients     int     `json:"clients"`
	Replicas    int     `json:"replicas"`
	FsyncPerS   float64 `json:"fsync_per_s,omitempty"`
	OpsPerFsync float64 `json:"ops_per_fsync,omitempty"`
	// WALSyncs is the syncs of the meta store's WAL during the timed
	// phase; CommitsPerWALSync = 2 × ops / WALSyncs (an op is an
	// allocation and a key commit, two synced batches).
	WALSyncs          uint64  `json:"wal_syncs"`
	CommitsPerWALSync float64 `json:"commits_per_wal_sync"`
	// WALSyncUsMean is the mean time of those syncs, µs (the raw fsync's
	// is the baseline's latency).
	WALSyncUsMean float64 `json:"wal_sync_us_mean"`
	// AllocationsPerRequest and CommitsPerRequest are the mean sizes of
	// the batches the meta API client sent (metaapi.AllocationsRoute,
	// CommitsRoute: concurrent calls share a request).
	AllocationsPerRequest float64 `json:"allocations_per_request"`
	CommitsPerRequest     float64 `json:"commits_per_request"`
	// RaftEntries is the meta log entries the leader appended during the
	// timed phase (replicas > 1; the proposals of a batch request, and
	// those queued together, are folded into one entry), OpsPerRaftEntry
	// ops / RaftEntries.
	RaftEntries     uint64  `json:"raft_entries,omitempty"`
	OpsPerRaftEntry float64 `json:"ops_per_raft_entry,omitempty"`
}

func (c *MetaBenchConfig) defaults() error {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Clients == 0 {
		c.Clients = DefaultMetaBenchClients
	}
	if c.Clients < 1 || c.Clients > bench.MaxWorkers {
		return fmt.Errorf("clients %d not in [1, %d]", c.Clients, bench.MaxWorkers)
	}
	if c.Keys == 0 {
		c.Keys = DefaultMetaBenchKeys
	}
	if c.Keys < 1 || c.Keys > MaxBenchKeys {
		return fmt.Errorf("keys %d not in [1, %d]", c.Keys, MaxBenchKeys)
	}
	if c.Duration < 0 {
		return errors.New("negative duration")
	}
	if c.SizeBytes == 0 {
		c.SizeBytes = DefaultMetaBenchSizeBytes
	}
	if c.SizeBytes < 1 || c.SizeBytes > metaapi.DefaultContainerSizeBytes {
		return fmt.Errorf("size %d not in [1, %d]", c.SizeBytes, int64(metaapi.DefaultContainerSizeBytes))
	}
	if c.BaselineDuration <= 0 {
		c.BaselineDuration = DefaultBaselineDuration
	}
	if c.Progress == nil {
		c.Progress = bench.TerminalProgress()
	}
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	return nil
}

// benchDatanode is a datanode as the meta service sees it: heartbeats
// over HTTP that report the pipelines it was told to join. Nothing
// connects to its address.
type benchDatanode struct {
	uuid, addr string
	id         uint64
	pipelines  map[uint64]bool
}

func (d *benchDatanode) beat(ctx context.Context, mc *metaapi.Client) error {
	hb := &metaapi.Heartbeat{UUID: d.uuid, NodeID: d.id, Addr: d.addr}
	for id := range d.pipelines {
		hb.Pipelines = append(hb.Pipelines, metaapi.PipelineReport{ID: id, LeaderID: d.id, Term: 1})
	}
	resp, err := mc.Heartbeat(ctx, hb)
	if err != nil {
		return fmt.Errorf("heartbeat of datanode %s: %w", d.uuid, err)
	}
	d.id = resp.NodeID
	for _, c := range resp.Commands {
		if c.Kind == metaapi.CmdJoinPipeline && c.Pipeline != nil {
			d.pipelines[c.Pipeline.ID] = true
		}
	}
	return nil
}

// RunMetaBench runs `spindle bench meta`: a meta service in this process
// (real HTTP listener on 127.0.0.1, real Pebble store in the bench's
// directory) with meta.PipelineSize datanodes registered and heartbeating
// over HTTP; Clients loops each allocate a block and commit a key of it
// through the HTTP client (metaapi), until Keys keys or Duration. Then the
// meta service is stopped and the raw fsync rate is measured in the same
// directory (bench.RunBaseline: one writer, pwrite 4 KiB + fdatasync).
func RunMetaBench(ctx context.Context, cfg MetaBenchConfig) (out MetaBenchResult, err error) {
	if err := cfg.defaults(); err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}
	root, made, err := benchRoot(cfg.Dir)
	if err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}
	defer func() {
		if cfg.Keep {
			return
		}
		for i := len(made) - 1; i >= 0; i-- {
			if rerr := os.RemoveAll(made[i]); rerr != nil && err == nil {
				err = fmt.Errorf("meta bench: cleanup: %w", rerr)
			}
		}
	}()
	metaDir := filepath.Join(root, "meta")
	progressf(cfg.Progress, "meta: meta service in %s (%d replicas), %d clients\n", metaDir, cfg.Replicas, cfg.Clients)
	srvs, err := startMetaGroup(metaDir, cfg.Replicas, cfg.Logger)
	if err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}
	stopped := false
	stopServer := func() error {
		if stopped {
			return nil
		}
		stopped = true
		var err error
		for _, srv := range srvs {
			if cerr := srv.Close(); err == nil {
				err = cerr
			}
		}
		return err
	}
	defer func() {
		if cerr := stopServer(); cerr != nil && err == nil {
			err = fmt.Errorf("meta bench: stopping the meta service: %w", cerr)
		}
	}()
	var addrs []string
	for _, srv := range srvs {
		addrs = append(addrs, srv.Addr())
	}
	mc, err := metaapi.NewClient(strings.Join(addrs, ","), metaapi.ClientOptions{PreAllocate: cfg.PreAllocate})
	if err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}

	// The datanodes heartbeat until the timed phase is over.
	hbCtx, stopHB := context.WithCancel(ctx)
	var hbWG sync.WaitGroup
	var hbErr atomic.Pointer[error]
	defer func() {
		stopHB()
		hbWG.Wait()
	}()
	nodes := make([]*benchDatanode, meta.PipelineSize)
	for i := range nodes {
		nodes[i] = &benchDatanode{uuid: fmt.Sprintf("bench-meta-dn-%d", i+1), addr: fmt.Sprintf("127.0.0.1:%d", 1+i), pipelines: map[uint64]bool{}}
		if err := nodes[i].beat(ctx, mc); err != nil {
			return out, fmt.Errorf("meta bench: registering: %w", err)
		}
	}
	hbWG.Add(1)
	go func() {
		defer hbWG.Done()
		t := time.NewTicker(metaBenchHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
			}
			for _, n := range nodes {
				if err := n.beat(hbCtx, mc); err != nil && hbCtx.Err() == nil {
					hbErr.Store(&err)
					return
				}
			}
		}
	}()
	if err := waitAllocatable(ctx, mc, &hbErr); err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}
	if _, err := mc.CreateBucket(ctx, DefaultMetaBenchBucket); err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}

	srv := leaderOf(srvs)
	if srv == nil {
		return out, errors.New("meta bench: no meta member serves")
	}
	syncs0, syncSeconds0, err := srv.Service().WALSyncs()
	if err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}
	last0 := srv.Service().MetaStatus().LastIndex
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return out, fmt.Errorf("meta bench: cpu profile: %w", err)
		}
		defer stop()
	}
	cb0, c0, ab0, a0 := mc.BatchStats()
	var next atomic.Int64
	size := uint64(cfg.SizeBytes)
	stats, err := bench.Loop(ctx, bench.LoopConfig{
		Workers: cfg.Clients, Duration: cfg.Duration, MaxOps: int64(cfg.Keys), Label: "meta", Progress: cfg.Progress,
	}, func(ctx context.Context, _ int, _ int64) (int, error) {
		key := fmt.Sprintf("k%08d", next.Add(1)-1)
		a, err := mc.Allocate(ctx, metaapi.AllocateRequest{Bucket: DefaultMetaBenchBucket, Key: key})
		if err != nil {
			return 0, err
		}
		ki, err := mc.CommitKey(ctx, DefaultMetaBenchBucket, key, metaapi.CommitKey{Size: size,
			Blocks: []metaapi.KeyBlock{{BlockRef: a.Block, Pipeline: a.Pipeline.ID, Length: size}}})
		if err != nil {
			return 0, err
		}
		if ki.Size != size || len(ki.Blocks) != 1 || ki.Blocks[0].Container != a.Block.Container || ki.Blocks[0].Local != a.Block.Local {
			return 0, fmt.Errorf("commit of %s: the meta service answered %d bytes in %d blocks", key, ki.Size, len(ki.Blocks))
		}
		return int(size), nil
	})
	if err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}
	if p := hbErr.Load(); p != nil {
		return out, fmt.Errorf("meta bench: %w", *p)
	}
	if stats.Ops == 0 {
		return out, errors.New("meta bench: no key committed in the time given")
	}
	syncs1, syncSeconds1, err := srv.Service().WALSyncs()
	if err != nil {
		return out, fmt.Errorf("meta bench: %w", err)
	}
	last1 := srv.Service().MetaStatus().LastIndex
	stopHB()
	hbWG.Wait()
	if err := stopServer(); err != nil {
		return out, fmt.Errorf("meta bench: stopping the meta service: %w", err)
	}

	res := stats.Result("meta")
	res.SetParam("clients", cfg.Clients)
	res.SetParam("replicas", cfg.Replicas)
	res.SetParam("preallocate", cfg.PreAllocate)
	res.SetParam("keys", cfg.Keys)
	res.SetParam("size_bytes", cfg.SizeBytes)
	res.SetParam("dir", root)
	if stats.Ops < int64(cfg.Keys) {
		res.AddNote("stopped by --duration after %d of %d keys", stats.Ops, cfg.Keys)
	}
	res.AddNote("an op is an allocate and a key commit through the HTTP API (two synced store batches); no data is written to datanodes; the API client batches concurrent calls into one request (allocations_per_request, commits_per_request)")
	if cfg.PreAllocate > 0 {
		res.AddNote("blocks pre-allocated %d at a time (for any key of the bucket, one request each): a key costs one synced step of the meta service, its commit", cfg.PreAllocate)
	}
	if cfg.Replicas > 1 {
		res.AddNote("%d meta replicas (a raft group on 127.0.0.1, one process): a commit is acknowledged once a majority has it fsynced in its raft log; wal_syncs are the leader's raft log fdatasyncs (their time is not measured)", cfg.Replicas)
	}
	out = MetaBenchResult{Result: res, Clients: cfg.Clients, Replicas: cfg.Replicas, WALSyncs: syncs1 - syncs0}
	if cb1, c1, ab1, a1 := mc.BatchStats(); cb1 > cb0 && ab1 > ab0 {
		out.CommitsPerRequest = round3(float64(c1-c0) / float64(cb1-cb0))
		out.AllocationsPerRequest = round3(float64(a1-a0) / float64(ab1-ab0))
	}
	if cfg.Replicas > 1 && last1 > last0 {
		out.RaftEntries = last1 - last0
		out.OpsPerRaftEntry = round3(float64(stats.Ops) / float64(out.RaftEntries))
	}
	if out.WALSyncs > 0 {
		out.CommitsPerWALSync = round3(2 * float64(stats.Ops) / float64(out.WALSyncs))
		if syncSeconds1 > syncSeconds0 {
			out.WALSyncUsMean = round3((syncSeconds1 - syncSeconds0) * 1e6 / float64(out.WALSyncs))
		}
	}
	if !cfg.NoBaseline {
		base, err := bench.RunBaseline(ctx, bench.BaselineConfig{
			Dir: filepath.Join(root, "baseline"), Writers: 1, ChunkSizeBytes: metaBenchFsyncChunkBytes, WritesPerSync: 1,
			Duration: cfg.BaselineDuration, FileSizeBytes: metaBenchFsyncFileBytes, Pattern: bench.PatternOverwrite,
			Progress: cfg.Progress,
		})
		if err != nil {
			return out, fmt.Errorf("meta bench: fsync baseline: %w", err)
		}
		out.SetBaseline(base)
		out.FsyncPerS = base.OpsPerS
		if base.OpsPerS > 0 {
			out.OpsPerFsync = round3(out.OpsPerS / base.OpsPerS)
		}
		out.AddNote("fsync_per_s: one writer, pwrite 4 KiB + fdatasync, overwriting a 64 KiB file, in the same directory after the run; ops_per_fsync = ops_per_s / fsync_per_s")
	}
	if cfg.Keep {
		out.AddNote("kept: the meta store in %s", metaDir)
	}
	return out, nil
}

// waitAllocatable waits (bounded) until the meta service has a pipeline
// blocks can be allocated on.
func waitAllocatable(ctx context.Context, mc *metaapi.Client, hbErr *atomic.Pointer[error]) error {
	ctx, cancel := context.WithTimeout(ctx, metaBenchStartWait)
	defer cancel()
	t := time.NewTicker(metaBenchHeartbeat / 5)
	defer t.Stop()
	for {
		if p := hbErr.Load(); p != nil {
			return *p
		}
		ps, err := mc.Pipelines(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Allocatable {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no allocatable pipeline after %s: %w", metaBenchStartWait, ctx.Err())
		case <-t.C:
		}
	}
}

// startMetaGroup starts a meta service of n members under dir (n = 1: a
// single one in dir itself; otherwise member i in dir/member<i>).
func startMetaGroup(dir string, n int, log *slog.Logger) ([]*meta.Server, error) {
	if n == 1 {
		srv, err := meta.Start(meta.Config{Dir: dir, Listen: "127.0.0.1:0", HeartbeatInterval: metaBenchHeartbeat, Logger: log})
		if err != nil {
			return nil, err
		}
		return []*meta.Server{srv}, nil
	}
	peers := map[uint64]string{}
	lns := make([]net.Listener, n)
	closeAll := func() {
		for _, ln := range lns {
			if ln != nil {
				closeQuietly(ln)
			}
		}
	}
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll()
			return nil, err
		}
		lns[i] = ln
		peers[uint64(i+1)] = ln.Addr().String()
	}
	var srvs []*meta.Server
	for i := range n {
		srv, err := meta.Start(meta.Config{Dir: filepath.Join(dir, fmt.Sprintf("member%d", i+1)), Listener: lns[i],
			HeartbeatInterval: metaBenchHeartbeat, Logger: log, ID: uint64(i + 1), Peers: peers})
		if err != nil {
			for _, s := range srvs {
				closeQuietly(s)
			}
			for _, ln := range lns[i:] {
				closeQuietly(ln)
			}
			return nil, err
		}
		srvs = append(srvs, srv)
	}
	return srvs, nil
}

// leaderOf is the member that serves (nil: none).
func leaderOf(srvs []*meta.Server) *meta.Server {
	for _, s := range srvs {
		if s.Service().Serving() {
			return s
		}
	}
	return nil
}
