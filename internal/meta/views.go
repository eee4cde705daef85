package meta

import (
	"slices"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Nodes is the admin view of every registered datanode, by node ID.
func (s *Service) Nodes() (*metaapi.NodeList, error) {
	return state.Read(s.State, func() (*metaapi.NodeList, error) {
		now := s.Cfg.Now()
		l := &metaapi.NodeList{Nodes: []metaapi.NodeInfo{}}
		for _, id := range s.SortedNodes() {
			l.Nodes = append(l.Nodes, s.nodeInfo(id, now)) // ops.go
		}
		return l, nil
	})
}

// Pipelines is the admin view of every pipeline, open and closed, by ID.
func (s *Service) Pipelines() (*metaapi.PipelineList, error) {
	return state.Read(s.State, func() (*metaapi.PipelineList, error) {
		now := s.Cfg.Now()
		l := &metaapi.PipelineList{Pipelines: []metaapi.Pipeline{}}
		for _, pid := range s.SortedPipelines() {
			v := s.PipelineView(s.PipelineByID[pid], now)
			v.Allocatable = s.Allocatable(s.PipelineByID[pid], now)
			l.Pipelines = append(l.Pipelines, *v)
		}
		return l, nil
	})
}

// Containers is the admin view of every container, by ID; used bytes and
// blocks are the largest any live replica reports; Replicas lists the
// live nodes whose report holds it (members of its pipeline or copies),
// ReplicaDetails each one's state, bytes and BCSID; BCSID is the highest
// a CLOSED replica reports (any replica's when none is CLOSED); Missing
// and UnderReplicated say what it lacks.
func (s *Service) Containers() (*metaapi.ContainerList, error) {
	return state.Read(s.State, func() (*metaapi.ContainerList, error) {
		now := s.Cfg.Now()
		ids := make([]uint64, 0, len(s.ContainerByID))
		for id := range s.ContainerByID {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		holders := map[uint64][]uint64{} // container → live nodes reporting it, by node ID
		for _, nid := range s.SortedNodes() {
			n := s.NodeByID[nid]
			if !n.Seen || !s.Live(nid, now) {
				continue
			}
			for cid := range n.Containers {
				holders[cid] = append(holders[cid], nid)
			}
		}
		_, top := s.ClosedIndex(now)
		idx := s.ReplicaIndex(now)
		l := &metaapi.ContainerList{Containers: []metaapi.ContainerInfo{}}
		for _, id := range ids {
			c := s.ContainerByID[id]
			ci := metaapi.ContainerInfo{ID: id, Pipeline: c.Rec.Pipeline, State: state.ContainerStateName(c.Rec.State), BCSID: top[id],
				CommittedBytes: c.Rec.Committed, Missing: s.MissingReplicas(c, now)}
			h := len(idx[id]) // (UnderReplicated's rule, repair/rerepl.go)
			ci.UnderReplicated = len(ci.Missing) > 0 ||
				c.Rec.State == state.ContainerClosed && h < s.Cfg.ReplicationFactor && (h > 0 || c.Rec.Committed > 0)
			for _, m := range holders[id] {
				r := s.NodeByID[m].Containers[id]
				ci.UsedBytes = max(ci.UsedBytes, r.UsedBytes)
				ci.Blocks = max(ci.Blocks, r.Blocks)
				ci.Replicas = append(ci.Replicas, m)
				if _, closed := top[id]; !closed {
					ci.BCSID = max(ci.BCSID, r.BCSID)
				}
				ci.ReplicaDetails = append(ci.ReplicaDetails, metaapi.ReplicaInfo{Node: m, State: r.State, UsedBytes: r.UsedBytes, BCSID: r.BCSID,
					Behind: c.Rec.State == state.ContainerClosed && r.State == metaapi.ContainerClosed && s.Behind(m, id, top[id])})
			}
			l.Containers = append(l.Containers, ci)
		}
		return l, nil
	})
}
