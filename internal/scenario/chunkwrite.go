package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/engine"
)

// ChunkWriteLocalConfig configures the engine-only chunk write bench.
type ChunkWriteLocalConfig struct {
	// DataDirs are the volumes; the bench works in a new subdirectory of
	// each and removes it at the end. Empty: one temporary directory.
	DataDirs []string
	// ChunkSizeBytes is the size of one WriteChunk (default 1 MiB).
	ChunkSizeBytes int64
	// Clients is the number of concurrent writers (default 16).
	Clients int
	// Duration and Count bound the run; at least one is required.
	Duration time.Duration
	Count    int64
	// BlockSizeBytes: a writer commits its block with PutBlock and starts
	// a new one when the next chunk would pass this size (default 64 MiB,
	// at least one chunk; Ozone's default block is 256 MiB).
	BlockSizeBytes int64
	// BytesPerChecksum is the checksum piece size (default 16 KiB).
	BytesPerChecksum uint32
	// Containers is how many OPEN containers the writers share (default 4).
	Containers int
	// RetainBytes bounds the data kept on disk: past it, writers delete
	// their oldest committed blocks (default 1 GiB). The overwrite
	// baseline's files add up to the same size.
	RetainBytes int64
	// SyncWorkers is the engine's group-commit parallelism (0: default).
	SyncWorkers int
	// NoBaseline skips the raw baselines.
	NoBaseline bool
	// NoOverwriteBaseline skips the second, overwrite-in-place baseline.
	NoOverwriteBaseline bool
	// Progress receives progress lines (nil: stderr when a terminal).
	Progress io.Writer
	// Logger for the engine (nil: discard).
	Logger *slog.Logger
}

// chunkLoadDefaults fills and checks what both chunk-write forms share:
// the chunk size (default 1 MiB), the clients (default 16) and the bound
// (a duration or a count, neither negative).
func chunkLoadDefaults(chunkSizeBytes *int64, clients *int, d time.Duration, count int64) error {
	if *chunkSizeBytes == 0 {
		*chunkSizeBytes = 1 << 20
	}
	if *chunkSizeBytes < 1 || *chunkSizeBytes > engine.MaxChunkSizeBytes {
		return fmt.Errorf("chunk size %d not in [1, %d]", *chunkSizeBytes, engine.MaxChunkSizeBytes)
	}
	if *clients == 0 {
		*clients = 16
	}
	if *clients < 1 || *clients > bench.MaxWorkers {
		return fmt.Errorf("clients %d not in [1, %d]", *clients, bench.MaxWorkers)
	}
	if d == 0 && count == 0 {
		return fmt.Errorf("no bound: give a duration or a count")
	}
	if d < 0 || count < 0 {
		return fmt.Errorf("negative duration or count")
	}
	return nil
}

func (c *ChunkWriteLocalConfig) defaults() error {
	if err := chunkLoadDefaults(&c.ChunkSizeBytes, &c.Clients, c.Duration, c.Count); err != nil {
		return err
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
	if c.RetainBytes == 0 {
		c.RetainBytes = 1 << 30
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// payloadVariants is how many distinct payloads each writer cycles
// through: one, as the baseline's writers use one buffer each, so that both
// read their source bytes from the same depth of the memory hierarchy (the
// engine neither compresses nor deduplicates, so repeats gain nothing).
const payloadVariants = 1

type payload struct {
	data []byte
	sums []uint32
}

// chunkWriter is one bench client: it appends chunks to its current block,
// commits full blocks, and deletes its oldest blocks past its share of the
// retention budget.
type chunkWriter struct {
	e          *engine.Engine
	container  engine.ContainerID
	nextLocal  uint64
	block      engine.BlockData
	blockMax   int64
	retained   []engine.BlockData // committed blocks, oldest first
	retainedB  int64
	retainMaxB int64
	payloads   []payload
	bpc        uint32
}

func (w *chunkWriter) writeOne(op int64) (int, error) {
	p := &w.payloads[op%int64(len(w.payloads))]
	if int64(w.block.Length)+int64(len(p.data)) > w.blockMax {
		if err := w.seal(); err != nil {
			return 0, err
		}
	}
	b := w.block.ID
	off := w.block.Length
	if err := w.e.WriteChunk(b, off, p.data, w.bpc, p.sums); err != nil {
		return 0, err
	}
	if err := w.e.Sync(); err != nil {
		return 0, err
	}
	w.block.Chunks = append(w.block.Chunks, engine.ChunkInfo{Offset: off, Length: uint64(len(p.data)), Checksums: p.sums})
	w.block.Length += uint64(len(p.data))
	return len(p.data), nil
}

// seal commits the current block and starts the next one.
func (w *chunkWriter) seal() error {
	if w.block.Length > 0 {
		if err := w.e.PutBlock(&w.block, 0); err != nil {
			return err
		}
		w.retained = append(w.retained, w.block)
		w.retainedB += int64(w.block.Length)
		for w.retainedB > w.retainMaxB && len(w.retained) > 1 {
			old := w.retained[0]
			// Inline, as the baseline truncates its file inline: both
			// pay for freeing space in the writer's own time.
			if err := w.e.DeleteBlock(old.ID); err != nil {
				return err
			}
			w.retained = w.retained[1:]
			w.retainedB -= int64(old.Length)
		}
	}
	w.nextLocal++
	w.block = engine.BlockData{ID: engine.BlockID{Container: w.container, Local: w.nextLocal}, BytesPerChecksum: w.bpc}
	return nil
}

// RunChunkWriteLocal runs `spindle bench chunk-write --local`: durable chunk
// writes straight into the engine (WriteChunk, then Sync, per operation; a
// PutBlock per full block), then the raw baseline (pwrite + fdatasync of the
// same size, one sync per write, same number of writers) on the same
// directory.
func RunChunkWriteLocal(ctx context.Context, cfg ChunkWriteLocalConfig) (bench.Result, error) {
	if err := cfg.defaults(); err != nil {
		return bench.Result{}, fmt.Errorf("chunk-write: %w", err)
	}
	var runDirs []string
	var tmp string
	if len(cfg.DataDirs) == 0 {
		d, err := os.MkdirTemp("", "spindle-bench-")
		if err != nil {
			return bench.Result{}, fmt.Errorf("chunk-write: %w", err)
		}
		tmp = d
		cfg.DataDirs = []string{d}
	}
	stamp := fmt.Sprintf("spindle-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	var made []string // data dirs this run created, removed at the end
	defer func() {
		for _, d := range runDirs {
			removeScratch(d)
		}
		for _, d := range made {
			removeScratch(d) // created by this run, parents included: all ours
		}
		if tmp != "" {
			removeScratch(tmp)
		}
	}()
	for _, d := range cfg.DataDirs {
		st, err := os.Stat(d)
		if errors.Is(err, os.ErrNotExist) {
			top := topmostMissing(d)
			if err = os.MkdirAll(d, 0o755); err == nil {
				made = append(made, top)
				st, err = os.Stat(d)
			}
		}
		if err != nil {
			return bench.Result{}, fmt.Errorf("chunk-write: data dir: %w", err)
		}
		if !st.IsDir() {
			return bench.Result{}, fmt.Errorf("chunk-write: data dir %s is not a directory", d)
		}
		runDirs = append(runDirs, filepath.Join(d, stamp))
	}

	e, err := engine.Open(engine.Config{DataDirs: runDirs, Logger: cfg.Logger, SyncWorkers: cfg.SyncWorkers})
	if err != nil {
		return bench.Result{}, fmt.Errorf("chunk-write: %w", err)
	}
	closeOnce := sync.OnceValue(e.Close)
	defer func() { _ = closeOnce() }() // on an early return; the run's end checks it
	for i := 1; i <= cfg.Containers; i++ {
		if err := e.CreateContainer(engine.ContainerID(i)); err != nil {
			return bench.Result{}, fmt.Errorf("chunk-write: %w", err)
		}
	}
	writers := make([]*chunkWriter, cfg.Clients)
	for i := range writers {
		w := &chunkWriter{
			e:          e,
			container:  engine.ContainerID(1 + i%cfg.Containers),
			nextLocal:  uint64(i) << 32, // disjoint local IDs per writer
			blockMax:   cfg.BlockSizeBytes,
			retainMaxB: max(cfg.RetainBytes/int64(cfg.Clients), cfg.BlockSizeBytes),
			bpc:        cfg.BytesPerChecksum,
		}
		// Payloads and their checksums are made before the clock starts:
		// computing checksums is the client's work, on another machine in
		// a real deployment; verifying them is the engine's, and counted.
		for v := 0; v < payloadVariants; v++ {
			data := make([]byte, cfg.ChunkSizeBytes)
			bench.FillPseudoRandom(data, uint64(i*payloadVariants+v+1))
			w.payloads = append(w.payloads, payload{data: data, sums: engine.ComputeChecksums(nil, data, cfg.BytesPerChecksum)})
		}
		if err := w.seal(); err != nil {
			return bench.Result{}, err
		}
		writers[i] = w
	}
	before := e.SyncStats()
	stats, err := bench.Loop(ctx, bench.LoopConfig{
		Workers: cfg.Clients, Duration: cfg.Duration, MaxOps: cfg.Count,
		Label: "chunk-write (engine)", Progress: cfg.Progress,
	}, func(ctx context.Context, worker int, op int64) (int, error) {
		return writers[worker].writeOne(op)
	})
	if err != nil {
		return bench.Result{}, fmt.Errorf("chunk-write: %w", err)
	}
	after := e.SyncStats()
	if err := closeOnce(); err != nil {
		return bench.Result{}, fmt.Errorf("chunk-write: close engine: %w", err)
	}
	res := stats.Result("chunk-write")
	res.SetParam("mode", "local")
	res.SetParam("data_dirs", cfg.DataDirs)
	res.SetParam("chunk_size_bytes", cfg.ChunkSizeBytes)
	res.SetParam("clients", cfg.Clients)
	res.SetParam("block_size_bytes", cfg.BlockSizeBytes)
	res.SetParam("bytes_per_checksum", cfg.BytesPerChecksum)
	res.SetParam("containers", cfg.Containers)
	res.SetParam("durable", true)
	rounds := after.Rounds - before.Rounds
	res.Extra = map[string]any{
		"sync_rounds":       rounds,
		"file_syncs":        after.FileSyncs - before.FileSyncs,
		"dir_syncs":         after.DirSyncs - before.DirSyncs,
		"meta_syncs":        after.MetaSyncs - before.MetaSyncs,
		"writes_per_round":  ratio(float64(stats.Ops), float64(rounds)),
		"file_syncs_per_op": ratio(float64(after.FileSyncs-before.FileSyncs), float64(stats.Ops)),
	}
	if stats.Ops == 0 {
		return res, errors.New("chunk-write: no write completed in the time given")
	}
	// The engine's data goes before the baseline runs in the same place, so
	// that both start from the same free space and the same memory (on
	// tmpfs, and in a VM, pages touched for the first time cost far more
	// than reused ones).
	for _, d := range runDirs {
		if err := os.RemoveAll(d); err != nil {
			return res, fmt.Errorf("chunk-write: %w", err)
		}
	}
	if !cfg.NoBaseline {
		// The ratio is taken against the raw loop that writes new space as
		// the engine does (each writer appends to a file of one block size,
		// truncated at the wrap); the overwrite loop, which rewrites space
		// already allocated (and on tmpfs, pages already in memory), is
		// reported beside it as the ceiling no store of new data reaches.
		base := bench.BaselineConfig{
			Dir: filepath.Join(runDirs[0], "baseline"), Writers: cfg.Clients, ChunkSizeBytes: cfg.ChunkSizeBytes,
			WritesPerSync: 1, Duration: cfg.Duration, MaxOps: cfg.Count,
			FileSizeBytes: cfg.BlockSizeBytes, Pattern: bench.PatternAppend, Progress: cfg.Progress,
		}
		app, err := bench.RunBaseline(ctx, base)
		if err != nil {
			return res, fmt.Errorf("chunk-write: baseline: %w", err)
		}
		res.SetBaseline(app)
		if !cfg.NoOverwriteBaseline {
			base.Pattern = bench.PatternOverwrite
			base.FileSizeBytes = max(cfg.RetainBytes/int64(cfg.Clients), cfg.ChunkSizeBytes)
			ow, err := bench.RunBaseline(ctx, base)
			if err != nil {
				return res, fmt.Errorf("chunk-write: overwrite baseline: %w", err)
			}
			res.Extra["baseline_overwrite"] = map[string]any{"ops_per_s": ow.OpsPerS, "mb_per_s": ow.MBPerS, "file_size_bytes": ow.FileSizeBytes}
		}
		if len(cfg.DataDirs) > 1 {
			res.AddNote("baseline measured on the first data dir only (%s)", cfg.DataDirs[0])
		}
	}
	return res, nil
}

// topmostMissing returns the highest ancestor of dir (or dir) that does
// not exist.
func topmostMissing(dir string) string {
	dir = filepath.Clean(dir)
	for {
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		if _, err := os.Stat(parent); err == nil {
			return dir
		}
		dir = parent
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return float64(int64(a/b*100+0.5)) / 100
}
