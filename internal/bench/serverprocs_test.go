package bench

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestProcNameNamesSpindleRoles(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"/x/bin/spindle", "server", "--dir", "d"}, "server"},
		{[]string{"spindle", "s3", "--listen", "a"}, "gateway"},
		{[]string{"/x/spindle", "meta", "--id", "2", "--dir", "d"}, "meta2"},
		{[]string{"/x/spindle", "meta", "--id=3"}, "meta3"},
		{[]string{"/x/spindle", "datanode", "--data-dir", "/d/datanodes/dn1"}, "dn1"},
		{[]string{"/usr/bin/minio", "server"}, "minio-7"},
	} {
		if got := procName(7, c.args); got != c.want {
			t.Errorf("procName(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

func TestServerProcsFindsChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // the test's own child
	var procs []Proc
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if procs = ServerProcs([]int{cmd.Process.Pid, os.Getpid()}); len(procs) == 2 {
			break // the shell has started its child
		}
	}
	if len(procs) != 2 {
		t.Fatalf("ServerProcs = %v, want the shell and its sleep (not this process)", procs)
	}
	for _, p := range procs {
		if p.PID == os.Getpid() {
			t.Fatalf("ServerProcs includes this process: %v", procs)
		}
	}
}

func TestServerCPUNoteLeavesOutTheClient(t *testing.T) {
	u := &CPUUse{CPUByProcess: map[string]float64{SelfProcName: 5, "dn1": 1, "server": 3}}
	n := ServerCPUNote(u, 1000, 1e9)
	for _, want := range []string{"4.00 s", "4000 µs/op", "4.00 CPU-s/GB", "dn1 1000", "server 3000"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
	if ServerCPUNote(&CPUUse{CPUByProcess: map[string]float64{SelfProcName: 1}}, 10, 0) != "" {
		t.Error("a note without server processes")
	}
}
