package metaapi

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Pre-allocation (ClientOptions.PreAllocate): Allocate serves a bucket's
// blocks from a pool the client fills ahead of need, PreAllocate blocks
// at a time in one request (AllocationsRoute, AnyKey allocations: each
// commits under any key of the bucket), so that a put costs one synced
// step of the meta service (its commit) instead of two.
//
// Reclaim: a pre-allocated block nobody commits is an allocation like an
// interrupted put's; the meta service deletes it after its allocation
// grace (an hour by default): blocks of a client that dies, blocks left
// in the pool at Close, and blocks older than MaxPreAllocatedAge, which
// the pool drops rather than hands out (their pipeline may have closed
// since). Allocate with ExcludePipelines (a client's failover) never uses
// the pool.
const (
	// MaxPreAllocate bounds ClientOptions.PreAllocate (one batch).
	MaxPreAllocate = MaxCommitBatch
	// MaxPreAllocatedAge: a pooled block older than this is dropped, not
	// handed out.
	MaxPreAllocatedAge = 10 * time.Second
)

// allocPool is a Client's pool of pre-allocated blocks, by bucket.
type allocPool struct {
	n int // blocks per refill (0: no pool)

	mu      sync.Mutex
	buckets map[string]*bucketPool
}

type bucketPool struct {
	refill sync.Mutex // one refill at a time; the others wait for it
	mu     sync.Mutex
	blocks []pooledBlock
}

type pooledBlock struct {
	r  AllocateResponse
	at time.Time
}

func (p *allocPool) bucket(name string) *bucketPool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.buckets == nil {
		p.buckets = map[string]*bucketPool{}
	}
	bp := p.buckets[name]
	if bp == nil {
		bp = &bucketPool{}
		p.buckets[name] = bp
	}
	return bp
}

// take pops a block younger than MaxPreAllocatedAge (ok false: none; the
// older ones are dropped).
func (bp *bucketPool) take(now time.Time) (AllocateResponse, bool) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for len(bp.blocks) > 0 {
		b := bp.blocks[len(bp.blocks)-1]
		bp.blocks = bp.blocks[:len(bp.blocks)-1]
		if now.Sub(b.at) < MaxPreAllocatedAge {
			return b.r, true
		}
	}
	return AllocateResponse{}, false
}

// allocatePooled serves req (no ExcludePipelines) from the bucket's pool,
// refilling it with c.pool.n blocks in one request when empty.
func (c *Client) allocatePooled(ctx context.Context, req AllocateRequest) (AllocateResponse, error) {
	bp := c.pool.bucket(req.Bucket)
	if r, ok := bp.take(time.Now()); ok {
		return r, nil
	}
	bp.refill.Lock()
	defer bp.refill.Unlock()
	if r, ok := bp.take(time.Now()); ok { // another caller refilled it
		return r, nil
	}
	if err := ctx.Err(); err != nil {
		return AllocateResponse{}, err
	}
	reqs := make([]AllocateRequest, c.pool.n)
	for i := range reqs {
		reqs[i] = AllocateRequest{Bucket: req.Bucket, AnyKey: true}
	}
	got, errs, err := c.sendAllocations(reqs)
	if err != nil {
		return AllocateResponse{}, fmt.Errorf("meta pre-allocate %d blocks in %s: %w", len(reqs), req.Bucket, err)
	}
	now := time.Now()
	var first error
	var blocks []pooledBlock
	for i := range got {
		if errs[i] != nil {
			first = errs[i]
			continue
		}
		blocks = append(blocks, pooledBlock{got[i], now})
	}
	if len(blocks) == 0 {
		return AllocateResponse{}, first
	}
	c.allocs.mu.Lock()
	c.allocs.batches++
	c.allocs.calls += uint64(len(reqs))
	c.allocs.mu.Unlock()
	bp.mu.Lock()
	bp.blocks = append(bp.blocks, blocks[1:]...)
	bp.mu.Unlock()
	return blocks[0].r, nil
}
