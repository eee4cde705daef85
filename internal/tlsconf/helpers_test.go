package tlsconf

import (
	"errors"
	"io"
	"net"
	"testing"
)

// closeT closes what a test is done with and fails the test on a Close
// error (a TLS connection's includes its close_notify alert's), but
// net.ErrClosed: one closed already.
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}
