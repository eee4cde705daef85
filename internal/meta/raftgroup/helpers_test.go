package raftgroup

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// quietLog discards what the members under test log.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitUntil polls cond every 10 ms for at most 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out (20 s) waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
