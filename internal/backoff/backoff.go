// Package backoff holds the project's one jittered pause between retries,
// shared by the pipeline client and the meta client so that clients that
// failed together do not retry in step.
//
// Concurrency: pure functions (math/rand/v2's global source is safe for
// concurrent use).
package backoff

import (
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
