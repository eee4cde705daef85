package ecnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// Steps of a rebuild, named to the Hook.
const (
	StepRebuilt     = "rebuilt"     // the shard stored here, verified and fsynced; before the report
	StepQuarantined = "quarantined" // the scrubber took a corrupt shard out of service
)

// repairWork runs the repair part of a poll's answer: the leftover
// shards dropped (each only if its file is still the one listed), the
// quarantined copies of shards rebuilt elsewhere dropped, the rebuilds
// started, one goroutine each.
func (w *Worker) repairWork(ctx context.Context, work ecapi.Work) {
	for _, d := range work.DropShards {
		if ok, err := w.Store.Drop(d.ShardRef, d.MTime); err != nil {
			w.Log.Warn("ec: drop a shard no EC record names", "container", d.Container, "shard", d.Index, "err", err)
		} else if ok {
			w.Log.Info("ec: shard no EC record names deleted (a leftover or a moved shard's old copy)", "container", d.Container, "shard", d.Index)
		}
	}
	for _, q := range work.DropQuarantined {
		if ok, err := w.Store.DropQuarantined(q); err != nil {
			w.Log.Warn("ec: drop a quarantined shard rebuilt elsewhere", "container", q.Container, "shard", q.Index, "err", err)
		} else if ok {
			w.Log.Info("ec: quarantined shard deleted (rebuilt elsewhere)", "container", q.Container, "shard", q.Index)
		}
	}
	for _, r := range work.Rebuild {
		w.mu.Lock()
		if w.rebuilding[r.ShardRef] {
			w.mu.Unlock()
			continue
		}
		w.rebuilding[r.ShardRef] = true
		w.mu.Unlock()
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			start := time.Now()
			err := w.Rebuild(ctx, r)
			if err != nil {
				w.Log.Warn("ec: shard rebuild failed", "container", r.Container, "shard", r.Index, "err", err)
			} else {
				w.Log.Info("ec: shard rebuilt", "container", r.Container, "shard", r.Index, "seconds", fmt.Sprintf("%.3f", time.Since(start).Seconds()))
			}
			if errors.Is(err, ErrCrash) {
				return
			}
			w.mu.Lock()
			delete(w.rebuilding, r.ShardRef)
			w.mu.Unlock()
		}()
	}
}

// Rebuild reconstructs shard r.Index of r.Container from the other
// shards (each 16 KiB verified against its CRC32C, any k of them), stores
// it here (verified whole, fsynced, renamed into place) and only then
// reports it; the meta service records the new location once that report
// is durable. A crash before the report leaves a shard no record names
// (dropped at a later poll).
func (w *Worker) Rebuild(ctx context.Context, r ecapi.Rebuild) error {
	ctx, cancel := context.WithTimeout(ctx, WorkTimeout)
	defer cancel()
	spec, err := ec.ParseSpec(r.Policy)
	if err != nil || !spec.Coded() || len(r.Shards) != spec.Shards() || r.Index < 0 || r.Index >= spec.Shards() {
		return fmt.Errorf("ecnode: rebuild of shard %d of container %d: policy %q with %d shards: %v", r.Index, r.Container, r.Policy, len(r.Shards), err)
	}
	readers := make([]io.ReaderAt, len(r.Shards))
	var open []*bulk.ShardReader
	defer func() {
		for _, sr := range open {
			_ = sr.Close() // a connection: nothing to report
		}
	}()
	for j, sh := range r.Shards {
		if j == r.Index || sh.Addr == "" {
			continue
		}
		sr := &bulk.ShardReader{Sec: w.TLS, Addr: sh.Addr, Container: r.Container, Generation: r.Generation, Index: j, Timeout: 30 * time.Second}
		open = append(open, sr)
		readers[j] = sr
	}
	set, err := ec.Open(readers)
	if err != nil {
		return fmt.Errorf("ecnode: rebuild of shard %d of container %d: %w", r.Index, r.Container, err)
	}
	if set.Container() != r.Container || uint64(set.Size()) != r.Logical || set.Generation() != r.Generation {
		return fmt.Errorf("ecnode: rebuild of shard %d of container %d generation %d: the shards are of container %d generation %d, %d bytes", r.Index, r.Container, r.Generation, set.Container(), set.Generation(), set.Size())
	}
	if err := w.Store.put(r.ShardRef, false, func(f *os.File) error { return set.Rebuild(r.Index, f) }); err != nil {
		return err
	}
	if err := w.hook(r.Container, StepRebuilt); err != nil {
		return err
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	return ecapi.ReportRebuilt(rctx, w.Meta, ecapi.Rebuilt{Node: w.Node, ShardRef: r.ShardRef})
}

// scrubOne verifies the stored shard due first (each every
// ScrubInterval): header, checksum table and every 16 KiB against its
// CRC32C. A corrupt one is quarantined — never served again — and so
// missing from the next inventory: the meta service has it rebuilt from
// k others (here, when this node is fit).
func (w *Worker) scrubOne(now time.Time) {
	held, err := w.Store.Held()
	if err != nil {
		w.Log.Warn("ec: list the shards", "err", err)
		return
	}
	slices.SortFunc(held, func(a, b ecapi.HeldShard) int { return w.scrubbed[a.ShardRef].Compare(w.scrubbed[b.ShardRef]) })
	if len(held) == 0 || now.Sub(w.scrubbed[held[0].ShardRef]) < w.ScrubInterval {
		return
	}
	ref := held[0].ShardRef
	w.scrubbed[ref] = now
	f, err := os.Open(w.Store.PathOf(ref))
	if err != nil {
		return // dropped meanwhile
	}
	defer func() { _ = f.Close() }() // read only
	st, err := f.Stat()
	if err == nil {
		var info ec.ShardInfo
		info, err = ec.VerifyShard(f, st.Size())
		if err == nil && (info.Container != ref.Container || info.Index != ref.Index || info.Generation != ref.Generation) {
			err = fmt.Errorf("%w: file of shard %d of container %d holds shard %d of container %d", ec.ErrCorrupt, ref.Index, ref.Container, info.Index, info.Container)
		}
	}
	if err == nil || !errors.Is(err, ec.ErrCorrupt) {
		return
	}
	w.Log.Warn("ec: scrubber found a corrupt shard; quarantined, to be rebuilt", "container", ref.Container, "shard", ref.Index, "err", err)
	if qerr := w.Store.Quarantine(ref); qerr != nil {
		w.Log.Error("ec: quarantine a corrupt shard", "container", ref.Container, "shard", ref.Index, "err", qerr)
		return
	}
	w.ScrubCorrupt.Add(1)
	_ = w.hook(ref.Container, StepQuarantined) // (tests: a signal)
}
