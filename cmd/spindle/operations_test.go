package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/netlab"
	"github.com/spindle-store/spindle/internal/readyfile"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// operationsTimeout bounds each wait of TestOperationsGuide for a process
// or the cluster to be ready.
const operationsTimeout = time.Minute

// TestOperationsGuide follows docs/OPERATIONS.md with the files of
// deploy/: a meta service and three datanodes as separate processes, each
// started from its role's config file (the datanodes' "hosts" each have
// their own directory tree and their own address — a network namespace
// each when the test runs as root, else a loopback address each — through
// the per-host environment file's variables), keys written, the
// meta store backed up, the cluster stopped in the documented order, the
// meta store wiped and restored from the backup, the cluster started again
// in the documented order: every key reads back.
func TestOperationsGuide(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	deploy := filepath.Join("..", "..", "deploy")
	readJSON := func(name string) configFile {
		t.Helper()
		cf, err := loadConfig(filepath.Join(deploy, name))
		if err != nil {
			t.Fatal(err)
		}
		return cf
	}
	writeJSON := func(path string, cf configFile) {
		t.Helper()
		b, err := json.Marshal(cf)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// host rebases an absolute path of deploy/ into a host's own tree.
	host := func(h, p string) string { return filepath.Join(root, h, p) }

	type proc struct {
		cmd   *exec.Cmd
		ready string
		addr  string
		done  chan error
	}
	hosts := []string{"spindle1", "spindle2", "spindle3"}
	net := newGuideNet(t, hosts)
	start := func(h, name string, args []string, env []string) *proc {
		t.Helper()
		p := &proc{ready: filepath.Join(root, name+".ready"), done: make(chan error, 1)}
		os.Remove(p.ready)
		logf, err := os.Create(filepath.Join(root, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		argv := net.wrap(h, append([]string{exe}, append(args, "--ready-file", p.ready)...))
		p.cmd = exec.Command(argv[0], argv[1:]...)
		// The host's environment: not the operator's TLS variables (set
		// below for the commands this test runs).
		base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SPINDLE_TLS_") })
		p.cmd.Env = append(append(base, asSpindleEnv+"=1"), env...)
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.done <- p.cmd.Wait(); logf.Close() }()
		t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
		deadline := time.Now().Add(operationsTimeout)
		for {
			addr, _, err := readyfile.Read(p.ready)
			if err == nil {
				p.addr = addr
				return p
			}
			select {
			case err := <-p.done:
				p.done <- err
				b, _ := os.ReadFile(filepath.Join(root, name+".log"))
				t.Fatalf("%s exited before it was ready: %v\n%s", name, err, b)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(root, name+".log"))
				t.Fatalf("%s not ready after %v:\n%s", name, operationsTimeout, b)
			}
		}
	}
	stop := func(name string, p *proc) {
		t.Helper()
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			p.done <- err
			if err != nil {
				t.Errorf("%s stopped with %v", name, err)
			}
		case <-time.After(operationsTimeout):
			t.Fatalf("%s did not stop on SIGTERM", name)
		}
	}

	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := runIn(t, []byte(stdin), args...)
		if err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}

	// Certificates (the guide's "Certificates"): a CA on the operator's
	// machine, a certificate per process for its host's address, copied
	// to the host with the CA's certificate, and one for the operator.
	caDir := filepath.Join(root, "ca")
	run("", "cert", "init", "--dir", caDir)
	issue := func(h, name, role string) {
		t.Helper()
		tlsDir := host(h, "/etc/spindle/tls")
		run("", "cert", "issue", "--ca-dir", caDir, "--name", name, "--role", role, "--host", net.addr(h), "--out", tlsDir)
		for _, ext := range []string{".crt", ".key"} {
			if err := os.Rename(filepath.Join(tlsDir, name+ext), filepath.Join(tlsDir, "node"+ext)); err != nil {
				t.Fatal(err)
			}
		}
		if b, err := exec.Command("cp", filepath.Join(caDir, "ca.crt"), tlsDir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, b)
		}
	}
	rebaseTLS := func(h string, sec map[string]any) {
		for _, k := range []string{"tls-cert", "tls-key", "tls-ca"} {
			sec[k] = host(h, sec[k].(string))
		}
	}
	// The role files, rebased: the meta service on spindle1, a datanode
	// on every host.
	issue("spindle1", "meta-1", "meta")
	metaCfg := readJSON("meta.json")
	metaCfg["meta"]["listen"] = net.addr("spindle1") + ":0"
	metaCfg["meta"]["dir"] = host("spindle1", metaCfg["meta"]["dir"].(string))
	rebaseTLS("spindle1", metaCfg["meta"])
	writeJSON(filepath.Join(root, "meta.json"), metaCfg)
	for _, h := range hosts {
		if h != "spindle1" {
			issue(h, "dn-"+h, "datanode")
		} else { // the meta service's host holds a datanode too: its own pair
			run("", "cert", "issue", "--ca-dir", caDir, "--name", "dn-"+h, "--role", "datanode", "--host", net.addr(h), "--out", host(h, "/etc/spindle/tls-dn"))
		}
		cf := readJSON("datanode.json")
		var dirs []any
		for _, d := range cf["datanode"]["data-dir"].([]any) {
			dirs = append(dirs, host(h, d.(string)))
		}
		cf["datanode"]["data-dir"] = dirs
		cf["datanode"]["log-dir"] = host(h, cf["datanode"]["log-dir"].(string))
		rebaseTLS(h, cf["datanode"])
		if h == "spindle1" {
			cf["datanode"]["tls-cert"] = host(h, "/etc/spindle/tls-dn/dn-"+h+".crt")
			cf["datanode"]["tls-key"] = host(h, "/etc/spindle/tls-dn/dn-"+h+".key")
		}
		writeJSON(filepath.Join(root, h+"-datanode.json"), cf)
	}
	// The operator's: spindle put, get, admin take it from the environment.
	run("", "cert", "issue", "--ca-dir", caDir, "--name", "ops", "--role", "admin", "--out", filepath.Join(root, "ops"))
	t.Setenv("SPINDLE_TLS_CERT", filepath.Join(root, "ops", "ops.crt"))
	t.Setenv("SPINDLE_TLS_KEY", filepath.Join(root, "ops", "ops.key"))
	t.Setenv("SPINDLE_TLS_CA", filepath.Join(caDir, "ca.crt"))
	startCluster := func(listen map[string]string) (*proc, map[string]*proc) {
		t.Helper()
		m := start("spindle1", "meta", []string{"meta", "--config", filepath.Join(root, "meta.json")}, nil)
		dns := map[string]*proc{}
		for _, h := range hosts {
			// datanode.env's variables, and the meta address (in
			// deploy/ the config file's; here where it listens now).
			env := []string{"SPINDLE_LISTEN=" + listen[h], "SPINDLE_METRICS_LISTEN=" + net.addr(h) + ":0", "SPINDLE_META=" + m.addr}
			if h == "spindle3" && net.lab != nil {
				// On every interface of its host, with the address the
				// others dial advertised (deploy/datanode.env's comment).
				_, port, _ := strings.Cut(listen[h], ":")
				env = append(env, "SPINDLE_LISTEN=0.0.0.0:"+port, "SPINDLE_ADVERTISE_ADDR="+net.addr(h))
			}
			dns[h] = start(h, h+"-datanode", []string{"datanode", "--config", filepath.Join(root, h+"-datanode.json")}, env)
		}
		t.Setenv("SPINDLE_META", m.addr)
		waitWritable(t, m.addr)
		return m, dns
	}
	stopCluster := func(m *proc, dns map[string]*proc) {
		t.Helper()
		for _, h := range hosts {
			stop(h+"-datanode", dns[h])
		}
		stop("meta", m)
	}

	// Each datanode on its host's address, the meta service on
	// spindle1's (see newGuideNet).
	m, dns := startCluster(map[string]string{"spindle1": net.addr("spindle1") + ":0", "spindle2": net.addr("spindle2") + ":0", "spindle3": net.addr("spindle3") + ":0"})
	run("", "bucket", "create", "test")
	const keys = 10
	value := func(i int) string { return strings.Repeat(fmt.Sprintf("key %d of the guide\n", i), 100*(i+1)) }
	for i := range keys {
		run(value(i), "put", fmt.Sprintf("test/k%d", i), "-")
	}
	backup := filepath.Join(root, "backup", "meta-1")
	run("", "admin", "meta", "backup", backup)
	// The datanodes come back on their addresses: pipelines name their
	// members by address.
	listen := map[string]string{}
	for _, h := range hosts {
		listen[h] = dns[h].addr
	}
	stopCluster(m, dns)

	metaDir := metaCfg["meta"]["dir"].(string)
	if err := os.Rename(metaDir, metaDir+".broken"); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", "-a", backup, metaDir).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, b)
	}
	m, dns = startCluster(listen)
	for i := range keys {
		if got := run("", "get", fmt.Sprintf("test/k%d", i)); got != value(i) {
			t.Errorf("test/k%d after the restore: %d bytes, want %d", i, len(got), len(value(i)))
		}
	}
	stopCluster(m, dns)
}

// waitWritable waits, up to operationsTimeout, until the meta service at
// addr has a pipeline that takes blocks and has a leader (the guide's
// "Check", as the embedded server waits for it).
func waitWritable(t *testing.T, addr string) {
	t.Helper()
	sec, err := tlsconf.NewSettings(tlsconf.Files{Cert: os.Getenv("SPINDLE_TLS_CERT"), Key: os.Getenv("SPINDLE_TLS_KEY"), CA: os.Getenv("SPINDLE_TLS_CA")})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metaapi.NewClient(addr, metaapi.ClientOptions{TLS: sec})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(operationsTimeout)
	var last error
	for time.Now().Before(deadline) {
		ps, err := mc.Pipelines(t.Context())
		if err == nil {
			for _, p := range ps {
				// A leader is not enough: a member may not have reported the
				// pipeline it just joined, and Allocate would refuse.
				if p.Allocatable && p.Leader != 0 {
					return
				}
			}
			err = errors.New("no allocatable pipeline with a leader yet")
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the cluster is not writable after %v: %v", operationsTimeout, last)
}

// guideNet is where TestOperationsGuide's three "hosts" live. As root (with
// ip(8)): a network namespace per host made by internal/netlab, each with an
// address on a bridge the test makes in its own namespace (10.213.N.H/24,
// the bridge .254), so that every process of a host runs in its namespace
// and talks to the others over the bridge, and the CLI (in the test's
// namespace) reaches them as a client on another machine would. Otherwise
// (not root, no ip(8), or no right to make a bridge): a loopback address
// per host (127.0.0.1-3; Linux routes all of
// 127.0.0.0/8 to lo). Only addresses inside namespaces the test made, or
// loopback ones, are used.
type guideNet struct {
	addrs map[string]string
	lab   *netlab.Net // nil: loopback addresses
}

func newGuideNet(t *testing.T, hosts []string) *guideNet {
	t.Helper()
	lab, err := netlab.New(hosts)
	if err != nil {
		// Not root, no ip(8), or root without the right to make interfaces
		// or namespaces (a container): netlab removed what it made.
		g := &guideNet{addrs: map[string]string{}}
		for i, h := range hosts {
			g.addrs[h] = fmt.Sprintf("127.0.0.%d", i+1)
		}
		t.Logf("hosts on loopback addresses: %v", err)
		return g
	}
	t.Cleanup(func() { lab.Close() })
	g := &guideNet{addrs: map[string]string{}, lab: lab}
	for _, h := range hosts {
		g.addrs[h] = lab.Addr(h)
	}
	t.Logf("hosts in network namespaces: %v", g.addrs)
	return g
}

// addr is host h's address.
func (g *guideNet) addr(h string) string { return g.addrs[h] }

// wrap runs argv on host h (in its namespace, if it has one).
func (g *guideNet) wrap(h string, argv []string) []string {
	if g.lab != nil {
		return g.lab.Command(h, argv)
	}
	return argv
}
