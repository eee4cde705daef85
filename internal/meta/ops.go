package meta

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Datanode operations: decommission, maintenance, recommission (the
// states are described in the metaapi package, ops.go). The state of a
// node that is not IN_SERVICE is one record 'O' | node ID in the store
// (FORMAT.md §13), written in the same batch as the pipelines the change
// closes, so it survives restarts and meta failovers; in memory it is
// s.repl.ops, loaded with the rest of the store.
//
// Effects, under s.mu with the replication manager:
//   - a node not IN_SERVICE gets no new pipeline and no copy, and its
//     OPEN pipelines are closed (at the change, and at every Tick);
//   - the replicas on a DECOMMISSIONING or DECOMMISSIONED node are not
//     counted (replicaIndex) but are read and copied from (replicasOf);
//   - the replicas on a node IN_MAINTENANCE count while it is STALE or
//     DEAD, until the deadline (reportsCount);
//   - at each Tick a DECOMMISSIONING node whose every container has its
//     replication factor of counted replicas elsewhere becomes
//     DECOMMISSIONED, and a maintenance past its deadline ends.

const prefixOps = 'O'

// Node operational states, as stored.
const (
	opInService uint8 = iota
	opDecommissioning
	opDecommissioned
	opMaintenance
)

// opState is a node's operational state.
type opState struct {
	state        uint8
	since, until time.Time
}

func (o opState) name() string {
	switch o.state {
	case opDecommissioning:
		return metaapi.NodeDecommissioning
	case opDecommissioned:
		return metaapi.NodeDecommissioned
	case opMaintenance:
		return metaapi.NodeInMaintenance
	}
	return metaapi.NodeInService
}

func (o opState) encode() []byte {
	e := newEnc()
	e.u8(o.state)
	e.u64(ms(o.since))
	e.u64(ms(o.until))
	return e.finish()
}

func decodeOpState(v []byte) (opState, error) {
	d := newDec("node operational state", v)
	o := opState{state: d.u8(), since: d.tm(), until: d.tm()}
	if o.state > opMaintenance {
		d.fail("state %d", o.state)
	}
	return o, d.done()
}

// loadOps reads the operational states (called by load).
func (s *State) loadOps() error {
	s.repl.ops = map[uint64]opState{}
	return s.scan(prefixOps, func(k, v []byte) error {
		id, ok := parseU64Key(k)
		o, err := decodeOpState(v)
		if err != nil {
			return err
		}
		if !ok || s.nodes[id] == nil {
			return fmt.Errorf("%w: operational state %x of no registered node", ErrCorrupt, k)
		}
		s.repl.ops[id] = o
		return nil
	})
}

// decommissioned: node id is DECOMMISSIONING or DECOMMISSIONED; its
// replicas are not counted.
func (s *Cluster) decommissioned(id uint64) bool {
	st := s.repl.ops[id].state
	return st == opDecommissioning || st == opDecommissioned
}

// inMaintenance: node id is IN_MAINTENANCE and its deadline has not come.
func (s *Cluster) inMaintenance(id uint64, now time.Time) bool {
	o := s.repl.ops[id]
	return o.state == opMaintenance && now.Before(o.until)
}

// inService: node id takes new pipelines and copies.
func (s *Cluster) inService(id uint64) bool { return s.repl.ops[id].state == opInService }

// setOp records node id's new state in b and memory.
func (s *Ops) setOp(b *pebble.Batch, id uint64, o opState) {
	if o.state == opInService {
		delete(s.repl.ops, id)
		if err := b.Delete(u64key(prefixOps, id), nil); err != nil {
			panic(fmt.Sprintf("meta: pebble batch delete: %v", err)) // a batch in memory does not fail
		}
		return
	}
	s.repl.ops[id] = o
	set(b, u64key(prefixOps, id), o.encode())
}

// closeOpPipelines closes the OPEN pipelines of the nodes not IN_SERVICE.
func (s *Ops) closeOpPipelines(b *pebble.Batch, now time.Time) {
	for _, pid := range s.cl.sortedPipelines() {
		p := s.pipelines[pid]
		if p.rec.State != pipelineOpen {
			continue
		}
		for _, m := range p.rec.Members {
			if !s.cl.inService(m) {
				s.cl.closePipeline(b, p, now, fmt.Sprintf("member %d is %s", m, s.repl.ops[m].name()))
				break
			}
		}
	}
}

// decommissionProgress is how far node id's decommission is.
func (s *Ops) decommissionProgress(id uint64, idx map[uint64][]uint64) *metaapi.DecommissionProgress {
	p := &metaapi.DecommissionProgress{}
	for _, cid := range slices.Sorted(maps.Keys(s.nodes[id].containers)) {
		c := s.containers[cid]
		if c == nil {
			continue
		}
		h := len(idx[cid])
		if c.rec.State == containerClosed && h == 0 && c.rec.Committed == 0 {
			continue // nothing to keep (underReplicated's rule)
		}
		p.Containers++
		if c.rec.State == containerClosed && h >= s.cfg.ReplicationFactor {
			p.Replicated++
		} else if len(p.Waiting) < 16 {
			p.Waiting = append(p.Waiting, cid)
		}
	}
	return p
}

// opsTick is the operations' part of a Tick: pipelines of nodes not IN
// SERVICE closed, maintenances past their deadline ended, decommissions
// complete marked DECOMMISSIONED.
func (s *Ops) opsTick(b *pebble.Batch, now time.Time) {
	if len(s.repl.ops) == 0 {
		return
	}
	s.closeOpPipelines(b, now)
	var idx map[uint64][]uint64
	for _, id := range slices.Sorted(maps.Keys(s.repl.ops)) {
		o := s.repl.ops[id]
		switch o.state {
		case opMaintenance:
			if !now.Before(o.until) {
				s.setOp(b, id, opState{state: opInService, since: now})
				s.log.Warn("maintenance over: the node is IN_SERVICE again; if it is still down its replicas are copied", "node", id,
					"health", s.cl.healthOf(s.nodes[id], now))
			}
		case opDecommissioning:
			if s.repl.safeMode || !s.nodes[id].seen && s.cl.healthOf(s.nodes[id], now) != metaapi.HealthDead {
				continue // its report is not known yet
			}
			if idx == nil {
				idx = s.cl.replicaIndex(now)
			}
			if p := s.decommissionProgress(id, idx); p.Replicated == p.Containers {
				s.setOp(b, id, opState{state: opDecommissioned, since: now})
				s.log.Warn("datanode DECOMMISSIONED: every container it holds has its replicas on other nodes; it can be stopped",
					"node", id, "containers", p.Containers)
			}
		}
	}
}

// NodeOp runs an operator's operation on node id (metaapi.OpDecommission,
// OpMaintenance for d, OpRecommission) and returns the node's view.
func (s *Ops) NodeOp(id uint64, op string, d time.Duration) (*metaapi.NodeInfo, error) {
	return mutate(s.State, func() (*metaapi.NodeInfo, *pebble.Batch, error) {
		now := s.cfg.Now()
		if s.nodes[id] == nil {
			return nil, nil, fmt.Errorf("%w: datanode %d", metaapi.ErrNotFound, id)
		}
		cur := s.repl.ops[id]
		b := s.db.NewBatch()
		switch op {
		case metaapi.OpDecommission:
			if cur.state == opDecommissioning || cur.state == opDecommissioned {
				break // already
			}
			s.setOp(b, id, opState{state: opDecommissioning, since: now})
			s.log.Warn("datanode DECOMMISSIONING: its containers are copied to other nodes", "node", id, "was", cur.name())
		case metaapi.OpMaintenance:
			if d <= 0 || d > metaapi.MaxMaintenance {
				b.Close()
				return nil, nil, fmt.Errorf("%w: maintenance of %s: want (0, %s]", metaapi.ErrInvalid, d, metaapi.MaxMaintenance)
			}
			if cur.state == opDecommissioning || cur.state == opDecommissioned {
				b.Close()
				return nil, nil, fmt.Errorf("%w: datanode %d is %s: recommission it first", metaapi.ErrInvalid, id, cur.name())
			}
			s.setOp(b, id, opState{state: opMaintenance, since: now, until: now.Add(d)})
			s.log.Warn("datanode IN_MAINTENANCE: its replicas are not copied while it is down", "node", id, "until", now.Add(d))
		case metaapi.OpRecommission:
			if cur.state != opInService {
				s.setOp(b, id, opState{state: opInService, since: now})
				s.log.Warn("datanode recommissioned: IN_SERVICE again", "node", id, "was", cur.name())
			}
		default:
			b.Close()
			return nil, nil, fmt.Errorf("%w: unknown operation %q (want %s, %s or %s)", metaapi.ErrInvalid, op,
				metaapi.OpDecommission, metaapi.OpMaintenance, metaapi.OpRecommission)
		}
		s.closeOpPipelines(b, now)
		ni := s.nodeInfo(id, now)
		return &ni, b, nil
	})
}

// nodeInfo is the admin view of node id.
func (s *Ops) nodeInfo(id uint64, now time.Time) metaapi.NodeInfo {
	n := s.nodes[id]
	ni := metaapi.NodeInfo{NodeID: id, UUID: n.rec.UUID, Addr: n.rec.Addr, Health: s.cl.healthOf(n, now),
		LastHeartbeat: n.last, Pipelines: []uint64{}, Containers: len(n.containers), UsedBytes: n.used,
		CapacityBytes: n.capacity, AvailableBytes: n.available, Full: s.cl.full(n), MetricsURL: n.rec.MetricsURL}
	for _, pid := range s.cl.sortedPipelines() {
		p := s.pipelines[pid]
		if p.rec.State == pipelineOpen && slices.Contains(p.rec.Members, id) {
			ni.Pipelines = append(ni.Pipelines, pid)
		}
	}
	s.opsNodeInfo(&ni, now)
	return ni
}

// opsNodeInfo adds the node's failed volumes and operational state to its
// admin view.
func (s *Ops) opsNodeInfo(ni *metaapi.NodeInfo, now time.Time) {
	ni.FailedVolumes = slices.Clone(s.repl.damage.volumes[ni.NodeID])
	o := s.repl.ops[ni.NodeID]
	ni.OpState, ni.OpSince = o.name(), o.since
	if o.state == opMaintenance {
		ni.MaintenanceUntil = o.until
	}
	if o.state == opDecommissioning || o.state == opDecommissioned {
		ni.Decommission = s.decommissionProgress(ni.NodeID, s.cl.replicaIndex(now))
	}
}

// routeOps adds the routes of damage and datanode operations.
func (s *Service) routeOps(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("GET /v1/damaged", "damaged", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := s.Damaged()
		return st, http.StatusOK, err
	})
	route("POST /v1/nodes/{id}/{op}", "node_op", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: node ID %q", metaapi.ErrInvalid, r.PathValue("id"))
		}
		var req metaapi.NodeOpRequest
		if r.ContentLength != 0 {
			if err := decodeBody(w, r, &req); err != nil {
				return nil, 0, err
			}
		}
		ni, err := s.NodeOp(id, r.PathValue("op"), time.Duration(req.DurationMs)*time.Millisecond)
		return ni, http.StatusOK, err
	})
}

// volumesFailed records node n's failed volumes (Heartbeat.FailedVolumes).
// When the list grows (not at the first report since the meta service
// started: those failures are old), the node's OPEN pipelines are closed: an OPEN
// container of theirs may have had its replica on the lost volume, and
// would otherwise fail only at its next write there; closed, it is closed
// on the other members and copied like any CLOSED container.
func (s *Ops) volumesFailed(b *pebble.Batch, n *node, failed []metaapi.FailedVolume, now time.Time) {
	id := n.rec.ID
	prev, known := s.repl.damage.volumes[id]
	s.repl.damage.volumes[id] = failed
	if !known || len(failed) <= len(prev) {
		return // (the first report since the start is not news)
	}
	for _, pid := range s.cl.sortedPipelines() {
		p := s.pipelines[pid]
		if p.rec.State == pipelineOpen && slices.Contains(p.rec.Members, id) {
			s.cl.closePipeline(b, p, now, fmt.Sprintf("member %d lost a volume: %s", id, failed[len(failed)-1].Dir))
		}
	}
}
