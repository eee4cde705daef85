package chaos

import (
	"fmt"
	"os"
)

// atExit is TestMain's check of a cleanup: a failed one is printed and
// turns a passing exit code into 1.
func atExit(code int, what string, err error) int {
	if err == nil {
		return code
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	return max(code, 1)
}
