package keyclient_test

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

// closeT closes what a test is done with and fails the test on a Close
// error, but net.ErrClosed: one closed already.
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}

// connGone says whether err is that of a write to a connection closed
// meanwhile, by either end (a client that gave up on its answer, a fake
// datanode stopped): the answer is lost, as from a real datanode.
func connGone(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// removeAllT removes dir at the end of a benchmark or test, failing it when
// something stays.
func removeAllT(t testing.TB, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Error(err)
	}
}
