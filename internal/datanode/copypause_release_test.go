//go:build !spindle_testhooks

package datanode

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// A release build has no copy-pause hook: with its variable set and its
// arm file present, a copy's first block writes no marker. (Built with
// -tags spindle_testhooks, the hook writes ARM.paused.<pid>.7 before it
// waits; the context is already done, so that wait returns at once.)
func TestReleaseBuildHasNoCopyPause(t *testing.T) {
	dir := t.TempDir()
	arm := filepath.Join(dir, "arm")
	if err := os.WriteFile(arm, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SPINDLE_TEST_COPY_PAUSE", arm)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	newCopyPause().wait(ctx, slog.New(slog.DiscardHandler), 7)
	if m, _ := filepath.Glob(arm + ".paused.*"); len(m) != 0 {
		t.Fatalf("a release build ran the copy-pause hook: markers %v", m)
	}
}
