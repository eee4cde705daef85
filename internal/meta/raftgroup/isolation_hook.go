//go:build spindle_testhooks

package raftgroup

import "sync/atomic"

// isolation, in a test build (-tags spindle_testhooks): Isolate makes the
// member drop every raft message it sends or receives, as if partitioned
// from the others, until Isolate(false).
type isolation struct{ on atomic.Bool }

func (i *isolation) isolated() bool { return i.on.Load() }

// Isolate cuts the member off from the others' raft messages (on) or
// reconnects it. A test hook: release builds have no such method.
func (r *Member) Isolate(on bool) { r.iso.on.Store(on) }
