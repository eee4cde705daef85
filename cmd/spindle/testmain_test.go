package main

import (
	"os"
	"testing"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// asSpindleEnv, set to "1" in a child's environment, makes the test binary
// act as the spindle binary: TestMain runs main() instead of the tests.
// Tests that start `spindle datanode` (or any subcommand) as a child
// process run os.Executable() with it, so no binary has to be built.
const asSpindleEnv = "SPINDLE_TEST_AS_SPINDLE"

func TestMain(m *testing.M) {
	if os.Getenv(asSpindleEnv) == "1" {
		main() // exits non-zero itself on error
		os.Exit(0)
	}
	// The client profiles servers write (and commands read) stay in the
	// test's own directory, never the user's (~/.config/spindle).
	dir, err := os.MkdirTemp("", "spindle-test-clients-")
	if err != nil {
		panic(err)
	}
	os.Setenv(tlsconf.ClientProfileEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
