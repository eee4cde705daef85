package meta

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// bodyGate admits request bodies (see above). Safe for concurrent use.
type bodyGate struct {
	sem         *semaphore.Weighted
	readTimeout time.Duration
	admitWait   time.Duration
	limitBytes  int64
	// inFlightBytes is the weight admitted now
	// (spindle_meta_request_body_bytes_in_flight).
	inFlightBytes atomic.Int64
}

func newBodyGate(c *state.Config) *bodyGate {
	return &bodyGate{sem: semaphore.NewWeighted(c.MaxBodyBytesInFlight), readTimeout: c.BodyReadTimeout,
		admitWait: c.BodyAdmitWait, limitBytes: c.MaxBodyBytesInFlight}
}

// admit waits for room for r's body and sets the deadline of its reading.
// The caller calls release once the handler is done with the body.
func (g *bodyGate) admit(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return func() {}, nil
	}
	weight := int64(state.MaxRequestBytes)
	if r.ContentLength > 0 && r.ContentLength < weight {
		weight = r.ContentLength
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.admitWait)
	err = g.sem.Acquire(ctx, weight)
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return nil, fmt.Errorf("%w: request ended while waiting for room for its body", metaapi.ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %d bytes of request bodies in flight, no room for %d more within %v", metaapi.ErrBusy, g.limitBytes, weight, g.admitWait)
	}
	// The deadline cuts a body that trickles in; net/http sets the next
	// request's deadlines itself. A ResponseWriter without deadlines (a
	// test recorder) keeps none.
	if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.readTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		g.sem.Release(weight)
		return nil, fmt.Errorf("meta: request body deadline: %w", err)
	}
	g.inFlightBytes.Add(weight)
	return func() {
		g.inFlightBytes.Add(-weight)
		g.sem.Release(weight)
	}, nil
}
