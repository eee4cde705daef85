package ecmeta

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Repair of EC containers (issue 37 item 4): a shard is missing when its
// datanode is DEAD (and not in maintenance) or unknown, or its datanode's inventory (the shards it
// lists in its polls, ecapi.WorkRequest.Shards) lacks it; moving when its
// datanode is decommissioning. Each such shard of a container with at
// least k shards left gets a rebuild: a target datanode reads k others,
// reconstructs the shard, stores it verified and fsynced, and reports
// (ecapi.Rebuilt); only then is the new location recorded, in one batch
// that rewrites the container's record (compare-and-set: the shard still
// where the rebuild found it). Until that batch is durable the old record
// stands; a rebuild that crashes leaves a shard no record names, dropped
// at its node's next poll (DropShards), as are a moved shard's old copy
// and a crashed conversion's shards.

// Limits of the repairs.
const (
	// MaxRepairs bounds the shard rebuilds in flight in the cluster.
	MaxRepairs = 4
	// inventoryGrace: a shard recorded on a node less than this before
	// its inventory arrived is not missing from it (the poll may have
	// been sent before the shard was stored).
	inventoryGrace = 2 * time.Second
)

// layoutMem is an EC container's shards as memory keeps them.
type layoutMem struct {
	gen        uint32 // the shards' generation
	policy     string
	data       int
	logical    uint64
	shardBytes uint64 // each shard file's
	nodes      []uint64
	since      []time.Time // when the record started naming nodes[i] (this stint)
	blocks     []ecapi.Block
}

// inventory is a datanode's shards as its last poll listed them.
type inventory struct {
	at     time.Time
	shards map[ecapi.ShardRef]int64 // → the file's mtime
}

type repairTask struct {
	target, from uint64
	why          string
	started      time.Time
	delivered    bool
	reporting    bool
}

// loadLayout decodes an EC record into memory.
func loadLayout(v []byte, now time.Time) (*layoutMem, error) {
	rec, err := DecodeRecord(v)
	if err != nil {
		return nil, err
	}
	spec, err := ec.ParseSpec(rec.Policy)
	if err != nil {
		return nil, err
	}
	l := &layoutMem{gen: rec.Generation, blocks: rec.Blocks, policy: rec.Policy, data: spec.Data, logical: rec.Logical, nodes: rec.Nodes, shardBytes: uint64(ec.ShardBytes(spec.Policy, int64(rec.Logical)))}
	for range rec.Nodes {
		l.since = append(l.since, now)
	}
	return l, nil
}

// shardState says whether shard i of l is missing, and whether it is on
// a decommissioning datanode (moving). Under State.Mu and m.mu.
func (m *Manager) shardState(cid uint64, l *layoutMem, i int, now time.Time) (missing, moving bool) {
	h := l.nodes[i]
	n := m.st.NodeByID[h]
	op := m.st.Repair.Ops[h].State
	if n == nil || m.cl.HealthOf(n, now) == metaapi.HealthDead && op != state.OpMaintenance {
		return true, false // (a datanode in maintenance is down on purpose: its shards count, as its replicas do)
	}
	if inv := m.held[h]; inv != nil && inv.at.After(l.since[i].Add(inventoryGrace)) {
		if _, ok := inv.shards[ecapi.ShardRef{Container: cid, Generation: l.gen, Index: i}]; !ok {
			return true, false
		}
	}
	return false, op == state.OpDecommissioning || op == state.OpDecommissioned
}

// counts is a container's shards present (missing ones not), missing and
// moving.
func (m *Manager) counts(cid uint64, l *layoutMem, now time.Time) (present int, missing, moving []int) {
	for i := range l.nodes {
		miss, mov := m.shardState(cid, l, i, now)
		switch {
		case miss:
			missing = append(missing, i)
		case mov:
			moving = append(moving, i)
			present++
		default:
			present++
		}
	}
	return present, missing, moving
}

// repairWorkLocked is the repair part of node n's poll: its inventory
// recorded, its stored shards no record names listed to drop, its
// rebuilds settled, repairs scheduled (outside safe mode) and those for
// it delivered. Under State.Mu and m.mu.
func (m *Manager) repairWorkLocked(n *state.Node, req ecapi.WorkRequest, now time.Time, w *ecapi.Work) {
	id := n.Rec.ID
	if req.Inventory {
		inv := &inventory{at: now, shards: map[ecapi.ShardRef]int64{}}
		for _, s := range req.Shards {
			inv.shards[s.ShardRef] = s.MTime
			if !m.named(s.ShardRef, id) {
				w.DropShards = append(w.DropShards, s)
			}
		}
		m.held[id] = inv
	}
	for _, ref := range req.Quarantined {
		if !m.named(ref, id) {
			w.DropQuarantined = append(w.DropQuarantined, ref)
		}
	}
	for ref, t := range m.repairs {
		switch {
		case t.reporting:
		case now.Sub(t.started) > TaskTimeout:
			m.repairFailed(ref, t, "timed out", now)
		case m.st.NodeByID[t.target] == nil || m.cl.HealthOf(m.st.NodeByID[t.target], now) == metaapi.HealthDead:
			m.repairFailed(ref, t, "the target is DEAD", now)
		case t.target == id && t.delivered && !slices.Contains(req.Rebuilding, ref):
			m.repairFailed(ref, t, "over without a report (failed or restarted)", now)
		}
	}
	if !m.st.Repair.SafeMode {
		m.scheduleRepairsLocked(now)
	}
	for _, ref := range slices.SortedFunc(maps.Keys(m.repairs), cmpRef) {
		t := m.repairs[ref]
		if t.target != id || t.delivered || t.reporting {
			continue
		}
		l := m.layout[ref.Container]
		r := ecapi.Rebuild{ShardRef: ref, Policy: l.policy, Logical: l.logical}
		for j, h := range l.nodes {
			sh := ecapi.Shard{Node: h}
			if hn := m.st.NodeByID[h]; hn != nil && j != ref.Index && m.cl.HealthOf(hn, now) != metaapi.HealthDead {
				sh.Addr = hn.Rec.Addr
			}
			r.Shards = append(r.Shards, sh)
		}
		w.Rebuild = append(w.Rebuild, r)
		t.delivered = true
	}
}

func cmpRef(a, b ecapi.ShardRef) int {
	if a.Container != b.Container {
		if a.Container < b.Container {
			return -1
		}
		return 1
	}
	return a.Index - b.Index
}

// named says whether a shard stored on node must stay there: an EC record
// names node for it (its generation), a rebuild of it to node is in
// flight, or a conversion of its container, or a compaction to its
// generation, is (whose report may name it). Under m.mu.
func (m *Manager) named(ref ecapi.ShardRef, node uint64) bool {
	if l := m.layout[ref.Container]; l != nil {
		if ref.Generation == l.gen && ref.Index < len(l.nodes) && l.nodes[ref.Index] == node {
			return true
		}
		if t := m.tasks[ref.Container]; t != nil && t.compact && t.gen == ref.Generation {
			return true
		}
		t := m.repairs[ref]
		return t != nil && t.target == node
	}
	return m.tasks[ref.Container] != nil
}

// Pauses before a shard whose rebuild failed is scheduled again: doubled
// at each failure in a row, from RepairRetryFirst to RepairRetryMax
// (jittered). Without them a rebuild whose sources are stopped but not
// yet STALE was scheduled again at every poll (50 ms): TestECChaos counted
// 72-192 failed rebuilds a run, each a connection or a read of k shards.
const (
	RepairRetryFirst = time.Second
	RepairRetryMax   = 30 * time.Second
)

// failure is a shard's last failed rebuild: its target (not chosen again
// for a rebuild in place), the failures in a row and when the next may be
// scheduled.
type failure struct {
	target uint64
	inRow  int
	next   time.Time
}

// retryDue says whether shard ref's rebuild may be scheduled at now: it
// did not fail, or its pause since the failure is over (repairFailed).
func (m *Manager) retryDue(ref ecapi.ShardRef, now time.Time) bool {
	return !now.Before(m.failedOn[ref].next)
}

func (m *Manager) repairFailed(ref ecapi.ShardRef, t *repairTask, why string, now time.Time) {
	delete(m.repairs, ref)
	f := m.failedOn[ref]
	f.target, f.inRow = t.target, f.inRow+1
	pause := RepairRetryMax
	if f.inRow <= 5 { // 1 s << 5 is past the cap
		pause = min(RepairRetryFirst<<(f.inRow-1), RepairRetryMax)
	}
	pause = backoff.Jitter(pause)
	f.next = now.Add(pause)
	m.failedOn[ref] = f
	m.repairsFailed++
	m.st.Log.Warn("EC shard rebuild failed; it is scheduled again after a pause", "container", ref.Container, "shard", ref.Index, "target", t.target, "why", why,
		"failures_in_row", f.inRow, "pause", pause.Round(time.Millisecond))
}

// scheduleRepairsLocked schedules a rebuild of each missing or moving
// shard of a container with at least k shards present, within
// MaxRepairs, in container ID order.
func (m *Manager) scheduleRepairsLocked(now time.Time) {
	if len(m.repairs) >= MaxRepairs {
		return
	}
	load := map[uint64]int{}
	for _, t := range m.repairs {
		load[t.target]++
	}
	for _, t := range m.tasks {
		for _, id := range t.targets {
			load[id]++
		}
	}
	for _, cid := range slices.Sorted(maps.Keys(m.layout)) {
		l := m.layout[cid]
		present, missing, moving := m.counts(cid, l, now)
		if len(missing)+len(moving) == 0 {
			continue
		}
		if present < l.data {
			m.refuseOnce(cid, fmt.Sprintf("unrecoverable: %d shards of %d left, %d needed", present, len(l.nodes), l.data))
			continue
		}
		for _, i := range append(missing, moving...) {
			ref := ecapi.ShardRef{Container: cid, Generation: l.gen, Index: i}
			if m.repairs[ref] != nil || !m.retryDue(ref, now) {
				continue
			}
			why := "missing"
			if slices.Contains(moving, i) {
				why = "decommission"
			}
			target := m.repairTarget(cid, l, i, why == "missing", load, now)
			if target == 0 {
				m.refuseOnce(cid, fmt.Sprintf("shard %d (%s): no datanode to rebuild it on (healthy, in service, not full, holding no other shard of it)", i, why))
				continue
			}
			delete(m.refused, cid)
			m.repairs[ref] = &repairTask{target: target, from: l.nodes[i], why: why, started: now}
			load[target]++
			m.st.Log.Info("EC shard rebuild scheduled", "container", cid, "shard", i, "from", l.nodes[i], "target", target, "why", why)
			if len(m.repairs) >= MaxRepairs {
				return
			}
		}
	}
}

func (m *Manager) refuseOnce(cid uint64, why string) {
	if m.refused[cid] != why {
		m.refused[cid] = why
		m.st.Log.Warn("EC container not repaired", "container", cid, "why", why)
	}
}

// repairTarget picks where shard i of cid is rebuilt: its own datanode
// when that is healthy, in service and only lost the file (a scrubbed or
// deleted shard: rebuilt in place) and the last rebuild of it did not
// fail there; else a HEALTHY datanode heard from
// since the start, in service, not full, holding no shard of cid and no
// other rebuild of it: the least loaded, from the container's ID on. 0:
// none.
func (m *Manager) repairTarget(cid uint64, l *layoutMem, i int, missing bool, load map[uint64]int, now time.Time) uint64 {
	ok := func(id uint64) bool {
		n := m.st.NodeByID[id]
		return n != nil && n.Seen && m.cl.HealthOf(n, now) == metaapi.HealthHealthy && m.cl.InService(id) && !m.cl.Full(n)
	}
	if h := l.nodes[i]; missing && ok(h) && m.held[h] != nil && m.failedOn[ecapi.ShardRef{Container: cid, Generation: l.gen, Index: i}].target != h {
		return h // (not again where it just failed: a volume lost, say)
	}
	busy := map[uint64]bool{}
	for _, h := range l.nodes {
		busy[h] = true
	}
	for ref, t := range m.repairs {
		if ref.Container == cid {
			busy[t.target] = true
		}
	}
	var cands []uint64
	for _, id := range m.cl.SortedNodes() {
		if ok(id) && !busy[id] {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return 0
	}
	start := int(cid % uint64(len(cands)))
	cands = append(cands[start:], cands[:start]...)
	slices.SortStableFunc(cands, func(a, b uint64) int { return load[a] - load[b] })
	return cands[0]
}

// Rebuilt records a rebuilt shard's new datanode: the container's record
// rewritten in one batch, only when the rebuild is the one in flight to
// that node and the shard is still recorded where the rebuild found it.
// From the answer on, the old copy (if any) is dropped.
//
// Over TLS the caller must be the datanode the report names.
func (m *Manager) Rebuilt(r ecapi.Rebuilt, caller tlsconf.Peer) error {
	ref := r.ShardRef
	var size uint64
	_, err := state.Mutate(m.st, func() (struct{}, *pebble.Batch, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, err := m.reporterLocked(r.Node, caller, "rebuild report", metaapi.ErrInvalid)
		if err != nil {
			return struct{}{}, nil, err
		}
		t := m.repairs[ref]
		if t == nil || t.target != r.Node || t.reporting {
			return struct{}{}, nil, fmt.Errorf("%w: no rebuild of shard %d of container %d to datanode %d in flight", metaapi.ErrInvalid, ref.Index, ref.Container, r.Node)
		}
		rec, err := m.record(ref.Container)
		if err != nil {
			return struct{}{}, nil, err
		}
		if ref.Generation != rec.Generation || ref.Index >= len(rec.Nodes) || rec.Nodes[ref.Index] != t.from {
			return struct{}{}, nil, fmt.Errorf("%w: shard %d of container %d moved meanwhile", metaapi.ErrInvalid, ref.Index, ref.Container)
		}
		rec.Nodes[ref.Index] = r.Node
		if err := rec.check(); err != nil {
			return struct{}{}, nil, fmt.Errorf("%w: %v", metaapi.ErrInvalid, err)
		}
		spec, _ := ec.ParseSpec(rec.Policy)
		size = uint64(ec.ShardBytes(spec.Policy, int64(rec.Logical)))
		t.reporting = true
		b := m.st.Store.NewBatch()
		state.Set(b, ContainerKey(ref.Container), rec.Encode())
		return struct{}{}, b, nil
	})
	if err != nil {
		if !errors.Is(err, metaapi.ErrInvalid) && !errors.Is(err, metaapi.ErrForbidden) {
			m.settleReport(ref, r.Node, false, 0)
		}
		return err
	}
	m.settleReport(ref, r.Node, true, size)
	m.st.Log.Info("EC shard rebuilt", "container", ref.Container, "shard", ref.Index, "node", r.Node)
	return nil
}

// settleReport ends a rebuild whose report was applied (ok: durable) or
// failed.
func (m *Manager) settleReport(ref ecapi.ShardRef, node uint64, ok bool, size uint64) {
	m.st.Mu.RLock()
	defer m.st.Mu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLocked() != nil {
		return
	}
	t := m.repairs[ref]
	if t == nil || t.target != node {
		return
	}
	if !ok {
		// Not applied (a failure after the apply ends the stint or fails
		// the store: memory is loaded again from the store).
		t.reporting = false
		return
	}
	delete(m.repairs, ref)
	delete(m.failedOn, ref)
	now := m.st.Cfg.Now()
	if l := m.layout[ref.Container]; l != nil && l.gen == ref.Generation {
		l.nodes[ref.Index], l.since[ref.Index] = node, now
	}
	m.repairsDone++
	m.repairedBytes += size
}

// record reads an EC container's record from the store.
func (m *Manager) record(cid uint64) (_ Record, err error) {
	v, closer, err := m.st.Store.Get(ContainerKey(cid))
	if errors.Is(err, pebble.ErrNotFound) {
		return Record{}, fmt.Errorf("%w: container %d is not erasure-coded", metaapi.ErrInvalid, cid)
	}
	if err != nil {
		return Record{}, err
	}
	defer state.CloseInto(closer, &err, "EC container")
	return DecodeRecord(v)
}

// Holds counts the shards EC records name node for (a decommission is
// done only at 0). Under State.Mu.
func (m *Manager) Holds(node uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLocked() != nil {
		return 1 // unknown: not done
	}
	n := 0
	for _, l := range m.layout {
		if slices.Contains(l.nodes, node) {
			n++
		}
	}
	return n
}

// ShardHealth says how many shards of EC container cid are missing and
// whether fewer than k are left (package repair counts them with the
// under-replicated containers). Under State.Mu.
func (m *Manager) ShardHealth(cid uint64) (missing int, unrecoverable bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ensureLocked() != nil || m.layout[cid] == nil {
		return 0, false
	}
	l := m.layout[cid]
	present, miss, _ := m.counts(cid, l, m.st.Cfg.Now())
	return len(miss), present < l.data
}

// Status is the state of erasure coding (GET /v1/ec/status).
func (m *Manager) Status() (ecapi.Status, error) {
	return state.Read(m.st, func() (ecapi.Status, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.ensureLocked(); err != nil {
			return ecapi.Status{}, err
		}
		return m.statusLocked(m.st.Cfg.Now()), nil
	})
}

func (m *Manager) statusLocked(now time.Time) ecapi.Status {
	st := ecapi.Status{Coded: len(m.layout), Conversions: []ecapi.Task{}, Repairs: []ecapi.Task{}, Compactions: []ecapi.Task{}, Containers: []ecapi.ContainerState{},
		RepairsDone: m.repairsDone, RepairsFailed: m.repairsFailed, RepairedBytes: m.repairedBytes,
		CompactionsDone: m.cp.done, CompactionsFailed: m.cp.failed, ReclaimedBytes: m.cp.reclaimed}
	for _, cid := range slices.Sorted(maps.Keys(m.layout)) {
		l := m.layout[cid]
		present, missing, moving := m.counts(cid, l, now)
		st.Shards += len(l.nodes)
		st.ShardsMissing += len(missing)
		st.ShardsMoving += len(moving)
		if len(missing) > 0 {
			st.Degraded++
		}
		if present < l.data {
			st.Unrecoverable++
		}
		_, live := liveBlocks(m.st, cid, l)
		st.DeadBytes += l.logical - live
		st.Containers = append(st.Containers, ecapi.ContainerState{Container: cid, Generation: l.gen, Policy: l.policy, Nodes: slices.Clone(l.nodes), Missing: missing, Moving: moving,
			Logical: l.logical, DeadBytes: l.logical - live})
	}
	m.spaceLocked(&st)
	for _, cid := range slices.Sorted(maps.Keys(m.tasks)) {
		t := m.tasks[cid]
		if t.compact {
			st.Compactions = append(st.Compactions, ecapi.Task{Container: cid, Index: -1, Node: t.node, Why: "compaction", Started: t.started.UnixMilli()})
			continue
		}
		st.Conversions = append(st.Conversions, ecapi.Task{Container: cid, Index: -1, Node: t.node, Why: "conversion", Started: t.started.UnixMilli()})
	}
	for _, ref := range slices.SortedFunc(maps.Keys(m.repairs), cmpRef) {
		t := m.repairs[ref]
		st.Repairs = append(st.Repairs, ecapi.Task{Container: ref.Container, Index: ref.Index, Node: t.target, From: t.from, Why: t.why, Started: t.started.UnixMilli()})
	}
	return st
}

// spaceLocked fills the raw and logical bytes of st.
func (m *Manager) spaceLocked(st *ecapi.Status) {
	per := map[uint64]*ecapi.NodeBytes{}
	node := func(id uint64) *ecapi.NodeBytes {
		if per[id] == nil {
			per[id] = &ecapi.NodeBytes{Node: id}
		}
		return per[id]
	}
	largest := map[uint64]uint64{} // container → its largest replica
	for id, n := range m.st.NodeByID {
		nb := node(id)
		for cid, r := range n.Containers {
			nb.ReplicaBytes += r.UsedBytes
			largest[cid] = max(largest[cid], r.UsedBytes)
		}
		st.ReplicaBytes += nb.ReplicaBytes
	}
	for _, l := range m.layout {
		st.ECLogicalBytes += l.logical
		for _, id := range l.nodes {
			nb := node(id)
			nb.Shards++
			nb.ShardBytes += l.shardBytes
			st.ShardBytes += l.shardBytes
		}
	}
	st.LogicalBytes = st.ECLogicalBytes
	for cid, n := range largest {
		if m.layout[cid] == nil {
			st.LogicalBytes += n
		}
	}
	for _, id := range slices.Sorted(maps.Keys(per)) {
		st.Nodes = append(st.Nodes, *per[id])
	}
}
