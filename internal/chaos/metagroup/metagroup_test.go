package metagroup

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

var spindleBin string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "spindle-metagroup-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory: best effort
	spindleBin = filepath.Join(dir, "spindle")
	cmd := exec.Command("go", "build", "-o", spindleBin, "github.com/spindle-store/spindle/cmd/spindle")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building spindle: %v\n", err)
		return 1
	}
	return m.Run()
}

// TestLeaderKillAndRestart: a group of three starts and elects a leader;
// the leader killed -9, another member leads; the killed member restarts
// on its directory and address; Stop stops them all.
func TestLeaderKillAndRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A member's raft identity is its address, known before it starts:
	// the sockets are bound here and handed over at the first start.
	var addrs []string
	var ls []*net.TCPListener
	for range 3 {
		// portpick:allow handed over to the member (Config.Listeners, --listen-fd), not closed
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	g := New(Config{Binary: spindleBin, Dir: t.TempDir(), Addrs: addrs, Listeners: ls})
	defer func() { _ = g.Stop(time.Second) }() // the test's Stop below is checked
	if err := g.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	ld := g.Leader(ctx)
	if ld == 0 {
		t.Fatalf("no leader within %v", LeaderTimeout)
	}
	if err := g.Kill(ld); err != nil || g.Running(ld) {
		t.Fatalf("kill of leader %d: %v, running %v", ld, err, g.Running(ld))
	}
	next := g.Leader(ctx)
	if next == 0 || next == ld {
		t.Fatalf("after the kill of leader %d: leader %d", ld, next)
	}
	if err := g.Start(ctx, ld); err != nil || !g.Running(ld) {
		t.Fatalf("restart of member %d: %v", ld, err)
	}
	if err := g.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for id := 1; id <= g.Size(); id++ {
		if g.Running(id) {
			t.Errorf("member %d still running after Stop", id)
		}
	}
}
