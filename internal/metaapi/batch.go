package metaapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// AllocationsRoute takes a batch of allocations in one request (Client
// batches concurrent Allocate calls into it): POST, JSON AllocateBatch,
// answered by an AllocateBatchResult, one result per request in order,
// each made as if sent alone (in order, under one hold of the service's
// lock, durable before the answer).
const AllocationsRoute = "/v1/allocations"

// AllocateBatch is the body of an AllocationsRoute request.
type AllocateBatch struct {
	Requests []AllocateRequest `json:"requests"`
}

// AllocateBatchResult answers an AllocateBatch.
type AllocateBatchResult struct {
	Results []AllocateResult `json:"results"`
}

// AllocateResult is one allocation's answer: the block or the error.
type AllocateResult struct {
	Block *AllocateResponse `json:"block,omitempty"`
	Error *Error            `json:"error,omitempty"`
}

// GetsRoute takes a batch of key lookups in one request (Client batches
// concurrent GetKey calls into it): POST, JSON GetBatch, answered as
// InlineContentType — the JSON of a GetBatchResult whose keys carry their
// inline values' lengths (InlineBytes) and not the values, then the values
// one after the other in order. Each lookup is answered as GetKey would
// (linearizable: after everything it may have seen is durable).
const GetsRoute = "/v1/gets"

// GetBatch is the body of a GetsRoute request.
type GetBatch struct {
	Keys []KeyName `json:"keys"`
}

// KeyName names a key.
type KeyName struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// GetBatchResult answers a GetBatch, one result per key in order.
type GetBatchResult struct {
	Results []GetResult `json:"results"`
}

// GetResult is one lookup's answer: the key (its inline value, if any,
// InlineBytes long in the body's tail) or the error.
type GetResult struct {
	Key         *KeyInfo `json:"key,omitempty"`
	InlineBytes int      `json:"inline_bytes,omitempty"`
	Error       *Error   `json:"error,omitempty"`
}

// EncodeGetBatchResult builds the body of a GetsRoute answer (the keys'
// Inline fields are cleared).
func EncodeGetBatchResult(res []GetResult) ([]byte, error) {
	var values []byte
	for i := range res {
		if k := res[i].Key; k != nil && len(k.Inline) > 0 {
			res[i].InlineBytes = len(k.Inline)
			values = append(values, k.Inline...)
			k.Inline = nil
		}
	}
	return EncodeInline(GetBatchResult{Results: res}, values)
}

// DecodeGetBatchResult splits a GetsRoute answer, each key with its
// inline value (aliasing body).
func DecodeGetBatchResult(body []byte) ([]GetResult, error) {
	var r GetBatchResult
	values, err := DecodeInline(body, &r)
	if err != nil {
		return nil, err
	}
	for i := range r.Results {
		g := &r.Results[i]
		if g.InlineBytes < 0 || g.InlineBytes > len(values) || (g.InlineBytes > 0 && g.Key == nil) {
			return nil, fmt.Errorf("%w: get %d of a batch: %d inline bytes, %d left", ErrInvalid, i, g.InlineBytes, len(values))
		}
		if g.InlineBytes > 0 {
			g.Key.Inline = values[:g.InlineBytes:g.InlineBytes]
			values = values[g.InlineBytes:]
		}
		g.InlineBytes = 0
	}
	if len(values) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the batch's values", ErrInvalid, len(values))
	}
	return r.Results, nil
}

// CommitsRoute takes a batch of key commits in one request (Client
// batches concurrent CommitKey calls into it): POST, body
// InlineContentType — the JSON of a CommitBatch whose items carry their
// inline values' lengths (InlineBytes) and not the values, then the values
// one after the other in item order. The answer is a CommitBatchResult,
// one result per item in order. Each commit is validated and applied as
// if sent alone, in item order (a later item sees an earlier one's
// effect), and answered once it is durable; a refused item changes
// nothing and does not affect the others. A member that does not serve
// refuses the whole batch (NOT_LEADER), having done nothing.
const CommitsRoute = "/v1/commits"

// Bounds of a commit batch.
const (
	// MaxCommitBatch bounds the commits (and the allocations) of one
	// batch.
	MaxCommitBatch = 64
	// MaxCommitBatchBytes bounds the inline values of one batch: a
	// commit whose value would take a batch past it goes in the next.
	MaxCommitBatchBytes = 4 << 20
	// MaxCommitBatchesInFlight bounds a Client's batches in flight (of
	// each kind); more calls wait in its queue and go in the next batch.
	MaxCommitBatchesInFlight = 4
)

// CommitBatch is the JSON part of a CommitsRoute body.
type CommitBatch struct {
	Commits []BatchedCommit `json:"commits"`
}

// BatchedCommit is one key's commit in a batch; its inline value (if
// any) is in the body's tail, InlineBytes long.
type BatchedCommit struct {
	Bucket      string `json:"bucket"`
	Key         string `json:"key"`
	InlineBytes int    `json:"inline_bytes,omitempty"`
	CommitKey
}

// CommitBatchResult answers a CommitBatch, one result per commit in order.
type CommitBatchResult struct {
	Results []CommitResult `json:"results"`
}

// CommitResult is one commit's answer: the key or the error.
type CommitResult struct {
	Key   *KeyInfo `json:"key,omitempty"`
	Error *Error   `json:"error,omitempty"`
}

// EncodeCommitBatch builds the body of a CommitsRoute request.
func EncodeCommitBatch(items []BatchedCommit) ([]byte, error) {
	var values []byte
	b := CommitBatch{Commits: make([]BatchedCommit, len(items))}
	for i, it := range items {
		it.InlineBytes = len(it.Inline)
		values = append(values, it.Inline...)
		it.Inline = nil
		b.Commits[i] = it
	}
	return EncodeInline(b, values)
}

// DecodeCommitBatch splits a CommitsRoute body into its commits, each
// with its inline value (aliasing body).
func DecodeCommitBatch(body []byte) ([]BatchedCommit, error) {
	var b CommitBatch
	values, err := DecodeInline(body, &b)
	if err != nil {
		return nil, err
	}
	if len(b.Commits) > MaxCommitBatch {
		return nil, fmt.Errorf("%w: %d commits in a batch, at most %d", ErrInvalid, len(b.Commits), MaxCommitBatch)
	}
	for i := range b.Commits {
		c := &b.Commits[i]
		if len(c.Inline) > 0 {
			return nil, fmt.Errorf("%w: commit %d of a batch has its value in the JSON", ErrInvalid, i)
		}
		if c.InlineBytes < 0 || c.InlineBytes > len(values) {
			return nil, fmt.Errorf("%w: commit %d of a batch: %d inline bytes, %d left", ErrInvalid, i, c.InlineBytes, len(values))
		}
		if c.InlineBytes > 0 {
			c.Inline = values[:c.InlineBytes:c.InlineBytes]
			values = values[c.InlineBytes:]
		}
		c.InlineBytes = 0
	}
	if len(values) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the batch's values", ErrInvalid, len(values))
	}
	return b.Commits, nil
}

// batchCall is one call waiting in a batcher.
type batchCall[Q, R any] struct {
	req  Q
	done chan struct{}
	res  R
	err  error
}

// batcher groups a Client's concurrent calls of one kind into batch
// requests: a call joins the queue; while fewer than
// MaxCommitBatchesInFlight batches are in flight, a sender takes what is
// queued (at most MaxCommitBatch calls, MaxCommitBatchBytes as counted by
// size) and sends it. No call waits for company: a lone call goes at
// once, in a batch of one; under load, calls queue while batches are in
// flight.
type batcher[Q, R any] struct {
	// size is a call's bytes toward MaxCommitBatchBytes (nil: none); send
	// sends one batch and returns one result or error per request, or
	// the error of the whole request.
	size func(Q) int
	send func(reqs []Q) ([]R, []error, error)
	// alone sends one request by itself: a call whose answer in a batch
	// was UNAVAILABLE (its member stopped leading in the middle of the
	// batch) is tried again alone, following the leader as any call.
	alone func(req Q) (R, error)

	mu       sync.Mutex
	queue    []*batchCall[Q, R]
	inflight int
	// batches and calls count what was sent (the mean batch size).
	batches, calls uint64
}

// call queues one request and waits for its answer (or ctx: the call may
// still be made then, its outcome unknown, as with any lost answer).
func (b *batcher[Q, R]) call(ctx context.Context, req Q) (R, error) {
	c := &batchCall[Q, R]{req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.inflight < MaxCommitBatchesInFlight
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
func (b *batcher[Q, R]) run() {
	for {
		b.mu.Lock()
		n, bytes := 0, 0
		for n < len(b.queue) && n < MaxCommitBatch {
			v := 0
			if b.size != nil {
				v = b.size(b.queue[n].req)
			}
			if n > 0 && bytes+v > MaxCommitBatchBytes {
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
		calls := make([]*batchCall[Q, R], n)
		copy(calls, b.queue)
		b.queue = b.queue[:copy(b.queue, b.queue[n:])]
		b.batches++
		b.calls += uint64(n)
		b.mu.Unlock()
		reqs := make([]Q, n)
		for i, c := range calls {
			reqs[i] = c.req
		}
		res, errs, err := b.send(reqs)
		if err == nil && (len(res) != n || len(errs) != n) {
			err = &Error{Code: CodeInternal, Message: fmt.Sprintf("meta batch: %d results for %d calls", len(res), n)}
		}
		for i, c := range calls {
			if err != nil {
				c.err = err
			} else {
				c.res, c.err = res[i], errs[i]
				if errors.Is(c.err, ErrUnavailable) && b.alone != nil {
					c.res, c.err = b.alone(c.req)
				}
			}
			close(c.done)
		}
	}
}

// stats returns the batches sent and the calls in them.
func (b *batcher[Q, R]) stats() (batches, calls uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batches, b.calls
}

// initBatchers sets up the Client's batchers.
func (c *Client) initBatchers() {
	c.commits.size = func(q BatchedCommit) int { return len(q.Inline) }
	c.commits.send = c.sendCommits
	c.commits.alone = func(q BatchedCommit) (KeyInfo, error) {
		return c.commitAlone(context.Background(), q.Bucket, q.Key, q.CommitKey)
	}
	c.allocs.send = func(reqs []AllocateRequest) ([]AllocateResponse, []error, error) {
		return c.sendAllocations(context.Background(), reqs)
	}
	c.allocs.alone = func(q AllocateRequest) (AllocateResponse, error) { return c.allocateAlone(context.Background(), q) }
	c.gets.send = c.sendGets
	c.gets.alone = func(q KeyName) (KeyInfo, error) {
		var ki KeyInfo
		return ki, c.Do(context.Background(), http.MethodGet, KeyPath(q.Bucket, q.Key), nil, &ki, true)
	}
}

// sendGets sends one GetsRoute batch.
func (c *Client) sendGets(names []KeyName) ([]KeyInfo, []error, error) {
	var res []GetResult
	if err := c.Do(context.Background(), http.MethodPost, GetsRoute, GetBatch{Keys: names}, &res, true); err != nil {
		return nil, nil, err
	}
	kis, errs := make([]KeyInfo, len(res)), make([]error, len(res))
	for i, r := range res {
		switch {
		case r.Error != nil:
			errs[i] = r.Error
		case r.Key == nil:
			errs[i] = &Error{Code: CodeInternal, Message: "meta get batch: neither a key nor an error in an answer"}
		default:
			kis[i] = *r.Key
		}
	}
	return kis, errs, nil
}

// sendCommits sends one CommitsRoute batch. Every commit is idempotent
// (an identical retry succeeds), so is the batch; it is bounded by the
// client's attempts, timeouts and failover limit, not by one caller's
// context.
func (c *Client) sendCommits(items []BatchedCommit) ([]KeyInfo, []error, error) {
	body, err := EncodeCommitBatch(items)
	if err != nil {
		return nil, nil, fmt.Errorf("meta commit batch: encode: %w", err)
	}
	var res CommitBatchResult
	if err := c.Do(context.Background(), http.MethodPost, CommitsRoute, rawBody{body, InlineContentType}, &res, true); err != nil {
		return nil, nil, err
	}
	kis, errs := make([]KeyInfo, len(res.Results)), make([]error, len(res.Results))
	for i, r := range res.Results {
		switch {
		case r.Error != nil:
			errs[i] = r.Error
		case r.Key == nil:
			errs[i] = &Error{Code: CodeInternal, Message: "meta commit batch: neither a key nor an error in an answer"}
		default:
			kis[i] = *r.Key
		}
	}
	return kis, errs, nil
}

// sendAllocations sends one AllocationsRoute batch (idempotent as
// Allocate is: a block allocated and never committed is garbage the meta
// service deletes).
func (c *Client) sendAllocations(ctx context.Context, reqs []AllocateRequest) ([]AllocateResponse, []error, error) {
	var res AllocateBatchResult
	if err := c.Do(ctx, http.MethodPost, AllocationsRoute, AllocateBatch{Requests: reqs}, &res, true); err != nil {
		return nil, nil, err
	}
	out, errs := make([]AllocateResponse, len(res.Results)), make([]error, len(res.Results))
	for i, r := range res.Results {
		switch {
		case r.Error != nil:
			errs[i] = r.Error
		case r.Block == nil:
			errs[i] = &Error{Code: CodeInternal, Message: "meta allocation batch: neither a block nor an error in an answer"}
		default:
			out[i] = *r.Block
		}
	}
	return out, errs, nil
}

// BatchStats returns the commit and allocation batches this client sent
// and the calls in them.
func (c *Client) BatchStats() (commitBatches, commits, allocBatches, allocs uint64) {
	commitBatches, commits = c.commits.stats()
	allocBatches, allocs = c.allocs.stats()
	return
}
