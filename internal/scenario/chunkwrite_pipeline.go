package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/report"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

// Defaults of ChunkWritePipelineConfig.
const (
	// DefaultPipelineMaxBytes bounds the bytes one pipeline run writes
	// (each of the three replicas holds them all), whatever the duration.
	DefaultPipelineMaxBytes = 4 << 30
	// DefaultPipelineConns is the number of connections the bench opens
	// to each datanode, shared by all its clients.
	DefaultPipelineConns = 1
	// leaderWait bounds the wait for the pipeline's first leader.
	leaderWait = 60 * time.Second
	// stopWait bounds the datanodes' graceful stop.
	stopWait = 20 * time.Second
)

// ChunkWritePipelineConfig configures the replicated chunk write bench:
// three datanode processes forming one pipeline on 127.0.0.1, written to
// through the pipeline client.
type ChunkWritePipelineConfig struct {
	// Binary is the spindle executable run as `spindle datanode`.
	// Required (the command passes its own).
	Binary string
	// DataDir and LogDir hold the datanodes' volumes (DataDir/dn1..3) and
	// Raft logs (LogDir/dn1..3); both are created when missing (and then
	// removed at the end), default temporary directories. The dn<i>
	// subdirectories must not exist yet; the bench removes them at the end.
	DataDir, LogDir string
	// ChunkSizeBytes is the size of one WriteChunk (default 1 MiB).
	ChunkSizeBytes int64
	// Clients is the number of concurrent writers (default 16); each
	// writes its own blocks sequentially.
	Clients int
	// Duration and Count bound the run; at least one is required.
	Duration time.Duration
	Count    int64
	// MaxBytes bounds the bytes written (default DefaultPipelineMaxBytes):
	// the run stops there even if Duration has not passed.
	MaxBytes int64
	// BlockSizeBytes: a writer commits its block with PutBlock and starts
	// a new one when the next chunk would pass this size (default 64 MiB,
	// at least one chunk).
	BlockSizeBytes int64
	// BytesPerChecksum is the checksum piece size (default 16 KiB).
	BytesPerChecksum uint32
	// Containers is how many containers the writers share at a time
	// (default 4); a full one (ContainerMaxBytes) is followed by the next
	// container ID.
	Containers int
	// ContainerMaxBytes is the container size limit (default 5 GiB).
	ContainerMaxBytes int64
	// Conns is the number of connections to each datanode, shared by
	// every client (default DefaultPipelineConns); Window the requests in
	// flight on each (default: enough for every client).
	Conns, Window int
	// Tick and ElectionTicks are the datanodes' raft timing (0: theirs).
	Tick          time.Duration
	ElectionTicks int
	// DatanodeArgs and DatanodeEnv are added to every datanode's command
	// line (not --cpuprofile: CPUProfileDir) and environment.
	DatanodeArgs, DatanodeEnv []string
	// DatanodeProcs is each datanode's GOMAXPROCS. 0: an equal share of
	// this machine's CPUs, max(1, NumCPU/3) (on 2 cores, Go's default
	// measured ~15% more CPU per write, ~15% fewer writes/s); < 0: Go's.
	DatanodeProcs int
	// CPUProfileDir, when set, makes each datanode write a CPU profile
	// dn<i>.pprof there, and the bench its own (the client side) of the
	// timed loop, client.pprof.
	CPUProfileDir string
	// NoBaseline skips the raw baseline.
	NoBaseline bool
	// Floor also measures the replication floor (bench.RunReplicationFloor)
	// in the data directory, with the run's clients, chunk size and bounds:
	// the least work of a three-replica write on this machine, beside
	// Spindle's (extra.floor, extra.cpu_per_gb_over_floor).
	Floor bool
	// TLS runs every connection (the writers' and the raft messages
	// between datanodes) with mutual TLS 1.3, as spindle server does by
	// default, with a PKI made for the run (tlsconf.EnsureLocal in a
	// temporary directory; the writers' certificate is the admin's);
	// false: plaintext. BlockToken, when set, is each block's token.
	TLS        bool
	BlockToken func(container, local uint64) string
	// Progress receives progress lines (nil: stderr when a terminal).
	Progress io.Writer
	// Logger for the client (nil: discard).
	Logger *slog.Logger
}

// ChunkWritePipelineResult is the result with the top-level fields of the
// replicated form.
type ChunkWritePipelineResult struct {
	bench.Result
	Replicas  int       `json:"replicas"`
	DataDir   string    `json:"data_dir"`
	LogDir    string    `json:"log_dir"`
	Placement Placement `json:"placement"`
}

// Placement says where the datanodes' data and logs were: filesystem,
// device, rotational.
type Placement struct {
	Data report.DirInfo `json:"data"`
	Log  report.DirInfo `json:"log"`
	// SameDevice: data and log share a device (they contend for its
	// fsyncs).
	SameDevice bool `json:"same_device"`
	// Label is a short "data/log" description, e.g. "tmpfs/tmpfs".
	Label string `json:"label"`
}

func (c *ChunkWritePipelineConfig) defaults() error {
	if c.Binary == "" {
		return errors.New("no spindle binary to run the datanodes")
	}
	if err := chunkLoadDefaults(&c.ChunkSizeBytes, &c.Clients, c.Duration, c.Count); err != nil {
		return err
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("negative byte bound")
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultPipelineMaxBytes
	}
	if c.BlockToken == nil {
		c.BlockToken = func(uint64, uint64) string { return "" }
	}
	if c.BlockSizeBytes == 0 {
		c.BlockSizeBytes = 64 << 20
	}
	c.BlockSizeBytes = max(c.BlockSizeBytes, c.ChunkSizeBytes)
	if c.BytesPerChecksum == 0 {
		c.BytesPerChecksum = engine.DefaultBytesPerChecksum
	}
	if c.Containers == 0 {
		c.Containers = 4
	}
	if c.Containers < 1 || c.Containers > 1024 {
		return fmt.Errorf("containers %d not in [1, 1024]", c.Containers)
	}
	if c.ContainerMaxBytes == 0 {
		c.ContainerMaxBytes = engine.DefaultMaxContainerSizeBytes
	}
	if c.ContainerMaxBytes < c.BlockSizeBytes {
		return fmt.Errorf("container size %d below the block size %d", c.ContainerMaxBytes, c.BlockSizeBytes)
	}
	if c.Conns <= 0 {
		c.Conns = DefaultPipelineConns
	}
	if c.Window <= 0 {
		c.Window = min(max(c.Clients/c.Conns+1, transport.DefaultWindow), transport.MaxWindow)
	}
	if c.DatanodeProcs == 0 {
		c.DatanodeProcs = max(1, runtime.NumCPU()/3)
	}
	if c.Progress == nil {
		c.Progress = bench.TerminalProgress()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// containerSlots hands out containers to writers: Containers slots, each
// holding its current container ID and the bytes reserved in it; a block
// that would not fit moves its slot to the next unused container ID.
type containerSlots struct {
	mu       sync.Mutex
	cur      []uint64
	reserved []int64
	next     uint64
	max      int64
}

func newContainerSlots(n int, maxBytes int64) *containerSlots {
	s := &containerSlots{cur: make([]uint64, n), reserved: make([]int64, n), max: maxBytes}
	for i := range s.cur {
		s.next++
		s.cur[i] = s.next
	}
	return s
}

// reserve returns the container a new block of up to size bytes goes to.
func (s *containerSlots) reserve(slot int, size int64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved[slot]+size > s.max {
		s.next++
		s.cur[slot], s.reserved[slot] = s.next, 0
	}
	s.reserved[slot] += size
	return s.cur[slot]
}

// pipelineWriter is one bench client: appends chunks, PutBlock when full.
type pipelineWriter struct {
	c         *client.Client
	slots     *containerSlots
	slot      int
	nextLocal uint64
	blockMax  int64
	block     transport.BlockData
	id        client.BlockID
	data      []byte
	sums      []uint32
	bpc       uint32
	blocks    int64 // committed
	token     func(container, local uint64) string
}

func (w *pipelineWriter) writeOne(ctx context.Context) (int, error) {
	if int64(w.block.Length)+int64(len(w.data)) > w.blockMax {
		if err := w.seal(ctx); err != nil {
			return 0, err
		}
	}
	off := w.block.Length
	if err := w.c.WriteChunkChecksums(ctx, w.id, off, w.data, w.bpc, w.sums); err != nil {
		return 0, err
	}
	w.block.Chunks = append(w.block.Chunks, transport.ChunkInfo{Offset: off, Length: uint64(len(w.data)), Checksums: w.sums})
	w.block.Length += uint64(len(w.data))
	return len(w.data), nil
}

// seal commits the current block (if it has data) and starts the next.
func (w *pipelineWriter) seal(ctx context.Context) error {
	if w.block.Length > 0 {
		if err := w.c.PutBlock(ctx, w.block, w.id.Token); err != nil {
			return err
		}
		w.blocks++
	}
	w.nextLocal++
	cid := w.slots.reserve(w.slot, w.blockMax)
	w.id = client.BlockID{Container: cid, Local: w.nextLocal, Token: w.token(cid, w.nextLocal)}
	w.block = transport.BlockData{ContainerID: w.id.Container, LocalID: w.id.Local, BytesPerChecksum: w.bpc}
	return nil
}

// RunChunkWritePipeline runs `spindle bench chunk-write` in its replicated
// form: three `spindle datanode` processes on 127.0.0.1 form one pipeline;
// Clients goroutines write chunks through it with the pipeline client (each
// write acknowledged once a quorum has made it durable, log and data), a
// PutBlock per full block; then the datanodes stop, their data goes, and
// the raw baseline (pwrite + fdatasync, same chunk size, same writers,
// appending as the datanodes do) runs on the data directory.
func RunChunkWritePipeline(ctx context.Context, cfg ChunkWritePipelineConfig) (out ChunkWritePipelineResult, err error) {
	if err := cfg.defaults(); err != nil {
		return out, fmt.Errorf("chunk-write: %w", err)
	}
	progress := func(format string, args ...any) {
		progressf(cfg.Progress, "chunk-write: "+format+"\n", args...)
	}
	var cleanup []string // removed at the end, last first
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			removeScratch(cleanup[i])
		}
	}()
	dataDir, made, err := benchDir(cfg.DataDir, "spindle-bench-data-")
	if err != nil {
		return out, fmt.Errorf("chunk-write: data dir: %w", err)
	}
	cleanup = append(cleanup, made...)
	logDir, made, err := benchDir(cfg.LogDir, "spindle-bench-log-")
	if err != nil {
		return out, fmt.Errorf("chunk-write: log dir: %w", err)
	}
	cleanup = append(cleanup, made...)
	const members = 3
	for i := 1; i <= members; i++ {
		for _, d := range []string{
			filepath.Join(dataDir, fmt.Sprintf("dn%d", i)), filepath.Join(logDir, fmt.Sprintf("dn%d", i)),
			filepath.Join(dataDir, fmt.Sprintf("dn%d.log", i)),
		} {
			if _, err := os.Lstat(d); err == nil {
				return out, fmt.Errorf("chunk-write: %s exists (left by an earlier run?): remove it or choose other directories", d)
			}
			cleanup = append(cleanup, d)
		}
		cleanup = append(cleanup, filepath.Join(dataDir, fmt.Sprintf("dn%d.ready", i)))
	}
	out.Replicas = members
	out.DataDir, out.LogDir = dataDir, logDir
	env := report.CaptureEnvironment([]string{dataDir, logDir})
	if len(env.Dirs) == 2 {
		out.Placement = Placement{Data: env.Dirs[0], Log: env.Dirs[1]}
		out.Placement.SameDevice = env.Dirs[0].Device != "" && env.Dirs[0].Device == env.Dirs[1].Device
		out.Placement.Label = placementLabel(env.Dirs[0], env.Dirs[1])
	}

	lcfg := localcluster.Config{
		Binary: cfg.Binary, Members: members, DataDir: dataDir, LogDir: logDir,
		Tick: cfg.Tick, ElectionTicks: cfg.ElectionTicks, ExtraArgs: cfg.DatanodeArgs,
		Env: cfg.DatanodeEnv,
	}
	if cfg.DatanodeProcs > 0 && !slices.ContainsFunc(cfg.DatanodeEnv, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
		lcfg.Env = append(slices.Clip(lcfg.Env), fmt.Sprintf("GOMAXPROCS=%d", cfg.DatanodeProcs))
	}
	if cfg.CPUProfileDir != "" {
		if err := os.MkdirAll(cfg.CPUProfileDir, 0o755); err != nil {
			return out, fmt.Errorf("chunk-write: %w", err)
		}
		lcfg.NodeArgs = func(id int) []string {
			return []string{"--cpuprofile", filepath.Join(cfg.CPUProfileDir, fmt.Sprintf("dn%d.pprof", id))}
		}
	}
	var clientTLS *tlsconf.Settings
	if cfg.TLS {
		pkiDir, err := os.MkdirTemp("", "spindle-bench-tls-")
		if err != nil {
			return out, fmt.Errorf("chunk-write: %w", err)
		}
		cleanup = append(cleanup, pkiDir)
		pki, err := tlsconf.EnsureLocal(pkiDir, []string{"127.0.0.1"})
		if err != nil {
			return out, fmt.Errorf("chunk-write: %w", err)
		}
		lcfg.TLS = pki.Files(tlsconf.RoleDatanode)
		if clientTLS, err = pki.Settings(tlsconf.RoleAdmin); err != nil {
			return out, fmt.Errorf("chunk-write: %w", err)
		}
		out.AddNote("mutual TLS 1.3 on every connection (writers and raft between datanodes)")
	}
	progress("starting 3 datanodes (data %s, log %s)", dataDir, logDir)
	cl, err := localcluster.Start(ctx, lcfg)
	if err != nil {
		return out, fmt.Errorf("chunk-write: %w", err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return cl.Stop(stopWait)
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("chunk-write: stopping the datanodes: %w", serr)
		}
	}()

	c, err := client.New(cl.Addrs(), cl.PipelineID(), client.Options{
		BytesPerChecksum: cfg.BytesPerChecksum, Window: cfg.Window, ConnsPerMember: cfg.Conns, Logger: cfg.Logger,
		Conn: transport.ConnConfig{TLS: clientTLS},
	})
	if err != nil {
		return out, fmt.Errorf("chunk-write: %w", err)
	}
	defer closeQuietly(c)

	// The first leader: a probe chunk of its own block, retried till answered.
	slots := newContainerSlots(cfg.Containers, cfg.ContainerMaxBytes)
	probe := make([]byte, min(cfg.ChunkSizeBytes, 4096))
	bench.FillPseudoRandom(probe, 0)
	leaderStart := time.Now()
	{
		wctx, cancel := context.WithTimeout(ctx, leaderWait)
		var perr error
		for attempt := 0; attempt < 10; attempt++ { // the client retries within each
			cid := slots.reserve(0, int64(len(probe)))
			if _, perr = c.WriteChunk(wctx, client.BlockID{Container: cid, Token: cfg.BlockToken(cid, 0)}, 0, probe); perr == nil || wctx.Err() != nil {
				break
			}
		}
		cancel()
		if perr != nil {
			return out, fmt.Errorf("chunk-write: no leader within %v: %w\n%s", leaderWait, perr, cl.Logs())
		}
	}
	leaderAfter := time.Since(leaderStart)
	progress("leader %s after %v", c.Leader(), leaderAfter.Round(time.Millisecond))

	writers := make([]*pipelineWriter, cfg.Clients)
	for i := range writers {
		w := &pipelineWriter{
			c: c, slots: slots, slot: i % cfg.Containers,
			nextLocal: uint64(i) << 32, // disjoint local IDs per writer
			blockMax:  cfg.BlockSizeBytes, bpc: cfg.BytesPerChecksum,
			data: make([]byte, cfg.ChunkSizeBytes), token: cfg.BlockToken,
		}
		// Payloads and checksums are made before the clock starts, as in
		// the local form (and the baseline's one buffer per writer).
		bench.FillPseudoRandom(w.data, uint64(i+1))
		w.sums = engine.ComputeChecksums(nil, w.data, cfg.BytesPerChecksum)
		if err := w.seal(ctx); err != nil {
			return out, err
		}
		writers[i] = w
	}
	maxOps := cfg.MaxBytes / cfg.ChunkSizeBytes
	if cfg.Count > 0 && cfg.Count < maxOps {
		maxOps = cfg.Count
	}
	before := c.Stats()
	stopProf := func() {}
	if cfg.CPUProfileDir != "" {
		if stopProf, err = startCPUProfile(filepath.Join(cfg.CPUProfileDir, "client.pprof")); err != nil {
			return out, fmt.Errorf("chunk-write: %w", err)
		}
		defer stopProf()
	}
	stats, err := bench.Loop(ctx, bench.LoopConfig{
		Workers: cfg.Clients, Duration: cfg.Duration, MaxOps: maxOps,
		Label: "chunk-write (3 replicas)", Progress: cfg.Progress, Processes: cl.Procs,
	}, func(ctx context.Context, worker int, op int64) (int, error) {
		return writers[worker].writeOne(ctx)
	})
	if err != nil {
		if ctx.Err() != nil { // interrupted: the datanodes did nothing wrong
			return out, fmt.Errorf("chunk-write: interrupted: %w", err)
		}
		return out, fmt.Errorf("chunk-write: %w\ndatanode logs:\n%s", err, cl.Logs())
	}
	stopProf()
	after := c.Stats()
	leader := c.Leader()
	closeQuietly(c)
	if err := stop(); err != nil {
		return out, fmt.Errorf("chunk-write: stopping the datanodes: %w", err)
	}
	res := stats.Result("chunk-write")
	res.SetParam("mode", "pipeline")
	res.SetParam("replicas", members)
	res.SetParam("data_dir", dataDir)
	res.SetParam("log_dir", logDir)
	res.SetParam("chunk_size_bytes", cfg.ChunkSizeBytes)
	res.SetParam("clients", cfg.Clients)
	res.SetParam("block_size_bytes", cfg.BlockSizeBytes)
	res.SetParam("bytes_per_checksum", cfg.BytesPerChecksum)
	res.SetParam("containers", cfg.Containers)
	res.SetParam("conns_per_datanode", cfg.Conns)
	res.SetParam("window", cfg.Window)
	if cfg.DatanodeProcs > 0 {
		res.SetParam("datanode_gomaxprocs", cfg.DatanodeProcs)
	}
	if len(cfg.DatanodeEnv) > 0 {
		res.SetParam("datanode_env", cfg.DatanodeEnv)
	}
	res.SetParam("durable", true)
	var blocks int64
	for _, w := range writers {
		blocks += w.blocks
	}
	res.Extra = map[string]any{
		"leader":            leader,
		"leader_wait_s":     leaderAfter.Seconds(),
		"blocks_committed":  blocks,
		"client_attempts":   after.Attempts - before.Attempts,
		"client_redirects":  after.Redirects - before.Redirects,
		"client_retries":    (after.Attempts - before.Attempts) - (after.Ops - before.Ops),
		"client_conn_dials": after.Dials,
		"client_batches":    after.Batches - before.Batches,
		"placement":         out.Placement.Label,
	}
	if cfg.CPUProfileDir != "" {
		res.Extra["cpu_profiles"] = cfg.CPUProfileDir
	}
	if byteBound := cfg.MaxBytes / cfg.ChunkSizeBytes; stats.Ops >= byteBound && (cfg.Count == 0 || byteBound < cfg.Count) {
		res.AddNote("stopped at the byte bound (%d bytes written by each replica); raise --max-bytes for longer runs", cfg.MaxBytes)
	}
	out.Result = res
	if stats.Ops == 0 {
		return out, errors.New("chunk-write: no write completed in the time given")
	}
	// The datanodes' data goes before the baseline runs in the same
	// place, so that both start from the same free space and memory.
	for i := 1; i <= members; i++ {
		for _, d := range []string{filepath.Join(dataDir, fmt.Sprintf("dn%d", i)), filepath.Join(logDir, fmt.Sprintf("dn%d", i))} {
			if err := os.RemoveAll(d); err != nil {
				return out, fmt.Errorf("chunk-write: %w", err)
			}
		}
	}
	if !cfg.NoBaseline {
		progress("baseline: pwrite + fdatasync on %s", dataDir)
		base := bench.BaselineConfig{
			Dir: filepath.Join(dataDir, "baseline"), Writers: cfg.Clients, ChunkSizeBytes: cfg.ChunkSizeBytes,
			WritesPerSync: 1, Duration: cfg.Duration, MaxOps: maxOps,
			FileSizeBytes: cfg.BlockSizeBytes, Pattern: bench.PatternAppend, Progress: cfg.Progress,
		}
		b, err := bench.RunBaseline(ctx, base)
		if err != nil {
			return out, fmt.Errorf("chunk-write: baseline: %w", err)
		}
		out.Result.SetBaseline(b)
		out.Result.AddNote("baseline: one replica's raw writes (pwrite + fdatasync per write, on the data dir); the pipeline writes each chunk three times, plus a log record per entry batch")
	}
	if cfg.Floor {
		progress("floor: three replicas' least work (receive, check, pwrite, forward) on %s", dataDir)
		f, err := bench.RunReplicationFloor(ctx, bench.FloorConfig{
			Dir: dataDir, Clients: cfg.Clients, ChunkSizeBytes: cfg.ChunkSizeBytes,
			BytesPerChecksum: cfg.BytesPerChecksum, Duration: cfg.Duration, MaxOps: maxOps,
			MaxBytesPerReplica: cfg.MaxBytes, Progress: cfg.Progress,
		})
		if err != nil {
			return out, fmt.Errorf("chunk-write: floor: %w", err)
		}
		if f.CPUUse == nil || f.CPUSecondsPerGB <= 0 {
			return out, errors.New("chunk-write: floor: its CPU was not measured")
		}
		out.Result.Extra["floor"] = f
		over := ""
		if u := out.Result.CPUUse; u != nil && u.CPUSecondsPerGB > 0 {
			r := math.Round(u.CPUSecondsPerGB/f.CPUSecondsPerGB*100) / 100
			out.Result.Extra["cpu_per_gb_over_floor"] = r
			over = fmt.Sprintf("; Spindle's %.2f CPU-s per GB is %.2f x the floor's", u.CPUSecondsPerGB, r)
		}
		out.Result.AddNote("floor: the same writes with none of Spindle's protocol, log or bookkeeping (loopback TCP to a leader that checks the CRC32C pieces, pwrites and forwards to two followers that check and pwrite; no log, no fsync): %.0f writes/s, %.1f MB/s, %.2f CPU-s per GB, %.0f CPU-us per write%s",
			f.OpsPerS, f.MBPerS, f.CPUSecondsPerGB, f.CPUUsPerOp, over)
	}
	return out, nil
}

// benchDir returns dir (created when missing; made lists what to remove
// at the end) or, when dir is "", a new temporary directory.
func benchDir(dir, pattern string) (string, []string, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", pattern)
		if err != nil {
			return "", nil, err
		}
		return d, []string{d}, nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, err
	}
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		top := topmostMissing(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, err
		}
		return dir, []string{top}, nil
	}
	if err != nil {
		return "", nil, err
	}
	if !st.IsDir() {
		return "", nil, fmt.Errorf("%s is not a directory", dir)
	}
	return dir, nil, nil
}

// placementLabel describes where data and log are: "tmpfs/tmpfs",
// "ext4 vda/same device", ...
func placementLabel(data, log report.DirInfo) string {
	name := func(d report.DirInfo) string {
		s := d.FSType
		if s == "" {
			s = "?"
		}
		if d.FSType != "tmpfs" && d.Source != "" {
			s += " " + filepath.Base(d.Source)
		}
		if d.Rotational != nil {
			if *d.Rotational {
				s += " (hdd)"
			} else {
				s += " (ssd)"
			}
		}
		return s
	}
	if data.Device != "" && data.Device == log.Device && data.FSType != "tmpfs" {
		return name(data) + "/same device"
	}
	return name(data) + "/" + name(log)
}

// startCPUProfile profiles this process into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		closeQuietly(f) // nothing written
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil { // the profile's last write
				slog.Warn("scenario: CPU profile may be incomplete", "path", path, "err", err)
			}
		})
	}, nil
}
