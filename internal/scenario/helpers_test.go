package scenario

import (
	"errors"
	"io"
	"net"
	"testing"
)

// closeT closes what a test is done with and fails the test on a Close
// error, but net.ErrClosed: a connection closed already.
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}
