//go:build !spindle_testhooks

package raftgroup

// isolation in a release build: empty, never isolated (the test hook of
// isolation_hook.go is not compiled in).
type isolation struct{}

func (*isolation) isolated() bool { return false }
