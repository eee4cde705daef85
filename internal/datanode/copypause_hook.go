//go:build spindle_testhooks

package datanode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// copyPauseEnv names a test hook, compiled only with the build tag
// spindle_testhooks (the integration tests build their binary with it;
// a release build has no such variable): an "arm" file ARM. While ARM
// exists, a copy that has received its first block creates
// ARM.paused.<pid>.<container> and waits until that marker or ARM is
// removed (once per container and process). Integration tests use it to
// kill -9 a source or a target in the middle of a copy, deterministically.
const copyPauseEnv = "SPINDLE_TEST_COPY_PAUSE"

// copyPause is the hook's state. wait may be called from any goroutine.
type copyPause struct {
	path   string // ARM; empty: the hook is off
	mu     sync.Mutex
	paused map[uint64]bool // containers paused once
}

func newCopyPause() *copyPause {
	return &copyPause{path: os.Getenv(copyPauseEnv), paused: map[uint64]bool{}}
}

// wait pauses the copy of container id while the hook is armed (see
// copyPauseEnv), until the test releases it or ctx ends.
func (p *copyPause) wait(ctx context.Context, log *slog.Logger, id uint64) {
	if p.path == "" {
		return
	}
	if _, err := os.Stat(p.path); err != nil {
		return // not armed
	}
	p.mu.Lock()
	again := p.paused[id]
	p.paused[id] = true
	p.mu.Unlock()
	if again {
		return
	}
	marker := fmt.Sprintf("%s.paused.%d.%d", p.path, os.Getpid(), id)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return
	}
	log.Info("container copy paused (test hook)", "container", id, "marker", marker)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		_, merr := os.Stat(marker)
		_, aerr := os.Stat(p.path)
		if errors.Is(merr, os.ErrNotExist) || errors.Is(aerr, os.ErrNotExist) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
