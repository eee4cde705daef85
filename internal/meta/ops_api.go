package meta

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/meta/state"
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
	return state.Mutate(s.State, func() (*metaapi.NodeInfo, *pebble.Batch, error) {
		now := s.Cfg.Now()
		if s.NodeByID[id] == nil {
			return nil, nil, fmt.Errorf("%w: datanode %d", metaapi.ErrNotFound, id)
		}
		cur := s.Repair.Ops[id]
		b := s.Store.NewBatch()
		switch op {
		case metaapi.OpDecommission:
			if cur.State == state.OpDecommissioning || cur.State == state.OpDecommissioned {
				break // already
			}
			s.SetOp(b, id, state.OpState{State: state.OpDecommissioning, Since: now})
			s.Log.Warn("datanode DECOMMISSIONING: its containers are copied to other nodes", "node", id, "was", cur.Name())
		case metaapi.OpMaintenance:
			if d <= 0 || d > metaapi.MaxMaintenance {
				state.CloseBatch(b)
				return nil, nil, fmt.Errorf("%w: maintenance of %s: want (0, %s]", metaapi.ErrInvalid, d, metaapi.MaxMaintenance)
			}
			if cur.State == state.OpDecommissioning || cur.State == state.OpDecommissioned {
				state.CloseBatch(b)
				return nil, nil, fmt.Errorf("%w: datanode %d is %s: recommission it first", metaapi.ErrInvalid, id, cur.Name())
			}
			s.SetOp(b, id, state.OpState{State: state.OpMaintenance, Since: now, Until: now.Add(d)})
			s.Log.Warn("datanode IN_MAINTENANCE: its replicas are not copied while it is down", "node", id, "until", now.Add(d))
		case metaapi.OpRecommission:
			if cur.State != state.OpInService {
				s.SetOp(b, id, state.OpState{State: state.OpInService, Since: now})
				s.Log.Warn("datanode recommissioned: IN_SERVICE again", "node", id, "was", cur.Name())
			}
		default:
			state.CloseBatch(b)
			return nil, nil, fmt.Errorf("%w: unknown operation %q (want %s, %s or %s)", metaapi.ErrInvalid, op,
				metaapi.OpDecommission, metaapi.OpMaintenance, metaapi.OpRecommission)
		}
		s.CloseOpPipelines(b, now)
		ni := s.nodeInfo(id, now)
		return &ni, b, nil
	})
}

// nodeInfo is the admin view of node id.
func (s *Service) nodeInfo(id uint64, now time.Time) metaapi.NodeInfo {
	n := s.NodeByID[id]
	ni := metaapi.NodeInfo{NodeID: id, UUID: n.Rec.UUID, Addr: n.Rec.Addr, Health: s.HealthOf(n, now),
		LastHeartbeat: n.Last, Pipelines: []uint64{}, Containers: len(n.Containers), UsedBytes: n.Used,
		CapacityBytes: n.Capacity, AvailableBytes: n.Available, Full: s.Full(n), MetricsURL: n.Rec.MetricsURL, ReadOnlyVolumes: n.ReadOnly}
	for _, pid := range s.SortedPipelines() {
		p := s.PipelineByID[pid]
		if p.Rec.State == state.PipelineOpen && slices.Contains(p.Rec.Members, id) {
			ni.Pipelines = append(ni.Pipelines, pid)
		}
	}
	s.opsNodeInfo(&ni, now)
	return ni
}

// opsNodeInfo adds the node's failed volumes and operational state to its
// admin view.
func (s *Service) opsNodeInfo(ni *metaapi.NodeInfo, now time.Time) {
	ni.FailedVolumes = slices.Clone(s.Repair.Damage.Volumes[ni.NodeID])
	o := s.Repair.Ops[ni.NodeID]
	ni.OpState, ni.OpSince = o.Name(), o.Since
	if o.State == state.OpMaintenance {
		ni.MaintenanceUntil = o.Until
	}
	if o.State == state.OpDecommissioning || o.State == state.OpDecommissioned {
		ni.Decommission = s.DecommissionProgress(ni.NodeID, s.ReplicaIndex(now))
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
			if err := httpio.DecodeBody(w, r, &req); err != nil {
				return nil, 0, err
			}
		}
		ni, err := s.NodeOp(id, r.PathValue("op"), time.Duration(req.DurationMs)*time.Millisecond)
		return ni, http.StatusOK, err
	})
	s.routeRemove(route) // remove_api.go
}
