package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// allocatable: OPEN, every member HEALTHY and serving it (or not heard
// from since the start: presumed to serve it as before).
func (s *Allocator) Allocatable(p *state.PipelineState, now time.Time) bool {
	if p.Rec.State != state.PipelineOpen {
		return false
	}
	for _, m := range p.Rec.Members {
		n := s.NodeByID[m]
		if s.cl.HealthOf(n, now) != metaapi.HealthHealthy || (n.Seen && !s.cl.Reports(m, p.Rec.ID)) {
			return false
		}
	}
	return !s.leaderless(p, now)
}

// leaderGrace: a pipeline younger than this is not called leaderless (its
// members report it before its first election ends).
const LeaderGrace = 3 * metaapi.DefaultHeartbeatInterval

// leaderless: the newest report of p (of the live members that report it)
// names no leader, and p is older than leaderGrace. Its members have lost
// their leader and not elected another: a majority of them is down or cut
// off (though not yet STALE), or an election is under way. A write handed
// out there would wait for the election or fail, so p is not handed out
// until a report names a leader again: after two datanodes of five died,
// puts went to their pipelines for the 5 s until STALE.
func (s *Allocator) leaderless(p *state.PipelineState, now time.Time) bool {
	if now.Sub(p.Rec.Created) < LeaderGrace {
		return false
	}
	var newest time.Time
	lead, found := uint64(0), false
	for _, m := range p.Rec.Members {
		if !s.cl.Live(m, now) || !s.cl.Reports(m, p.Rec.ID) {
			continue
		}
		if n := s.NodeByID[m]; !found || n.Last.After(newest) {
			newest, lead, found = n.Last, n.Pipelines[p.Rec.ID].LeaderID, true
		}
	}
	return found && lead == 0
}

// degradedAllocatable: OPEN, at least MinLive (Config.MinLiveReplicas,
// never below a raft majority) of its members HEALTHY and serving it, and
// the others STALE (a datanode just killed, not yet declared dead) or
// DEAD with the pipeline kept degraded (KeepDegraded: no replacement
// member exists). Its writes commit on that majority, fsynced on each, as
// raft's quorum has it; used only when no pipeline is allocatable, so that
// puts go on through the seconds between a datanode's death and its
// pipelines' closing, and after it while no pipeline of PipelineSize
// HEALTHY members can be made (with 3 datanodes every pipeline holds each
// of them).
func (s *Allocator) degradedAllocatable(p *state.PipelineState, now time.Time) bool {
	if p.Rec.State != state.PipelineOpen {
		return false
	}
	ok, dead := 0, false
	for _, m := range p.Rec.Members {
		n := s.NodeByID[m]
		switch h := s.cl.HealthOf(n, now); {
		case h == metaapi.HealthDead:
			dead = true
		case h == metaapi.HealthHealthy && (!n.Seen || s.cl.Reports(m, p.Rec.ID)):
			ok++
		}
	}
	if dead {
		if keep, _ := s.cl.KeepDegraded(p, now); !keep {
			return false // closed at the next Tick
		}
	}
	return ok >= s.cl.MinLive() && !s.leaderless(p, now)
}

// Allocate hands out a new block for bucket/key: a fresh local ID in an
// OPEN container of an allocatable pipeline (round robin over them; when
// there is none, of a degraded one: degradedAllocatable),
// recorded with its time so that it can be committed once, or deleted
// after AllocationGrace.
func (s *Allocator) Allocate(req *metaapi.AllocateRequest) (*metaapi.AllocateResponse, error) {
	resp, err := state.Mutate(s.State, func() (*metaapi.AllocateResponse, *pebble.Batch, error) { return s.allocateLocked(req) })
	if err == nil {
		s.Metrics.Allocations.Inc()
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
	got, errs, werr, err := state.ApplyEach(s.State, make([]error, len(reqs)), func(i int) (*metaapi.AllocateResponse, *pebble.Batch, error) {
		return s.allocateLocked(&reqs[i])
	})
	if err != nil {
		return nil, err
	}
	res := make([]metaapi.AllocateResult, len(reqs))
	for i := range reqs {
		if err := cmp.Or(errs[i], werr); err != nil && (errs[i] != nil || got[i] != nil) {
			res[i].Error = state.APIError(fmt.Sprintf("allocate for %s/%s", reqs[i].Bucket, reqs[i].Key), err)
			continue
		}
		res[i].Block = got[i]
		s.Metrics.Allocations.Inc()
	}
	return res, nil
}

// allocateLocked is Allocate under s.mu.
func (s *Allocator) allocateLocked(req *metaapi.AllocateRequest) (*metaapi.AllocateResponse, *pebble.Batch, error) {
	if req.AnyKey {
		if req.Key != "" {
			return nil, nil, fmt.Errorf("%w: an allocation for any key names key %q", metaapi.ErrInvalid, req.Key)
		}
		if _, err := s.BucketOf(req.Bucket, "x"); err != nil { // the bucket's checks only
			return nil, nil, err
		}
	} else if _, err := s.BucketOf(req.Bucket, req.Key); err != nil {
		return nil, nil, err
	}
	now := s.Cfg.Now()
	var cands []*state.PipelineState
	for _, pid := range s.cl.SortedPipelines() {
		if p := s.PipelineByID[pid]; s.Allocatable(p, now) && !slices.Contains(req.ExcludePipelines, pid) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		for _, pid := range s.cl.SortedPipelines() {
			if p := s.PipelineByID[pid]; s.degradedAllocatable(p, now) && !slices.Contains(req.ExcludePipelines, pid) {
				cands = append(cands, p)
			}
		}
		if len(cands) > 0 {
			s.Metrics.DegradedAllocations.Inc()
		}
	}
	if len(cands) == 0 {
		healthy := 0
		var full []string
		for _, n := range s.NodeByID {
			if s.cl.HealthOf(n, now) == metaapi.HealthHealthy {
				healthy++
				if s.cl.Full(n) {
					full = append(full, fmt.Sprintf("node %d has %d MiB", n.Rec.ID, n.Available>>20))
				}
			}
		}
		open := 0
		for _, p := range s.PipelineByID {
			if p.Rec.State == state.PipelineOpen {
				open++
			}
		}
		fullNote := ""
		if len(full) > 0 {
			// A full node gets no pipeline: say so, or "3 healthy
			// datanodes" reads as if a pipeline could be made.
			fullNote = fmt.Sprintf(" (%d of them full, below %d MiB available: %s)", len(full), s.Cfg.MinAvailableBytes>>20, strings.Join(full, ", "))
		}
		return nil, nil, fmt.Errorf("%w: %d healthy datanodes%s, %d needed for a pipeline; %d open pipelines, %d excluded by the client",
			metaapi.ErrNoPipeline, healthy, fullNote, state.PipelineSize, open, len(req.ExcludePipelines))
	}
	p := cands[s.RR%uint64(len(cands))]
	s.RR++
	b := s.Store.NewBatch()
	var open []*state.ContainerState
	for _, cid := range p.Containers {
		c := s.ContainerByID[cid]
		if c.Rec.State != state.ContainerOpen {
			continue
		}
		if c.Rec.Committed >= s.FullBytes() {
			s.cl.StartClose(b, c, fmt.Sprintf("%d bytes committed", c.Rec.Committed))
			continue
		}
		open = append(open, c)
	}
	for len(open) < s.Cfg.ContainersPerPipeline {
		c := &state.ContainerState{Rec: state.ContainerRecord{ID: s.Ctr.NextContainer, Pipeline: p.Rec.ID, State: state.ContainerOpen, Created: now, NextLocal: 1}}
		s.Ctr.NextContainer++
		s.ContainerByID[c.Rec.ID] = c
		p.Containers = append(p.Containers, c.Rec.ID)
		open = append(open, c)
		state.Set(b, state.CounterKey(), s.Ctr.Encode())
		s.Log.Info("container created", "container", c.Rec.ID, "pipeline", p.Rec.ID)
	}
	c := open[p.RR%uint64(len(open))]
	p.RR++
	ref := state.BlockRef{Container: c.Rec.ID, Local: c.Rec.NextLocal}
	c.Rec.NextLocal++
	state.Set(b, state.U64Key(state.PrefixContainer, c.Rec.ID), c.Rec.Encode())
	a := state.AllocRecord{Allocated: now, Bucket: req.Bucket, Key: req.Key}
	state.Set(b, state.BlockKey(state.PrefixAlloc, ref.Container, ref.Local), a.Encode())
	s.Allocs[ref] = a
	return &metaapi.AllocateResponse{
		Block:    metaapi.BlockRef{Container: ref.Container, Local: ref.Local},
		Pipeline: *s.cl.PipelineView(p, now),
	}, b, nil
}

// Allocator hands out blocks in containers of open pipelines.
type Allocator struct {
	*state.State
	cl *Cluster
}

// NewAllocator allocates blocks in cl's pipelines.
func NewAllocator(st *state.State, cl *Cluster) *Allocator { return &Allocator{st, cl} }
