// Package idcache is the S3 gateway's identity cache (issue 33 item 6): the
// users the gateway has seen, by access key, so that a request costs no
// meta round trip and known users keep working while the meta service
// does not answer (a leader change, no quorum).
//
// An entry is kept after its first lookup and renewed in the background
// every Refresh while it is used; it is served while younger than Fresh,
// and, while the meta service does not answer (its renewal failing or in
// flight), up to Stale old. A user the meta service no longer knows is
// dropped at its renewal: a deleted user, or a changed secret, applies
// within Fresh and one renewal.
//
// Concurrency: a Cache is safe for concurrent use; one refresher
// goroutine, started with the first entry, stopped by Close.
package idcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// The cache's times.
const (
	Fresh   = 2 * time.Second
	Refresh = time.Second
	Stale   = 60 * time.Second
	// idle: an entry unused this long is dropped; maxEntries bounds the
	// entries (beyond: users are looked up, not cached).
	idle       = 10 * time.Minute
	maxEntries = 100_000
	// workers bounds the refresher's lookups in flight.
	workers = 8
	// timeout bounds one lookup.
	timeout = 10 * time.Second
)

// ErrNoSuchUser: the meta service answered that no user has the key.
var ErrNoSuchUser = errors.New("idcache: no such user")

// Lookup asks the meta service for the user of an access key.
type Lookup func(ctx context.Context, access string) (metaapi.User, error)

// Cache is the identity cache over a Lookup.
type Cache struct {
	lookup Lookup
	now    func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	running bool
	stop    chan struct{}
	done    chan struct{}
}

// entry is a cached user, under Cache.mu.
type entry struct {
	user       metaapi.User
	fetched    time.Time // the meta service's last answer
	used       time.Time
	failing    bool // the last renewal found the meta service unavailable
	refreshing bool
}

// New is a cache over lookup.
func New(lookup Lookup) *Cache {
	return &Cache{lookup: lookup, now: time.Now, entries: map[string]*entry{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// definite says err is the meta service's answer that the user does not
// exist (as opposed to the meta service not answering).
func definite(err error) bool {
	return errors.Is(err, metaapi.ErrNotFound) || errors.Is(err, metaapi.ErrInvalid)
}

// Get returns the user of an access key (ErrNoSuchUser when none), from
// the cache when it may (the package comment).
func (c *Cache) Get(access string) (metaapi.User, error) {
	now := c.now()
	c.mu.Lock()
	if e := c.entries[access]; e != nil {
		e.used = now
		age := now.Sub(e.fetched)
		if age < Fresh || (age < Stale && (e.failing || e.refreshing)) {
			u := e.user
			c.mu.Unlock()
			return u, nil
		}
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u, err := c.lookup(ctx, access)
	if definite(err) {
		c.Forget(access)
		return metaapi.User{}, ErrNoSuchUser
	}
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e := c.entries[access]; e != nil && c.now().Sub(e.fetched) < Stale {
			e.failing = true
			return e.user, nil
		}
		return metaapi.User{}, fmt.Errorf("s3gw: user lookup: %w", err)
	}
	c.remember(access, u, now)
	return u, nil
}

// remember caches u (answered by the meta service at t) and starts the
// refresher with the first entry.
func (c *Cache) remember(access string, u metaapi.User, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[access]
	if e == nil {
		if len(c.entries) >= maxEntries {
			return
		}
		e = &entry{used: t}
		c.entries[access] = e
	}
	e.user, e.fetched, e.failing = u, t, false
	if !c.running {
		select {
		case <-c.stop: // closed: no refresher (entries expire)
		default:
			c.running = true
			go c.refresher()
		}
	}
}

// Forget drops an access key's entry (a user this gateway deleted).
func (c *Cache) Forget(access string) {
	c.mu.Lock()
	delete(c.entries, access)
	c.mu.Unlock()
}

// refresher renews, every Refresh, the entries older than that and drops
// the idle ones, until Close.
func (c *Cache) refresher() {
	defer close(c.done)
	t := time.NewTicker(Refresh)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.refreshOnce()
		}
	}
}

// refreshOnce renews the entries due (workers at a time) and returns once
// all are answered or have failed.
func (c *Cache) refreshOnce() {
	now := c.now()
	var due []string
	c.mu.Lock()
	for access, e := range c.entries {
		switch {
		case now.Sub(e.used) > idle:
			delete(c.entries, access)
		case !e.refreshing && now.Sub(e.fetched) >= Refresh:
			e.refreshing = true
			due = append(due, access)
		}
	}
	c.mu.Unlock()
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for _, access := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.renew(access)
		}()
	}
	wg.Wait()
}

// renew asks the meta service for one entry.
func (c *Cache) renew(access string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u, err := c.lookup(ctx, access)
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[access]
	if e == nil {
		return
	}
	e.refreshing = false
	switch {
	case definite(err):
		delete(c.entries, access)
	case err != nil:
		e.failing = true
	default:
		e.user, e.fetched, e.failing = u, now, false
	}
}

// Close stops the refresher (idempotent).
func (c *Cache) Close() {
	c.mu.Lock()
	select {
	case <-c.stop:
		c.mu.Unlock()
		return
	default:
	}
	close(c.stop)
	running := c.running
	c.mu.Unlock()
	if running {
		<-c.done
	}
}
