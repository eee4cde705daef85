package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

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

// stopAtEnd reaps cmd (started; the test must not Wait for it) and stops
// it when the test ends: SIGTERM, then SIGKILL if it has not exited
// within 30 s. The channel is closed once cmd has exited.
func stopAtEnd(t *testing.T, cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return done
}
