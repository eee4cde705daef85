package raftqueue

import (
	"slices"
	"sync"
	"testing"
)

// TestPopAllReturnsEverythingInOrder: items pushed before a PopAll come out
// in push order, all at once, appended after what dst held; the next
// PopAll starts from what was pushed after.
func TestPopAllReturnsEverythingInOrder(t *testing.T) {
	q := New[int]()
	for i := 1; i <= 5; i++ {
		q.Push(i)
	}
	stop := make(chan struct{})
	got := q.PopAll([]int{-1}, stop)
	want := []int{-1, 1, 2, 3, 4, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("PopAll = %v, want %v", got, want)
	}
	q.Push(6)
	q.Push(7)
	if got := q.PopAll(got[:0], stop); !slices.Equal(got, []int{6, 7}) {
		t.Fatalf("second PopAll = %v, want [6 7]", got)
	}
}

// TestPopAllAfterStop: a closed stop returns nil only for an empty queue;
// items queued when stop is closed are still handed over first.
func TestPopAllAfterStop(t *testing.T) {
	q := New[string]()
	stop := make(chan struct{})
	close(stop)
	if got := q.PopAll([]string{"kept?"}, stop); got != nil {
		t.Fatalf("PopAll of an empty queue after stop = %q, want nil", got)
	}
	q.Push("a")
	if got := q.PopAll(nil, stop); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("PopAll after stop with an item queued = %q, want [a]", got)
	}
	if got := q.PopAll(nil, stop); got != nil {
		t.Fatalf("PopAll after the queue was drained = %q, want nil", got)
	}
}

// TestPopAllWaitsForPush: a PopAll on an empty queue waits for the next
// Push (it neither returns empty-handed nor misses the wake-up). The
// consumer is known to be waiting or about to wait when Push runs; either
// way it must return the item. A lost wake-up hangs the test, which the
// test binary's timeout reports.
func TestPopAllWaitsForPush(t *testing.T) {
	q := New[int]()
	stop := make(chan struct{})
	defer close(stop)
	for i := range 100 {
		started := make(chan struct{})
		got := make(chan []int)
		go func() {
			close(started)
			got <- q.PopAll(nil, stop)
		}()
		<-started
		q.Push(i)
		if g := <-got; !slices.Equal(g, []int{i}) {
			t.Fatalf("round %d: PopAll = %v, want [%d]", i, g, i)
		}
	}
}

// TestConcurrentPushersEachItemOnce: items from several pushing goroutines
// reach one consumer exactly once each, and each pusher's items in the
// order it pushed them.
func TestConcurrentPushersEachItemOnce(t *testing.T) {
	const pushers, each = 4, 2000
	type item struct{ from, seq int }
	q := New[item]()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range each {
				q.Push(item{p, s})
			}
		}()
	}
	next := make([]int, pushers) // the seq expected next from each pusher
	var buf []item
	for n := 0; n < pushers*each; {
		buf = q.PopAll(buf[:0], stop)
		if len(buf) == 0 {
			t.Fatalf("PopAll returned %v with stop open", buf)
		}
		for _, it := range buf {
			if it.seq != next[it.from] {
				t.Fatalf("pusher %d: got seq %d, want %d (lost, repeated or reordered)", it.from, it.seq, next[it.from])
			}
			next[it.from]++
			n++
		}
	}
	wg.Wait()
	close(stop)
	if got := q.PopAll(nil, stop); got != nil {
		t.Fatalf("items beyond those pushed: %v", got)
	}
}
