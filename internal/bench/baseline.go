package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Baseline defaults and limits.
const (
	DefaultBaselineChunkSizeBytes = 1 << 20
	DefaultBaselineFileSizeBytes  = 256 << 20
	// MaxBaselineChunkSizeBytes bounds one pwrite (and one payload buffer).
	MaxBaselineChunkSizeBytes = 1 << 30
	// maxSyscallAttempts bounds retries of one pwrite/fdatasync on EINTR and
	// short writes.
	maxSyscallAttempts = 64
)

// BaselineConfig describes a raw-OS write baseline run.
type BaselineConfig struct {
	// Dir holds the files baseline-<i>.dat. It is created when missing (and
	// then removed at the end if empty); "" means a new temporary directory.
	Dir string
	// Writers is the number of goroutines, each writing its own file
	// (default 1).
	Writers int
	// ChunkSizeBytes is the size of one pwrite (default 1 MiB).
	ChunkSizeBytes int64
	// WritesPerSync is the sync cadence: one fdatasync after every N pwrites
	// of a writer (default 1). Writes still pending when the run stops are
	// synced before it returns, so every counted write is durable.
	WritesPerSync int
	// Duration and MaxOps bound the run; it stops at whichever comes first.
	// At least one must be positive.
	Duration time.Duration
	MaxOps   int64
	// FileSizeBytes bounds each writer's file: writing is sequential from
	// offset 0 and wraps to 0 when the next chunk would pass this size
	// (default 256 MiB), so disk use is at most Writers × FileSizeBytes.
	FileSizeBytes int64
	// Pattern is what happens at the wrap: PatternOverwrite (default)
	// rewrites the file in place, so every later write lands on space the
	// filesystem already allocated (and, on tmpfs, on pages already in
	// memory); PatternAppend truncates the file to zero first, so that every
	// write goes to newly allocated space, as a store writing new blocks
	// (and deleting old ones) does.
	Pattern string
	// Progress is as in LoopConfig (nil: stderr when it is a terminal).
	Progress io.Writer
}

// Baseline is the outcome of RunBaseline; it is also what a Result carries
// as its "baseline" object. MB is 10^6 bytes.
type Baseline struct {
	OpsPerS        float64        `json:"ops_per_s"`
	MBPerS         float64        `json:"mb_per_s"`
	Ops            int64          `json:"ops"`
	Bytes          int64          `json:"bytes"`
	Seconds        float64        `json:"seconds"`
	Syncs          int64          `json:"syncs"`
	LatencyUs      LatencySummary `json:"latency_us"`
	Dir            string         `json:"dir"`
	Writers        int            `json:"writers"`
	ChunkSizeBytes int64          `json:"chunk_size_bytes"`
	WritesPerSync  int            `json:"writes_per_sync"`
	FileSizeBytes  int64          `json:"file_size_bytes"`
	Pattern        string         `json:"pattern"`
	// CPUSeconds is this process's CPU time during the timed writes and
	// syncs (not the files' creation or removal); 0 when not measured.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
}

// Baseline write patterns, see BaselineConfig.Pattern.
const (
	PatternOverwrite = "overwrite"
	PatternAppend    = "append"
)

// Result presents the baseline as a bench result of scenario "baseline".
func (b Baseline) Result() Result {
	r := Result{
		Scenario:  "baseline",
		Ops:       b.Ops,
		Seconds:   b.Seconds,
		OpsPerS:   b.OpsPerS,
		Bytes:     b.Bytes,
		MBPerS:    b.MBPerS,
		LatencyUs: b.LatencyUs,
	}
	r.SetParam("dir", b.Dir)
	r.SetParam("writers", b.Writers)
	r.SetParam("chunk_size_bytes", b.ChunkSizeBytes)
	r.SetParam("writes_per_sync", b.WritesPerSync)
	r.SetParam("file_size_bytes", b.FileSizeBytes)
	r.SetParam("pattern", b.Pattern)
	r.Extra = map[string]any{"syncs": b.Syncs}
	return r
}

func (c BaselineConfig) withDefaults() (BaselineConfig, error) {
	if c.Writers == 0 {
		c.Writers = 1
	}
	if c.ChunkSizeBytes == 0 {
		c.ChunkSizeBytes = DefaultBaselineChunkSizeBytes
	}
	if c.WritesPerSync == 0 {
		c.WritesPerSync = 1
	}
	if c.FileSizeBytes == 0 {
		c.FileSizeBytes = DefaultBaselineFileSizeBytes
	}
	if c.Pattern == "" {
		c.Pattern = PatternOverwrite
	}
	switch {
	case c.Pattern != PatternOverwrite && c.Pattern != PatternAppend:
		return c, fmt.Errorf("bench: baseline: pattern %q, want %q or %q", c.Pattern, PatternOverwrite, PatternAppend)
	case c.Writers < 1 || c.Writers > MaxWorkers:
		return c, fmt.Errorf("bench: baseline: %d writers, want 1..%d", c.Writers, MaxWorkers)
	case c.ChunkSizeBytes < 1 || c.ChunkSizeBytes > MaxBaselineChunkSizeBytes:
		return c, fmt.Errorf("bench: baseline: chunk size %d bytes, want 1..%d", c.ChunkSizeBytes, MaxBaselineChunkSizeBytes)
	case c.WritesPerSync < 1:
		return c, fmt.Errorf("bench: baseline: writes per sync %d, want >= 1", c.WritesPerSync)
	case c.FileSizeBytes < c.ChunkSizeBytes:
		return c, fmt.Errorf("bench: baseline: file size %d bytes is smaller than a chunk (%d bytes)", c.FileSizeBytes, c.ChunkSizeBytes)
	case c.Duration < 0 || c.MaxOps < 0 || (c.Duration == 0 && c.MaxOps == 0):
		return c, fmt.Errorf("bench: baseline: bounds duration %v and max ops %d: want at least one positive and none negative", c.Duration, c.MaxOps)
	}
	return c, nil
}

// RunBaseline measures the raw OS write path that the engine is compared
// with: Writers goroutines, each doing pwrite(ChunkSizeBytes) sequentially
// into its own file with an fdatasync after every WritesPerSync writes,
// through golang.org/x/sys/unix on a bare file descriptor (deliberately not
// through vfs or any other abstraction). Payloads are non-zero pseudo-random
// bytes. The latency of a write runs from the start of its pwrite to the
// completion of the fdatasync that made it durable. The files are deleted
// before RunBaseline returns. On error (e.g. ENOSPC) or cancellation, the
// figures measured so far are returned with the error.
func RunBaseline(ctx context.Context, cfg BaselineConfig) (res Baseline, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return Baseline{}, err
	}
	dir, removeDir, err := baselineDir(cfg.Dir)
	if err != nil {
		return Baseline{}, err
	}
	writers := make([]*baselineWriter, 0, cfg.Writers)
	defer func() {
		for _, bw := range writers {
			err = errors.Join(err, bw.close())
		}
		if removeDir {
			if rerr := os.Remove(dir); rerr != nil {
				err = errors.Join(err, fmt.Errorf("bench: baseline: remove %s: %w", dir, rerr))
			}
		}
	}()
	for i := range cfg.Writers {
		bw, err := openBaselineWriter(dir, i, cfg)
		if err != nil {
			return Baseline{}, err
		}
		writers = append(writers, bw)
	}

	st, err := runLoop(ctx,
		LoopConfig{Workers: cfg.Writers, Duration: cfg.Duration, MaxOps: cfg.MaxOps, Label: "baseline", Progress: cfg.Progress},
		func(_ context.Context, w *worker, _ int64) (int, error) {
			return writers[w.id].write(w.lat)
		},
		func(_ context.Context, w *worker) error {
			return writers[w.id].sync(w.lat)
		})
	res = Baseline{
		Dir:            dir,
		Writers:        cfg.Writers,
		ChunkSizeBytes: cfg.ChunkSizeBytes,
		WritesPerSync:  cfg.WritesPerSync,
		FileSizeBytes:  cfg.FileSizeBytes,
		Pattern:        cfg.Pattern,
	}
	r := st.Result("baseline")
	res.Ops, res.Bytes, res.Seconds, res.OpsPerS, res.MBPerS, res.LatencyUs = r.Ops, r.Bytes, r.Seconds, r.OpsPerS, r.MBPerS, r.LatencyUs
	if st.CPU != nil {
		res.CPUSeconds = st.CPU.CPUSeconds
	}
	for _, bw := range writers {
		res.Syncs += bw.syncs
	}
	if err != nil {
		return res, fmt.Errorf("bench: baseline in %s: %w", dir, err)
	}
	return res, nil
}

// baselineDir returns the directory to use and whether RunBaseline created it
// (and so removes it at the end).
func baselineDir(dir string) (string, bool, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "spindle-baseline-")
		if err != nil {
			return "", false, fmt.Errorf("bench: baseline: create temporary directory: %w", err)
		}
		return d, true, nil
	}
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return dir, false, nil
	case err == nil:
		return "", false, fmt.Errorf("bench: baseline: %s is not a directory", dir)
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", false, fmt.Errorf("bench: baseline: create %s: %w", dir, err)
		}
		return dir, true, nil
	default:
		return "", false, fmt.Errorf("bench: baseline: %w", err)
	}
}

// baselineWriter is one writer's file and state; used by one goroutine only.
type baselineWriter struct {
	id       int
	path     string
	fd       int
	buf      []byte
	off      int64
	fileSize int64
	truncate bool // PatternAppend: truncate to zero at the wrap
	perSync  int
	pending  []time.Time // start times of writes not yet covered by a sync
	syncs    int64
}

func openBaselineWriter(dir string, i int, cfg BaselineConfig) (*baselineWriter, error) {
	path := filepath.Join(dir, fmt.Sprintf("baseline-%d.dat", i))
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: baseline writer %d: open %s: %w", i, path, err)
	}
	buf := make([]byte, cfg.ChunkSizeBytes)
	rng := rand.New(rand.NewPCG(uint64(i)+1, 0x5350494e444c45)) // "SPINDLE"
	for j := range buf {
		buf[j] = byte(rng.IntN(255)) + 1 // never zero: no sparse-file or zero-page shortcuts
	}
	return &baselineWriter{
		id: i, path: path, fd: fd, buf: buf, fileSize: cfg.FileSizeBytes, truncate: cfg.Pattern == PatternAppend,
		perSync: cfg.WritesPerSync, pending: make([]time.Time, 0, cfg.WritesPerSync),
	}, nil
}

// write issues one pwrite at the current offset and, every perSync writes,
// the fdatasync that completes them (recording their latencies into lat).
func (bw *baselineWriter) write(lat *Latency) (int, error) {
	if bw.off+int64(len(bw.buf)) > bw.fileSize {
		bw.off = 0
		if bw.truncate {
			// Writes before the wrap are made durable first, so every
			// counted write was durable once, as the engine's are.
			if err := bw.sync(lat); err != nil {
				return 0, err
			}
			if err := unix.Ftruncate(bw.fd, 0); err != nil {
				return 0, fmt.Errorf("baseline writer %d: ftruncate %s: %w", bw.id, bw.path, err)
			}
		}
	}
	start := time.Now()
	if err := pwriteFull(bw.fd, bw.buf, bw.off); err != nil {
		return 0, fmt.Errorf("baseline writer %d: pwrite %d bytes to %s at offset %d: %w", bw.id, len(bw.buf), bw.path, bw.off, err)
	}
	bw.off += int64(len(bw.buf))
	bw.pending = append(bw.pending, start)
	if len(bw.pending) >= bw.perSync {
		if err := bw.sync(lat); err != nil {
			return 0, err
		}
	}
	return len(bw.buf), nil
}

// sync fdatasyncs the file if writes are pending and records their latencies.
func (bw *baselineWriter) sync(lat *Latency) error {
	if len(bw.pending) == 0 {
		return nil
	}
	if err := fdatasync(bw.fd); err != nil {
		return fmt.Errorf("baseline writer %d: fdatasync %s: %w", bw.id, bw.path, err)
	}
	done := time.Now()
	for _, s := range bw.pending {
		lat.Record(done.Sub(s))
	}
	bw.pending = bw.pending[:0]
	bw.syncs++
	return nil
}

// close closes and deletes the file.
func (bw *baselineWriter) close() error {
	var err error
	if bw.fd >= 0 {
		if cerr := unix.Close(bw.fd); cerr != nil {
			err = fmt.Errorf("bench: baseline writer %d: close %s: %w", bw.id, bw.path, cerr)
		}
		bw.fd = -1
	}
	if rerr := os.Remove(bw.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("bench: baseline writer %d: %w", bw.id, rerr))
	}
	return err
}

// pwriteFull writes all of b at off, retrying EINTR and short writes a
// bounded number of times.
func pwriteFull(fd int, b []byte, off int64) error {
	for attempt := 0; len(b) > 0; attempt++ {
		if attempt == maxSyscallAttempts {
			return fmt.Errorf("%d bytes left after %d attempts: %w", len(b), attempt, io.ErrShortWrite)
		}
		n, err := unix.Pwrite(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// fdatasync retries EINTR a bounded number of times.
func fdatasync(fd int) error {
	var err error
	for range maxSyscallAttempts {
		if err = unix.Fdatasync(fd); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
	return err
}
