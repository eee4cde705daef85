package idcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// fakeUsers is a meta service's users as the cache's lookup sees them.
type fakeUsers struct {
	mu    sync.Mutex
	users map[string]string // access → secret
	down  bool
	calls int
}

func (f *fakeUsers) lookup(_ context.Context, access string) (metaapi.User, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return metaapi.User{}, fmt.Errorf("%w: meta unreachable", metaapi.ErrUnavailable)
	}
	s, ok := f.users[access]
	if !ok {
		return metaapi.User{}, fmt.Errorf("%w: access key %s", metaapi.ErrNotFound, access)
	}
	return metaapi.User{Name: access, AccessKey: access, SecretKey: s}, nil
}

func (f *fakeUsers) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// TestIdentityCache (issue 33 item 6): a known user is served from the
// cache without a meta call while fresh; a changed secret and a deleted
// user apply at the next renewal (within Fresh+Refresh,
// under the 5 s asked); while the meta service does not answer, known
// users are served up to Stale, unknown ones refused with an
// error that is not "no such user", and past Stale known ones too.
// Fails without the cache (every lookup a meta call) and without the
// stale serving (the lookups during the outage fail).
func TestIdentityCache(t *testing.T) {
	if Fresh+2*Refresh > 5*time.Second {
		t.Fatalf("changes would take up to %v", Fresh+2*Refresh)
	}
	f := &fakeUsers{users: map[string]string{"alice": "secret-1", "bob": "secret-b"}}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := New(f.lookup)
	m.now = func() time.Time { return clock }
	m.running = true // the test renews (refreshOnce), no goroutine
	get := m.Get
	for range 100 {
		if a, err := get("alice"); err != nil || a.SecretKey != "secret-1" {
			t.Fatalf("alice: %+v, %v", a, err)
		}
	}
	if _, err := get("bob"); err != nil {
		t.Fatal(err)
	}
	if f.calls != 2 {
		t.Fatalf("%d meta calls for 101 lookups of two users, want 2", f.calls)
	}
	// Changes: alice's secret, bob deleted; renewed after Refresh.
	f.set(func() { f.users["alice"] = "secret-2"; delete(f.users, "bob") })
	clock = clock.Add(Refresh)
	m.refreshOnce()
	if a, err := get("alice"); err != nil || a.SecretKey != "secret-2" {
		t.Fatalf("alice after her secret changed: %+v, %v", a, err)
	}
	if _, err := get("bob"); !errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("bob after his deletion: %v", err)
	}
	// Without renewals (the refresher behind), an entry past
	// Fresh is asked for again.
	f.set(func() { f.users["alice"] = "secret-3" })
	clock = clock.Add(Fresh)
	if a, err := get("alice"); err != nil || a.SecretKey != "secret-3" {
		t.Fatalf("alice past Fresh: %+v, %v", a, err)
	}
	// The meta service down: alice served from the cache, renewals
	// failing, up to Stale.
	f.set(func() { f.down = true; f.users["carol"] = "secret-c" })
	down := clock
	for _, d := range []time.Duration{Refresh, 10 * time.Second, 30 * time.Second, Stale - time.Second} {
		clock = down.Add(d)
		m.refreshOnce()
		if a, err := get("alice"); err != nil || a.SecretKey != "secret-3" {
			t.Fatalf("alice with the meta service down: %+v, %v", a, err)
		}
	}
	if _, err := get("carol"); err == nil || errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("an unknown user with the meta service down: %v, want an error other than no such user", err)
	}
	clock = down.Add(Stale)
	if _, err := get("alice"); err == nil {
		t.Fatal("alice served past Stale with the meta service down")
	}
	f.set(func() { f.down = false })
	if a, err := get("alice"); err != nil || a.SecretKey != "secret-3" {
		t.Fatalf("alice with the meta service back: %+v, %v", a, err)
	}
	mustShutdown(t, m)
}

func mustShutdown(t *testing.T, m *Cache) {
	t.Helper()
	m.mu.Lock()
	m.running = false // the test's: no goroutine to wait for
	m.mu.Unlock()
	m.Close()
	m.Close()
}

// TestRefresherRenews: the refresher goroutine renews a used
// entry (a changed secret is seen within Fresh + a refresh
// without any lookup asking) and stops with Close.
func TestRefresherRenews(t *testing.T) {
	f := &fakeUsers{users: map[string]string{"alice": "secret-1"}}
	m := New(f.lookup)
	if _, err := m.Get("alice"); err != nil {
		t.Fatal(err)
	}
	f.set(func() { f.users["alice"] = "secret-2" })
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		s := m.entries["alice"].user.SecretKey
		m.mu.Unlock()
		if s == "secret-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refresher did not renew alice within 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.Close()
}
