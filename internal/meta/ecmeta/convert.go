package ecmeta

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Work answers a datanode's poll: the replicas of EC containers it still
// holds (to drop: the EC record is durable, the answer waits for it), and
// at most one conversion of a CLOSED container it holds a healthy replica
// of, when the cluster runs fewer than MaxConversions, else at most one
// compaction of an EC container (compact.go) when it runs fewer than
// MaxCompactions; none for a node running one. A conversion or
// compaction the node no longer lists as running, or whose node is DEAD,
// is over (failed: it may be scheduled again).
//
// Over TLS the caller must be the datanode it names (the certificate its
// node record is bound to, as for heartbeats).
func (m *Manager) Work(req ecapi.WorkRequest, caller tlsconf.Peer) (ecapi.Work, error) {
	return state.Read(m.st, func() (ecapi.Work, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		n, err := m.reporterLocked(req.Node, caller, "work request", metaapi.ErrNotFound)
		if err != nil {
			return ecapi.Work{}, err
		}
		now := m.st.Cfg.Now()
		var w ecapi.Work
		for cid := range n.Containers {
			if m.coded[cid] {
				w.Drop = append(w.Drop, cid)
			}
		}
		slices.Sort(w.Drop)
		m.repairWorkLocked(n, req, now, &w)
		busy := false
		over := func(cid uint64, t *task, why string) {
			delete(m.tasks, cid)
			if !t.compact {
				m.st.Log.Warn("EC conversion over: "+why+"; it may be scheduled again", "container", cid, "node", t.node)
				return
			}
			inRow, pause := m.cp.failedAt(cid, now)
			m.st.Log.Warn("EC compaction over: "+why+"; the container keeps its generation, compacted again after a pause", "container", cid,
				"node", t.node, "generation", t.gen, "failures_in_row", inRow, "pause", pause)
		}
		conversions, compactions := 0, 0
		for cid, t := range m.tasks {
			running := req.Converting
			if t.compact {
				running = req.Compacting
			}
			switch {
			case t.reporting:
			case m.coded[cid] && !t.compact:
				delete(m.tasks, cid)
			case now.Sub(t.started) > TaskTimeout:
				over(cid, t, "timed out")
			case m.st.NodeByID[t.node] == nil || m.cl.HealthOf(m.st.NodeByID[t.node], now) == metaapi.HealthDead:
				over(cid, t, "its datanode is DEAD")
			case t.node == req.Node && !slices.Contains(running, cid):
				over(cid, t, "no report (failed or restarted)")
			case t.node == req.Node:
				busy = true
			}
			if m.tasks[cid] != nil && t.compact {
				compactions++
			} else if m.tasks[cid] != nil {
				conversions++
			}
		}
		if busy || m.st.Repair.SafeMode {
			return w, nil
		}
		if conversions < MaxConversions {
			if c, ok := m.scheduleLocked(req.Node, now); ok {
				w.Convert = append(w.Convert, c)
				return w, nil
			}
		}
		if compactions < MaxCompactions {
			if c, ok := scheduleCompaction(m, req.Node, now); ok {
				w.Compact = append(w.Compact, c)
			}
		}
		return w, nil
	})
}

// scheduleLocked picks the first CLOSED container (ID order) node holds
// a healthy replica of whose buckets all want the same coded policy and
// which is old and big enough, and places its shards.
func (m *Manager) scheduleLocked(node uint64, now time.Time) (ecapi.Conversion, bool) {
	if _, err := m.scanStepLocked(now); err != nil {
		m.st.Log.Error("erasure coding", "err", err)
		return ecapi.Conversion{}, false
	}
	var cands []uint64
	for cid, c := range m.st.ContainerByID {
		if c.Rec.State == state.ContainerClosed && !m.coded[cid] && m.tasks[cid] == nil && m.eligible(cid, now) && len(m.buckets[cid]) > 0 {
			if _, ok := m.st.NodeByID[node].Containers[cid]; ok {
				cands = append(cands, cid)
			}
		}
	}
	slices.Sort(cands)
	for _, cid := range cands {
		if !slices.Contains(m.cl.ReplicasOf(cid, now), node) {
			continue
		}
		c := m.st.ContainerByID[cid]
		spec, ok := m.containerPolicyLocked(cid)
		if !ok || now.Sub(c.Rec.Created) < spec.MinAge || int64(m.cl.ContainerSize(c, []uint64{node})) < max(spec.MinBytes, 1) {
			continue
		}
		targets, err := m.placeLocked(cid, spec, now)
		if err != nil {
			if m.refused[cid] != err.Error() {
				m.refused[cid] = err.Error()
				m.st.Log.Warn("EC conversion not placed", "container", cid, "policy", spec.String(), "err", err)
			}
			continue
		}
		delete(m.refused, cid)
		conv := ecapi.Conversion{Container: cid, Policy: spec.String(), Buckets: m.buckets[cid]}
		t := &task{node: node, started: now}
		for _, id := range targets {
			conv.Targets = append(conv.Targets, ecapi.Shard{Node: id, Addr: m.st.NodeByID[id].Rec.Addr})
			t.targets = append(t.targets, id)
		}
		m.tasks[cid] = t
		m.st.Log.Info("EC conversion scheduled", "container", cid, "policy", conv.Policy, "converter", node, "targets", targets)
		return conv, true
	}
	return ecapi.Conversion{}, false
}

// containerPolicyLocked is the coded policy every bucket with blocks in
// cid wants (false: none, or they disagree — the container stays
// replicated).
func (m *Manager) containerPolicyLocked(cid uint64) (ec.Spec, bool) {
	return agreed(m.buckets[cid], func(b string) ec.Spec { s, _ := m.policyLocked(b); return s })
}

// agreed is the coded policy every one of buckets wants (false: none of
// them, one wants rep3, or two disagree).
func agreed(buckets []string, policyOf func(bucket string) ec.Spec) (ec.Spec, bool) {
	var want ec.Spec
	for i, b := range buckets {
		s := policyOf(b)
		if !s.Coded() || (i > 0 && s.String() != want.String()) {
			return ec.Spec{}, false
		}
		want = s
	}
	return want, want.Coded()
}

// placeLocked chooses a datanode for each shard: HEALTHY, heard from since
// the start, in service, not full, each shard on a different one; those
// with the fewest shards of conversions in flight first, then from the
// container's ID on (spread). Too few: an error saying so (never fewer
// nodes than shards).
func (m *Manager) placeLocked(cid uint64, s ec.Spec, now time.Time) ([]uint64, error) {
	load := map[uint64]int{}
	for _, t := range m.tasks {
		for _, id := range t.targets {
			load[id]++
		}
	}
	var cands []uint64
	for _, id := range m.cl.SortedNodes() {
		n := m.st.NodeByID[id]
		if n.Seen && m.cl.HealthOf(n, now) == metaapi.HealthHealthy && m.cl.InService(id) && !m.cl.Full(n) {
			cands = append(cands, id)
		}
	}
	if len(cands) < s.Shards() {
		return nil, fmt.Errorf("policy %s needs %d healthy datanodes (one per shard), %d are", s.Name, s.Shards(), len(cands))
	}
	start := int(cid % uint64(len(cands)))
	cands = append(cands[start:], cands[:start]...)
	slices.SortStableFunc(cands, func(a, b uint64) int { return load[a] - load[b] })
	return cands[:s.Shards()], nil
}

// Converted records a finished conversion: one record, the switch of the
// container to EC, once every shard is fsynced on its node (the converter
// reports only then). From the answer on, its replicas are dropped.
//
// Over TLS the caller must be the converter the report names.
func (m *Manager) Converted(r ecapi.Converted, caller tlsconf.Peer) error {
	rec := Record{Container: r.Container, Policy: r.Policy, Logical: r.Logical, Nodes: r.Nodes, Blocks: r.Blocks}
	if err := rec.check(); err != nil {
		return fmt.Errorf("%w: conversion of container %d: %v", metaapi.ErrInvalid, r.Container, err)
	}
	_, err := state.Mutate(m.st, func() (struct{}, *pebble.Batch, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, err := m.reporterLocked(r.Node, caller, "conversion report", metaapi.ErrInvalid)
		if err != nil {
			return struct{}{}, nil, err
		}
		c := m.st.ContainerByID[r.Container]
		if c == nil || c.Rec.State != state.ContainerClosed {
			return struct{}{}, nil, fmt.Errorf("%w: container %d is not CLOSED", metaapi.ErrInvalid, r.Container)
		}
		if m.coded[r.Container] {
			return struct{}{}, nil, errRepeated
		}
		// Only the conversion in flight (this stint) may switch it: a
		// shard of one no task names is dropped as a leftover.
		t := m.tasks[r.Container]
		if t == nil || t.node != r.Node || t.reporting || !slices.Equal(t.targets, r.Nodes) {
			return struct{}{}, nil, fmt.Errorf("%w: no conversion of container %d by datanode %d to %v in flight", metaapi.ErrInvalid, r.Container, r.Node, r.Nodes)
		}
		for _, id := range r.Nodes {
			if m.st.NodeByID[id] == nil {
				return struct{}{}, nil, fmt.Errorf("%w: shard on unknown datanode %d", metaapi.ErrInvalid, id)
			}
		}
		rec.Converted = m.st.Cfg.Now()
		t.reporting = true
		b := m.st.Store.NewBatch()
		state.Set(b, ContainerKey(r.Container), rec.Encode())
		completeDeletes(m.st, b, r.Container, rec.Blocks)
		return struct{}{}, b, nil
	})
	if errors.Is(err, errRepeated) {
		return nil
	}
	if err != nil && !errors.Is(err, metaapi.ErrInvalid) && !errors.Is(err, metaapi.ErrForbidden) {
		m.st.Mu.RLock()
		m.mu.Lock()
		if t := m.tasks[r.Container]; m.ensureLocked() == nil && t != nil && t.node == r.Node {
			// Not applied (a failure after the apply ends the stint or
			// fails the store: memory is loaded again from the store).
			t.reporting = false
		}
		m.mu.Unlock()
		m.st.Mu.RUnlock()
	}
	if err != nil {
		return err
	}
	// Durable (Mutate waited): from now on Work drops its replicas.
	m.st.Mu.RLock()
	m.mu.Lock()
	if m.ensureLocked() == nil {
		m.coded[r.Container] = true
		m.layout[r.Container], _ = loadLayout(rec.Encode(), m.st.Cfg.Now())
		delete(m.tasks, r.Container)
	}
	m.mu.Unlock()
	m.st.Mu.RUnlock()
	m.st.Log.Info("container erasure-coded", "container", r.Container, "policy", r.Policy, "logical_bytes", r.Logical, "shard_nodes", r.Nodes)
	return nil
}

// reporterLocked loads the EC containers when the stint changed
// (ensureLocked) and returns datanode id's record, refusing a caller that
// does not speak for it (under mu). role names the request in the error
// when there is none, of kind missing.
func (m *Manager) reporterLocked(id uint64, caller tlsconf.Peer, role string, missing error) (*state.Node, error) {
	if err := m.ensureLocked(); err != nil {
		return nil, err
	}
	n := m.st.NodeByID[id]
	if n == nil {
		return nil, fmt.Errorf("%w: %s: no datanode %d", missing, role, id)
	}
	if err := speaksFor(caller, n); err != nil {
		return nil, err
	}
	return n, nil
}

// speaksFor refuses an authenticated caller whose certificate is not the
// one node's record is bound to (plaintext: nobody is authenticated).
func speaksFor(caller tlsconf.Peer, n *state.Node) error {
	if caller.Authenticated() && n.Rec.CertName != caller.Name {
		return fmt.Errorf("%w: certificate %s does not speak for datanode %d", metaapi.ErrForbidden, caller, n.Rec.ID)
	}
	return nil
}

// errRepeated: a report of a container recorded EC already.
var errRepeated = errors.New("repeated")

// Layout returns an EC container's layout (ErrNotFound: not coded).
func (m *Manager) Layout(cid uint64) (ecapi.Layout, error) {
	return state.Read(m.st, func() (_ ecapi.Layout, err error) {
		v, closer, err := m.st.Store.Get(ContainerKey(cid))
		if errors.Is(err, pebble.ErrNotFound) {
			return ecapi.Layout{}, fmt.Errorf("%w: container %d is not erasure-coded", metaapi.ErrNotFound, cid)
		}
		if err != nil {
			return ecapi.Layout{}, err
		}
		defer state.CloseInto(closer, &err, "EC container")
		rec, err := DecodeRecord(v)
		if err != nil {
			return ecapi.Layout{}, err
		}
		l := ecapi.Layout{Container: cid, Generation: rec.Generation, Policy: rec.Policy, Logical: rec.Logical, Blocks: rec.Blocks}
		for _, id := range rec.Nodes {
			sh := ecapi.Shard{Node: id}
			if n := m.st.NodeByID[id]; n != nil {
				sh.Addr = n.Rec.Addr
			}
			l.Shards = append(l.Shards, sh)
		}
		return l, nil
	})
}
