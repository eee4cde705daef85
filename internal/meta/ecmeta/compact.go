package ecmeta

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/units"
)

// Compaction of EC containers (issue 37 item 5). A block deleted from an
// EC container keeps its pending deletion (package cluster leaves the
// deletions of EC containers alone) and its bytes in the shards. When a
// container's live bytes (its record's blocks without a pending
// deletion) fall under CompactPolicy.Below of its logical bytes and at
// least CompactPolicy.MinBytes would be freed, a datanode's poll gets the
// compaction (Work.Compact): it reads the live blocks through the
// container's shards (every byte verified), lays them out one after
// another as the logical bytes of the next generation, encodes them, stores
// every shard of that generation on its target (verified, fsynced,
// renamed: a generation's shard files have names of their own, so both
// generations coexist on a node) and only then reports Compacted. The
// switch is one batch: the record rewritten (the new generation, its
// nodes, the blocks at their new offsets) and the pending deletions of the
// blocks left out removed, done. Until that batch the old record and its
// complete generation stand (readers keep reading it); after it the new
// one, and the old generation's shards, named by no record, are dropped at
// their nodes' next polls (DropShards, mtime-guarded). A compaction is
// accepted only from the one in flight and only if the record is still
// the generation it read.

// Limits of the compactions.
const (
	// MaxCompactions bounds the compactions in flight in the cluster (a
	// datanode runs one conversion or compaction at a time).
	MaxCompactions = 2
	// DefaultCompactBelow and DefaultCompactMinBytes: CompactPolicy's
	// defaults.
	DefaultCompactBelow    = 0.5
	DefaultCompactMinBytes = 64 << 20
	// Pauses before a container whose compaction failed is compacted
	// again: doubled at each failure in a row, from CompactRetryFirst to
	// CompactRetryMax.
	CompactRetryFirst = time.Second
	CompactRetryMax   = 5 * time.Minute
)

// CompactPolicy says which EC containers are compacted.
type CompactPolicy struct {
	// Below: a container is compacted when its live bytes are under this
	// fraction of its logical bytes (0: never; below 1).
	Below float64
	// MinBytes: ... and at least this many logical bytes would be freed
	// (tiny containers are not rewritten for little).
	MinBytes units.ByteSize
}

// Compaction is the policy of the Managers made after it is set (New
// copies it): the meta service's flags (AddFlags) bind to it.
var Compaction = CompactPolicy{Below: DefaultCompactBelow, MinBytes: DefaultCompactMinBytes}

// AddFlags binds Compaction to f: --ec-compact-below (a fraction in
// [0, 1), refused otherwise), --ec-compact-min-bytes.
func AddFlags(f *pflag.FlagSet) {
	f.Var((*fraction)(&Compaction.Below), "ec-compact-below", "an erasure-coded container is rewritten without its deleted blocks once its live bytes are under this fraction of its bytes (0: never) ...")
	f.Var(&Compaction.MinBytes, "ec-compact-min-bytes", "... and that frees at least this many bytes (e.g. 64MiB)")
}

// fraction is --ec-compact-below's value: checked when set.
type fraction float64

func (v *fraction) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
func (v *fraction) Type() string   { return "fraction" }
func (v *fraction) Set(s string) error {
	x, err := strconv.ParseFloat(s, 64)
	if err == nil {
		err = CompactPolicy{Below: x}.Validate()
	}
	if err != nil {
		return fmt.Errorf("want a fraction of at least 0 (never) and under 1: %v", err)
	}
	*v = fraction(x)
	return nil
}

// Validate refuses a fraction outside [0, 1).
func (p CompactPolicy) Validate() error {
	if !(p.Below >= 0 && p.Below < 1) || p.MinBytes < 0 {
		return fmt.Errorf("ecmeta: compaction below %v of a container's bytes, freeing %d: want 0 (never) up to under 1, and bytes ≥ 0", p.Below, p.MinBytes)
	}
	return nil
}

// Wants says whether a container of logical bytes with live bytes still
// referenced is to be compacted.
func (p CompactPolicy) Wants(logical, live uint64) bool {
	return p.Below > 0 && live <= logical && float64(live) < p.Below*float64(logical) && logical-live >= uint64(max(p.MinBytes, 1))
}

// compactCandidate is an EC container as the policy sees it.
type compactCandidate struct {
	Container, Logical, Live uint64
}

// pickCompactions is the containers the policy wants compacted, most
// bytes to free first (then by ID), at most n.
func pickCompactions(cands []compactCandidate, p CompactPolicy, n int) []uint64 {
	var want []compactCandidate
	for _, c := range cands {
		if p.Wants(c.Logical, c.Live) {
			want = append(want, c)
		}
	}
	slices.SortFunc(want, func(a, b compactCandidate) int {
		return cmp.Or(cmp.Compare(b.Logical-b.Live, a.Logical-a.Live), cmp.Compare(a.Container, b.Container))
	})
	var out []uint64
	for _, c := range want[:min(n, len(want))] {
		out = append(out, c.Container)
	}
	return out
}

// compactions is the memory of the compactions (this stint).
type compactions struct {
	done, failed, reclaimed uint64
	fails                   map[uint64]failure // container → its last failed compaction (the pause)
	lastGen                 map[uint64]uint32  // container → the last generation handed out
}

// liveBlocks is l's blocks without a pending deletion (st.Deletes), and
// their bytes. Under State.Mu.
func liveBlocks(st *state.State, cid uint64, l *layoutMem) ([]ecapi.Block, uint64) {
	pending := st.Deletes[cid]
	var keep []ecapi.Block
	var live uint64
	for _, b := range l.blocks {
		if pending[b.Local] == nil {
			keep = append(keep, b)
			live += b.Length
		}
	}
	return keep, live
}

// completeDeletes adds to b the removal of cid's pending deletions of
// blocks its new record (blocks) does not hold — done: no generation of
// its shards holds them — and removes them from memory. Under State.Mu
// (write), in the batch that writes the record.
func completeDeletes(st *state.State, b *pebble.Batch, cid uint64, blocks []ecapi.Block) {
	held := map[uint64]bool{}
	for _, bl := range blocks {
		held[bl.Local] = true
	}
	done := 0
	for _, local := range slices.Sorted(maps.Keys(st.Deletes[cid])) {
		if !held[local] {
			state.Del(b, state.BlockKey(state.PrefixDelete, cid, local))
			st.RemoveDelete(state.BlockRef{Container: cid, Local: local})
			done++
		}
	}
	st.Metrics.DeletesAcked.Add(float64(done))
}

// scheduleCompaction hands node (HEALTHY, in service, running no
// EC task) the compaction of the EC container the policy wants most, if
// any: no shard of it missing or moving, no rebuild or other task of it
// in flight, its last failure's pause over, its new shards placed.
// Under State.Mu and m.mu.
func scheduleCompaction(m *Manager, node uint64, now time.Time) (ecapi.Compaction, bool) {
	if n := m.st.NodeByID[node]; n == nil || m.cl.HealthOf(n, now) != metaapi.HealthHealthy || !m.cl.InService(node) {
		return ecapi.Compaction{}, false
	}
	busy := map[uint64]bool{}
	for ref := range m.repairs {
		busy[ref.Container] = true
	}
	var cands []compactCandidate
	for cid, l := range m.layout {
		if m.tasks[cid] != nil || busy[cid] || now.Before(m.cp.fails[cid].next) {
			continue
		}
		if present, _, moving := m.counts(cid, l, now); present < len(l.nodes) || len(moving) > 0 {
			continue
		}
		_, live := liveBlocks(m.st, cid, l)
		cands = append(cands, compactCandidate{Container: cid, Logical: l.logical, Live: live})
	}
	for _, cid := range pickCompactions(cands, m.compact, len(cands)) {
		l := m.layout[cid]
		gen := max(l.gen, m.cp.lastGen[cid]) + 1
		spec, err := ec.ParseSpec(l.policy)
		if err != nil || gen > bulk.MaxGeneration {
			continue
		}
		targets, err := m.placeLocked(cid, spec, now)
		if err != nil {
			if why := "compaction: " + err.Error(); m.refused[cid] != why {
				m.refused[cid] = why
				m.st.Log.Warn("EC compaction not placed", "container", cid, "policy", l.policy, "err", err)
			}
			continue
		}
		delete(m.refused, cid)
		keep, live := liveBlocks(m.st, cid, l)
		c := ecapi.Compaction{Container: cid, From: l.gen, Generation: gen, Policy: l.policy, Logical: l.logical, Blocks: keep}
		for _, h := range l.nodes {
			sh := ecapi.Shard{Node: h}
			if hn := m.st.NodeByID[h]; hn != nil && m.cl.HealthOf(hn, now) != metaapi.HealthDead {
				sh.Addr = hn.Rec.Addr
			}
			c.Shards = append(c.Shards, sh)
		}
		for _, id := range targets {
			c.Targets = append(c.Targets, ecapi.Shard{Node: id, Addr: m.st.NodeByID[id].Rec.Addr})
		}
		m.tasks[cid] = &task{node: node, targets: targets, started: now, compact: true, gen: gen, from: l.gen, keep: keep}
		m.cp.lastGen[cid] = gen
		m.st.Log.Info("EC compaction scheduled", "container", cid, "generation", gen, "logical_bytes", l.logical, "live_bytes", live,
			"compactor", node, "targets", targets)
		return c, true
	}
	return ecapi.Compaction{}, false
}

// failedAt counts a compaction of cid that will not report (failed) and
// returns its failures in a row and the pause before cid is compacted
// again. Under m.mu.
func (c *compactions) failedAt(cid uint64, now time.Time) (int, time.Duration) {
	f := c.fails[cid]
	f.inRow++
	pause := CompactRetryMax
	if f.inRow <= 9 { // 1 s << 9 is past the cap
		pause = min(CompactRetryFirst<<(f.inRow-1), CompactRetryMax)
	}
	f.next = now.Add(pause)
	c.fails[cid] = f
	c.failed++
	return f.inRow, pause
}

// Compacted records a finished compaction: one batch switches the
// container's record to the new generation (its shards fsynced on their
// nodes: the compactor reports only then) and removes the pending
// deletions of the blocks it does not hold (completeDeletes). Only the compaction in flight may
// report, only while the record is the generation it read, and only with
// the blocks it was given, each at the same length and CRC. From the
// answer on, the old generation's shards are dropped.
//
// Over TLS the caller must be the compactor the report names.
func (m *Manager) Compacted(r ecapi.Compacted, caller tlsconf.Peer) error {
	var rec Record
	var oldRaw, newRaw uint64
	_, err := state.Mutate(m.st, func() (struct{}, *pebble.Batch, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, err := m.reporterLocked(r.Node, caller, "compaction report", metaapi.ErrInvalid)
		if err != nil {
			return struct{}{}, nil, err
		}
		old, err := m.record(r.Container)
		if err != nil {
			return struct{}{}, nil, err
		}
		if old.Generation == r.Generation && slices.Equal(old.Nodes, r.Nodes) && old.Logical == r.Logical {
			return struct{}{}, nil, errRepeated // (its answer was lost: the client retried)
		}
		t := m.tasks[r.Container]
		if t == nil || !t.compact || t.node != r.Node || t.reporting || t.gen != r.Generation || t.from != r.From || !slices.Equal(t.targets, r.Nodes) {
			return struct{}{}, nil, fmt.Errorf("%w: no compaction of container %d by datanode %d to generation %d on %v in flight", metaapi.ErrInvalid, r.Container, r.Node, r.Generation, r.Nodes)
		}
		if old.Generation != t.from {
			return struct{}{}, nil, fmt.Errorf("%w: container %d is at generation %d, the compaction read %d", metaapi.ErrInvalid, r.Container, old.Generation, t.from)
		}
		if len(r.Blocks) != len(t.keep) {
			return struct{}{}, nil, fmt.Errorf("%w: compaction of container %d: %d blocks, %d given", metaapi.ErrInvalid, r.Container, len(r.Blocks), len(t.keep))
		}
		for i, b := range r.Blocks {
			if k := t.keep[i]; b.Local != k.Local || b.Length != k.Length || b.CRC32C != k.CRC32C {
				return struct{}{}, nil, fmt.Errorf("%w: compaction of container %d: block %d is %+v, was %+v", metaapi.ErrInvalid, r.Container, i, b, k)
			}
		}
		rec = Record{Container: r.Container, Generation: r.Generation, Converted: old.Converted, Policy: old.Policy, Logical: r.Logical, Nodes: r.Nodes, Blocks: r.Blocks}
		if err := rec.check(); err != nil {
			return struct{}{}, nil, fmt.Errorf("%w: compaction of container %d: %v", metaapi.ErrInvalid, r.Container, err)
		}
		spec, _ := ec.ParseSpec(rec.Policy)
		oldRaw = uint64(len(old.Nodes)) * uint64(ec.ShardBytes(spec.Policy, int64(old.Logical)))
		newRaw = uint64(len(rec.Nodes)) * uint64(ec.ShardBytes(spec.Policy, int64(rec.Logical)))
		t.reporting = true
		b := m.st.Store.NewBatch()
		state.Set(b, ContainerKey(r.Container), rec.Encode())
		completeDeletes(m.st, b, r.Container, rec.Blocks)
		return struct{}{}, b, nil
	})
	if errors.Is(err, errRepeated) {
		return nil
	}
	m.st.Mu.RLock()
	defer m.st.Mu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLocked() != nil {
		return err
	}
	t := m.tasks[r.Container]
	if err != nil {
		if t != nil && t.compact && t.node == r.Node && !errors.Is(err, metaapi.ErrInvalid) && !errors.Is(err, metaapi.ErrForbidden) {
			// Not applied (a failure after the apply ends the stint or
			// fails the store: memory is loaded again from the store).
			t.reporting = false
		}
		return err
	}
	// Durable (Mutate waited): the new generation is the container's.
	now := m.st.Cfg.Now()
	m.layout[r.Container], _ = loadLayout(rec.Encode(), now)
	delete(m.tasks, r.Container)
	delete(m.cp.fails, r.Container)
	for _, ref := range slices.Collect(maps.Keys(m.repairs)) {
		if ref.Container == r.Container && ref.Generation != rec.Generation {
			delete(m.repairs, ref) // (of the old generation: their reports are refused)
		}
	}
	m.cp.done++
	if oldRaw > newRaw {
		m.cp.reclaimed += oldRaw - newRaw
	}
	m.st.Log.Info("EC container compacted", "container", r.Container, "generation", r.Generation, "logical_bytes", r.Logical,
		"blocks", len(r.Blocks), "shard_nodes", r.Nodes, "freed_shard_bytes", int64(oldRaw)-int64(newRaw))
	return nil
}
