package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/units"
)

// Defaults and limits of FloodConfig.
const (
	DefaultFloodIdleConns  = 1000
	MaxFloodIdleConns      = 4000
	DefaultFloodPeers      = 4
	MaxFloodPeers          = 64
	DefaultFloodFrames     = 200 // per flooding peer
	DefaultFloodPhase      = 10 * time.Second
	DefaultFloodClients    = 4
	DefaultFloodChunkBytes = 64 << 10
	// DefaultFloodBudgetBytes is each of the datanodes' two payload
	// budgets (client and raft) in the bench: small, so that the flood
	// fills them many times over.
	DefaultFloodBudgetBytes = 128 << 20
	// floodSampleEvery is the period of the leader's RSS samples.
	floodSampleEvery = 100 * time.Millisecond
	// idlePipeline is the pipeline the idle connections' one request
	// names: served by no datanode.
	idlePipeline = 1 << 40
)

// FloodConfig configures `spindle bench flood`: a 3-datanode pipeline (as
// `bench chunk-write` starts it) whose leader is flooded while
// well-behaved clients write through it.
type FloodConfig struct {
	// Binary is the spindle executable run as `spindle datanode`.
	Binary string
	// DataDir and LogDir: as ChunkWritePipelineConfig's.
	DataDir, LogDir string
	// Clients write ChunkSizeBytes chunks, one block each, for Phase
	// quiet, then for Phase under the flood.
	Clients        int
	ChunkSizeBytes int64
	Phase          time.Duration
	// IdleConns connections to the leader each send one request, read
	// its answer and then stay idle.
	IdleConns int
	// Peers connections send maximum-size frames as fast as the leader
	// takes them, FramesPerPeer each at most, within the flood phase, half
	// WriteChunks and half RaftMessages, of the kind Refused says.
	// Admitted (false): WriteChunks of the pipeline of the largest chunk
	// (engine.MaxChunkSizeBytes) with a well-formed header but wrong
	// checksums (admitted against the leader's client budget, refused by
	// the leader at their first bad piece as they arrive, the rest of
	// each read and dropped at the connection's skip rate:
	// transport.PayloadCheck), and RaftMessages of the
	// pipeline's group of transport.MaxPayloadBytes from a non-member at
	// a stale term (MsgApps older than the group's term: refused from
	// their header by the datanode's raftRoutable, their payloads dropped
	// at the skip rate). Refused (true): frames refused from their header (WriteChunks
	// of transport.MaxPayloadBytes, longer than a chunk may be;
	// RaftMessages of a group not served), whose payloads are skipped.
	Peers         int
	FramesPerPeer int
	Refused       bool
	// ClientBudgetBytes and RaftBudgetBytes are the datanodes' payload
	// budgets (--client-payload-budget, --raft-payload-budget).
	ClientBudgetBytes, RaftBudgetBytes int64
	// DatanodeArgs are added to every datanode's command line.
	DatanodeArgs []string
	Progress     io.Writer
	Logger       *slog.Logger
}

func (c *FloodConfig) defaults() error {
	if c.Binary == "" {
		return errors.New("no spindle binary to run the datanodes")
	}
	if c.Clients <= 0 {
		c.Clients = DefaultFloodClients
	}
	if c.ChunkSizeBytes <= 0 {
		c.ChunkSizeBytes = DefaultFloodChunkBytes
	}
	if c.ChunkSizeBytes > engine.MaxChunkSizeBytes {
		return fmt.Errorf("chunk size %d over %d", c.ChunkSizeBytes, engine.MaxChunkSizeBytes)
	}
	if c.Phase <= 0 {
		c.Phase = DefaultFloodPhase
	}
	if c.IdleConns < 0 || c.IdleConns > MaxFloodIdleConns {
		return fmt.Errorf("idle connections %d not in [0, %d]", c.IdleConns, MaxFloodIdleConns)
	}
	if c.Peers < 0 || c.Peers > MaxFloodPeers {
		return fmt.Errorf("flooding peers %d not in [0, %d]", c.Peers, MaxFloodPeers)
	}
	if c.FramesPerPeer <= 0 {
		c.FramesPerPeer = DefaultFloodFrames
	}
	if c.ClientBudgetBytes <= 0 {
		c.ClientBudgetBytes = DefaultFloodBudgetBytes
	}
	if c.RaftBudgetBytes <= 0 {
		c.RaftBudgetBytes = DefaultFloodBudgetBytes
	}
	if c.Progress == nil {
		c.Progress = bench.TerminalProgress()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// FloodResult is the flood phase's result (the clients' writes under the
// flood), with the quiet phase and the leader's memory in Extra.
type FloodResult struct {
	bench.Result
}

// RunFlood runs `spindle bench flood`.
func RunFlood(ctx context.Context, cfg FloodConfig) (out FloodResult, err error) {
	if err := cfg.defaults(); err != nil {
		return out, fmt.Errorf("flood: %w", err)
	}
	progress := func(format string, args ...any) {
		progressf(cfg.Progress, "flood: "+format+"\n", args...)
	}
	var cleanup []string
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			removeScratch(cleanup[i])
		}
	}()
	dataDir, made, err := benchDir(cfg.DataDir, "spindle-bench-data-")
	if err != nil {
		return out, fmt.Errorf("flood: data dir: %w", err)
	}
	cleanup = append(cleanup, made...)
	logDir, made, err := benchDir(cfg.LogDir, "spindle-bench-log-")
	if err != nil {
		return out, fmt.Errorf("flood: log dir: %w", err)
	}
	cleanup = append(cleanup, made...)
	const members = 3
	for i := 1; i <= members; i++ {
		for _, d := range []string{
			fmt.Sprintf("%s/dn%d", dataDir, i), fmt.Sprintf("%s/dn%d", logDir, i),
			fmt.Sprintf("%s/dn%d.log", dataDir, i), fmt.Sprintf("%s/dn%d.ready", dataDir, i),
		} {
			if _, err := os.Lstat(d); err == nil {
				return out, fmt.Errorf("flood: %s exists (left by an earlier run?)", d)
			}
			cleanup = append(cleanup, d)
		}
	}
	args := append([]string{
		"--client-payload-budget", strconv.FormatInt(cfg.ClientBudgetBytes, 10),
		"--raft-payload-budget", strconv.FormatInt(cfg.RaftBudgetBytes, 10),
	}, cfg.DatanodeArgs...)
	progress("starting 3 datanodes (budgets: client %s, raft %s)", units.ByteSize(cfg.ClientBudgetBytes), units.ByteSize(cfg.RaftBudgetBytes))
	cl, err := localcluster.Start(ctx, localcluster.Config{
		Binary: cfg.Binary, Members: members, DataDir: dataDir, LogDir: logDir, ExtraArgs: args,
	})
	if err != nil {
		return out, fmt.Errorf("flood: %w", err)
	}
	defer func() {
		if serr := cl.Stop(stopWait); serr != nil && err == nil {
			err = fmt.Errorf("flood: stopping the datanodes: %w", serr)
		}
	}()
	c, err := client.New(cl.Addrs(), cl.PipelineID(), client.Options{Logger: cfg.Logger})
	if err != nil {
		return out, fmt.Errorf("flood: %w", err)
	}
	defer closeQuietly(c)

	slots := newContainerSlots(cfg.Clients, engine.DefaultMaxContainerSizeBytes)
	probe := make([]byte, 4096)
	bench.FillPseudoRandom(probe, 0)
	{
		wctx, cancel := context.WithTimeout(ctx, leaderWait)
		var perr error
		for attempt := 0; attempt < 10; attempt++ {
			if _, perr = c.WriteChunk(wctx, client.BlockID{Container: slots.reserve(0, int64(len(probe))), Local: 0}, 0, probe); perr == nil || wctx.Err() != nil {
				break
			}
		}
		cancel()
		if perr != nil {
			return out, fmt.Errorf("flood: no leader within %v: %w\n%s", leaderWait, perr, cl.Logs())
		}
	}
	leaderAddr := c.Leader()
	ln := cl.Node(leaderAddr)
	if ln == nil {
		return out, fmt.Errorf("flood: leader %q is not a member", leaderAddr)
	}
	pid := cl.PID(ln.ID)
	progress("leader: member %d at %s (pid %d)", ln.ID, leaderAddr, pid)

	writers := make([]*pipelineWriter, cfg.Clients)
	for i := range writers {
		w := &pipelineWriter{
			c: c, slots: slots, slot: i, nextLocal: uint64(i) << 32,
			blockMax: 64 << 20, bpc: engine.DefaultBytesPerChecksum, data: make([]byte, cfg.ChunkSizeBytes),
		}
		bench.FillPseudoRandom(w.data, uint64(i+1))
		w.sums = engine.ComputeChecksums(nil, w.data, w.bpc)
		if err := w.seal(ctx); err != nil {
			return out, fmt.Errorf("flood: %w", err)
		}
		writers[i] = w
	}
	// Both phases write at most this much (the disk is not the point).
	maxOps := int64(2<<30) / cfg.ChunkSizeBytes
	phase := func(label string) (bench.Stats, error) {
		return bench.Loop(ctx, bench.LoopConfig{
			Workers: cfg.Clients, Duration: cfg.Phase, MaxOps: maxOps, Label: label, Progress: cfg.Progress,
			Processes: cl.Procs,
		}, func(ctx context.Context, worker int, _ int64) (int, error) {
			return writers[worker].writeOne(ctx)
		})
	}
	progress("quiet phase: %d clients, %s chunks, %v", cfg.Clients, units.ByteSize(cfg.ChunkSizeBytes), cfg.Phase)
	quiet, err := phase("flood (quiet)")
	if err != nil {
		return out, fmt.Errorf("flood: quiet phase: %w\n%s", err, cl.Logs())
	}
	quietMem, err := procMemory(pid)
	if err != nil {
		return out, fmt.Errorf("flood: %w", err)
	}

	// The flood: idle connections first, then the flooding peers, for
	// the phase's duration.
	progress("opening %d idle connections", cfg.IdleConns)
	idle, err := openIdleConns(ctx, leaderAddr, cfg.IdleConns)
	defer func() {
		for _, nc := range idle {
			closeQuietly(nc)
		}
	}()
	if err != nil {
		return out, fmt.Errorf("flood: %w", err)
	}
	fctx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	var fl flooders
	fl.start(fctx, leaderAddr, cl.PipelineID(), cfg.Refused, cfg.Peers, cfg.FramesPerPeer)
	var peakRSS atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(floodSampleEvery)
		defer t.Stop()
		for {
			if m, err := procMemory(pid); err == nil {
				peakRSS.Store(max(peakRSS.Load(), m.RSS))
			}
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	progress("flood phase: %d idle connections, %d peers sending maximum-size frames (refused from their header: %v)", len(idle), cfg.Peers, cfg.Refused)
	flood, err := phase("flood (flooded)")
	stopFlood()
	fl.wait()
	<-sampled
	if err != nil {
		return out, fmt.Errorf("flood: flood phase: %w\n%s", err, cl.Logs())
	}
	mem, err := procMemory(pid)
	if err != nil {
		return out, fmt.Errorf("flood: %w", err)
	}

	res := flood.Result("flood")
	quietP99 := quiet.Latency.PercentileUs(99)
	floodP99 := flood.Latency.PercentileUs(99)
	budget := cfg.ClientBudgetBytes + cfg.RaftBudgetBytes
	res.SetParam("replicas", members)
	res.SetParam("clients", cfg.Clients)
	res.SetParam("chunk_size_bytes", cfg.ChunkSizeBytes)
	res.SetParam("phase_seconds", cfg.Phase.Seconds())
	res.SetParam("idle_conns", cfg.IdleConns)
	res.SetParam("flood_peers", cfg.Peers)
	res.SetParam("flood_refused", cfg.Refused)
	res.SetParam("client_budget_bytes", cfg.ClientBudgetBytes)
	res.SetParam("raft_budget_bytes", cfg.RaftBudgetBytes)
	ratio := 0.0
	if quietP99 > 0 {
		ratio = floodP99 / quietP99
	}
	res.Extra = map[string]any{
		"quiet_ops":                 quiet.Ops,
		"quiet_ops_per_s":           quiet.OpsPerS(),
		"quiet_p99_us":              quietP99,
		"flood_p99_us":              floodP99,
		"p99_ratio":                 ratio,
		"idle_conns_open":           len(idle),
		"flood_frames_sent":         fl.frames.Load(),
		"flood_bytes_sent":          fl.bytes.Load(),
		"flood_conns":               fl.conns.Load(),
		"leader_pid":                pid,
		"leader_rss_quiet_bytes":    quietMem.RSS,
		"leader_rss_peak_bytes":     max(peakRSS.Load(), mem.RSS),
		"leader_vmhwm_bytes":        mem.HWM,
		"budget_bytes":              budget,
		"leader_hwm_over_budget":    mem.HWM - budget,
		"leader_hwm_over_quiet_rss": mem.HWM - quietMem.RSS,
	}
	res.AddNote("p99 of the clients' writes: %.0f µs quiet, %.0f µs under the flood (%.2f×); leader VmHWM %s against budgets of %s (client + raft), %s RSS after the quiet phase",
		quietP99, floodP99, ratio, units.ByteSize(mem.HWM), units.ByteSize(budget), units.ByteSize(quietMem.RSS))
	out.Result = res
	return out, nil
}

// procMem is a process's resident memory from /proc/PID/status.
type procMem struct {
	RSS, HWM int64 // VmRSS, VmHWM, bytes
}

func procMemory(pid int) (procMem, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return procMem{}, fmt.Errorf("reading the datanode's memory: %w", err)
	}
	return procMemoryIn(fs, pid)
}

// procMemoryIn reads VmRSS and VmHWM of PID/status under fs through
// procfs (kB × 1024, as the hand parser it replaced: TestProcMemorySameFigures).
func procMemoryIn(fs procfs.FS, pid int) (procMem, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return procMem{}, fmt.Errorf("reading the datanode's memory: %w", err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return procMem{}, fmt.Errorf("reading the datanode's memory: %w", err)
	}
	return procMem{RSS: int64(st.VmRSS), HWM: int64(st.VmHWM)}, nil
}

// openIdleConns opens n connections to addr, each sending one request
// (GetBlock of a block that does not exist) and reading its answer, so
// that each is a served data-path connection, then left idle.
func openIdleConns(ctx context.Context, addr string, n int) ([]net.Conn, error) {
	var d net.Dialer
	var out []net.Conn
	for i := 0; i < n; i++ {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		nc, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err != nil {
			return out, fmt.Errorf("idle connection %d: %w", i, err)
		}
		out = append(out, nc)
		c := transport.NewConn(nc, transport.ConnConfig{})
		if err := c.Send(&transport.GetBlock{RequestID: 1, PipelineID: idlePipeline, ContainerID: 1 << 40, LocalID: uint64(i)}); err != nil {
			return out, fmt.Errorf("idle connection %d: %w", i, err)
		}
		if err := nc.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return out, fmt.Errorf("idle connection %d: %w", i, err)
		}
		if _, err := c.ReadFrame(); err != nil {
			return out, fmt.Errorf("idle connection %d: no answer: %w", i, err)
		}
		if err := nc.SetReadDeadline(time.Time{}); err != nil {
			return out, fmt.Errorf("idle connection %d: %w", i, err)
		}
	}
	return out, nil
}

// flooders send maximum-size frames to a pipeline's leader: WriteChunks
// of the pipeline and RaftMessages of its group (see FloodConfig.Peers),
// never reading what comes back; a connection the datanode closes is
// redialled.
type flooders struct {
	wg                   sync.WaitGroup
	frames, bytes, conns atomic.Int64
}

func (f *flooders) start(ctx context.Context, addr string, pipelineID uint64, refused bool, peers, frames int) {
	big := make([]byte, transport.MaxPayloadBytes)
	for p := 0; p < peers; p++ {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			var enc transport.Encoder
			var m transport.Message
			payload := big
			switch {
			case p%2 == 0 && refused:
				m = &transport.WriteChunk{RequestID: 1, PipelineID: pipelineID, ContainerID: 1 << 40, LocalID: 1, Length: uint64(len(payload))}
			case p%2 == 0:
				payload = big[:engine.MaxChunkSizeBytes]
				sums := make([]uint32, engine.PieceCount(uint64(len(payload)), engine.DefaultBytesPerChecksum))
				for i := range sums {
					sums[i] = 1 // not the CRC32C of zeros
				}
				m = &transport.WriteChunk{RequestID: 1, PipelineID: pipelineID, ContainerID: 1 << 40, LocalID: 1,
					Length: uint64(len(payload)), BytesPerChecksum: engine.DefaultBytesPerChecksum, Checksums: sums}
			default:
				group := pipelineID
				if refused {
					group = idlePipeline
				}
				rm := &transport.RaftMessage{GroupID: group, Message: floodRaftMessage(len(payload))}
				rm.SetPayloads([][]byte{payload})
				m = rm
			}
			var c *transport.Conn
			for sent := 0; sent < frames && ctx.Err() == nil; {
				if c == nil {
					var d net.Dialer
					nc, err := d.DialContext(ctx, "tcp", addr)
					if err != nil {
						return
					}
					f.conns.Add(1)
					c = transport.NewConn(nc, transport.ConnConfig{})
					context.AfterFunc(ctx, func() { closeQuietly(nc) })
				}
				enc.Reset()
				if err := enc.Append(m, payload); err != nil {
					return
				}
				if err := c.SendBatch(&enc); err != nil {
					// Closed (its reply queue overflowed, it timed
					// out) or the flood is over: a new one, if any.
					closeQuietly(c)
					c = nil
					continue
				}
				sent++
				f.frames.Add(1)
				f.bytes.Add(int64(enc.Len()))
			}
			if c != nil {
				closeQuietly(c)
			}
		}()
	}
}

func (f *flooders) wait() { f.wg.Wait() }

// floodRaftMessage is a MsgApp of one entry naming one WriteChunk of n
// bytes (its payload), from node 9 (no member) at term 1 (stale: every
// pipeline's first leader is elected at term 2 or later), which raft
// ignores.
func floodRaftMessage(n int) *raftpb.Message {
	data := pipeline.AppendCommand(nil, &pipeline.Command{Kind: pipeline.KindWriteChunk,
		WriteChunk: transport.WriteChunk{ContainerID: 1, LocalID: 1, Length: uint64(n)}})
	return &raftpb.Message{
		Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(1), From: proto.Uint64(9),
		Term: proto.Uint64(1), LogTerm: proto.Uint64(1), Index: proto.Uint64(1), Commit: proto.Uint64(1),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(1), Index: proto.Uint64(2), Type: raftpb.EntryType_EntryNormal.Enum(), Data: data}},
	}
}
