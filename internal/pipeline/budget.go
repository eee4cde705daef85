package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Shares of a byteBudget (see byteBudget).
const (
	largeShareDivisor = 8
	reserveDivisor    = 4
)

// errBudgetClosed ends the waits of a stopping node's budgets.
var errBudgetClosed = errors.New("pipeline: node stopping")

// byteBudget bounds payload bytes held in memory: a frame's payload is
// admitted (acquire) before its buffer is allocated, and released when the
// bytes are no longer held. A connection that would exceed it waits (it
// stops reading, so TCP pushes back on its sender); a payload larger than
// the whole budget is admitted when nothing else is held. Large payloads
// (over limit/largeShareDivisor) leave a reserve of limit/reserveDivisor
// to the small ones: a few senders of maximum-size frames cannot fill the
// budget and make every small write wait behind them. A node has two,
// the client budget and the raft budget (see the package comment).
type byteBudget struct {
	mu      sync.Mutex
	cond    *sync.Cond
	used    int64
	limit   int64
	peak    int64 // high-water mark of used
	waiting int   // acquires waiting
	closed  bool
}

func newByteBudget(limitBytes int64) *byteBudget {
	b := &byteBudget{limit: limitBytes}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire waits until n bytes fit, or ctx ends, or the budget is closed.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	// The common case, room now, takes the lock once and registers
	// nothing with ctx.
	b.mu.Lock()
	if !b.closed && b.fits(n) {
		b.take(n)
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.closed {
			return errBudgetClosed
		}
		if b.fits(n) {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		b.waiting++
		b.cond.Wait()
		b.waiting--
	}
	b.take(n)
	return nil
}

// fits reports whether n bytes may be taken now (b.mu held): a payload
// over 1/largeShareDivisor of the limit leaves 1/reserveDivisor of it to
// smaller ones; anything fits an empty budget.
func (b *byteBudget) fits(n int64) bool {
	room := b.limit
	if n > b.limit/largeShareDivisor {
		room -= b.limit / reserveDivisor
	}
	return b.used == 0 || b.used+n <= room
}

// take accounts n bytes (b.mu held).
func (b *byteBudget) take(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// releaser returns a function that releases n bytes, once however often
// it is called.
func (b *byteBudget) releaser(n int64) func() {
	var done atomic.Bool
	return func() {
		if !done.Swap(true) {
			b.release(n)
		}
	}
}

// close ends every wait, now and later, with errBudgetClosed.
func (b *byteBudget) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cond.Broadcast()
}

// stats returns the bytes held, the most ever held at once and the
// acquires waiting.
func (b *byteBudget) stats() (used, peak int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak, b.waiting
}
