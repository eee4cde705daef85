package pipeline

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spindle-store/spindle/internal/transport"
)

// TestAnsweredCountsByKindAndStatus: the cached children of the request
// metrics count each answer under its own kind and status, including
// statuses past the cache's bound.
func TestAnsweredCountsByKindAndStatus(t *testing.T) {
	m := newMetrics(&Node{}, nil)
	w := &proposal{kind: KindWriteChunk}
	b := &proposal{kind: KindPutBlock}
	m.answered(w, transport.StatusOK)
	m.answered(w, transport.StatusOK)
	m.answered(b, transport.StatusNotLeader)
	m.answered(w, transport.Status(answerStatuses+1))
	for _, c := range []struct {
		kind, status string
		want         float64
	}{
		{"WriteChunk", "OK", 2},
		{"PutBlock", "NOT_LEADER", 1},
		{"PutBlock", "OK", 0},
		{"WriteChunk", transport.Status(answerStatuses + 1).String(), 1},
	} {
		if got := testutil.ToFloat64(m.proposals.WithLabelValues(c.kind, c.status)); got != c.want {
			t.Errorf("%s %s: %v answers, want %v", c.kind, c.status, got, c.want)
		}
	}
}
