// Package raftqueue is the hand-off between a raft host's event loop and
// its storage workers (the append worker that makes raft's log entries
// durable, the apply worker that applies committed entries): an unbounded
// FIFO that the loop pushes to without ever blocking and a worker drains
// whole.
//
// Invariants:
//   - Items come out in the order they were pushed, each exactly once: a
//     PopAll returns every item pushed before it took the lock and not yet
//     returned, and no other.
//   - Push never blocks (beyond the queue's short mutex). A blocking
//     hand-off from the loop to a worker that is itself waiting to hand its
//     results back to the loop would deadlock. The queue is not bounded by
//     itself: what bounds it is raft's own flow control (in-flight appends
//     by MaxInflightMsgs and the uncommitted log size, applies by
//     MaxCommittedSizePerReady per Ready), so a host must not push more than
//     raft lets it have in flight.
//   - A wake-up is never lost: Push leaves a token in a channel of capacity
//     1 after adding its item, and PopAll looks at the items before it
//     waits for the token. A token may be stale (its items were taken by an
//     earlier PopAll); PopAll then looks again and waits again.
//   - PopAll looks at the items before it looks at stop: once stop is
//     closed it still returns what is queued, and it returns nil only after
//     finding the queue empty with stop closed.
//
// Concurrency contract: Push may be called from any number of goroutines.
// PopAll is meant for one consumer per queue (a worker); several consumers
// are safe but each item goes to one of them only, with no order between
// them. Items are handed over as they were pushed (no copy): after Push the
// pusher must not change what a pointer item points to.
package raftqueue

import "sync"

// Queue is an unbounded FIFO of T from a raft host's event loop to one
// worker. Make it with New; the zero Queue is not usable.
type Queue[T any] struct {
	mu     sync.Mutex
	items  []T
	signal chan struct{} // capacity 1: "items may not be empty"
}

// New returns an empty queue.
func New[T any]() *Queue[T] {
	return &Queue[T]{signal: make(chan struct{}, 1)}
}

// Push appends v and wakes the consumer. It never waits for the consumer.
func (q *Queue[T]) Push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default: // a token is there already: the consumer will look
	}
}

// PopAll waits until the queue has items or stop is closed, and returns
// every queued item, in push order, appended to dst (so a worker can reuse
// its slice: q.PopAll(buf[:0], stop)). It returns nil when stop is closed
// and nothing is queued; otherwise a non-nil slice with at least one item.
func (q *Queue[T]) PopAll(dst []T, stop <-chan struct{}) []T {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			dst = append(dst, q.items...)
			clear(q.items) // drop the queue's references to what it handed over
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
