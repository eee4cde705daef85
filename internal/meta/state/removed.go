package state

import (
	"fmt"
	"slices"
	"time"
)

// A datanode removed for good (an operator's `spindle admin datanode
// remove`, package cluster's removal) keeps its node record 'N' — its ID
// stays below the counter and is never handed out again, its UUID is
// remembered — and its operational state record 'O' says OpRemoved (since
// the removal). It is in none of the memory maps of the registry
// (NodeByID, NodeByUUID, Repair.Ops), only in Repair.Removed, and in no
// pipeline record: the removal rewrote the CLOSED pipelines it was a
// member of without it (a pipeline whose every member was removed has
// none). A heartbeat under its UUID is refused.

// RemovedNode is a datanode removed for good.
type RemovedNode struct {
	Rec     NodeRecord
	Removed OpState
	// Logged: when a heartbeat of it was last logged as refused (memory
	// only: one line a minute, not one a heartbeat, while it runs).
	Logged time.Time
}

// loadRemoved moves node id, removed for good, from the registry loaded
// so far to Repair.Removed (called by loadOps, after the pipelines: no
// pipeline may name it).
func (s *State) loadRemoved(id uint64, o OpState) error {
	n := s.NodeByID[id]
	for _, p := range s.PipelineByID {
		if slices.Contains(p.Rec.Members, id) {
			return fmt.Errorf("%w: node %d, removed, is a member of pipeline %d", ErrCorrupt, id, p.Rec.ID)
		}
	}
	delete(s.NodeByID, id)
	delete(s.NodeByUUID, n.Rec.UUID)
	s.Repair.Removed[n.Rec.UUID] = RemovedNode{Rec: n.Rec, Removed: o}
	return nil
}

// RemovedByID is the removed node id, if it was removed.
func (s *State) RemovedByID(id uint64) (RemovedNode, bool) {
	for _, r := range s.Repair.Removed {
		if r.Rec.ID == id {
			return r, true
		}
	}
	return RemovedNode{}, false
}
