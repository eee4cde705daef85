package netlab

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// server listens on host's address (port 7000) in its namespace and
// answers each connection with "hi"; it lives at most 120 s, and the test
// kills it at the end.
func server(t *testing.T, n *Net, host string) {
	t.Helper()
	prog := `import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen(16); s.settimeout(1)
print("listening", flush=True)
end = time.time() + 120
while time.time() < end:
    try:
        c, _ = s.accept()
    except OSError:  # the 1 s timeout, or a connection reset before accept
        continue
    try:
        c.sendall(b"hi")
    except OSError:  # a client that gave up (a lossy link): serve the next
        pass
    c.close()
`
	argv := n.Command(host, []string{"python3", "-c", prog, n.Addr(host)})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Errorf("kill the server on %s: %v", host, err)
		}
		_ = cmd.Wait() // killed just above: "signal: killed" is expected
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "listening" {
		t.Fatalf("server on %s did not start: %q", host, line)
	}
}

// reaches says whether from (in its namespace) gets "hi" from to's server
// within 2 s (a partitioned link drops the SYN: the connection times out).
func reaches(t *testing.T, n *Net, from, to string) bool {
	t.Helper()
	prog := `import socket, sys
try:
    c = socket.create_connection((sys.argv[1], 7000), timeout=2)
    sys.exit(0 if c.recv(2) == b"hi" else 2)
except OSError as e:
    print(e, file=sys.stderr)
    sys.exit(1)
`
	argv := n.Command(from, []string{"python3", "-c", prog, n.Addr(to)})
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		t.Logf("%s → %s: %s", from, to, bytes.TrimSpace(out))
		return false
	}
	if err != nil {
		t.Fatalf("%s → %s: %v", from, to, err)
	}
	return true
}

// TestPartitionDelayHeal: three hosts reach each other; a partition
// between a and b stops their packets both ways while c still reaches both;
// a delay (netem on the host's link, or the relay) keeps every path, a
// 100 % loss cuts every path of the host; Heal restores every path; Close
// removes the namespaces. As root only (it says why it skips otherwise).
func TestPartitionDelayHeal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 to listen and connect inside the namespaces")
	}
	n, err := New([]string{"a", "b", "c"})
	if err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	for _, h := range n.Hosts() {
		server(t, n, h)
	}
	all := func(want map[[2]string]bool) {
		t.Helper()
		for _, from := range n.Hosts() {
			for _, to := range n.Hosts() {
				if from == to {
					continue
				}
				if got := reaches(t, n, from, to); got != want[pair(from, to)] {
					t.Fatalf("%s → %s: reaches %v, want %v (%s)", from, to, got, want[pair(from, to)], n.Faults())
				}
			}
		}
	}
	connected := map[[2]string]bool{pair("a", "b"): true, pair("a", "c"): true, pair("b", "c"): true}
	all(connected)
	if err := n.Partition("a", "b"); err != nil {
		t.Fatal(err)
	}
	all(map[[2]string]bool{pair("a", "c"): true, pair("b", "c"): true})
	if err := n.Delay("c", 30*time.Millisecond, 5*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if n.Host("c") != nil && n.relays["c"] == nil {
		argv := n.Command("c", []string{"tc", "qdisc", "show", "dev", "eth0"})
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "netem") || !strings.Contains(string(out), "delay 30ms") {
			t.Fatalf("c's qdiscs after Delay: %s %v", out, err)
		}
	}
	t.Logf("faults: %s", n.Faults())
	all(map[[2]string]bool{pair("a", "c"): true, pair("b", "c"): true}) // delayed, not cut
	// Everything c sends lost: nobody reaches c, c reaches nobody (the
	// replies are its packets too); a and b are still cut.
	if err := n.Delay("c", time.Millisecond, 0, 100); err != nil {
		t.Fatal(err)
	}
	all(map[[2]string]bool{})
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	all(connected)
	if err := n.Partition("a", "a"); err == nil {
		t.Fatal("a host partitioned from itself")
	}
	if err := n.Delay("nobody", time.Millisecond, 0, 0); err == nil {
		t.Fatal("a delay on no host")
	}
	ns := n.Host("a").NS
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + ns); !os.IsNotExist(err) {
		t.Fatalf("namespace %s left after Close: %v", ns, err)
	}
}
