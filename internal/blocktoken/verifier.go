package blocktoken

import (
	"container/list"
	"slices"
	"sync"
	"time"
)

// DefaultCacheEntries bounds a Verifier's cache of verified tokens.
const DefaultCacheEntries = 4096

// Verifier checks tokens on a datanode against the keys it was given
// (SetKeys), remembering the tokens it verified (bounded LRU by their
// bytes) so that a token is HMAC'd once, not once per chunk.
type Verifier struct {
	now func() time.Time
	max int

	mu    sync.Mutex
	keys  []Key
	gen   uint64                   // counts the key changes
	cache map[string]*list.Element // token bytes → *entry
	lru   list.List                // front: most recently used
}

type entry struct {
	raw string
	tok Token
}

// NewVerifier returns a Verifier without keys (it refuses every token
// until SetKeys) caching at most maxEntries tokens (≤ 0: the default);
// now nil is time.Now.
func NewVerifier(maxEntries int, now func() time.Time) *Verifier {
	if maxEntries <= 0 {
		maxEntries = DefaultCacheEntries
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{now: now, max: maxEntries, cache: map[string]*list.Element{}}
}

// SetKeys replaces the keys; the cache is emptied when they change.
func (v *Verifier) SetKeys(keys []Key) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if slices.EqualFunc(keys, v.keys, func(a, b Key) bool { return a.ID == b.ID && string(a.Secret) == string(b.Secret) }) {
		return
	}
	v.keys = slices.Clone(keys)
	v.gen++
	clear(v.cache)
	v.lru.Init()
}

// HasKeys says whether the Verifier has been given keys.
func (v *Verifier) HasKeys() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.keys) > 0
}

// Check says whether token lets principal do op on block local of
// container: nil, or an error wrapping ErrForbidden (ErrRequired for an
// empty token).
func (v *Verifier) Check(token []byte, container, local uint64, op Op, principal string) error {
	if len(token) == 0 {
		return ErrRequired
	}
	now := v.now()
	v.mu.Lock()
	if e, ok := v.cache[string(token)]; ok { // no allocation for the lookup
		v.lru.MoveToFront(e)
		t := &e.Value.(*entry).tok
		v.mu.Unlock()
		return t.Allows(now, container, local, op, principal)
	}
	keys, gen := v.keys, v.gen
	v.mu.Unlock()
	if len(keys) == 0 {
		return ErrNoKeys
	}
	t, err := Verify(token, keys) // outside the lock: keys is never changed in place
	if err != nil {
		return err
	}
	if err := t.Allows(now, container, local, op, principal); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if gen != v.gen {
		return nil // the keys changed meanwhile: allowed under the old ones, not cached
	}
	if _, ok := v.cache[string(token)]; !ok {
		raw := string(token)
		v.cache[raw] = v.lru.PushFront(&entry{raw: raw, tok: t})
		for v.lru.Len() > v.max {
			old := v.lru.Back()
			v.lru.Remove(old)
			delete(v.cache, old.Value.(*entry).raw)
		}
	}
	return nil
}

// Cached is the number of tokens in the cache.
func (v *Verifier) Cached() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lru.Len()
}
