package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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

// atExit is TestMain's check of a cleanup: a failed one is printed and
// turns a passing exit code into 1.
func atExit(code int, what string, err error) int {
	if err == nil {
		return code
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	return max(code, 1)
}
