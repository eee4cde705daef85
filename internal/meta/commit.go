package meta

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
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

func (d *durability) init() {
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
func (d *durability) wait(seq uint64) error {
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
type pending struct {
	seq   uint64
	b     *pebble.Batch
	stint uint64
	read  bool
}

// frontier is what an answer that made no change waits for: everything
// it may have seen. Callers hold s.mu (either mode).
func (s *State) frontier() pending {
	if s.rep != nil {
		seq := s.proposed
		if s.staged != nil {
			seq++ // the staged proposal, made before s.mu is released
		}
		return pending{stint: s.stint, seq: seq, read: true}
	}
	return pending{seq: s.applied}
}

// apply puts b (possibly empty) into the store in s.mu order and returns
// what the answer must wait for. Callers hold s.mu for writing and have
// already changed memory: a failure fails the service (sticky).
func (s *State) apply(b *pebble.Batch) (pending, error) {
	if b == nil || b.Empty() {
		if b != nil {
			b.Close()
		}
		return s.frontier(), nil
	}
	if s.rep != nil {
		return s.propose(b)
	}
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		b.Close()
		err = fmt.Errorf("meta: store commit: %w", err)
		s.dur.fail(err)
		s.log.Error("meta store commit failed; refusing every later request", "err", err)
		return pending{}, err
	}
	s.applied++
	return pending{seq: s.applied, b: b}, nil
}

// applyStaged is apply for one item of a batch request (applyEach): on a
// replicated service the item's batch joins the staged proposal, which
// the caller makes with flushStaged before it releases s.mu, so that a
// batch is one proposal and one log entry (an item still sees the
// earlier ones through the overlay). A group of one applies each item's
// batch to the store at once (a later item reads the store).
func (s *State) applyStaged(b *pebble.Batch) (pending, error) {
	if s.rep == nil || b == nil || b.Empty() {
		return s.apply(b)
	}
	return s.stage(b)
}

// await waits, outside s.mu, until p is durable: it collects the sync of
// p's own batch, then waits for every earlier one.
func (s *State) await(p pending) error {
	if s.awaitHook != nil {
		s.awaitHook(p.b != nil)
	}
	if s.rep != nil {
		return s.rep.await(p)
	}
	if p.b != nil {
		err := p.b.SyncWait()
		p.b.Close()
		if err != nil {
			err = fmt.Errorf("meta: store sync: %w", err)
			s.log.Error("meta store sync failed; refusing every later request", "err", err)
		}
		s.dur.complete(p.seq, err)
	}
	if err := s.dur.wait(p.seq); err != nil {
		return fmt.Errorf("meta: store failed, the change is not durable: %w", err)
	}
	return nil
}

// mutate runs fn under s.mu for writing. fn validates, changes memory and
// returns its answer and the batch of its changes (nil or empty: none);
// on error it must have changed nothing. The batch is applied under the
// lock, and the answer is returned once it, and every change fn may have
// seen, is durable.
func mutate[T any](s *State, fn func() (T, *pebble.Batch, error)) (T, error) {
	var zero T
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return zero, err
	}
	v, b, err := fn()
	var p pending
	if err != nil {
		if b != nil {
			b.Close()
		}
		p = s.frontier()
	} else if p, err = s.apply(b); err != nil {
		s.mu.Unlock()
		return zero, err
	}
	s.mu.Unlock()
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
func read[T any](s *State, fn func() (T, error)) (T, error) {
	var zero T
	s.mu.RLock()
	if err := s.usable(); err != nil {
		s.mu.RUnlock()
		return zero, err
	}
	v, err := fn()
	p := s.frontier()
	s.mu.RUnlock()
	if werr := s.await(p); werr != nil {
		return zero, werr
	}
	if err != nil {
		return zero, err
	}
	return v, nil
}
