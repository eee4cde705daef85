package meta

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// allocatable: OPEN, every member HEALTHY and serving it (or not heard
// from since the start: presumed to serve it as before).
func (s *Allocator) allocatable(p *pipelineState, now time.Time) bool {
	if p.rec.State != pipelineOpen {
		return false
	}
	for _, m := range p.rec.Members {
		n := s.nodes[m]
		if s.cl.healthOf(n, now) != metaapi.HealthHealthy || (n.seen && !s.cl.reports(m, p.rec.ID)) {
			return false
		}
	}
	return !s.leaderless(p, now)
}

// leaderGrace: a pipeline younger than this is not called leaderless (its
// members report it before its first election ends).
const leaderGrace = 3 * metaapi.DefaultHeartbeatInterval

// leaderless: the newest report of p (of the live members that report it)
// names no leader, and p is older than leaderGrace. Its members have lost
// their leader and not elected another: a majority of them is down or cut
// off (though not yet STALE), or an election is under way. A write handed
// out there would wait for the election or fail, so p is not handed out
// until a report names a leader again: after two datanodes of five died,
// puts went to their pipelines for the 5 s until STALE.
func (s *Allocator) leaderless(p *pipelineState, now time.Time) bool {
	if now.Sub(p.rec.Created) < leaderGrace {
		return false
	}
	var newest time.Time
	lead, found := uint64(0), false
	for _, m := range p.rec.Members {
		if !s.cl.live(m, now) || !s.cl.reports(m, p.rec.ID) {
			continue
		}
		if n := s.nodes[m]; !found || n.last.After(newest) {
			newest, lead, found = n.last, n.pipelines[p.rec.ID].LeaderID, true
		}
	}
	return found && lead == 0
}

// degradedAllocatable: OPEN, a raft majority of its members HEALTHY and
// serving it, none DEAD (the others STALE: a datanode just killed, not yet
// declared dead). Its writes commit on that majority, fsynced on each, as
// raft's quorum has it; used only when no pipeline is allocatable, so that
// puts go on through the seconds between a datanode's death and its
// pipelines' closing (with 3 datanodes every pipeline holds each of them).
func (s *Allocator) degradedAllocatable(p *pipelineState, now time.Time) bool {
	if p.rec.State != pipelineOpen {
		return false
	}
	ok := 0
	for _, m := range p.rec.Members {
		n := s.nodes[m]
		switch h := s.cl.healthOf(n, now); {
		case h == metaapi.HealthDead:
			return false
		case h == metaapi.HealthHealthy && (!n.seen || s.cl.reports(m, p.rec.ID)):
			ok++
		}
	}
	return ok > len(p.rec.Members)/2 && !s.leaderless(p, now)
}

// Allocate hands out a new block for bucket/key: a fresh local ID in an
// OPEN container of an allocatable pipeline (round robin over them; when
// there is none, of a pipeline with a majority of HEALTHY members),
// recorded with its time so that it can be committed once, or deleted
// after AllocationGrace.
func (s *Allocator) Allocate(req *metaapi.AllocateRequest) (*metaapi.AllocateResponse, error) {
	resp, err := mutate(s.State, func() (*metaapi.AllocateResponse, *pebble.Batch, error) { return s.allocateLocked(req) })
	if err == nil {
		s.metrics.allocations.Inc()
	}
	return resp, err
}

// AllocateMany makes a batch of allocations (metaapi.AllocationsRoute):
// each as Allocate would, in order, under one hold of s.mu, each its own
// store batch; the answers come once every one is durable (one sync or
// raft round for the batch). One result per request; a refusal
// (NO_PIPELINE, an unknown bucket) does not affect the others. A service
// that does not serve refuses the whole batch.
func (s *Allocator) AllocateMany(reqs []metaapi.AllocateRequest) ([]metaapi.AllocateResult, error) {
	if len(reqs) > metaapi.MaxCommitBatch {
		return nil, fmt.Errorf("%w: %d allocations in a batch, at most %d", metaapi.ErrInvalid, len(reqs), metaapi.MaxCommitBatch)
	}
	got, errs, werr, err := applyEach(s.State, make([]error, len(reqs)), func(i int) (*metaapi.AllocateResponse, *pebble.Batch, error) {
		return s.allocateLocked(&reqs[i])
	})
	if err != nil {
		return nil, err
	}
	res := make([]metaapi.AllocateResult, len(reqs))
	for i := range reqs {
		if err := cmp.Or(errs[i], werr); err != nil && (errs[i] != nil || got[i] != nil) {
			res[i].Error = apiError(fmt.Sprintf("allocate for %s/%s", reqs[i].Bucket, reqs[i].Key), err)
			continue
		}
		res[i].Block = got[i]
		s.metrics.allocations.Inc()
	}
	return res, nil
}

// allocateLocked is Allocate under s.mu.
func (s *Allocator) allocateLocked(req *metaapi.AllocateRequest) (*metaapi.AllocateResponse, *pebble.Batch, error) {
	if req.AnyKey {
		if req.Key != "" {
			return nil, nil, fmt.Errorf("%w: an allocation for any key names key %q", metaapi.ErrInvalid, req.Key)
		}
		if _, err := s.bucketOf(req.Bucket, "x"); err != nil { // the bucket's checks only
			return nil, nil, err
		}
	} else if _, err := s.bucketOf(req.Bucket, req.Key); err != nil {
		return nil, nil, err
	}
	now := s.cfg.Now()
	var cands []*pipelineState
	for _, pid := range s.cl.sortedPipelines() {
		if p := s.pipelines[pid]; s.allocatable(p, now) && !slices.Contains(req.ExcludePipelines, pid) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		for _, pid := range s.cl.sortedPipelines() {
			if p := s.pipelines[pid]; s.degradedAllocatable(p, now) && !slices.Contains(req.ExcludePipelines, pid) {
				cands = append(cands, p)
			}
		}
		if len(cands) > 0 {
			s.metrics.degradedAllocations.Inc()
		}
	}
	if len(cands) == 0 {
		healthy := 0
		var full []string
		for _, n := range s.nodes {
			if s.cl.healthOf(n, now) == metaapi.HealthHealthy {
				healthy++
				if s.cl.full(n) {
					full = append(full, fmt.Sprintf("node %d has %d MiB", n.rec.ID, n.available>>20))
				}
			}
		}
		open := 0
		for _, p := range s.pipelines {
			if p.rec.State == pipelineOpen {
				open++
			}
		}
		fullNote := ""
		if len(full) > 0 {
			// A full node gets no pipeline: say so, or "3 healthy
			// datanodes" reads as if a pipeline could be made.
			fullNote = fmt.Sprintf(" (%d of them full, below %d MiB available: %s)", len(full), s.cfg.MinAvailableBytes>>20, strings.Join(full, ", "))
		}
		return nil, nil, fmt.Errorf("%w: %d healthy datanodes%s, %d needed for a pipeline; %d open pipelines, %d excluded by the client",
			metaapi.ErrNoPipeline, healthy, fullNote, PipelineSize, open, len(req.ExcludePipelines))
	}
	p := cands[s.rr%uint64(len(cands))]
	s.rr++
	b := s.db.NewBatch()
	var open []*containerState
	for _, cid := range p.containers {
		c := s.containers[cid]
		if c.rec.State != containerOpen {
			continue
		}
		if c.rec.Committed >= s.fullBytes() {
			s.cl.startClose(b, c, fmt.Sprintf("%d bytes committed", c.rec.Committed))
			continue
		}
		open = append(open, c)
	}
	for len(open) < s.cfg.ContainersPerPipeline {
		c := &containerState{rec: containerRecord{ID: s.ctr.NextContainer, Pipeline: p.rec.ID, State: containerOpen, Created: now, NextLocal: 1}}
		s.ctr.NextContainer++
		s.containers[c.rec.ID] = c
		p.containers = append(p.containers, c.rec.ID)
		open = append(open, c)
		set(b, counterKey(), s.ctr.encode())
		s.log.Info("container created", "container", c.rec.ID, "pipeline", p.rec.ID)
	}
	c := open[p.rr%uint64(len(open))]
	p.rr++
	ref := blockRef{c.rec.ID, c.rec.NextLocal}
	c.rec.NextLocal++
	set(b, u64key(prefixContainer, c.rec.ID), c.rec.encode())
	a := allocRecord{Allocated: now, Bucket: req.Bucket, Key: req.Key}
	set(b, blockKey(prefixAlloc, ref.container, ref.local), a.encode())
	s.allocs[ref] = a
	return &metaapi.AllocateResponse{
		Block:    metaapi.BlockRef{Container: ref.container, Local: ref.local},
		Pipeline: *s.cl.pipelineView(p, now),
	}, b, nil
}

// Allocator hands out blocks in containers of open pipelines.
type Allocator struct {
	*State
	cl *Cluster
}
