package ecnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// Steps of a compaction, named to the Hook after each.
const (
	StepCompactRead    = "compact-read"    // the live blocks staged, each verified
	StepCompactEncode  = "compact-encode"  // the new generation's shards staged
	StepCompactStoring = "compact-storing" // one shard about to be sent (per shard; tests hold some back)
	StepCompactStored  = "compact-stored"  // one shard stored on its node (per shard)
	StepCompactReport  = "compact-report"  // every shard stored; before the report
	StepCompacted      = "compacted"       // the report answered: the switch is durable
)

// runCompaction runs c on its own goroutine (one a container).
func (w *Worker) runCompaction(ctx context.Context, c ecapi.Compaction) {
	w.mu.Lock()
	if w.compacting[c.Container] {
		w.mu.Unlock()
		return
	}
	w.compacting[c.Container] = true
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		start := time.Now()
		logical, err := w.Compact(ctx, c)
		if err != nil {
			w.Log.Warn("ec: compaction failed", "container", c.Container, "generation", c.Generation, "err", err)
		} else {
			w.Log.Info("ec: container compacted", "container", c.Container, "generation", c.Generation, "logical_bytes", logical,
				"was", c.Logical, "seconds", fmt.Sprintf("%.3f", time.Since(start).Seconds()))
		}
		if errors.Is(err, ErrCrash) {
			return // a crashed compaction stays listed: the test restarts the node
		}
		w.mu.Lock()
		delete(w.compacting, c.Container)
		w.mu.Unlock()
	}()
}

// Compact runs one compaction, in this order: (1) read each live block
// of c through the current generation's shards (ec.Set: every 16 KiB
// verified, a stripe rebuilt from any k when needed) and check it whole
// against its CRC32C, into a staging file, one after another: the new
// logical bytes; (2) encode them as generation c.Generation; (3) store
// each shard on its target (verified whole and fsynced there before it
// answers), all of them; (4) report Compacted, which switches the record
// in one batch. A crash before (4) leaves the old generation, complete,
// the container's; the new shards are garbage, dropped at later polls.
// It returns the new logical bytes.
func (w *Worker) Compact(ctx context.Context, c ecapi.Compaction) (logical int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, WorkTimeout)
	defer cancel()
	spec, err := ec.ParseSpec(c.Policy)
	if err != nil || !spec.Coded() || len(c.Targets) != spec.Shards() || len(c.Shards) != spec.Shards() || c.Generation <= c.From {
		return 0, fmt.Errorf("ecnode: compaction of container %d: policy %q, %d shards, %d targets, generation %d from %d: %v",
			c.Container, c.Policy, len(c.Shards), len(c.Targets), c.Generation, c.From, err)
	}
	readers := make([]io.ReaderAt, len(c.Shards))
	var open []*bulk.ShardReader
	defer func() {
		for _, sr := range open {
			_ = sr.Close() // a connection: nothing to report
		}
	}()
	for j, sh := range c.Shards {
		if sh.Addr == "" {
			continue
		}
		sr := &bulk.ShardReader{Sec: w.TLS, Addr: sh.Addr, Container: c.Container, Generation: c.From, Index: j, Timeout: 30 * time.Second}
		open = append(open, sr)
		readers[j] = sr
	}
	set, err := ec.Open(readers)
	if err != nil {
		return 0, fmt.Errorf("ecnode: compaction of container %d: %w", c.Container, err)
	}
	if set.Container() != c.Container || set.Generation() != c.From || uint64(set.Size()) != c.Logical {
		return 0, fmt.Errorf("ecnode: compaction of container %d: the shards are of container %d generation %d, %d bytes", c.Container, set.Container(), set.Generation(), set.Size())
	}
	wk, err := w.startWork(fmt.Sprintf("work-c%d", c.Container))
	if err != nil {
		return 0, err
	}
	defer wk.finish(&err)
	lf := wk.logical
	blocks, err := stageLive(set, c, lf)
	if err != nil {
		return 0, err
	}
	if len(blocks) > 0 {
		last := blocks[len(blocks)-1]
		logical = int64(last.Offset + last.Length)
	}
	if err := w.hook(c.Container, StepCompactRead); err != nil {
		return 0, err
	}
	dst, err := wk.createShards(spec.Shards())
	if err != nil {
		return 0, err
	}
	if err := ec.EncodeGeneration(lf, logical, spec.Policy, c.Container, c.Generation, dst); err != nil {
		return 0, err
	}
	if err := w.hook(c.Container, StepCompactEncode); err != nil {
		return 0, err
	}
	size := ec.ShardBytes(spec.Policy, logical)
	if err := wk.sendShards(func(i int, f *os.File) error {
		if err := w.hook(c.Container, StepCompactStoring); err != nil {
			return err
		}
		if err := bulk.PutShardGeneration(ctx, w.TLS, c.Targets[i].Addr, c.Container, c.Generation, i, f, size); err != nil {
			return err
		}
		return w.hook(c.Container, StepCompactStored)
	}); err != nil {
		return 0, err
	}
	if err := w.hook(c.Container, StepCompactReport); err != nil {
		return 0, err
	}
	rep := ecapi.Compacted{Node: w.Node, Container: c.Container, From: c.From, Generation: c.Generation, Logical: uint64(logical), Blocks: blocks}
	for _, t := range c.Targets {
		rep.Nodes = append(rep.Nodes, t.Node)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	if err := ecapi.ReportCompacted(rctx, w.Meta, rep); err != nil {
		return 0, err
	}
	return logical, w.hook(c.Container, StepCompacted)
}

// stageLive writes c's live blocks, read from set at their offsets and
// each checked whole against its CRC32C, one after another to f, and
// returns where each now is.
func stageLive(set *ec.Set, c ecapi.Compaction, f *os.File) ([]ecapi.Block, error) {
	out := make([]ecapi.Block, 0, len(c.Blocks))
	buf := make([]byte, readPiece)
	var off uint64
	for _, b := range c.Blocks {
		if b.Offset+b.Length > c.Logical || b.Length > c.Logical {
			return nil, fmt.Errorf("ecnode: compaction of container %d: block %d at %d+%d past %d bytes", c.Container, b.Local, b.Offset, b.Length, c.Logical)
		}
		var crc uint32
		for pos := uint64(0); pos < b.Length; pos += readPiece {
			p := buf[:min(uint64(readPiece), b.Length-pos)]
			if n, err := set.ReadAt(p, int64(b.Offset+pos)); n != len(p) {
				return nil, fmt.Errorf("ecnode: compaction of container %d: read block %d at %d: %w", c.Container, b.Local, pos, err)
			}
			crc = crc32c.Update(crc, p)
			if _, err := f.Write(p); err != nil {
				return nil, err
			}
		}
		if crc != b.CRC32C {
			return nil, fmt.Errorf("%w: compaction of container %d: block %d crc32c %08x, recorded %08x", ec.ErrCorrupt, c.Container, b.Local, crc, b.CRC32C)
		}
		out = append(out, ecapi.Block{Local: b.Local, Offset: off, Length: b.Length, CRC32C: crc})
		off += b.Length
	}
	return out, nil
}
