// Package batcher groups concurrent calls of one kind into batch
// requests (the meta client's commits, allocations and key lookups:
// metaapi's CommitsRoute, AllocationsRoute, GetsRoute).
//
// A call joins a queue; while fewer than MaxInFlight batches are in
// flight, a sender takes what is queued (at most MaxCalls calls, MaxBytes
// as counted by Size) and sends it. No call waits for company: a lone call
// goes at once, in a batch of one; under load, calls queue while batches
// are in flight, and the next batch takes them all.
//
// A batch is sent with a context of no caller's (context.Background: it
// is bounded by the sender's own attempts and timeouts, not by one
// caller's deadline) — except in a Scoped batcher, whose batches each
// carry the values (not the cancellation) of their first call's context:
// there every call of a batch has the same scope, so the same identity
// (the gateway's S3 user, which the meta client's transport reads from the
// context), and a batch says of its caller exactly what each call alone
// would have said.
//
// Invariants: every call gets exactly its own answer or error (or its
// ctx's); a batch holds calls of one scope only; at most MaxInFlight
// batches of a Batcher are in flight.
//
// Concurrency: Call, Stats and Count may be called from any goroutine; Send
// and Alone are called from the batch's sender goroutine.
package batcher

import (
	"context"
	"fmt"
	"sync"
)

// Batcher batches calls of one kind. Set its fields before the first Call.
type Batcher[Q, R any] struct {
	// MaxCalls, MaxBytes (counted by Size; nil Size: none) and
	// MaxInFlight bound a batch and the batches in flight.
	MaxCalls, MaxBytes, MaxInFlight int
	Size                            func(Q) int
	// Send sends one batch and returns one result or error per request,
	// or the error of the whole request.
	Send func(ctx context.Context, reqs []Q) ([]R, []error, error)
	// Again, when set, says that a call's error inside a batch is to be
	// retried by Alone (a member that stopped leading midway: outcome
	// unknown, and the call alone follows the leader).
	Again func(error) bool
	Alone func(ctx context.Context, req Q) (R, error)
	// Scoped: batches carry their first call's context values (above).
	Scoped bool

	mu       sync.Mutex
	queue    []*call[Q, R]
	inflight int
	// batches and calls count what was sent (the mean batch size).
	batches, calls uint64
}

// call is one call waiting in a batcher.
type call[Q, R any] struct {
	ctx  context.Context
	req  Q
	done chan struct{}
	res  R
	err  error
}

// Call queues one request and waits for its answer (or ctx: the call may
// still be made then, its outcome unknown, as with any lost answer).
func (b *Batcher[Q, R]) Call(ctx context.Context, req Q) (R, error) {
	c := &call[Q, R]{ctx: ctx, req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.inflight < b.MaxInFlight
	if start {
		b.inflight++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		var zero R
		return zero, fmt.Errorf("%w (the call may still be made)", ctx.Err())
	}
}

// run sends batches until the queue is empty.
func (b *Batcher[Q, R]) run() {
	for {
		b.mu.Lock()
		n, bytes := 0, 0
		for n < len(b.queue) && n < b.MaxCalls {
			v := 0
			if b.Size != nil {
				v = b.Size(b.queue[n].req)
			}
			if n > 0 && bytes+v > b.MaxBytes {
				break
			}
			bytes += v
			n++
		}
		if n == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		calls := make([]*call[Q, R], n)
		copy(calls, b.queue)
		b.queue = b.queue[:copy(b.queue, b.queue[n:])]
		b.batches++
		b.calls += uint64(n)
		b.mu.Unlock()
		reqs := make([]Q, n)
		for i, c := range calls {
			reqs[i] = c.req
		}
		ctx := context.Background()
		if b.Scoped {
			ctx = context.WithoutCancel(calls[0].ctx)
		}
		res, errs, err := b.Send(ctx, reqs)
		if err == nil && (len(res) != n || len(errs) != n) {
			err = fmt.Errorf("meta batch: %d results for %d calls", len(res), n)
		}
		for i, c := range calls {
			if err != nil {
				c.err = err
			} else {
				c.res, c.err = res[i], errs[i]
				if c.err != nil && b.Again != nil && b.Again(c.err) && b.Alone != nil {
					c.res, c.err = b.Alone(ctx, c.req)
				}
			}
			close(c.done)
		}
	}
}

// Stats returns the batches sent and the calls in them.
func (b *Batcher[Q, R]) Stats() (batches, calls uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batches, b.calls
}

// Queued is the number of calls waiting for a batch.
func (b *Batcher[Q, R]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Count adds a batch of n calls sent around the queue (the meta client's
// pre-allocations) to Stats.
func (b *Batcher[Q, R]) Count(n int) {
	b.mu.Lock()
	b.batches++
	b.calls += uint64(n)
	b.mu.Unlock()
}

// Scopes keeps a Scoped Batcher per scope, each made by New when its
// first call comes and dropped when its last call has returned, so that
// scopes no longer used take no memory.
type Scopes[Q, R any] struct {
	New func() *Batcher[Q, R]

	mu sync.Mutex
	m  map[string]*scoped[Q, R]
}

type scoped[Q, R any] struct {
	b     *Batcher[Q, R]
	calls int // calls in Call now
}

// Call is b.Call on scope's batcher.
func (s *Scopes[Q, R]) Call(ctx context.Context, scope string, req Q) (R, error) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]*scoped[Q, R])
	}
	e := s.m[scope]
	if e == nil {
		b := s.New()
		b.Scoped = true
		e = &scoped[Q, R]{b: b}
		s.m[scope] = e
	}
	e.calls++
	s.mu.Unlock()
	r, err := e.b.Call(ctx, req)
	s.mu.Lock()
	if e.calls--; e.calls == 0 && s.m[scope] == e {
		delete(s.m, scope) // a batch still in flight for a gone caller keeps its own reference
	}
	s.mu.Unlock()
	return r, err
}

// Len is the number of scopes with calls in progress.
func (s *Scopes[Q, R]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
