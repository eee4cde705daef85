package metaapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/spindle-store/spindle/internal/metaapi/allocpool"
)

// Pre-allocation (ClientOptions.PreAllocate): Allocate serves a bucket's
// blocks from a pool the client fills ahead of need (package allocpool:
// scopes, sizing to demand, ages), one request per refill
// (AllocationsRoute, AnyKey allocations: each commits under any key of
// the bucket), so that a put costs one synced step of the meta service
// (its commit) instead of two. A pre-allocated block nobody commits is
// an allocation like an interrupted put's, which the meta service
// deletes after its allocation grace. Allocate with ExcludePipelines (a
// client's failover) never uses the pool; a refill refused FORBIDDEN
// lets the scope's calls allocate for their keys alone.
const (
	// MaxPreAllocate bounds ClientOptions.PreAllocate (one batch).
	MaxPreAllocate = MaxCommitBatch
	// MaxPreAllocatedAge: a pooled block older than this is dropped, not
	// handed out.
	MaxPreAllocatedAge = allocpool.MaxAge
)

// newPool is c's pool of pre-allocated blocks.
func newPool(c *Client, opts ClientOptions) *allocpool.Pool[AllocateResponse] {
	return &allocpool.Pool[AllocateResponse]{Most: opts.PreAllocate, Scope: opts.PoolScope, Now: opts.Now,
		Refused: func(err error) bool { return errors.Is(err, ErrForbidden) },
		Fill: func(ctx context.Context, bucket string, n int) ([]AllocateResponse, error) {
			reqs := make([]AllocateRequest, n)
			for i := range reqs {
				reqs[i] = AllocateRequest{Bucket: bucket, AnyKey: true}
			}
			got, errs, err := c.sendAllocations(ctx, reqs)
			if err != nil {
				return nil, fmt.Errorf("meta pre-allocate %d blocks in %s: %w", n, bucket, err)
			}
			c.allocs.mu.Lock()
			c.allocs.batches++
			c.allocs.calls += uint64(n)
			c.allocs.mu.Unlock()
			var blocks []AllocateResponse
			var refused error // the first item's error, when no block came
			for i := range got {
				if errs[i] != nil {
					if refused == nil {
						refused = errs[i]
					}
					continue
				}
				blocks = append(blocks, got[i])
			}
			if len(blocks) == 0 {
				if refused == nil {
					refused = &Error{Code: CodeInternal, Message: fmt.Sprintf("meta pre-allocation: %d results for %d blocks", len(got), n)}
				}
				return nil, refused
			}
			return blocks, nil
		}}
}

// allocateUnpooled is Allocate without the pool.
func (c *Client) allocateUnpooled(ctx context.Context, req AllocateRequest) (AllocateResponse, error) {
	if !c.noBatch {
		return c.allocs.call(ctx, req)
	}
	return c.allocateAlone(ctx, req)
}
