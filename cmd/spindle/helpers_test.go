package main

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
)

// closeT closes what a test is done with (a server, a meta service, a
// file) and fails the test on a Close error, but net.ErrClosed: closed
// already.
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}

// killT kills p and fails the test on an error, but os.ErrProcessDone: a
// process that has exited and been waited for already.
func killT(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill %d: %v", p.Pid, err)
	}
}
