package ecmeta

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// TestFailedRebuildWaitsBeforeItsRetry: a shard whose rebuild failed is
// not scheduled again before a pause (1 s, doubled at each failure in a
// row up to 30 s, jittered to half to one and a half of it); without it a
// rebuild from stopped sources was scheduled again at every 50 ms poll
// (TestECChaos: 72-192 failures a run).
func TestFailedRebuildWaitsBeforeItsRetry(t *testing.T) {
	m := &Manager{st: &state.State{Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		repairs: map[ecapi.ShardRef]*repairTask{}, failedOn: map[ecapi.ShardRef]failure{}}
	ref := ecapi.ShardRef{Container: 7, Index: 2}
	t0 := time.Unix(1_800_000_000, 0)
	if !m.retryDue(ref, t0) {
		t.Fatal("a shard that never failed is not due")
	}
	now := t0
	for i, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
		want *= time.Second
		m.repairs[ref] = &repairTask{target: 4}
		m.repairFailed(ref, m.repairs[ref], "test", now)
		if m.repairs[ref] != nil || m.failedOn[ref].target != 4 || m.failedOn[ref].inRow != i+1 {
			t.Fatalf("failure %d: task %v, failure %+v", i+1, m.repairs[ref], m.failedOn[ref])
		}
		if m.retryDue(ref, now.Add(want/2-time.Millisecond)) {
			t.Fatalf("failure %d: due before half of its %v pause", i+1, want)
		}
		if !m.retryDue(ref, now.Add(want*3/2)) {
			t.Fatalf("failure %d: not due after one and a half of its %v pause (next %v)", i+1, want, m.failedOn[ref].next.Sub(now))
		}
		now = now.Add(want * 3 / 2)
	}
}
