package datanode

import (
	"io"
	"testing"
)

// closeT closes what a test is done with (an engine, a log, a file, a
// response body) and fails the test on a Close error.
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
