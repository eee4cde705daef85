// Package demo is `spindle demo`: Spindle's main job on its embedded
// default, end to end, in a temporary directory. Today that is the storage
// engine: write and read back some hundreds of MB with verification, close
// and scan the containers, reopen the engine and verify again, then short
// chunk-write benches; it prints a summary table. Later issues grow it into
// a whole cluster.
//
// Invariants: everything it creates is under one temporary directory,
// removed at the end (also on failure); every figure it prints was measured
// in this run; any mismatch is an error and a non-zero exit.
//
// Concurrency: Run starts and joins its own goroutines; one Run at a time.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

// Config sizes the demo.
type Config struct {
	// Dir is where the temporary directory goes ("" = os.TempDir()).
	Dir string
	// DataBytes is how much is written and read back (default 256 MiB).
	DataBytes int64
	// Writers write in parallel (default 4).
	Writers int
	// BenchDuration is the length of each short bench (default 2 s).
	BenchDuration time.Duration
	// Out receives progress and the summary table.
	Out io.Writer
}

const (
	demoChunkBytes = 1 << 20
	demoBlockBytes = 4 << 20
)

type row struct{ step, figures, result string }

// Run runs the demo.
func Run(ctx context.Context, cfg Config) error {
	if cfg.DataBytes <= 0 {
		cfg.DataBytes = 256 << 20
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 4
	}
	if cfg.BenchDuration <= 0 {
		cfg.BenchDuration = 2 * time.Second
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	tmp, err := os.MkdirTemp(cfg.Dir, "spindle-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := cfg.Out
	fmt.Fprintf(out, "spindle demo: storage engine in %s\n", tmp)

	var rows []row
	vols := []string{filepath.Join(tmp, "vol1"), filepath.Join(tmp, "vol2")}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() (*engine.Engine, error) {
		return engine.Open(engine.Config{DataDirs: vols, Logger: quiet})
	}
	e, err := open()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() { e.Close() }()

	// 1. Write.
	blocks := int(max(cfg.DataBytes/demoBlockBytes, 1))
	containers := cfg.Writers
	for i := 1; i <= containers; i++ {
		if err := e.CreateContainer(engine.ContainerID(i)); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	ids := make([]engine.BlockID, blocks)
	for i := range ids {
		ids[i] = engine.BlockID{Container: engine.ContainerID(1 + i%containers), Local: uint64(i + 1)}
	}
	fmt.Fprintf(out, "writing %s in %d blocks of %s (chunks of %s) from %d writers ...\n",
		units.FormatBytes(int64(blocks)*demoBlockBytes), blocks, units.FormatBytes(demoBlockBytes), units.FormatBytes(demoChunkBytes), cfg.Writers)
	start := time.Now()
	if err := parallel(cfg.Writers, blocks, func(i int) error { return writeBlock(e, ids[i]) }); err != nil {
		return err
	}
	if err := e.Sync(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	total := int64(blocks) * demoBlockBytes
	el := time.Since(start)
	st := e.SyncStats()
	rows = append(rows, row{"write (durable, PutBlock per block)",
		fmt.Sprintf("%s in %.2fs = %.0f MB/s; %d sync rounds, %d fdatasyncs", units.FormatBytes(total), el.Seconds(), float64(total)/1e6/el.Seconds(), st.Rounds, st.FileSyncs), "ok"})

	// 2. Read back and verify.
	readAll := func(label string) error {
		start := time.Now()
		err := parallel(cfg.Writers, blocks, func(i int) error { return verifyBlock(e, ids[i]) })
		if err != nil {
			return err
		}
		el := time.Since(start)
		rows = append(rows, row{label, fmt.Sprintf("%s in %.2fs = %.0f MB/s, every byte compared", units.FormatBytes(total), el.Seconds(), float64(total)/1e6/el.Seconds()), "ok"})
		return nil
	}
	fmt.Fprintln(out, "reading back and verifying ...")
	if err := readAll("read back (CRC32C per 16 KiB + compare)"); err != nil {
		return err
	}

	// 3. Close and scan.
	fmt.Fprintln(out, "closing and scanning containers ...")
	start = time.Now()
	var scanned uint64
	for i := 1; i <= containers; i++ {
		id := engine.ContainerID(i)
		if err := e.CloseContainer(id); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		res, err := e.ScanContainer(id)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if len(res.Damage) > 0 {
			return fmt.Errorf("demo: scan of container %d found damage: %v", id, res.Damage)
		}
		scanned += res.Bytes
	}
	rows = append(rows, row{"close + scan containers", fmt.Sprintf("%d CLOSED containers, %s verified in %.2fs", containers, units.FormatBytes(int64(scanned)), time.Since(start).Seconds()), "ok"})

	// 4. Reopen and verify again.
	if err := e.Close(); err != nil {
		return fmt.Errorf("demo: close: %w", err)
	}
	if e, err = open(); err != nil {
		return fmt.Errorf("demo: reopen: %w", err)
	}
	fmt.Fprintln(out, "reopened the engine; verifying again ...")
	if err := readAll("reopen + read back"); err != nil {
		return err
	}
	for _, ci := range e.ListContainers() {
		if ci.State != engine.StateClosed {
			return fmt.Errorf("demo: container %d is %s after reopen, want CLOSED", ci.ID, ci.State)
		}
	}
	if err := e.Close(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	// 5. Short benches.
	var results []bench.Result
	for _, b := range []struct {
		size    int64
		clients int
	}{{1 << 10, 16}, {1 << 20, 4}} {
		fmt.Fprintf(out, "bench chunk-write --local --chunk-size %s --clients %d --duration %s ...\n", units.FormatBytes(b.size), b.clients, cfg.BenchDuration)
		benchDir := filepath.Join(tmp, "bench")
		if err := os.MkdirAll(benchDir, 0o755); err != nil {
			return err
		}
		res, err := scenario.RunChunkWriteLocal(ctx, scenario.ChunkWriteLocalConfig{
			DataDirs: []string{benchDir}, ChunkSizeBytes: b.size, Clients: b.clients, Duration: cfg.BenchDuration,
			RetainBytes: 256 << 20, NoOverwriteBaseline: true, Progress: io.Discard, Logger: quiet,
		})
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		results = append(results, res)
		ratio := "-"
		if res.RatioToBaseline != nil {
			ratio = fmt.Sprintf("%.2f", *res.RatioToBaseline)
		}
		rows = append(rows, row{fmt.Sprintf("chunk-write %s x%d", units.FormatBytes(b.size), b.clients),
			fmt.Sprintf("%.0f writes/s, %.1f MB/s, p99 %.0f µs; raw pwrite+fdatasync %.0f/s; ratio %s", res.OpsPerS, res.MBPerS, res.LatencyUs.P99, res.Baseline.OpsPerS, ratio), "ok"})
	}

	fmt.Fprintln(out)
	fmt.Fprintln(out, "summary (figures measured in this run; MB = 10^6 bytes):")
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  step\tfigures\tresult")
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.step, r.figures, r.result)
	}
	tw.Flush()
	fmt.Fprintln(out)
	return bench.WriteTable(out, results...)
}

// parallel runs fn(0..n-1) on `workers` goroutines; the first error wins.
func parallel(workers, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if first != nil || next >= n {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// blockContent is the deterministic content of block b at offset off.
func blockContent(b engine.BlockID, off uint64, n int) []byte {
	p := make([]byte, n)
	bench.FillPseudoRandom(p, (uint64(b.Container)<<32|b.Local)^off*0x9E3779B97F4A7C15)
	return p
}

func writeBlock(e *engine.Engine, b engine.BlockID) error {
	bd := &engine.BlockData{ID: b, BytesPerChecksum: engine.DefaultBytesPerChecksum}
	for off := uint64(0); off < demoBlockBytes; off += demoChunkBytes {
		data := blockContent(b, off, demoChunkBytes)
		sums := engine.ComputeChecksums(nil, data, bd.BytesPerChecksum)
		if err := e.WriteChunk(b, off, data, bd.BytesPerChecksum, sums); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		bd.Chunks = append(bd.Chunks, engine.ChunkInfo{Offset: off, Length: demoChunkBytes, Checksums: sums})
		bd.Length += demoChunkBytes
	}
	if err := e.PutBlock(bd); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

func verifyBlock(e *engine.Engine, b engine.BlockID) error {
	bd, err := e.GetBlock(b)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if bd.Length != demoBlockBytes {
		return fmt.Errorf("demo: block %d/%d has %d bytes, wrote %d", b.Container, b.Local, bd.Length, demoBlockBytes)
	}
	buf := make([]byte, demoChunkBytes)
	for off := uint64(0); off < bd.Length; off += demoChunkBytes {
		got, err := e.ReadChunk(b, off, demoChunkBytes, buf)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if !bytes.Equal(got, blockContent(b, off, demoChunkBytes)) {
			return fmt.Errorf("demo: block %d/%d offset %d: bytes read differ from bytes written", b.Container, b.Local, off)
		}
	}
	return nil
}
