package metaapi

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

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
	// MaxCommitBatch bounds the commits of one batch.
	MaxCommitBatch = 64
	// MaxCommitBatchBytes bounds the inline values of one batch: a
	// commit whose value would take a batch past it goes in the next.
	MaxCommitBatchBytes = 4 << 20
	// MaxCommitBatchesInFlight bounds a Client's batches in flight; more
	// commits wait in its queue and go in the next batch.
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

// commitCall is one CommitKey waiting in a Client's batcher.
type commitCall struct {
	c    BatchedCommit
	done chan struct{}
	ki   KeyInfo
	err  error
}

// batcher groups concurrent CommitKey calls of a Client into CommitsRoute
// requests: a call joins the queue; while fewer than
// MaxCommitBatchesInFlight batches are in flight, a sender takes what is
// queued (at most MaxCommitBatch commits, MaxCommitBatchBytes of values)
// and sends it. No call waits for company: a lone commit goes at once, in
// a batch of one; under load, commits queue while batches are in flight.
type batcher struct {
	mu       sync.Mutex
	queue    []*commitCall
	inflight int
	// batches and commits count what was sent (the mean batch size).
	batches, commits uint64
}

// commitBatched queues one commit and waits for its answer (or ctx: the commit
// may still be made then, its outcome unknown, as any lost answer).
func (c *Client) commitBatched(ctx context.Context, bucket, key string, ck CommitKey) (KeyInfo, error) {
	call := &commitCall{c: BatchedCommit{Bucket: bucket, Key: key, CommitKey: ck}, done: make(chan struct{})}
	b := &c.batch
	b.mu.Lock()
	b.queue = append(b.queue, call)
	start := b.inflight < MaxCommitBatchesInFlight
	if start {
		b.inflight++
	}
	b.mu.Unlock()
	if start {
		go c.sendBatches()
	}
	select {
	case <-call.done:
		return call.ki, call.err
	case <-ctx.Done():
		return KeyInfo{}, fmt.Errorf("meta commit %s/%s: %w (the commit may still be made)", bucket, key, ctx.Err())
	}
}

// sendBatches sends batches until the queue is empty.
func (c *Client) sendBatches() {
	b := &c.batch
	for {
		b.mu.Lock()
		n, bytes := 0, 0
		for n < len(b.queue) && n < MaxCommitBatch {
			v := len(b.queue[n].c.Inline)
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
		calls := make([]*commitCall, n)
		copy(calls, b.queue)
		b.queue = b.queue[:copy(b.queue, b.queue[n:])]
		b.batches++
		b.commits += uint64(n)
		b.mu.Unlock()
		c.sendBatch(calls)
	}
}

// sendBatch sends one batch and hands each call its result. A failure of
// the whole request (unreachable, NOT_LEADER after the failover bounds)
// is every call's error.
func (c *Client) sendBatch(calls []*commitCall) {
	items := make([]BatchedCommit, len(calls))
	for i, call := range calls {
		items[i] = call.c
	}
	var res CommitBatchResult
	body, err := EncodeCommitBatch(items)
	if err == nil {
		// Every commit is idempotent (an identical retry succeeds), so is
		// the batch. Bounded by the client's attempts, timeouts and
		// failover limit, not by any one caller's context.
		err = c.do(context.Background(), http.MethodPost, CommitsRoute, rawBody{body, InlineContentType}, &res, true)
	}
	if err == nil && len(res.Results) != len(calls) {
		err = &Error{Code: CodeInternal, Message: fmt.Sprintf("meta commit batch: %d results for %d commits", len(res.Results), len(calls))}
	}
	for i, call := range calls {
		switch {
		case err != nil:
			call.err = fmt.Errorf("meta commit %s/%s: %w", call.c.Bucket, call.c.Key, err)
		case res.Results[i].Error != nil:
			call.err = res.Results[i].Error
		case res.Results[i].Key == nil:
			call.err = &Error{Code: CodeInternal, Message: fmt.Sprintf("meta commit %s/%s: neither a key nor an error in the batch's answer", call.c.Bucket, call.c.Key)}
		default:
			call.ki = *res.Results[i].Key
		}
		close(call.done)
	}
}

// CommitBatchStats returns the commit batches this client sent and the
// commits in them.
func (c *Client) CommitBatchStats() (batches, commits uint64) {
	c.batch.mu.Lock()
	defer c.batch.mu.Unlock()
	return c.batch.batches, c.batch.commits
}
