package state

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// The commit pipeline (see "Concurrency" in the package comment).
//
// A request changes memory and builds its batch under s.mu (for writing);
// still under s.mu, the batch is applied to Pebble without waiting for the
// WAL sync (DB.ApplyNoSyncWait: sequence number, WAL record and memtable,
// in s.mu order, so the store's order of batches is memory's order) and
// gets the next batch sequence (s.applied). Then s.mu is released and the
// request waits, outside the lock, until its batch and every earlier one
// are synced; Pebble syncs the batches that queued up meanwhile together
// (group commit). Every answer, read-only ones included, first waits until
// the last batch applied when it looked at the state (s.applied then) is
// durable: no answer depends on a change that a crash could still undo.
//
// Bound: the batches applied and not yet synced are bounded by Pebble's
// commit pipeline (record.SyncConcurrency synced batches; ApplyNoSyncWait
// blocks beyond it) and, in practice, by the requests in flight.
//
// A replicated member (raft.go) takes the same path with two changes:
// apply proposes the batch (into the leader's overlay and, in s.mu order,
// to the raft log) instead of writing the store — the items of a batch
// request are staged and proposed together, one proposal — and await
// waits until the proposal is committed, or, for an answer that proposed
// nothing (frontier), until what it saw is and a ReadIndex round
// confirmed the leadership.

// durability says which applied batches are synced: every batch with a
// sequence ≤ durable is. Batches are synced in sequence order (Pebble's WAL
// is one file written in that order), but their owners learn it in any
// order: durable advances only over a contiguous run of completions.
type durability struct {
	mu      sync.Mutex
	cond    sync.Cond // L = &mu; broadcast when durable advances or err is set
	durable uint64
	synced  map[uint64]bool // completed batches above durable
	// err is the first failed sync or apply. Sticky: no batch after it can
	// be durable (memory is ahead of the store), so the service refuses
	// every later request.
	err error
}

func (d *durability) Init() {
	d.cond.L = &d.mu
	d.synced = map[uint64]bool{}
}

// complete records the outcome of batch seq's sync.
func (d *durability) complete(seq uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.failLocked(err)
		return
	}
	d.synced[seq] = true
	advanced := false
	for d.synced[d.durable+1] {
		delete(d.synced, d.durable+1)
		d.durable++
		advanced = true
	}
	if advanced { // waiters wait for durable (or err) only
		d.cond.Broadcast()
	}
}

func (d *durability) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failLocked(err)
}

func (d *durability) failLocked(err error) {
	if d.err == nil {
		d.err = err
	}
	d.cond.Broadcast()
}

// failure is the sticky failure, nil while the store is healthy.
func (d *durability) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// wait returns once every batch up to seq is durable (nil), or once a
// batch up to seq can no longer be (the failure).
func (d *durability) Wait(seq uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.durable < seq {
		if d.err != nil {
			return d.err
		}
		d.cond.Wait()
	}
	return nil
}

// pending is what an answer waits for: batches up to seq durable; b, when
// not nil, is the request's own batch, whose sync the request collects.
// On a replicated service (raft.go): the proposals of stint up to seq
// applied, and, for read (no proposal of its own), a ReadIndex round.
type Pending struct {
	Seq   uint64
	b     *pebble.Batch
	Stint uint64
	Read  bool
}

// frontier is what an answer that made no change waits for: everything
// it may have seen. Callers hold s.mu (either mode).
func (s *State) frontier() Pending {
	if s.Rep != nil {
		seq := s.Proposed
		if s.Staged != nil {
			seq++ // the staged proposal, made before s.mu is released
		}
		return Pending{Stint: s.Stint, Seq: seq, Read: true}
	}
	return Pending{Seq: s.Applied}
}

// apply puts b (possibly empty) into the store in s.mu order and returns
// what the answer must wait for. Callers hold s.mu for writing and have
// already changed memory: a failure fails the service (sticky).
func (s *State) apply(b *pebble.Batch) (Pending, error) {
	if b == nil || b.Empty() {
		if b != nil {
			CloseBatch(b)
		}
		return s.frontier(), nil
	}
	if s.Rep != nil {
		return s.propose(b)
	}
	if err := s.Store.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		CloseBatch(b)
		err = fmt.Errorf("meta: store commit: %w", err)
		s.Dur.fail(err)
		s.Log.Error("meta store commit failed; refusing every later request", "err", err)
		return Pending{}, err
	}
	s.Applied++
	return Pending{Seq: s.Applied, b: b}, nil
}

// applyStaged is apply for one item of a batch request (applyEach): on a
// replicated service the item's batch joins the staged proposal, which
// the caller makes with flushStaged before it releases s.mu, so that a
// batch is one proposal and one log entry (an item still sees the
// earlier ones through the overlay). A group of one applies each item's
// batch to the store at once (a later item reads the store).
func (s *State) applyStaged(b *pebble.Batch) (Pending, error) {
	if s.Rep == nil || b == nil || b.Empty() {
		return s.apply(b)
	}
	return s.stage(b)
}

// await waits, outside s.mu, until p is durable: it collects the sync of
// p's own batch, then waits for every earlier one.
func (s *State) await(p Pending) error {
	if s.AwaitHook != nil {
		s.AwaitHook(p.b != nil)
	}
	if s.Rep != nil {
		return s.Rep.Await(p)
	}
	if p.b != nil {
		err := p.b.SyncWait()
		CloseBatch(p.b)
		if err != nil {
			err = fmt.Errorf("meta: store sync: %w", err)
			s.Log.Error("meta store sync failed; refusing every later request", "err", err)
		}
		s.Dur.complete(p.Seq, err)
	}
	if err := s.Dur.Wait(p.Seq); err != nil {
		return fmt.Errorf("meta: store failed, the change is not durable: %w", err)
	}
	return nil
}

// mutate runs fn under s.mu for writing. fn validates, changes memory and
// returns its answer and the batch of its changes (nil or empty: none);
// on error it must have changed nothing. The batch is applied under the
// lock, and the answer is returned once it, and every change fn may have
// seen, is durable.
func Mutate[T any](s *State, fn func() (T, *pebble.Batch, error)) (T, error) {
	return mutate(s, true, fn)
}

// MutateControl is Mutate for the cluster manager's own writes
// (heartbeats, Tick): they are not held back by the proposal backlog,
// whose bound is for client writes; they come at the heartbeat rate and
// keep the cluster's view of its datanodes current while clients wait.
func MutateControl[T any](s *State, fn func() (T, *pebble.Batch, error)) (T, error) {
	return mutate(s, false, fn)
}

func mutate[T any](s *State, admit bool, fn func() (T, *pebble.Batch, error)) (T, error) {
	var zero T
	s.Mu.Lock()
	if err := s.Usable(); err != nil {
		s.Mu.Unlock()
		return zero, err
	}
	if admit {
		if err := s.admitLocked(); err != nil {
			return zero, err // s.Mu released
		}
	}
	v, b, err := fn()
	var p Pending
	if err != nil {
		if b != nil {
			CloseBatch(b)
		}
		p = s.frontier()
	} else if p, err = s.apply(b); err != nil {
		s.Mu.Unlock()
		return zero, err
	}
	s.Mu.Unlock()
	if werr := s.await(p); werr != nil {
		return zero, werr
	}
	if err != nil {
		return zero, err
	}
	return v, nil
}

// read runs fn under s.mu for reading and returns its answer once every
// change fn may have seen is durable.
func Read[T any](s *State, fn func() (T, error)) (T, error) {
	var zero T
	s.Mu.RLock()
	if err := s.Usable(); err != nil {
		s.Mu.RUnlock()
		return zero, err
	}
	v, err := fn()
	p := s.frontier()
	s.Mu.RUnlock()
	if werr := s.await(p); werr != nil {
		return zero, werr
	}
	if err != nil {
		return zero, err
	}
	return v, nil
}

// maxOverlayBytes: the leader's overlay of proposed, not yet applied
// batches is rebuilt from the batches still in flight once it holds more
// than this (and more than twice what is in flight). A variable: a test
// rebuilds it at every proposal.
var MaxOverlayBytes = 8 << 20

// inflight is a proposal of the current stint not known applied yet: the
// leader rebuilds its overlay from them.
type inflight struct {
	seq  uint64
	repr []byte
}

// proposal is queued by flushStaged (in s.mu order) for the raft
// goroutine: the stint's proposal seq, its Pebble batch (read-only: the
// same bytes are the proposal's inflight record).
type Proposal struct {
	Stint, Seq uint64
	Repr       []byte
}

// endStintLocked is endStint under s.mu.
func (s *State) EndStintLocked(why error) {
	if s.Stint != 0 {
		s.Log.Warn("meta leader stops serving", "term", s.Stint, "why", why)
	}
	s.Stint, s.Proposed, s.Inflight, s.InflightBytes, s.Staged = 0, 0, nil, 0, nil
	s.InitMemory() // it may be ahead of the log; a follower keeps none
	if s.Store.Overlay != nil {
		CloseBatch(s.Store.Overlay)
		s.Store.Overlay = nil
	}
	s.Rep.StintEnded()
}

// propose replaces apply on a replicated service: under s.mu, b goes
// into the overlay and, as the stint's next proposal, to the raft
// goroutine (in s.mu order: the log's order is memory's).
func (s *State) propose(b *pebble.Batch) (Pending, error) {
	p, err := s.stage(b)
	if err == nil {
		s.flushStaged()
	}
	return p, err
}

// stage puts b into the overlay and into the staged batch: the stint's
// next proposal, which flushStaged makes (before s.mu is released) with
// every batch staged since the last (the items of a batch request: one
// proposal, one entry). A staged batch past maxFoldedEntryBytes is
// flushed first. Under s.mu for writing; a failure ends the stint
// (memory is ahead of the log), dropping what was staged.
func (s *State) stage(b *pebble.Batch) (Pending, error) {
	defer CloseBatch(b)
	repr := b.Repr()
	if len(repr)+EntryFoldedOverheadBytes+64 > MaxRaftRecordBytes {
		err := fmt.Errorf("meta: a change of %d bytes is over the meta log's record limit", len(repr))
		s.EndStintLocked(err)
		return Pending{}, err
	}
	if s.Staged != nil && s.Staged.Len()+len(repr) > MaxFoldedEntryBytes {
		s.flushStaged()
	}
	if err := s.Store.Overlay.Apply(b, nil); err != nil {
		err = fmt.Errorf("meta: overlay: %w", err)
		s.EndStintLocked(err)
		return Pending{}, err
	}
	if s.Staged == nil {
		s.Staged = new(pebble.Batch) // of no store: its bytes are only proposed
	}
	if err := s.Staged.Apply(b, nil); err != nil {
		err = fmt.Errorf("meta: stage a proposal: %w", err)
		s.EndStintLocked(err)
		return Pending{}, err
	}
	return Pending{Stint: s.Stint, Seq: s.Proposed + 1}, nil
}

// flushStaged makes the staged batch the stint's next proposal (none
// staged: nothing). Under s.mu for writing.
func (s *State) flushStaged() {
	if s.Staged == nil {
		return
	}
	repr := s.Staged.Repr()
	s.Staged = nil // never closed: repr is the proposal's now
	s.Proposed++
	s.Inflight = append(s.Inflight, inflight{seq: s.Proposed, repr: repr})
	s.InflightBytes += len(repr)
	s.Rep.Propose(Proposal{Stint: s.Stint, Seq: s.Proposed, Repr: repr})
	s.maybeRebuildOverlay()
}

// maybeRebuildOverlay replaces a large overlay with one of the proposals
// still in flight (those applied are in the store). Under s.mu.
func (s *State) maybeRebuildOverlay() {
	s.trimApplied()
	if len(s.Store.Overlay.Repr()) <= MaxOverlayBytes {
		return
	}
	var n int
	for _, f := range s.Inflight {
		n += len(f.repr)
	}
	if len(s.Store.Overlay.Repr()) <= 2*n {
		return
	}
	ov := s.Store.DB.NewIndexedBatch()
	for _, f := range s.Inflight {
		eb := s.Store.DB.NewBatch()
		// A copy: the batch takes ownership of what SetRepr gets, and
		// Close gives it back to Pebble for reuse — f.repr is the
		// proposal's own entry, still on its way through raft.
		err := eb.SetRepr(slices.Clone(f.repr))
		if err == nil {
			err = ov.Apply(eb, nil)
		}
		if cerr := eb.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			// The rebuild is only a trim: the old overlay holds every
			// proposal in flight (and some applied), so it stays. A new
			// one missing a proposal would let a mutation validate
			// against a state without it.
			s.Log.Warn("meta overlay not rebuilt; keeping the old one", "seq", f.seq, "err", err)
			if cerr := ov.Close(); cerr != nil {
				s.Log.Warn("closing the abandoned overlay", "err", cerr)
			}
			return
		}
	}
	if err := s.Store.Overlay.Close(); err != nil {
		s.Log.Warn("closing the replaced overlay", "err", err)
	}
	s.Store.Overlay = ov
	s.Inflight = append([]inflight(nil), s.Inflight...)
}

// applyEach is a batch's mutations, one per item, in order under one hold
// of s.mu, each its own store batch made by fn(i) as the single request
// would make it (an item whose pre[i] is set was refused beforehand and is
// not run). On a replicated service the applied items' batches are staged
// and proposed together (applyStaged): one proposal, one log entry,
// applied atomically on every member. A refusal changes nothing and does
// not affect the others; a failed apply is sticky: it and every later
// item fail with it (and so do the earlier items staged with it, whose
// outcome is unknown once the stint ended). It answers
// once every applied item is durable: per item its value (the zero value
// when refused) and error, and the wait's error. A service that does not
// serve refuses the whole batch (the last error).
func ApplyEach[T any](s *State, pre []error, fn func(i int) (T, *pebble.Batch, error)) (vals []T, errs []error, werr, err error) {
	vals, errs = make([]T, len(pre)), pre
	s.Mu.Lock()
	if err := s.Usable(); err != nil {
		s.Mu.Unlock()
		return nil, nil, nil, err
	}
	if err := s.admitLocked(); err != nil {
		return nil, nil, nil, err // s.Mu released
	}
	var own []Pending
	refused := false
	for i := range pre {
		if errs[i] != nil {
			refused = true
			continue
		}
		v, b, err := fn(i)
		if err != nil {
			if b != nil {
				CloseBatch(b)
			}
			errs[i], refused = err, true
			continue
		}
		p, err := s.applyStaged(b)
		if err != nil { // sticky: this one and every later one fail
			for j := i; j < len(errs); j++ {
				if errs[j] == nil {
					errs[j] = err
				}
			}
			break
		}
		if len(own) == 0 || own[len(own)-1] != p {
			own = append(own, p) // staged items share their proposal
		}
		vals[i] = v
	}
	s.flushStaged()
	front := s.frontier()
	s.Mu.Unlock()
	return vals, errs, s.awaitAll(own, refused, front), nil
}

// awaitAll waits for a batch's own pendings, and, when some request was
// refused (a refusal may rest on what it saw), for the frontier; the
// first failure.
func (s *State) awaitAll(own []Pending, refused bool, front Pending) error {
	var werr error
	for _, p := range own {
		if err := s.await(p); err != nil && werr == nil {
			werr = err
		}
	}
	if refused && werr == nil {
		werr = s.await(front)
	}
	return werr
}

// apiError is err as one result of a batch.
func APIError(what string, err error) *metaapi.Error {
	code, _ := metaapi.CodeOf(err)
	return &metaapi.Error{Code: code, Reason: metaapi.ReasonOf(err), Message: fmt.Sprintf("%s: %v", what, err)}
}

// BeginStint makes the leader of term serve from an empty proposal state
// (raftgroup, once every entry before its term is applied and memory is
// loaded). Under s.Mu for writing.
func (s *State) BeginStint(term uint64) {
	s.Stint, s.Proposed, s.Inflight, s.InflightBytes, s.Staged = term, 0, nil, 0, nil
}

// trimApplied drops the proposals the store has applied from Inflight.
// Under s.Mu for writing.
func (s *State) trimApplied() {
	applied := s.Rep.AppliedSeqNow()
	k := sort.Search(len(s.Inflight), func(i int) bool { return s.Inflight[i].seq > applied })
	for _, f := range s.Inflight[:k] {
		s.InflightBytes -= len(f.repr)
	}
	s.Inflight = s.Inflight[k:]
}

// admitLocked holds a client write back while the serving leader's
// proposals not yet applied hold Config.MaxProposalBacklogBytes or more:
// it waits, outside s.Mu, for applies, at most ProposalBacklogWait in all,
// then refuses the write BUSY (metaapi.ErrBusy: the client retries).
// Called with s.Mu held for writing and the service usable; returns nil
// with s.Mu held, or an error with s.Mu released.
func (s *State) admitLocked() error {
	if s.Rep == nil || s.Stint == 0 {
		return nil
	}
	var deadline time.Time
	for {
		s.trimApplied()
		if s.InflightBytes < s.Cfg.MaxProposalBacklogBytes {
			return nil
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(s.Cfg.ProposalBacklogWait)
			s.Metrics.BacklogWaits.Inc()
		}
		if !now.Before(deadline) {
			held := s.InflightBytes
			s.Mu.Unlock()
			s.Metrics.BacklogRefusals.Inc()
			return fmt.Errorf("%w: the meta log holds %d bytes of changes not yet applied (bound %d) after %s: retry",
				metaapi.ErrBusy, held, s.Cfg.MaxProposalBacklogBytes, s.Cfg.ProposalBacklogWait)
		}
		stint, seen := s.Stint, s.Rep.AppliedSeqNow()
		s.Mu.Unlock()
		err := s.Rep.WaitApplied(stint, seen, min(deadline.Sub(now), backlogPollInterval))
		s.Mu.Lock()
		if err == nil {
			err = s.Usable()
		}
		if err != nil {
			s.Mu.Unlock()
			return err
		}
	}
}

// backlogPollInterval bounds one wait of admitLocked (it looks at the
// backlog again after each).
const backlogPollInterval = 100 * time.Millisecond
