package pipeline

import "sync"

// queue is an unbounded FIFO between the event loop and a worker. The loop
// never blocks on it (a blocking hand-off from the loop to a worker that is
// itself waiting to hand its results back to the loop would deadlock); what
// bounds it is raft's own flow control: in-flight appends are bounded by
// MaxInflightMsgs and the uncommitted log size, applies by
// MaxCommittedSizePerReady per Ready.
type queue[T any] struct {
	mu     sync.Mutex
	items  []T
	signal chan struct{} // capacity 1: "items is not empty"
}

func newQueue[T any]() *queue[T] {
	return &queue[T]{signal: make(chan struct{}, 1)}
}

func (q *queue[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// popAll waits until the queue has items or stop is closed, and returns
// every item (nil when stopped), appended to dst.
func (q *queue[T]) popAll(dst []T, stop <-chan struct{}) []T {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			dst = append(dst, q.items...)
			clear(q.items)
			q.items = q.items[:0]
			q.mu.Unlock()
			return dst
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-stop:
			return nil
		}
	}
}
