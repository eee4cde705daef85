package metaapi

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Datanode operational states (NodeInfo.OpState), set by an operator:
//
//   - IN_SERVICE: the default.
//   - DECOMMISSIONING: the node gets no new pipeline (its OPEN ones are
//     closed), no copy; its replicas no longer count, so every container
//     it holds is copied elsewhere (it may be a source); once each has its
//     replication factor of replicas on other nodes, the state becomes
//     DECOMMISSIONED and the node can be stopped.
//   - DECOMMISSIONED: as DECOMMISSIONING, done.
//   - IN_MAINTENANCE: until MaintenanceUntil, the node gets no new
//     pipeline (its OPEN ones are closed) and its replicas count as
//     present even while it is STALE or DEAD: nothing is copied because
//     it is down. At the deadline it is IN_SERVICE again (and, if still
//     down, its replicas are copied as usual).
//
// Recommission makes a node IN_SERVICE again. The states are in the meta
// service's replicated store: they survive its restarts and failovers.
const (
	NodeInService       = "IN_SERVICE"
	NodeDecommissioning = "DECOMMISSIONING"
	NodeDecommissioned  = "DECOMMISSIONED"
	NodeInMaintenance   = "IN_MAINTENANCE"
)

// Operations on a node (POST /v1/nodes/{id}/{op}).
const (
	OpDecommission = "decommission"
	OpMaintenance  = "maintenance"
	OpRecommission = "recommission"
	// MaxMaintenance bounds a maintenance's duration.
	MaxMaintenance = 30 * 24 * time.Hour
)

// NodeOpRequest is the body of POST /v1/nodes/{id}/maintenance.
type NodeOpRequest struct {
	// DurationMs: how long the maintenance lasts (1 ms..MaxMaintenance).
	DurationMs int64 `json:"duration_ms,omitempty"`
}

// DecommissionProgress: of the containers the node holds, how many have
// their replication factor of healthy replicas on other nodes; Waiting
// lists the first of those that do not yet (at most 16).
type DecommissionProgress struct {
	Containers int      `json:"containers"`
	Replicated int      `json:"replicated"`
	Waiting    []uint64 `json:"waiting,omitempty"`
}

// NodeOp runs op (OpDecommission, OpMaintenance with d, OpRecommission)
// on node id and returns the node as it is now.
func (c *Client) NodeOp(ctx context.Context, id uint64, op string, d time.Duration) (*NodeInfo, error) {
	var out NodeInfo
	var in *NodeOpRequest
	if op == OpMaintenance {
		in = &NodeOpRequest{DurationMs: d.Milliseconds()}
	}
	if err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/nodes/%d/%s", id, op), in, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// NodeRemoved is the state of a datanode removed for good (RemoveNode): it
// is in no listing any more; NodeRemoval reports it.
const NodeRemoved = "REMOVED"

// NodeRemoval is the answer of DELETE /v1/nodes/{id}: the datanode removed
// for good (a DECOMMISSIONED one, or a DEAD one emptied), as it was. A
// refusal is ErrPrecondition naming what is in the way (package meta's
// "Datanode operations"). Its ID is never reused; its UUID's heartbeats
// are refused (INVALID). A second removal answers AlreadyRemoved.
type NodeRemoval struct {
	NodeID uint64 `json:"node_id"`
	UUID   string `json:"uuid"`
	Addr   string `json:"addr"`
	// Health and OpState: what the node was when removed.
	Health         string    `json:"health,omitempty"`
	OpState        string    `json:"op_state,omitempty"`
	RemovedAt      time.Time `json:"removed_at"`
	AlreadyRemoved bool      `json:"already_removed,omitempty"`
	// Pipelines: the CLOSED pipelines it was a past member of (it is no
	// longer listed among their members).
	Pipelines []uint64 `json:"pipelines,omitempty"`
}

// RemoveNode removes node id for good (see NodeRemoval).
func (c *Client) RemoveNode(ctx context.Context, id uint64) (*NodeRemoval, error) {
	var out NodeRemoval
	if err := c.Do(ctx, http.MethodDelete, fmt.Sprintf("/v1/nodes/%d", id), nil, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}
