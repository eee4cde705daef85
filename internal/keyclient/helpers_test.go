package keyclient_test

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

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
