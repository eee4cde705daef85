package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var spindleBin string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) (code int) {
	dir, err := os.MkdirTemp("", "spindle-chaos-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { code = atExit(code, "removing the test directory", os.RemoveAll(dir)) }()
	spindleBin = filepath.Join(dir, "spindle")
	cmd := exec.Command("go", "build", "-o", spindleBin, "github.com/spindle-store/spindle/cmd/spindle")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building spindle: %v\n", err)
		return 1
	}
	return m.Run()
}

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChaosShort is the short form of `spindle bench chaos`, in its
// default configuration (3 meta members, mutual TLS, on $TMPDIR): 5 datanodes,
// 40 s of writers and readers under every implemented fault kind, then
// heal, re-replication and the checks. It fails on any lost or partial
// put, any wrong byte read, a history of the hot keys that is not
// linearizable, or a fault kind never injected. SPINDLE_CHAOS_SEED
// replays a seed; SPINDLE_CHAOS_DURATION changes the duration.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2-minute multi-process run")
	}
	seed := int64(20261125)
	if s := os.Getenv("SPINDLE_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("SPINDLE_CHAOS_SEED: %v", err)
		}
	}
	d := 40 * time.Second
	if s := os.Getenv("SPINDLE_CHAOS_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("SPINDLE_CHAOS_DURATION: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{
		Binary: spindleBin, Dir: t.TempDir(), Duration: d, Seed: seed,
		SettleTimeout: time.Minute, Progress: logWriter{t},
		// at most 3 × 768 MiB in the test's temporary directory; then the
		// hot keys only, under faults until the end
		MaxBytes: 768 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if rep.Failed() {
		t.Errorf("violations (replay: SPINDLE_CHAOS_SEED=%d SPINDLE_CHAOS_DURATION=%v): %d lost, %d unreadable, %d partial puts, %d wrong reads, history %s\n%s",
			rep.Seed, d, rep.Lost, rep.Unreadable, rep.PartialPuts, rep.WrongReads, rep.Linearizable, strings.Join(rep.Violations, "\n"))
	}
	if rep.Linearizable != string(linOK) {
		t.Errorf("linearizability: %s", rep.Linearizable)
	}
	for _, s := range rep.ByFault {
		if s.Kind != noFault && s.Injected == 0 {
			t.Errorf("fault %s never injected: %v", s.Kind, rep.Notes)
		}
	}
	if rep.Keys == 0 || rep.HistoryOps == 0 {
		t.Errorf("nothing checked: %d keys, %d hot key operations", rep.Keys, rep.HistoryOps)
	}
}
