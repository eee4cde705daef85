package main

import (
	"errors"
	"fmt"
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
	if err := os.Setenv(tlsconf.ClientProfileEnv, dir); err != nil {
		panic(err)
	}
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "removing the client profiles' directory: %v\n", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// stopAtEnd reaps cmd (started; the test must not Wait for it) and stops
// it when the test ends: SIGTERM, then SIGKILL if it has not exited
// within 30 s. The channel is closed once cmd has exited.
func stopAtEnd(t *testing.T, cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		// Its exit status is the test's to check (it watches done): the
		// process may have been refused or killed on purpose.
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("SIGTERM %d: %v", cmd.Process.Pid, err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			killT(t, cmd.Process)
			<-done
		}
	})
	return done
}
