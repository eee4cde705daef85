package meta

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// RemoveNode removes datanode id for good (`spindle admin datanode
// remove`; the rules are cluster/remove.go's, the answer
// metaapi.NodeRemoval's): one replicated, durable batch. A node removed
// already is answered again (AlreadyRemoved), changing nothing.
func (s *Service) RemoveNode(id uint64) (*metaapi.NodeRemoval, error) {
	return state.Mutate(s.State, func() (*metaapi.NodeRemoval, *pebble.Batch, error) {
		if r, ok := s.RemovedByID(id); ok {
			return &metaapi.NodeRemoval{NodeID: id, UUID: r.Rec.UUID, Addr: r.Rec.Addr, RemovedAt: r.Removed.Since, AlreadyRemoved: true}, nil, nil
		}
		now := s.Cfg.Now()
		rm := cluster.NewRemoval(s.State, s.Cluster)
		if err := rm.CheckRemove(id, now); err != nil {
			return nil, nil, err
		}
		b := s.Store.NewBatch()
		return rm.Remove(b, id, now), b, nil
	})
}

// removedHeartbeat is the refusal of a heartbeat under the UUID of a
// datanode removed for good (nil: not removed). It is refused as INVALID,
// which ends a datanode's registration at its start: the datanode must be
// wiped (a new UUID) to join again, as a new node with a new ID.
func (s *Service) removedHeartbeat(hb *metaapi.Heartbeat) error {
	r, ok := s.Repair.Removed[hb.UUID]
	if !ok {
		return nil
	}
	if now := s.Cfg.Now(); now.Sub(r.Logged) >= time.Minute { // (under s.mu for writing)
		s.Log.Warn("heartbeat refused: the datanode was removed for good (stop it, or wipe it to join as a new datanode); logged once a minute",
			"node", r.Rec.ID, "uuid", hb.UUID, "addr", hb.Addr, "removed", r.Removed.Since)
		r.Logged = now
		s.Repair.Removed[hb.UUID] = r
	}
	return fmt.Errorf("%w: datanode %s was node %d, removed from the cluster at %s (spindle admin datanode remove): it cannot join again under this identity; wipe its data and log directories to join as a new datanode",
		metaapi.ErrInvalid, hb.UUID, r.Rec.ID, r.Removed.Since.UTC().Format("2006-01-02 15:04:05Z"))
}

// routeRemove adds DELETE /v1/nodes/{id} (node_remove, admin only, audited).
func (s *Service) routeRemove(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("DELETE /v1/nodes/{id}", "node_remove", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil || id == 0 {
			return nil, 0, fmt.Errorf("%w: node ID %q", metaapi.ErrInvalid, r.PathValue("id"))
		}
		nr, err := s.RemoveNode(id)
		return nr, http.StatusOK, err
	})
}
