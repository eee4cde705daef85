package meta

import (
	"fmt"
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

// NodeOp runs an operator's operation on node id (metaapi.OpDecommission,
// OpMaintenance for d, OpRecommission) and returns the node's view.
func (s *Service) NodeOp(id uint64, op string, d time.Duration) (*metaapi.NodeInfo, error) {
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
func (s *Service) nodeInfo(id uint64, now time.Time) metaapi.NodeInfo {
	n := s.nodes[id]
	ni := metaapi.NodeInfo{NodeID: id, UUID: n.rec.UUID, Addr: n.rec.Addr, Health: s.healthOf(n, now),
		LastHeartbeat: n.last, Pipelines: []uint64{}, Containers: len(n.containers), UsedBytes: n.used,
		CapacityBytes: n.capacity, AvailableBytes: n.available, Full: s.full(n), MetricsURL: n.rec.MetricsURL}
	for _, pid := range s.sortedPipelines() {
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
func (s *Service) opsNodeInfo(ni *metaapi.NodeInfo, now time.Time) {
	ni.FailedVolumes = slices.Clone(s.repl.damage.volumes[ni.NodeID])
	o := s.repl.ops[ni.NodeID]
	ni.OpState, ni.OpSince = o.name(), o.since
	if o.state == opMaintenance {
		ni.MaintenanceUntil = o.until
	}
	if o.state == opDecommissioning || o.state == opDecommissioned {
		ni.Decommission = s.decommissionProgress(ni.NodeID, s.replicaIndex(now))
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
