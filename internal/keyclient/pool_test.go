package keyclient

import (
	"testing"

	"github.com/spindle-store/spindle/internal/client"
)

// Containers of one pipeline with different replica sets (some copied
// elsewhere) keep one client each: alternating between them reuses both
// instead of replacing one with the other; beyond max idle clients the
// least recently released one is closed.
func TestPoolKeepsAClientPerReplicaSet(t *testing.T) {
	p := newPool(client.Options{}, 2)
	defer p.close()
	abc := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	abd := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"}
	get := func(members []string) *pooled {
		t.Helper()
		pc, err := p.get(7, members)
		if err != nil {
			t.Fatal(err)
		}
		return pc
	}
	first, second := get(abc), get(abd)
	if first == second {
		t.Fatal("two replica sets of pipeline 7 share one client")
	}
	p.put(first)
	p.put(second)
	for range 3 {
		a, b := get(abc), get(abd)
		if a != first || b != second || a.stale || b.stale {
			t.Fatalf("alternating replica sets: got new or stale clients (%p %p, want %p %p)", a, b, first, second)
		}
		p.put(a)
		p.put(b)
	}
	// A third replica set: with max 2 idle, the least recently released
	// (abc) is closed once the third is released.
	third := get([]string{"127.0.0.1:1", "127.0.0.1:3", "127.0.0.1:4"})
	p.put(third)
	if !first.stale || second.stale || third.stale {
		t.Fatalf("after a third replica set: stale %v %v %v, want true false false", first.stale, second.stale, third.stale)
	}
	if again := get(abc); again == first {
		t.Fatal("an evicted client came back")
	}
}
