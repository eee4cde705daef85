package ecnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Steps of a conversion, named to the Hook after each.
const (
	StepRead    = "read"    // the logical bytes staged, verified
	StepEncode  = "encode"  // the shards staged
	StepStored  = "stored"  // one shard stored on its node (the Hook sees it per shard)
	StepReport  = "report"  // every shard stored; before the report
	StepDropped = "dropped" // a replica of an EC container deleted
	StepPolled  = "polled"  // a poll answered (container 0; before its work runs)
)

// WorkTimeout bounds a conversion or a rebuild: the meta service forgets
// one not reported in that time (ecmeta.TaskTimeout, the same).
const WorkTimeout = 10 * time.Minute

// ErrCrash is what a Hook returns to stop a conversion where it is, as a
// kill -9 would: nothing cleaned up, nothing reported.
var ErrCrash = errors.New("ecnode: crash injected")

// Worker runs a datanode's conversions.
type Worker struct {
	Eng   *engine.Engine
	Store *Store
	Meta  ecapi.Doer
	TLS   *tlsconf.Settings
	Node  uint64
	Log   *slog.Logger
	// Interval between polls (0: 1 s).
	Interval time.Duration
	// Hook, when set (tests), is called after each step with the
	// container and the step; an error stops the conversion there
	// (ErrCrash: as a crash would, leaving its files).
	Hook func(container uint64, step string) error
	// ScrubInterval is how often each stored shard is verified whole
	// (rebuild.go; 0: never). ScrubCorrupt counts the shards found
	// corrupt (quarantined).
	ScrubInterval time.Duration
	ScrubCorrupt  atomic.Uint64

	mu         sync.Mutex
	running    map[uint64]bool
	compacting map[uint64]bool
	rebuilding map[ecapi.ShardRef]bool
	scrubbed   map[ecapi.ShardRef]time.Time // (the poll goroutine's)
	wg         sync.WaitGroup
}

// Run polls the meta service until ctx ends, then waits for its
// conversions.
func (w *Worker) Run(ctx context.Context) {
	interval := w.Interval
	if interval <= 0 {
		interval = time.Second
	}
	w.mu.Lock()
	w.running, w.rebuilding, w.scrubbed = map[uint64]bool{}, map[ecapi.ShardRef]bool{}, map[ecapi.ShardRef]time.Time{}
	w.compacting = map[uint64]bool{}
	w.mu.Unlock()
	defer w.wg.Wait()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.poll(ctx); err != nil && ctx.Err() == nil {
			w.Log.Debug("ec: poll", "err", err)
		}
		if w.ScrubInterval > 0 {
			w.scrubOne(time.Now())
		}
	}
}

func (w *Worker) poll(ctx context.Context) error {
	held, err := w.Store.Held()
	if err != nil {
		return err
	}
	quarantined, err := w.Store.Quarantined()
	if err != nil {
		return err
	}
	w.mu.Lock()
	req := ecapi.WorkRequest{Node: w.Node, Shards: held, Inventory: true, Quarantined: quarantined}
	for cid := range w.running {
		req.Converting = append(req.Converting, cid)
	}
	for ref := range w.rebuilding {
		req.Rebuilding = append(req.Rebuilding, ref)
	}
	for cid := range w.compacting {
		req.Compacting = append(req.Compacting, cid)
	}
	w.mu.Unlock()
	slices.Sort(req.Converting)
	slices.Sort(req.Compacting)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	work, err := ecapi.GetWork(pctx, w.Meta, req)
	cancel()
	if err != nil {
		return err
	}
	_ = w.hook(0, StepPolled) // a signal for tests: nothing to stop
	w.repairWork(ctx, work)
	for _, cid := range work.Drop {
		if err := w.drop(cid); err != nil {
			w.Log.Warn("ec: drop the replica of an EC container", "container", cid, "err", err)
		}
	}
	for _, c := range work.Compact {
		w.runCompaction(ctx, c)
	}
	for _, c := range work.Convert {
		w.mu.Lock()
		if w.running[c.Container] {
			w.mu.Unlock()
			continue
		}
		w.running[c.Container] = true
		w.mu.Unlock()
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			start := time.Now()
			logical, err := w.Convert(ctx, c)
			if err != nil {
				w.Log.Warn("ec: conversion failed", "container", c.Container, "policy", c.Policy, "err", err)
			} else {
				secs := time.Since(start).Seconds()
				w.Log.Info("ec: container converted", "container", c.Container, "policy", c.Policy, "logical_bytes", logical,
					"seconds", fmt.Sprintf("%.3f", secs), "mb_per_s", fmt.Sprintf("%.1f", float64(logical)/1e6/max(secs, 1e-9)))
			}
			if errors.Is(err, ErrCrash) {
				return // a crashed conversion stays listed: the test restarts the node
			}
			w.mu.Lock()
			delete(w.running, c.Container)
			w.mu.Unlock()
		}()
	}
	return nil
}

// drop deletes this node's replica of an EC container (the meta service
// lists it only once the container's EC record is durable).
func (w *Worker) drop(cid uint64) error {
	err := w.Eng.DeleteContainer(engine.ContainerID(cid), false)
	if errors.Is(err, engine.ErrNotFound) {
		return nil
	}
	if err == nil {
		w.Log.Info("ec: replica of an erasure-coded container deleted", "container", cid)
		err = w.hook(cid, StepDropped)
	}
	return err
}

func (w *Worker) hook(cid uint64, step string) error {
	if w.Hook == nil {
		return nil
	}
	return w.Hook(cid, step)
}

// Convert runs one conversion (see the package comment) and returns the
// container's logical bytes.
func (w *Worker) Convert(ctx context.Context, c ecapi.Conversion) (logical int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, WorkTimeout) // (a target lost without a reset does not hang it)
	defer cancel()
	spec, err := ec.ParseSpec(c.Policy)
	if err != nil || !spec.Coded() || len(c.Targets) != spec.Shards() {
		return 0, fmt.Errorf("ecnode: conversion of container %d: policy %q for %d targets: %v", c.Container, c.Policy, len(c.Targets), err)
	}
	wk, err := w.startWork(fmt.Sprintf("work-%d", c.Container))
	if err != nil {
		return 0, err
	}
	defer wk.finish(&err)
	lf := wk.logical
	blocks, logical, err := w.stage(c.Container, lf)
	if err != nil {
		return 0, err
	}
	if err := w.hook(c.Container, StepRead); err != nil {
		return 0, err
	}
	dst, err := wk.createShards(spec.Shards())
	if err != nil {
		return 0, err
	}
	if err := ec.Encode(lf, logical, spec.Policy, c.Container, dst); err != nil {
		return 0, err
	}
	if err := w.hook(c.Container, StepEncode); err != nil {
		return 0, err
	}
	size := ec.ShardBytes(spec.Policy, logical)
	if err := wk.sendShards(func(i int, f *os.File) error {
		if err := bulk.PutShard(ctx, w.TLS, c.Targets[i].Addr, c.Container, i, f, size); err != nil {
			return err
		}
		return w.hook(c.Container, StepStored)
	}); err != nil {
		return 0, err
	}
	if err := w.hook(c.Container, StepReport); err != nil {
		return 0, err
	}
	rep := ecapi.Converted{Node: w.Node, Container: c.Container, Policy: spec.String(), Logical: uint64(logical), Blocks: blocks}
	for _, t := range c.Targets {
		rep.Nodes = append(rep.Nodes, t.Node)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	return logical, ecapi.ReportConverted(rctx, w.Meta, rep)
}

// readPiece is the size of one verified read of a block.
const readPiece = 4 << 20

// stage writes the container's logical bytes (its committed blocks in
// local ID order, each read verified) to f, and returns where each is.
func (w *Worker) stage(cid uint64, f *os.File) ([]ecapi.Block, int64, error) {
	id := engine.ContainerID(cid)
	info, err := w.Eng.Container(id)
	if err != nil {
		return nil, 0, err
	}
	if info.State != engine.StateClosed {
		return nil, 0, fmt.Errorf("ecnode: container %d is %s here, not CLOSED", cid, info.State)
	}
	var out []ecapi.Block
	var off int64
	buf := make([]byte, readPiece)
	after, first := uint64(0), true
	for {
		page, err := w.Eng.ListBlocks(id, after, first, 0)
		if err != nil {
			return nil, 0, err
		}
		for _, bd := range page {
			var crc uint32
			for pos := uint64(0); pos < bd.Length; pos += readPiece {
				n := min(uint64(readPiece), bd.Length-pos)
				data, err := w.Eng.ReadChunk(bd.ID, pos, n, buf)
				if err != nil {
					return nil, 0, err
				}
				crc = crc32c.Update(crc, data)
				if _, err := f.Write(data); err != nil {
					return nil, 0, err
				}
			}
			out = append(out, ecapi.Block{Local: bd.ID.Local, Offset: uint64(off), Length: bd.Length, CRC32C: crc})
			off += int64(bd.Length)
			after = bd.ID.Local
		}
		if len(page) < engine.ListBlocksMax {
			break
		}
		first = false
	}
	return out, off, nil
}

// work is a conversion's or a compaction's scratch directory under the
// store: the container's live bytes staged in "logical", then its shards
// encoded into "shard.N" before they are sent.
type work struct {
	dir     string
	logical *os.File
	shards  []*os.File
}

// startWork empties (or makes) the work directory name under the store
// and creates its logical file. The caller defers finish with its named
// error.
func (w *Worker) startWork(name string) (*work, error) {
	wk := &work{dir: filepath.Join(w.Store.Dir, name)}
	if err := os.RemoveAll(wk.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(wk.dir, 0o755); err != nil {
		return nil, err
	}
	lf, err := os.Create(filepath.Join(wk.dir, "logical"))
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(wk.dir))
	}
	wk.logical = lf
	return wk, nil
}

// createShards creates the n shard files; their writers, in shard order.
func (wk *work) createShards(n int) ([]io.Writer, error) {
	dst := make([]io.Writer, 0, n)
	for i := range n {
		f, err := os.Create(filepath.Join(wk.dir, fmt.Sprintf("shard.%d", i)))
		if err != nil {
			return nil, err
		}
		wk.shards = append(wk.shards, f)
		dst = append(dst, f)
	}
	return dst, nil
}

// finish closes the work's files (the first close error is kept in *errp
// when it holds none) and removes its directory, unless *errp is ErrCrash:
// a simulated crash leaves it as a real one would, for the restart to find.
func (wk *work) finish(errp *error) {
	for i := len(wk.shards) - 1; i >= 0; i-- {
		closeInto(wk.shards[i], errp)
	}
	closeInto(wk.logical, errp)
	if !errors.Is(*errp, ErrCrash) {
		*errp = errors.Join(*errp, os.RemoveAll(wk.dir))
	}
}

// sendShards sends every shard file, from its start, with put (to its
// target), all in parallel; each answer means verified and fsynced there.
func (wk *work) sendShards(put func(i int, f *os.File) error) error {
	errs := make([]error, len(wk.shards))
	var wg sync.WaitGroup
	for i, f := range wk.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				errs[i] = err
				return
			}
			errs[i] = put(i, f)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func closeInto(f *os.File, err *error) {
	if cerr := f.Close(); *err == nil && cerr != nil {
		*err = cerr
	}
}
