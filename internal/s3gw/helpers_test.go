package s3gw_test

import (
	"fmt"
	"io"
	"os"
	"testing"
)

// closeT closes what a test is done with (a response body, an object
// read) and fails the test on a Close error.
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
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
