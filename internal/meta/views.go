package meta

import (
	"slices"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Nodes is the admin view of every registered datanode, by node ID.
func (s *Service) Nodes() (*metaapi.NodeList, error) {
	return read(s.State, func() (*metaapi.NodeList, error) {
		now := s.cfg.Now()
		l := &metaapi.NodeList{Nodes: []metaapi.NodeInfo{}}
		for _, id := range s.sortedNodes() {
			l.Nodes = append(l.Nodes, s.nodeInfo(id, now)) // ops.go
		}
		return l, nil
	})
}

// Pipelines is the admin view of every pipeline, open and closed, by ID.
func (s *Service) Pipelines() (*metaapi.PipelineList, error) {
	return read(s.State, func() (*metaapi.PipelineList, error) {
		now := s.cfg.Now()
		l := &metaapi.PipelineList{Pipelines: []metaapi.Pipeline{}}
		for _, pid := range s.sortedPipelines() {
			v := s.pipelineView(s.pipelines[pid], now)
			v.Allocatable = s.allocatable(s.pipelines[pid], now)
			l.Pipelines = append(l.Pipelines, *v)
		}
		return l, nil
	})
}

// Containers is the admin view of every container, by ID; used bytes and
// blocks are the largest any live replica reports; Replicas lists the
// live nodes whose report holds it (members of its pipeline or copies),
// ReplicaDetails each one's state, bytes and BCSID; BCSID is the highest
// a CLOSED replica reports (any replica's when none is CLOSED).
func (s *Service) Containers() (*metaapi.ContainerList, error) {
	return read(s.State, func() (*metaapi.ContainerList, error) {
		now := s.cfg.Now()
		ids := make([]uint64, 0, len(s.containers))
		for id := range s.containers {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		holders := map[uint64][]uint64{} // container → live nodes reporting it, by node ID
		for _, nid := range s.sortedNodes() {
			n := s.nodes[nid]
			if !n.seen || !s.live(nid, now) {
				continue
			}
			for cid := range n.containers {
				holders[cid] = append(holders[cid], nid)
			}
		}
		_, top := s.closedIndex(now)
		l := &metaapi.ContainerList{Containers: []metaapi.ContainerInfo{}}
		for _, id := range ids {
			c := s.containers[id]
			ci := metaapi.ContainerInfo{ID: id, Pipeline: c.rec.Pipeline, State: containerStateName(c.rec.State), BCSID: top[id],
				CommittedBytes: c.rec.Committed}
			for _, m := range holders[id] {
				r := s.nodes[m].containers[id]
				ci.UsedBytes = max(ci.UsedBytes, r.UsedBytes)
				ci.Blocks = max(ci.Blocks, r.Blocks)
				ci.Replicas = append(ci.Replicas, m)
				if _, closed := top[id]; !closed {
					ci.BCSID = max(ci.BCSID, r.BCSID)
				}
				ci.ReplicaDetails = append(ci.ReplicaDetails, metaapi.ReplicaInfo{Node: m, State: r.State, UsedBytes: r.UsedBytes, BCSID: r.BCSID,
					Behind: c.rec.State == containerClosed && r.State == metaapi.ContainerClosed && s.behind(m, id, top[id])})
			}
			l.Containers = append(l.Containers, ci)
		}
		return l, nil
	})
}
