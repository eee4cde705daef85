package pipeline

import (
	"context"
	"sync"
)

// byteBudget bounds the chunk bytes of client writes a leader holds in
// memory between their arrival and their answer. A connection that would
// exceed it waits (it stops reading, so TCP pushes back on its client); a
// write larger than the whole budget is admitted when nothing else is held.
type byteBudget struct {
	mu      sync.Mutex
	cond    *sync.Cond
	used    int64
	maxUsed int64

	// parkHook, when set (tests only, before the budget is used), is
	// called with mu held each time acquire is about to wait, so that a
	// test knows a caller is waiting instead of hoping it got there.
	parkHook func()
}

func newByteBudget(maxBytes int64) *byteBudget {
	b := &byteBudget{maxUsed: maxBytes}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire waits until n bytes fit, or ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used > 0 && b.used+n > b.maxUsed {
		if err := ctx.Err(); err != nil {
			return err
		}
		if b.parkHook != nil {
			b.parkHook()
		}
		b.cond.Wait()
	}
	b.used += n
	return nil
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
