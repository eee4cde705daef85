package main

import (
	"os"
	"testing"
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
	os.Exit(m.Run())
}
