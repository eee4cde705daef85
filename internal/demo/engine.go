package demo

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/units"
)

const (
	demoChunkBytes = 1 << 20
	demoBlockBytes = 4 << 20
)

// runEngine is part 1: the storage engine alone on two volumes.
func (d *demo) runEngine(ctx context.Context) error {
	cfg := d.cfg
	vols := []string{filepath.Join(d.tmp, "engine", "vol1"), filepath.Join(d.tmp, "engine", "vol2")}
	open := func() (*engine.Engine, error) {
		return engine.Open(engine.Config{DataDirs: vols, Logger: d.log})
	}
	d.say("1. storage engine on two volumes in %s", filepath.Join(d.tmp, "engine"))
	e, err := open()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() { _ = e.Close() }() // on an early return, its error the one; the Closes below are checked

	// Write.
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
	d.say("   writing %s in %d blocks of %s (chunks of %s) from %d writers ...",
		units.FormatBytes(int64(blocks)*demoBlockBytes), blocks, units.FormatBytes(demoBlockBytes), units.FormatBytes(demoChunkBytes), cfg.Writers)
	start := time.Now()
	if err := parallel(ctx, cfg.Writers, blocks, func(i int) error { return writeBlock(e, ids[i]) }); err != nil {
		return err
	}
	if err := e.Sync(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	total := int64(blocks) * demoBlockBytes
	el := time.Since(start)
	st := e.SyncStats()
	d.add("engine: write (durable, PutBlock per block)",
		fmt.Sprintf("%s in %.2fs = %.0f MB/s; %d sync rounds, %d fdatasyncs", units.FormatBytes(total), el.Seconds(), float64(total)/1e6/el.Seconds(), st.Rounds, st.FileSyncs))

	// Read back and verify.
	readAll := func(label string) error {
		start := time.Now()
		err := parallel(ctx, cfg.Writers, blocks, func(i int) error { return verifyBlock(e, ids[i]) })
		if err != nil {
			return err
		}
		el := time.Since(start)
		d.add(label, fmt.Sprintf("%s in %.2fs = %.0f MB/s, every byte compared", units.FormatBytes(total), el.Seconds(), float64(total)/1e6/el.Seconds()))
		return nil
	}
	d.say("   reading back and verifying ...")
	if err := readAll("engine: read back (CRC32C per 16 KiB + compare)"); err != nil {
		return err
	}

	// Close and scan.
	d.say("   closing and scanning containers ...")
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
	if scanned != uint64(total) {
		return fmt.Errorf("demo: scans verified %d bytes, %d were written", scanned, total)
	}
	d.add("engine: close + scan containers", fmt.Sprintf("%d CLOSED containers, %s verified in %.2fs", containers, units.FormatBytes(int64(scanned)), time.Since(start).Seconds()))

	// Reopen and verify again.
	if err := e.Close(); err != nil {
		return fmt.Errorf("demo: close: %w", err)
	}
	if e, err = open(); err != nil {
		return fmt.Errorf("demo: reopen: %w", err)
	}
	d.say("   reopened the engine; verifying again ...")
	if err := readAll("engine: reopen + read back"); err != nil {
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
	return nil
}

// parallel runs fn(0..n-1) on `workers` goroutines; the first error (or
// ctx's end) stops them and is returned.
func parallel(ctx context.Context, workers, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := 0
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				if first == nil && ctx.Err() != nil {
					first = ctx.Err()
				}
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
		})
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
	if err := e.PutBlock(bd, 0); err != nil {
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
