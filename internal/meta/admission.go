package meta

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Request bodies are admitted against two bounds, so that clients that
// send slowly or all at once cannot hold the service's memory and
// goroutines without limit (a slowloris behind the mutual TLS, or a burst
// of large inline commits):
//
//   - time: a body must arrive within BodyReadTimeout of its admission
//     (MaxRequestBytes at 0.5 MB/s); a read past it fails, the request is
//     refused INVALID and its connection closed by net/http;
//   - bytes: the bodies admitted at once weigh at most MaxBodyBytesInFlight
//     (each its Content-Length, MaxRequestBytes when it has none), held
//     until its handler returns. A request finding no room waits up to
//     BodyAdmitWait and is then refused BUSY (503) before a byte of its
//     body is read: nothing was done, and the client retries it
//     (metaapi.ErrBusy), POSTs included.
//
// Requests without a body (GETs, most DELETEs) are not counted. The raft
// stream and snapshot routes (raftnet.go) are not under these bounds:
// they are long-lived by design and served only to meta members.
const (
	DefaultBodyReadTimeout      = 60 * time.Second
	DefaultMaxBodyBytesInFlight = 256 << 20
	DefaultBodyAdmitWait        = 10 * time.Second
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

func newBodyGate(c *Config) *bodyGate {
	return &bodyGate{sem: semaphore.NewWeighted(c.MaxBodyBytesInFlight), readTimeout: c.BodyReadTimeout,
		admitWait: c.BodyAdmitWait, limitBytes: c.MaxBodyBytesInFlight}
}

// admit waits for room for r's body and sets the deadline of its reading.
// The caller calls release once the handler is done with the body.
func (g *bodyGate) admit(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return func() {}, nil
	}
	weight := int64(MaxRequestBytes)
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
