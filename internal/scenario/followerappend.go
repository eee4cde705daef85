package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/syscallprof"
	"github.com/spindle-store/spindle/internal/transport"
)

// FollowerAppendMessage defines the unit the follower-append bench
// counts, in its help and in its JSON.
const FollowerAppendMessage = "a message is one replicated WriteChunk of chunk_size_bytes (as in seed 000, " +
	"where the batch-1 and batch-10 runs both wrote 30000 chunks); an AppendEntries (one raft MsgApp " +
	"carrying one entry) holds `batch` of them, so append_entries = ceil(messages / batch); ops = messages; " +
	"latency_us is the AppendEntries round trip (send to the follower's MsgAppResp, sent once log and " +
	"chunk data are fdatasynced)"

// Defaults of FollowerAppendConfig.
const (
	DefaultFollowerAppendMessages    = 30000
	DefaultFollowerAppendChunkBytes  = 1 << 20
	DefaultFollowerAppendRetainBytes = 2 << 30
	DefaultFollowerAppendBlockBytes  = 256 << 20
	DefaultFollowerAppendWindow      = 8
	DefaultFollowerAppendTimeout     = 20 * time.Minute
	// faContainerBytes is what the bench puts in one container before
	// moving to the next: under the engine's default container limit.
	faContainerBytes = 4 << 30
	// faStall fails a run whose follower acknowledged nothing for this long.
	faStall = 2 * time.Minute
)

// FollowerAppendConfig configures `spindle bench follower-append`.
type FollowerAppendConfig struct {
	// Binary is the spindle binary run as `spindle datanode` ("": this
	// executable).
	Binary string
	// Messages is the number of WriteChunks replicated (default 30000).
	Messages int64
	// Batch is the WriteChunks per AppendEntries (default 1).
	Batch int
	// ChunkSizeBytes is the size of one WriteChunk (default 1 MiB).
	ChunkSizeBytes int64
	// DataDir and LogDir are where the datanode keeps its block files and
	// its raft log; each run works in a new subdirectory, removed after
	// it. Missing directories are created (and removed at the end); ""
	// means a new temporary directory.
	DataDir, LogDir string
	// RetainBytes bounds the block data kept: past it, the leader deletes
	// the oldest blocks (default 2 GiB).
	RetainBytes int64
	// BlockSizeBytes is the block size: chunks are written sequentially
	// into a block until it is full (default 256 MiB).
	BlockSizeBytes int64
	// Window bounds the AppendEntries in flight (default 8).
	Window int
	// ProfileSyscalls adds a second run with the datanode under
	// `strace -f -c`; throughput is measured in the first, untraced run.
	ProfileSyscalls bool
	// Strace is the strace binary ("": found on PATH).
	Strace string
	// Timeout bounds the whole bench (default 20 min).
	Timeout time.Duration
	// NoBaseline skips the raw pwrite + fdatasync baseline.
	NoBaseline bool
	// Progress receives progress lines (nil: stderr when a terminal).
	Progress io.Writer
	// Logger reports the steps (nil: discard).
	Logger *slog.Logger
}

func (c *FollowerAppendConfig) defaults() error {
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the spindle binary to run as the datanode: %w", err)
		}
		c.Binary = exe
	}
	if c.Messages == 0 {
		c.Messages = DefaultFollowerAppendMessages
	}
	if c.Batch == 0 {
		c.Batch = 1
	}
	if c.ChunkSizeBytes == 0 {
		c.ChunkSizeBytes = DefaultFollowerAppendChunkBytes
	}
	if c.RetainBytes == 0 {
		c.RetainBytes = DefaultFollowerAppendRetainBytes
	}
	if c.BlockSizeBytes == 0 {
		c.BlockSizeBytes = DefaultFollowerAppendBlockBytes
	}
	if c.Window == 0 {
		c.Window = DefaultFollowerAppendWindow
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultFollowerAppendTimeout
	}
	if c.Progress == nil {
		c.Progress = bench.TerminalProgress()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case c.Messages < 1:
		return fmt.Errorf("messages %d, want >= 1", c.Messages)
	case c.Batch < 1 || c.Batch > faMaxBatch:
		return fmt.Errorf("batch %d not in [1, %d]", c.Batch, faMaxBatch)
	case c.ChunkSizeBytes < 1 || c.ChunkSizeBytes > engine.MaxChunkSizeBytes:
		return fmt.Errorf("chunk size %d not in [1, %d]", c.ChunkSizeBytes, engine.MaxChunkSizeBytes)
	case int64(c.Batch)*c.ChunkSizeBytes > transport.MaxPayloadBytes:
		return fmt.Errorf("batch %d × chunk size %d bytes is over a frame's payload limit %d", c.Batch, c.ChunkSizeBytes, transport.MaxPayloadBytes)
	case c.BlockSizeBytes < c.ChunkSizeBytes:
		return fmt.Errorf("block size %d bytes is smaller than a chunk (%d)", c.BlockSizeBytes, c.ChunkSizeBytes)
	case c.BlockSizeBytes > faContainerBytes:
		return fmt.Errorf("block size %d bytes is over the %d bytes the bench puts in a container", c.BlockSizeBytes, faContainerBytes)
	case c.RetainBytes < c.ChunkSizeBytes:
		return fmt.Errorf("retain %d bytes is less than a chunk (%d)", c.RetainBytes, c.ChunkSizeBytes)
	case c.Window < 1 || c.Window > faMaxWindow:
		return fmt.Errorf("window %d not in [1, %d]", c.Window, faMaxWindow)
	case c.Timeout < 0:
		return fmt.Errorf("negative timeout %v", c.Timeout)
	}
	if n := maxEntryBytes(c.Batch, c.ChunkSizeBytes); n > faMaxEntryBytes {
		return fmt.Errorf("batch %d of %d-byte chunks needs %d bytes of entry headers, over %d", c.Batch, c.ChunkSizeBytes, n, faMaxEntryBytes)
	}
	return nil
}

// maxEntryBytes bounds the entry data of one AppendEntries: batch
// WriteChunk headers (with their checksums) and as many DeleteBlocks.
func maxEntryBytes(batch int, chunk int64) int {
	const big = math.MaxUint64 >> 1
	wc := pipeline.AppendCommand(nil, &pipeline.Command{Kind: pipeline.KindWriteChunk, WriteChunk: transport.WriteChunk{
		PipelineID: big, ContainerID: big, LocalID: big, Offset: big, Length: big,
		BytesPerChecksum: engine.DefaultBytesPerChecksum,
		Checksums:        make([]uint32, engine.PieceCount(uint64(chunk), engine.DefaultBytesPerChecksum)),
	}})
	del := pipeline.AppendCommand(nil, &pipeline.Command{Kind: pipeline.KindDeleteBlock, Ref: transport.GetBlock{PipelineID: big, ContainerID: big, LocalID: big}})
	return 1 + (batch+1)*(len(wc)-1+len(del)-1)
}

// SyscallSummary is the datanode's system-call profile in a traced run.
type SyscallSummary struct {
	// Tool is what counted: "strace -f -c".
	Tool string `json:"tool"`
	// Scope says what was counted.
	Scope string `json:"scope"`
	// Total is strace's total line: every call of every thread of the
	// datanode, from its start to its exit.
	Total            int64   `json:"total"`
	Errors           int64   `json:"errors"`
	PerMessage       float64 `json:"per_message"`
	PerAppendEntries float64 `json:"per_append_entries"`
	// ByName maps a syscall to its calls.
	ByName map[string]int64 `json:"by_name"`
	// ThreadsCreated counts clone, clone3, fork and vfork.
	ThreadsCreated int64 `json:"threads_created"`
	// FdatasyncPerMessage counts fdatasync and fsync.
	FdatasyncPerMessage float64 `json:"fdatasync_per_message"`
	// Seconds is the time strace attributes to system calls.
	Seconds float64 `json:"seconds"`
	// Rows are strace's rows in printed order, with their errors and
	// times (what `spindle report` tabulates and charts).
	Rows []syscallprof.Syscall `json:"rows"`
	// TracedRun is the traced run's own throughput (slowed by strace;
	// the result's top-level figures come from the untraced run).
	TracedRun TracedRun `json:"traced_run"`
}

// TracedRun are the figures of the run under the tracer.
type TracedRun struct {
	Seconds float64 `json:"seconds"`
	OpsPerS float64 `json:"ops_per_s"`
	MBPerS  float64 `json:"mb_per_s"`
}

// FollowerAppendResult is the outcome of the bench: the standard result
// (ops = messages, latency per AppendEntries round trip) with the
// scenario's own top-level fields.
type FollowerAppendResult struct {
	bench.Result
	Messages          int64           `json:"messages"`
	Batch             int             `json:"batch"`
	AppendEntries     int64           `json:"append_entries"`
	ChunkSizeBytes    int64           `json:"chunk_size_bytes"`
	MessageDefinition string          `json:"message_definition"`
	Syscalls          *SyscallSummary `json:"syscalls,omitempty"`
}

// summarizeSyscalls turns an strace table into the per-message figures.
func summarizeSyscalls(p syscallprof.Profile, messages, appendEntries int64) *SyscallSummary {
	s := &SyscallSummary{
		Tool:    "strace -f -c",
		Scope:   "every thread of the datanode process from its start to its exit: start-up, the messages, shutdown",
		Total:   p.Total.Calls,
		Errors:  p.Total.Errors,
		Seconds: p.Total.Seconds,
		ByName:  make(map[string]int64, len(p.Syscalls)),
		Rows:    p.Syscalls,
	}
	for _, sc := range p.Syscalls {
		s.ByName[sc.Name] += sc.Calls
	}
	for _, n := range []string{"clone", "clone3", "fork", "vfork"} {
		s.ThreadsCreated += s.ByName[n]
	}
	s.PerMessage = round4(float64(s.Total) / float64(messages))
	s.PerAppendEntries = round4(float64(s.Total) / float64(appendEntries))
	s.FdatasyncPerMessage = round4(float64(s.ByName["fdatasync"]+s.ByName["fsync"]) / float64(messages))
	return s
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// faDirs are the directories of a bench run.
type faDirs struct {
	data, log string
	work      string   // ready files, datanode output, strace summary
	remove    []string // created by the bench, removed at the end
}

// prepareDir returns dir, creating it when missing (and noting the topmost
// directory created for removal), or a new temporary directory for "".
func (d *faDirs) prepareDir(dir, what string) (string, error) {
	if dir == "" {
		t, err := os.MkdirTemp("", "spindle-follower-append-"+what+"-")
		if err != nil {
			return "", fmt.Errorf("%s dir: %w", what, err)
		}
		d.remove = append(d.remove, t)
		return t, nil
	}
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		top := topmostMissing(dir)
		if err = os.MkdirAll(dir, 0o755); err == nil {
			d.remove = append(d.remove, top)
			st, err = os.Stat(dir)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%s dir: %w", what, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s dir %s is not a directory", what, dir)
	}
	return dir, nil
}

func (d *faDirs) cleanup() {
	if d.work != "" {
		removeScratch(d.work)
	}
	for _, r := range slices.Backward(d.remove) {
		removeScratch(r) // created by this run: all ours
	}
}

// RunFollowerAppend runs `spindle bench follower-append` (seed 000): a
// real datanode, started as a child process and made the follower of a
// test pipeline, receives cfg.Messages WriteChunks in AppendEntries of
// cfg.Batch from this process playing the raft leader over the wire
// protocol. A first run measures throughput and AppendEntries round trips;
// then the raw baseline (pwrite + fdatasync, one sync per AppendEntries'
// worth of chunks) runs on the same data directory; with ProfileSyscalls a
// second run traces the datanode with `strace -f -c` and reports its
// system calls per message. A figure that cannot be measured is an error,
// never a zero.
func RunFollowerAppend(ctx context.Context, cfg FollowerAppendConfig) (FollowerAppendResult, error) {
	if err := cfg.defaults(); err != nil {
		return FollowerAppendResult{}, fmt.Errorf("follower-append: %w", err)
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, cfg.Timeout, fmt.Errorf("the bench's timeout (%v) passed", cfg.Timeout))
		defer cancel()
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return FollowerAppendResult{}, fmt.Errorf("follower-append: the datanode binary: %w", err)
	}
	// strace is checked first, so that a bench that cannot profile fails
	// before its long untraced run.
	if cfg.ProfileSyscalls {
		path, err := findStrace(ctx, cfg.Strace, cfg.Binary)
		if err != nil {
			return FollowerAppendResult{}, fmt.Errorf("follower-append: --profile-syscalls: %w", err)
		}
		cfg.Strace = path
	}
	var dirs faDirs
	defer dirs.cleanup()
	var err error
	if dirs.data, err = dirs.prepareDir(cfg.DataDir, "data"); err != nil {
		return FollowerAppendResult{}, fmt.Errorf("follower-append: %w", err)
	}
	if dirs.log, err = dirs.prepareDir(cfg.LogDir, "log"); err != nil {
		return FollowerAppendResult{}, fmt.Errorf("follower-append: %w", err)
	}
	if dirs.work, err = os.MkdirTemp("", "spindle-follower-append-work-"); err != nil {
		return FollowerAppendResult{}, fmt.Errorf("follower-append: %w", err)
	}

	chunk := make([]byte, cfg.ChunkSizeBytes)
	bench.FillPseudoRandom(chunk, 1)
	lcfg := leaderConfig{
		Messages: cfg.Messages, Batch: cfg.Batch,
		Chunk: chunk, BPC: engine.DefaultBytesPerChecksum,
		Checksums:     engine.ComputeChecksums(nil, chunk, engine.DefaultBytesPerChecksum),
		Window:        cfg.Window,
		BlockSize:     cfg.BlockSizeBytes,
		BlocksPerCont: int(faContainerBytes / cfg.BlockSizeBytes),
		RetainBytes:   cfg.RetainBytes,
		Stall:         faStall,
		Progress:      cfg.Progress,
		Label:         "follower-append",
	}

	cfg.Logger.Info("follower-append: untraced run", "messages", cfg.Messages, "batch", cfg.Batch, "chunk_size_bytes", cfg.ChunkSizeBytes)
	st, err := runFollowerOnce(ctx, cfg, &dirs, lcfg, "run", "")
	if err != nil {
		return FollowerAppendResult{}, fmt.Errorf("follower-append: %w", err)
	}
	res := FollowerAppendResult{
		Result:   bench.Stats{Workers: 1, Ops: st.Messages, Bytes: st.Bytes, Elapsed: st.Elapsed, Latency: st.Latency, CPU: st.CPU}.Result("follower-append"),
		Messages: st.Messages, Batch: cfg.Batch, AppendEntries: st.AppendEntries,
		ChunkSizeBytes: cfg.ChunkSizeBytes, MessageDefinition: FollowerAppendMessage,
	}
	res.SetParam("data_dir", dirs.data)
	res.SetParam("log_dir", dirs.log)
	res.SetParam("window", cfg.Window)
	res.SetParam("block_size_bytes", cfg.BlockSizeBytes)
	res.SetParam("retain_bytes", cfg.RetainBytes)
	res.SetParam("bytes_per_checksum", engine.DefaultBytesPerChecksum)
	res.SetParam("datanode", cfg.Binary)
	res.SetParam("durable", true)
	res.Extra = map[string]any{
		"delete_blocks": st.DeleteBlocks,
		"blocks":        st.Blocks,
		"containers":    st.Containers,
		"heartbeats":    st.Heartbeats,
		"last_index":    st.LastIndex,
	}

	if !cfg.NoBaseline {
		cfg.Logger.Info("follower-append: raw baseline", "dir", dirs.data)
		base, err := bench.RunBaseline(ctx, bench.BaselineConfig{
			Dir:     filepath.Join(dirs.data, fmt.Sprintf("follower-append-%d-baseline", os.Getpid())),
			Writers: 1, ChunkSizeBytes: cfg.ChunkSizeBytes, WritesPerSync: cfg.Batch,
			MaxOps: cfg.Messages, FileSizeBytes: cfg.BlockSizeBytes, Pattern: bench.PatternAppend,
			Progress: cfg.Progress,
		})
		if err != nil {
			return res, fmt.Errorf("follower-append: baseline: %w", err)
		}
		res.SetBaseline(base)
		res.AddNote("baseline: one writer, pwrite of chunk_size_bytes into block-sized files on the data dir, an fdatasync per %d write(s) (one AppendEntries' worth); the follower also writes its log", cfg.Batch)
	}

	if cfg.ProfileSyscalls {
		cfg.Logger.Info("follower-append: traced run", "strace", cfg.Strace)
		out := filepath.Join(dirs.work, "strace.txt")
		tst, err := runFollowerOnce(ctx, cfg, &dirs, lcfg, "traced", out)
		if err != nil {
			return res, fmt.Errorf("follower-append: traced run: %w", err)
		}
		prof, err := syscallprof.ParseFile(out)
		if err != nil {
			return res, fmt.Errorf("follower-append: traced run: strace summary: %w", err)
		}
		if prof.Total.Calls <= 0 {
			return res, fmt.Errorf("follower-append: traced run: strace counted no system calls in %s", out)
		}
		if prof.Truncated() {
			res.AddNote("strace summary rows do not add up to its total (%d of %d calls)", prof.Rows.Calls, prof.Total.Calls)
		}
		s := summarizeSyscalls(prof, tst.Messages, tst.AppendEntries)
		tr := bench.Stats{Workers: 1, Ops: tst.Messages, Bytes: tst.Bytes, Elapsed: tst.Elapsed}.Result("traced")
		s.TracedRun = TracedRun{Seconds: tr.Seconds, OpsPerS: tr.OpsPerS, MBPerS: tr.MBPerS}
		res.Syscalls = s
	}
	return res, nil
}

// findStrace returns the strace binary and checks that it can trace here
// (ptrace may be forbidden in a container) by tracing `binary --version`.
func findStrace(ctx context.Context, path, binary string) (string, error) {
	if path == "" {
		p, err := exec.LookPath("strace")
		if err != nil {
			return "", errors.New("strace is not on PATH (install it: `make deps`, or apt-get install strace); no syscall figure is reported without it")
		}
		path = p
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(pctx, path, "-f", "-c", "-o", os.DevNull, "--", binary, "--version")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s cannot trace here (%v): %s", path, err, strings.TrimSpace(string(out)))
	}
	return path, nil
}

// runFollowerOnce starts a datanode on fresh subdirectories of the data
// and log dirs (under strace when straceOut is set), replicates to it,
// stops it and removes its directories.
func runFollowerOnce(ctx context.Context, cfg FollowerAppendConfig, dirs *faDirs, lcfg leaderConfig, name, straceOut string) (leaderStats, error) {
	sub := fmt.Sprintf("follower-append-%d-%s", os.Getpid(), name)
	dataDir, logDir := filepath.Join(dirs.data, sub), filepath.Join(dirs.log, sub)
	defer func() {
		removeScratch(dataDir)
		removeScratch(logDir)
	}()
	for _, d := range []string{dataDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return leaderStats{}, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return leaderStats{}, fmt.Errorf("leader: listen: %w", err)
	}
	spec := datanodeSpec{
		Binary: cfg.Binary, DataDir: dataDir, LogDir: logDir,
		LeaderAddr: ln.Addr().String(), WorkDir: dirs.work, Name: name,
	}
	if straceOut != "" {
		spec.Strace, spec.StraceOut = cfg.Strace, straceOut
	}
	p, err := startDatanode(ctx, spec)
	if err != nil {
		closeQuietly(ln)
		return leaderStats{}, err
	}
	out, err := transport.DialConn(ctx, p.addr, transport.ConnConfig{})
	if err != nil {
		closeQuietly(ln)
		p.kill()
		return leaderStats{}, fmt.Errorf("leader: %w%s", err, p.tail())
	}
	sess := startLeader(ctx, ln, out)
	cpu := bench.StartCPU([]bench.Proc{{Name: "follower", PID: p.pid}})
	st, err := sess.run(lcfg, p.done)
	u := cpu.Stop(st.Messages, st.Bytes)
	st.CPU = &u
	if err != nil {
		p.kill()
		sess.close()
		return st, fmt.Errorf("%w%s", err, p.tail())
	}
	// Stopped while the leader is still connected: its shutdown is seen
	// from its steady state.
	stopErr := p.stop()
	sess.close()
	if stopErr != nil {
		return st, stopErr
	}
	return st, nil
}

// WriteTable prints the result as a table, then the syscall profile.
func (r FollowerAppendResult) WriteTable(w io.Writer) error {
	if err := r.Result.WriteTable(w); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "messages=%d (WriteChunks) batch=%d append_entries=%d\n", r.Messages, r.Batch, r.AppendEntries)
	if s := r.Syscalls; s != nil {
		fmt.Fprintf(&b, "syscalls (%s, %s):\n", s.Tool, s.Scope)
		fmt.Fprintf(&b, "  total %d, %.2f per message, %.2f per AppendEntries; threads created %d; fdatasync+fsync %.3f per message\n",
			s.Total, s.PerMessage, s.PerAppendEntries, s.ThreadsCreated, s.FdatasyncPerMessage)
		fmt.Fprintf(&b, "  traced run: %.2f s, %.0f messages/s, %.2f MB/s\n", s.TracedRun.Seconds, s.TracedRun.OpsPerS, s.TracedRun.MBPerS)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  syscall\tcalls\tper message\t")
		names := slices.SortedFunc(maps.Keys(s.ByName), func(a, c string) int {
			if d := s.ByName[c] - s.ByName[a]; d != 0 {
				if d > 0 {
					return 1
				}
				return -1
			}
			return strings.Compare(a, c)
		})
		for _, n := range names {
			fmt.Fprintf(tw, "  %s\t%d\t%.3f\t\n", n, s.ByName[n], float64(s.ByName[n])/float64(max(r.Messages, 1)))
		}
		_ = tw.Flush() // into b, a strings.Builder: it cannot fail
	}
	_, err := io.WriteString(w, b.String())
	return err
}
