//go:build !spindle_testhooks

package datanode

import (
	"context"
	"log/slog"
)

// copyPause is the copy-pause test hook of copypause_hook.go, absent from
// a release build (no build tag spindle_testhooks): it never pauses and
// reads no environment variable.
type copyPause struct{}

func newCopyPause() *copyPause { return nil }

func (*copyPause) wait(context.Context, *slog.Logger, uint64) {}
