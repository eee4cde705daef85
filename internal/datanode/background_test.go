package datanode

import (
	"io"
	"log/slog"
	"sync"
	"testing"
)

// TestBackgroundCommandsTracked: a command run in the background (a
// replica deletion, a proposal) is counted in the heartbeater's bg, which
// Run waits for before it closes the engine, until it returns; the engine
// closed under a replica deletion still running crashed the datanode in
// Pebble (found by ecnode's TestECChaos). The probe takes one from bg's
// count while the command runs and gives it back: without the tracking
// the count is 0 and the probe panics (negative WaitGroup counter).
func TestBackgroundCommandsTracked(t *testing.T) {
	var bg sync.WaitGroup
	h := &heartbeater{proposals: make(chan struct{}, 2), bg: &bg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	started, release := make(chan struct{}), make(chan struct{})
	h.inBackground("delete_container", func() {
		close(started)
		<-release
	})
	<-started
	counted := func() (ok bool) {
		defer func() { ok = recover() == nil }()
		bg.Add(-1)
		bg.Add(1)
		return true
	}()
	close(release)
	if !counted {
		t.Fatal("a background command runs without being counted in bg: Run would close the engine under it")
	}
	bg.Wait()
}
