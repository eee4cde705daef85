package main

import (
	"errors"
	"os"
	"testing"
)

// killT kills p and fails the test on an error, but os.ErrProcessDone: a
// process that has exited and been waited for already.
func killT(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill %d: %v", p.Pid, err)
	}
}
