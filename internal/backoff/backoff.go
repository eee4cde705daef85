// Package backoff holds the project's one jittered pause between retries,
// shared by the pipeline client and the meta client so that clients that
// failed together do not retry in step, and the one pause that ends early
// when its context does (Sleep).
//
// Concurrency: pure functions (math/rand/v2's global source is safe for
// concurrent use).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter is a pause drawn uniformly from [d/2, 3d/2] (d itself when d ≤ 0).
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d/2 + rand.N(d+1)
}

// Sleep waits d, or until ctx ends; false means ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
