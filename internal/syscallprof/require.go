package syscallprof

import (
	"fmt"
	"os"
)

// RequireStraceEnv names the environment variable that turns a test's
// "no strace that may trace here" skip into a failure when it is "1". CI
// sets it (.ci/run), where `make deps` installs strace, so that the
// syscall-profile paths cannot go untested there without anyone noticing
// (a container without CAP_SYS_PTRACE, a failed apt-get).
const RequireStraceEnv = "SPINDLE_REQUIRE_STRACE"

// TB is the part of testing.TB that NoStrace uses (this package does not
// import testing).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// NoStrace ends a test that needs a working strace and has none: it skips
// with the reason, or fails with it when SPINDLE_REQUIRE_STRACE=1.
func NoStrace(t TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if os.Getenv(RequireStraceEnv) == "1" {
		t.Fatalf("%s; %s=1 requires strace (make deps installs it; ptrace must be allowed)", reason, RequireStraceEnv)
	}
	t.Skipf("%s (%s=1 would make this a failure)", reason, RequireStraceEnv)
}
