// Package testutil holds the helpers every package's tests share. Only
// tests import it. No state; safe for concurrent use.
package testutil

import (
	"errors"
	"io"
	"net"
	"testing"
)

// CloseT closes c and reports its error, except net.ErrClosed (the peer or
// an earlier close already closed it), as a test error.
func CloseT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}
