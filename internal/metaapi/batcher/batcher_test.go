package batcher

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type who struct{}

// sent is one batch as Send saw it: the scope its context carried, and
// its requests.
type sent struct {
	ctxWho string
	reqs   []string
}

// recorder sends batches that wait for release, answering each request
// with itself upper-cased.
type recorder struct {
	mu      sync.Mutex
	batches []sent
	arrived chan struct{}
	release chan struct{}
}

func newRecorder() *recorder {
	return &recorder{arrived: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (r *recorder) send(ctx context.Context, reqs []string) ([]string, []error, error) {
	w, _ := ctx.Value(who{}).(string)
	r.mu.Lock()
	r.batches = append(r.batches, sent{w, slices.Clone(reqs)})
	r.mu.Unlock()
	r.arrived <- struct{}{}
	<-r.release
	res := make([]string, len(reqs))
	for i, q := range reqs {
		res[i] = strings.ToUpper(q)
	}
	return res, make([]error, len(reqs)), nil
}

func newBatcher(r *recorder) *Batcher[string, string] {
	return &Batcher[string, string]{MaxCalls: 64, MaxInFlight: 1, Send: r.send}
}

// callAll makes n calls per scope at once, each asking "<scope>-<i>", and
// checks every answer.
func callAll(t *testing.T, call func(ctx context.Context, scope, req string) (string, error), scopes []string, n int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for _, sc := range scopes {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := fmt.Sprintf("%s-%d", sc, i)
				got, err := call(context.WithValue(context.Background(), who{}, sc), sc, req)
				if err != nil || got != strings.ToUpper(req) {
					t.Errorf("%s: got %q, %v", req, got, err)
				}
			}()
		}
	}
	return &wg
}

// Scoped batches hold one scope's calls only and carry that scope's
// context values; calls queued behind a batch in flight go together.
// With one Batcher for both scopes (no Scopes), the batch after the first
// mixes them (checked by hand).
func TestScopes(t *testing.T) {
	r := newRecorder()
	var s Scopes[string, string]
	s.New = func() *Batcher[string, string] { return newBatcher(r) }
	call := func(ctx context.Context, scope, req string) (string, error) {
		return s.Call(ctx, scope, req)
	}
	// A first call per scope takes the one slot in flight; the rest queue.
	first := callAll(t, call, []string{"alice", "bob"}, 1)
	for range 2 {
		select {
		case <-r.arrived:
		case <-time.After(time.Minute): // bounds a broken build's wait, not a speed
			t.Fatal("the two scopes' first calls are not both in flight: one waits behind the other")
		}
	}
	rest := callAll(t, call, []string{"alice", "bob"}, 8)
	for _, sc := range []string{"alice", "bob"} {
		s.mu.Lock()
		b := s.m[sc].b // held by its first call, in flight
		s.mu.Unlock()
		for b.Queued() < 8 {
			runtime.Gosched() // the scope's 8 calls are on their way into its queue
		}
	}
	close(r.release)
	first.Wait()
	rest.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	multi := false
	for _, b := range r.batches {
		for _, q := range b.reqs {
			if !strings.HasPrefix(q, b.ctxWho+"-") {
				t.Fatalf("a batch sent as %q holds %q: %q", b.ctxWho, q, b.reqs)
			}
		}
		multi = multi || len(b.reqs) > 1
	}
	if !multi {
		t.Fatalf("no batch of more than one call: %+v", r.batches)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("%d scopes kept after their calls returned", n)
	}
}

// An unscoped batch is sent with no caller's context; a caller's
// cancellation ends its own wait only.
func TestUnscopedContext(t *testing.T) {
	r := newRecorder()
	b := newBatcher(r)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), who{}, "carol"))
	done := make(chan error, 1)
	go func() { _, err := b.Call(ctx, "x"); done <- err }()
	<-r.arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	close(r.release)
	got, err := b.Call(context.Background(), "y")
	if err != nil || got != "Y" {
		t.Fatalf("next call: %q, %v", got, err)
	}
	if r.batches[0].ctxWho != "" {
		t.Fatalf("an unscoped batch carried a caller's context value %q", r.batches[0].ctxWho)
	}
	if batches, calls := b.Stats(); batches != 2 || calls != 2 {
		t.Fatalf("stats: %d batches, %d calls", batches, calls)
	}
}
