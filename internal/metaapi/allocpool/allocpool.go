// Package allocpool keeps a meta client's pools of blocks allocated ahead
// of need (metaapi.ClientOptions.PreAllocate), by scope and bucket, so
// that a put costs the meta service one synced step (its commit) instead
// of two (an Allocate, then the commit).
//
// Scopes: a refill is made with the context of the call that found the
// pool empty, so as the caller that context names (the S3 gateway names
// the request's user on every meta call). With Pool.Scope the pools are
// kept by scope and bucket, and a block brought in one scope is handed
// out only in it. A refill refused (Pool.Refused: the meta service's
// FORBIDDEN, a caller who may write some keys of the bucket and not any
// key) is not tried again in that scope and bucket for MaxAge: Take
// answers "not pooled" meanwhile and the caller allocates alone.
//
// Sizing: a refill asks for what the pool handed out since the previous
// one, scaled to Window (a second's worth at the rate just seen), at
// least one and at most Most; the first refill of a pool asks for one.
// So a client that writes slowly pre-allocates one block at a time, and
// the blocks left unused when demand stops are about a second's worth of
// the demand before (refillSize).
//
// Invariants: a block is handed out at most once; never one older than
// MaxAge (dropped: its pipeline may have closed since). Blocks dropped,
// left in a pool at exit, or in a pool forgotten are allocations never
// committed, which the meta service deletes after its allocation grace.
//
// Concurrency: a Pool is safe for concurrent use; one refill per scope
// and bucket at a time (the callers that find that pool empty meanwhile
// wait for it, then take from it). At most MaxPools pools are kept: past
// that, the empty ones are forgotten.
package allocpool

import (
	"context"
	"sync"
	"time"
)

const (
	// MaxAge: a pooled block older than this is dropped, not handed out.
	MaxAge = 10 * time.Second
	// Window: a refill is sized to the demand of this long.
	Window = time.Second
	// MaxPools bounds the pools kept (scopes × buckets).
	MaxPools = 4096
)

// Pool hands out blocks (B) allocated ahead of need. Set its fields
// before the first Take.
type Pool[B any] struct {
	// Most bounds a refill (> 0).
	Most int
	// Scope is a call's scope (nil: one).
	Scope func(ctx context.Context) string
	// Now is the clock (ages and sizing); nil: time.Now.
	Now func() time.Time
	// Fill allocates n blocks for any key of bucket, made as ctx's
	// caller: the blocks it got (at least one), or an error.
	Fill func(ctx context.Context, bucket string, n int) ([]B, error)
	// Refused says Fill's error is a refusal of the caller (then the
	// scope's calls are not pooled for MaxAge).
	Refused func(error) bool

	mu    sync.Mutex
	pools map[key]*pool[B]
}

type key struct{ scope, bucket string }

type pool[B any] struct {
	refill sync.Mutex // one refill at a time; the others wait for it

	mu           sync.Mutex
	blocks       []pooled[B]
	taken        int       // blocks handed out since the last refill
	filledAt     time.Time // the last refill's (zero: none yet)
	refusedUntil time.Time // a refill was refused: not pooled until then
}

type pooled[B any] struct {
	b  B
	at time.Time
}

func (p *Pool[B]) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pool[B]) pool(ctx context.Context, bucket string) *pool[B] {
	k := key{bucket: bucket}
	if p.Scope != nil {
		k.scope = p.Scope(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pools == nil {
		p.pools = map[key]*pool[B]{}
	}
	bp := p.pools[k]
	if bp == nil {
		if len(p.pools) >= MaxPools {
			for k, o := range p.pools {
				if o.empty() {
					delete(p.pools, k)
				}
			}
		}
		bp = &pool[B]{}
		p.pools[k] = bp
	}
	return bp
}

func (bp *pool[B]) empty() bool {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	return len(bp.blocks) == 0
}

// take pops a block younger than MaxAge (ok false: none; the older ones
// are dropped).
func (bp *pool[B]) take(now time.Time) (B, bool) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for len(bp.blocks) > 0 {
		b := bp.blocks[len(bp.blocks)-1]
		bp.blocks = bp.blocks[:len(bp.blocks)-1]
		if now.Sub(b.at) < MaxAge {
			bp.taken++
			return b.b, true
		}
	}
	var zero B
	return zero, false
}

// refillSize is how many blocks a refill asks for: taken blocks were
// handed out over elapsed since the previous refill (none: first is
// true), scaled to Window, within 1..most.
func refillSize(taken int, elapsed time.Duration, first bool, most int) int {
	if first || taken <= 0 {
		return 1
	}
	if elapsed <= 0 {
		return most
	}
	n := (int64(taken)*int64(Window) + int64(elapsed) - 1) / int64(elapsed)
	return int(max(1, min(n, int64(most))))
}

// Take hands out a block for any key of bucket from ctx's pool,
// refilling it (Fill, as ctx's caller) when empty. ok false with no
// error: not pooled (a refill was refused in this scope within MaxAge);
// the caller allocates for its key alone.
func (p *Pool[B]) Take(ctx context.Context, bucket string) (b B, ok bool, err error) {
	bp := p.pool(ctx, bucket)
	if b, ok := bp.take(p.now()); ok {
		return b, true, nil
	}
	bp.refill.Lock()
	defer bp.refill.Unlock()
	t := p.now()
	if b, ok := bp.take(t); ok { // another caller refilled it
		return b, true, nil
	}
	bp.mu.Lock()
	refused := t.Before(bp.refusedUntil)
	n := refillSize(bp.taken, t.Sub(bp.filledAt), bp.filledAt.IsZero(), p.Most)
	bp.mu.Unlock()
	if refused {
		return b, false, nil
	}
	if err := ctx.Err(); err != nil {
		return b, false, err
	}
	got, err := p.Fill(ctx, bucket, n)
	if err != nil {
		if p.Refused != nil && p.Refused(err) {
			bp.mu.Lock()
			bp.refusedUntil = t.Add(MaxAge)
			bp.mu.Unlock()
			return b, false, nil
		}
		return b, false, err
	}
	t = p.now()
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for _, g := range got[1:] {
		bp.blocks = append(bp.blocks, pooled[B]{g, t})
	}
	bp.taken, bp.filledAt = 1, t
	return got[0], true, nil
}
