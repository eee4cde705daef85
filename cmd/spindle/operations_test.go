package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	stdnet "net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/keyclient"
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
		if err := os.Remove(p.ready); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
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
		go func() {
			err := p.cmd.Wait()
			if cerr := logf.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("closing its log: %w", cerr)
			}
			p.done <- err
		}()
		t.Cleanup(func() {
			killT(t, p.cmd.Process)
			// Reported by stop already, or "signal: killed" (just above): expected.
			if err := <-p.done; err != nil {
				t.Logf("%s at the test's end: %v", name, err)
			}
		})
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
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("SIGTERM %s: %v", name, err)
		}
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
	// machine, a pair per process for its host's address, installed where
	// the host's environment file says, and one for the operator.
	caDir := filepath.Join(root, "ca")
	run("", "cert", "init", "--dir", caDir)
	// The hosts' environment files (deploy/hosts/), their addresses those
	// of this test's hosts and their paths in each host's tree; the meta
	// service of one member, on spindle1 (META_PEERS empty, the files'
	// comment).
	var addrs []string
	for _, h := range hosts {
		addrs = append(addrs, net.addr(h))
	}
	envs := map[string]map[string]string{}
	for i, h := range hosts {
		envs[h] = hostEnv(t, i, addrs, root)
		envs[h]["META_PEERS"], envs[h]["META_ADDRS"] = "", net.addr("spindle1")+":9860"
		issueHostPairs(t, caDir, filepath.Join(root, "out", h), envs[h], i+1, h, net.addr(h))
	}
	envList := func(env map[string]string, more ...string) []string {
		var l []string
		for k, v := range env {
			l = append(l, k+"="+v)
		}
		return append(l, more...)
	}
	// The operator's: spindle put, get, admin take it from the environment.
	run("", "cert", "issue", "--ca-dir", caDir, "--name", "ops", "--role", "admin", "--out", filepath.Join(root, "ops"))
	t.Setenv("SPINDLE_TLS_CERT", filepath.Join(root, "ops", "ops.crt"))
	t.Setenv("SPINDLE_TLS_KEY", filepath.Join(root, "ops", "ops.key"))
	t.Setenv("SPINDLE_TLS_CA", filepath.Join(caDir, "ca.crt"))
	startCluster := func(listen map[string]string) (*proc, map[string]*proc) {
		t.Helper()
		// Each on a port it picks (SPINDLE_LISTEN over the file's).
		m := start("spindle1", "meta", []string{"meta", "--config", filepath.Join(deployDir, "meta.json")}, envList(envs["spindle1"], "SPINDLE_LISTEN="+net.addr("spindle1")+":0"))
		dns := map[string]*proc{}
		for _, h := range hosts {
			// The host's file, and the addresses this test's processes
			// have (in deploy/ the fixed ports of the file).
			env := envList(envs[h], "SPINDLE_LISTEN="+listen[h], "SPINDLE_METRICS_LISTEN="+net.addr(h)+":0", "SPINDLE_META="+m.addr)
			if h == "spindle3" && net.lab != nil {
				// On every interface of its host, with the address the
				// others dial advertised (LISTEN_ADDR=0.0.0.0, the host
				// files' comment).
				_, port, _ := strings.Cut(listen[h], ":")
				env = append(env, "SPINDLE_LISTEN=0.0.0.0:"+port, "SPINDLE_ADVERTISE_ADDR="+net.addr(h))
			}
			dns[h] = start(h, h+"-datanode", []string{"datanode", "--config", filepath.Join(deployDir, "datanode.json")}, env)
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

	metaDir := envs["spindle1"]["META_DIR"]
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
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("netlab close: %v", err)
		}
	})
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

// TestThreeHosts follows docs/OPERATIONS.md §4 with the files of deploy/
// as they are: three "hosts" on three loopback addresses (127.0.0.1-3,
// each with its own tree), each running a meta member and a datanode
// started from meta.json and datanode.json with its deploy/hosts/HOST.env
// (addresses and paths those of the test's hosts, the guide's ports),
// mutual TLS with the certificates the guide issues; files stored and read
// with an application's (client) certificate, the cluster watched with the
// operator's (admin); then §4 "Losing a host, and its return" with the
// same commands: while four clients write small (inline) and 1 MiB keys,
// the host of the meta leader loses both processes (SIGKILL); the two
// others serve every read, the lost datanode turns DEAD, its pipelines
// stay OPEN with their containers under-replicated, and the host is
// started again from the same files. It fails on a stretch of more than
// maxPutStretch (5 s) without an acknowledged put, or unless within a
// minute of the host's return every acknowledged key's containers have
// three replicas at their BCSID, the meta members are caught up, the
// pipelines whole and nothing is under-replicated; then every
// acknowledged key reads back as written. The meta members run with
// 48 MiB containers (SPINDLE_CONTAINER_SIZE, the one setting not from
// deploy/) so that containers fill and close while the host is away and
// its replicas of them must be brought up to date on its return.
func TestThreeHosts(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addrs := deployLoopback(t)
	root := t.TempDir()
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := runIn(t, []byte(stdin), args...)
		if err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	// §4 "Certificates": the CA and the hosts' pairs, installed at their
	// environment files' paths; the operator's and an application's.
	caDir := filepath.Join(root, "ca")
	run("", "cert", "init", "--dir", caDir)
	var envs []map[string]string
	for i, h := range deployHosts {
		env := hostEnv(t, i, addrs, root)
		issueHostPairs(t, caDir, filepath.Join(root, "out", h.name), env, i+1, h.name, addrs[i])
		envs = append(envs, env)
	}
	run("", "cert", "issue", "--ca-dir", caDir, "--name", "ops", "--role", "admin", "--out", filepath.Join(root, "ops"))
	run("", "cert", "issue", "--ca-dir", caDir, "--name", "app", "--role", "client", "--out", filepath.Join(root, "app"))

	type proc struct {
		name, ready, log string
		cmd              *exec.Cmd
		exited           chan struct{} // closed once cmd has exited, with err its Wait's
		err              error
	}
	kill := func(p *proc) {
		if err := p.cmd.Process.Kill(); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		<-p.exited
	}
	launch := func(i int, role string) *proc {
		t.Helper()
		name := deployHosts[i].name + "-" + role
		p := &proc{name: name, ready: filepath.Join(root, name+".ready"), log: filepath.Join(root, name+".log"), exited: make(chan struct{})}
		// Appended to: a restarted process's log follows its first life's.
		logf, err := os.OpenFile(p.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		p.cmd = exec.Command(exe, role, "--config", filepath.Join(deployDir, role+".json"), "--ready-file", p.ready)
		// The host's environment: its file (as systemd's EnvironmentFile=)
		// and nothing of the operator's.
		p.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SPINDLE_") })
		p.cmd.Env = append(p.cmd.Env, asSpindleEnv+"=1")
		for k, v := range envs[i] {
			p.cmd.Env = append(p.cmd.Env, k+"="+v)
		}
		if role == "meta" {
			// Containers that fill while a host is away (see above).
			p.cmd.Env = append(p.cmd.Env, "SPINDLE_CONTAINER_SIZE=48MiB")
		}
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.err = p.cmd.Wait()
			if err := logf.Close(); err != nil {
				t.Errorf("%s: %v", p.log, err)
			}
			close(p.exited)
		}()
		t.Cleanup(func() {
			if t.Failed() {
				logProblems(t, p.log)
			}
			select {
			case <-p.exited: // killed by the test
				return
			default:
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Errorf("%s: %v", p.name, err)
			}
			select {
			case <-p.exited:
				if p.err != nil {
					t.Errorf("%s stopped with %v", p.name, p.err)
				}
			case <-time.After(operationsTimeout):
				t.Errorf("%s did not stop on SIGTERM", p.name)
				kill(p)
			}
		})
		return p
	}
	waitReady := func(p *proc, want string) {
		t.Helper()
		deadline := time.Now().Add(operationsTimeout)
		for {
			addr, _, err := readyfile.Read(p.ready)
			if err == nil {
				if addr != want {
					t.Fatalf("%s serves at %s, want %s", p.name, addr, want)
				}
				return
			}
			select {
			case <-p.exited:
				b, _ := os.ReadFile(p.log)
				t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.err, b)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(p.log)
				t.Fatalf("%s not ready after %v:\n%s", p.name, operationsTimeout, b)
			}
		}
	}

	// Start order (§4): the three meta members (all launched before any
	// is waited for: a member alone has no quorum), then the datanodes.
	start := time.Now()
	var metas, dns []*proc
	for i := range deployHosts {
		metas = append(metas, launch(i, "meta"))
	}
	for i, p := range metas {
		waitReady(p, addrs[i]+":9860")
	}
	for i := range deployHosts {
		dns = append(dns, launch(i, "datanode"))
	}
	for i, p := range dns {
		waitReady(p, addrs[i]+":9870")
	}
	// The operator's environment (§4 "Check"): every member, the admin pair.
	metaAddrs := envs[0]["META_ADDRS"]
	t.Setenv("SPINDLE_META", metaAddrs)
	asRole := func(name string) {
		t.Setenv("SPINDLE_TLS_CERT", filepath.Join(root, name, name+".crt"))
		t.Setenv("SPINDLE_TLS_KEY", filepath.Join(root, name, name+".key"))
		t.Setenv("SPINDLE_TLS_CA", filepath.Join(caDir, "ca.crt"))
	}
	asRole("ops")
	waitWritable(t, metaAddrs)
	if out := run("", "admin", "nodes"); strings.Count(out, "HEALTHY") != 3 {
		t.Errorf("admin nodes: want 3 HEALTHY datanodes:\n%s", out)
	}
	t.Logf("three hosts serving after %v", time.Since(start).Round(time.Millisecond))

	// An application: its client pair puts and gets; values of both kinds
	// (inline in the meta store, and in blocks on the datanodes).
	asRole("app")
	run("", "bucket", "create", "test")
	run("hello\n", "put", "test/hello", "-") // §4 "Check"
	if got := run("", "get", "test/hello"); got != "hello\n" {
		t.Fatalf("test/hello: %q", got)
	}
	value := func(i int) string { return strings.Repeat(fmt.Sprintf("key %d of three hosts\n", i), 400*(i%3)+10) }
	const keys = 9
	for i := range keys {
		run(value(i), "put", fmt.Sprintf("test/k%d", i), "-")
	}
	for i := range keys {
		if got := run("", "get", fmt.Sprintf("test/k%d", i)); got != value(i) {
			t.Fatalf("test/k%d: %d bytes, want %d", i, len(got), len(value(i)))
		}
	}

	// An application keeps writing through what follows (§4 "Losing a
	// host, and its return"): writers of small (inline) and block-sized
	// keys, with the client pair, from before the loss until after the
	// host's return.
	load := startHostLossLoad(t, metaAddrs, filepath.Join(root, "app"), filepath.Join(caDir, "ca.crt"))
	load.waitMore(t, 20, operationsTimeout, "before the loss")

	// The meta leader's host is lost: both its processes killed.
	asRole("ops")
	var group metaGroupView
	if err := json.Unmarshal([]byte(run("", "admin", "meta", "--json")), &group); err != nil || group.LeaderID == 0 {
		t.Fatalf("admin meta --json: %+v, %v", group, err)
	}
	lost := int(group.LeaderID) - 1
	lostDatanode := addrs[lost] + ":9870"
	// Whether its datanode leads a pipeline too (then the pipeline's
	// raft group elects another leader while the meta group does).
	var nodes []metaapi.NodeInfo
	if err := json.Unmarshal([]byte(run("", "admin", "nodes", "--json")), &nodes); err != nil {
		t.Fatalf("admin nodes --json: %v", err)
	}
	var lostID uint64
	for _, n := range nodes {
		if n.Addr == lostDatanode {
			lostID = n.NodeID
		}
	}
	var ps []metaapi.Pipeline
	if err := json.Unmarshal([]byte(run("", "admin", "pipelines", "--json")), &ps); err != nil || lostID == 0 {
		t.Fatalf("admin pipelines --json: %v (datanode %s: node %d)", err, lostDatanode, lostID)
	}
	var led []uint64
	for _, p := range ps {
		if p.Leader == lostID {
			led = append(led, p.ID)
		}
	}
	t.Logf("killing %s (meta leader %d, and datanode %d, leader of pipelines %v of %d)", deployHosts[lost].name, group.LeaderID, lostID, led, len(ps))
	kill(metas[lost])
	kill(dns[lost])
	killed := time.Now()
	load.mark("killed")
	asRole("app")
	// The first read waits for a new leader (an election); the others
	// are served at once.
	deadline := time.Now().Add(operationsTimeout)
	for {
		out, errOut, err := runIn(t, nil, "get", "test/hello")
		if err == nil && out == "hello\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read %v after the loss of %s: %v\n%s", operationsTimeout, deployHosts[lost].name, err, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("reads served again %v after the loss", time.Since(killed).Round(time.Millisecond))
	for i := range keys {
		if got := run("", "get", fmt.Sprintf("test/k%d", i)); got != value(i) {
			t.Errorf("test/k%d after the loss: %d bytes, want %d", i, len(got), len(value(i)))
		}
	}
	asRole("ops")
	if err := json.Unmarshal([]byte(run("", "admin", "meta", "--json")), &group); err != nil || group.LeaderID == 0 || int(group.LeaderID)-1 == lost {
		t.Errorf("admin meta --json after the loss: %+v, %v", group, err)
	}

	// §5: the lost datanode DEAD (--dead-after, 30 s), its pipelines kept
	// OPEN on the two others, their containers under-replicated; the
	// writes go on.
	deadline = time.Now().Add(metaapi.DefaultDeadAfter + operationsTimeout)
	for {
		if err := json.Unmarshal([]byte(run("", "admin", "nodes", "--json")), &nodes); err != nil {
			t.Fatalf("admin nodes --json: %v", err)
		}
		i := slices.IndexFunc(nodes, func(n metaapi.NodeInfo) bool { return n.Addr == lostDatanode })
		if i >= 0 && nodes[i].Health == metaapi.HealthDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not DEAD %v after the loss: %+v", lostDatanode, time.Since(killed).Round(time.Second), nodes)
		}
		time.Sleep(500 * time.Millisecond)
	}
	load.mark("datanode DEAD")
	var repl metaapi.ReplicationStatus
	if err := json.Unmarshal([]byte(run("", "admin", "replication", "--json")), &repl); err != nil || repl.UnderReplicatedOpen == 0 {
		t.Errorf("admin replication --json with %s DEAD: %+v, %v; want OPEN containers under-replicated", lostDatanode, repl, err)
	}
	t.Logf("%s DEAD %v after the loss; %d containers under-replicated (%d OPEN)", lostDatanode, time.Since(killed).Round(time.Millisecond), repl.UnderReplicated, repl.UnderReplicatedOpen)
	load.waitMore(t, 20, operationsTimeout, "with the datanode DEAD")
	// The containers that filled and closed meanwhile have two replicas:
	// the returning datanode's is OPEN and behind, or missing.
	var cs []metaapi.ContainerInfo
	if err := json.Unmarshal([]byte(run("", "admin", "containers", "--json")), &cs); err != nil {
		t.Fatalf("admin containers --json: %v", err)
	}
	closedWithout := 0
	for _, c := range cs {
		if c.State == metaapi.ContainerClosed && len(c.Replicas) < 3 {
			closedWithout++
		}
	}
	t.Logf("%d of %d containers CLOSED without the lost datanode's replica", closedWithout, len(cs))

	// The host returns: both processes started again from the same files
	// (systemctl start spindle-meta spindle-datanode).
	returned := time.Now()
	load.mark("host back")
	for _, p := range []*proc{metas[lost], dns[lost]} {
		if err := os.Remove(p.ready); err != nil {
			t.Fatal(err)
		}
	}
	metas[lost], dns[lost] = launch(lost, "meta"), launch(lost, "datanode")
	waitReady(metas[lost], addrs[lost]+":9860")
	waitReady(dns[lost], lostDatanode)
	t.Logf("%s serving again %v after its return", deployHosts[lost].name, time.Since(returned).Round(time.Millisecond))
	load.waitMore(t, 20, operationsTimeout, "after the host's return")
	acked := load.stop(t)
	if gap := load.longest; gap > maxPutStretch {
		t.Errorf("longest stretch without a put %v (%s), more than %v", gap.Round(time.Millisecond), load.longestAt, maxPutStretch)
	}

	// Every acknowledged key: its containers with 3 replicas at their
	// BCSID, the meta members caught up, within a minute of the return;
	// then each reads back as written.
	waitThreeReplicas(t, run, acked, returned)
	asRole("app")
	load.readBack(t, acked)
}

// logProblems logs the WARN and ERROR lines of a process's log (the last
// 30), for a failed test: its directory goes with the test.
func logProblems(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			lines = append(lines, l)
		}
	}
	t.Logf("%s, its warnings and errors:\n%s", filepath.Base(path), strings.Join(lines[max(0, len(lines)-30):], ""))
}

// maxPutStretch is the longest a put may wait for another to succeed
// while one host of three is lost (issue 31's acceptance).
const maxPutStretch = 5 * time.Second

// hostLossLoad is TestThreeHosts' application: hostLossWriters writers,
// each its own key client (as separate processes would have), putting
// keys of hostLossSizes in turn, paced, until stopped or
// hostLossMaxPuts each. It records the keys acknowledged and the longest
// stretch without an acknowledged put.
type hostLossLoad struct {
	kcs  []*keyclient.Client
	halt chan struct{}
	done sync.WaitGroup

	mu        sync.Mutex
	acked     map[string]metaapi.KeyInfo
	failures  []string
	failed    int
	last      time.Time
	longest   time.Duration
	longestAt string // when the longest stretch began, after which event
	event     string
	eventAt   time.Time
}

const (
	hostLossWriters = 4
	hostLossMaxPuts = 3000
	hostLossPace    = 100 * time.Millisecond
)

// hostLossSizes: inline in the meta store, one chunk, and four chunks of
// a block (1 MiB and a bit).
var hostLossSizes = []int{3 << 10, 200 << 10, 1<<20 + 4321}

// hostLossValue is writer w's value number i (its bytes name it).
func hostLossValue(w, i int) []byte {
	size := hostLossSizes[i%len(hostLossSizes)]
	line := fmt.Appendf(nil, "writer %d value %d of the host-loss test\n", w, i)
	return bytes.Repeat(line, size/len(line)+1)[:size]
}

func hostLossKey(w, i int) string { return fmt.Sprintf("loss/w%d-%05d", w, i) }

func startHostLossLoad(t *testing.T, metaAddrs, pairDir, ca string) *hostLossLoad {
	t.Helper()
	name := filepath.Base(pairDir)
	sec, err := tlsconf.NewSettings(tlsconf.Files{Cert: filepath.Join(pairDir, name+".crt"), Key: filepath.Join(pairDir, name+".key"), CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	l := &hostLossLoad{halt: make(chan struct{}), acked: map[string]metaapi.KeyInfo{}, last: time.Now(), event: "start", eventAt: time.Now()}
	for range hostLossWriters {
		mc, err := metaapi.NewClient(metaAddrs, metaapi.ClientOptions{TLS: sec})
		if err != nil {
			t.Fatal(err)
		}
		kc, err := keyclient.New(mc, keyclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := kc.Close(); err != nil {
				t.Errorf("closing a key client: %v", err)
			}
		})
		l.kcs = append(l.kcs, kc)
	}
	for w, kc := range l.kcs {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			pace := time.NewTicker(hostLossPace)
			defer pace.Stop()
			for i := range hostLossMaxPuts {
				select {
				case <-l.halt:
					return
				case <-pace.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), operationsTimeout)
				res, err := kc.Put(ctx, "test", hostLossKey(w, i), bytes.NewReader(hostLossValue(w, i)), keyclient.PutOptions{})
				cancel()
				l.record(hostLossKey(w, i), res, err)
			}
		}()
	}
	t.Cleanup(func() {
		select {
		case <-l.halt:
		default:
			close(l.halt)
		}
		l.done.Wait()
	})
	return l
}

func (l *hostLossLoad) record(key string, res keyclient.PutResult, err error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed++
		if len(l.failures) < 10 {
			l.failures = append(l.failures, fmt.Sprintf("%s %s (%v after %s): %v", now.Format("15:04:05.000"), key, now.Sub(l.eventAt).Round(time.Millisecond), l.event, err))
		}
		return
	}
	l.acked[key] = res.Key
	if d := now.Sub(l.last); d > l.longest {
		l.longest = d
		l.longestAt = fmt.Sprintf("from %v after %s", l.last.Sub(l.eventAt).Round(time.Millisecond), l.event)
	}
	l.last = now
}

// mark notes an event: the stretches are told from the last one.
func (l *hostLossLoad) mark(event string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.event, l.eventAt = event, time.Now()
}

func (l *hostLossLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitMore waits, up to within, for n more acknowledged puts.
func (l *hostLossLoad) waitMore(t *testing.T, n int, within time.Duration, what string) {
	t.Helper()
	want, deadline := l.count()+n, time.Now().Add(within)
	for l.count() < want {
		if time.Now().After(deadline) {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("%s: %d puts acknowledged, want %d within %v; %d failed: %v", what, len(l.acked), want, within, l.failed, l.failures)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the writers and returns the keys acknowledged; the stretch
// up to the stop counts too.
func (l *hostLossLoad) stop(t *testing.T) map[string]metaapi.KeyInfo {
	t.Helper()
	close(l.halt)
	l.done.Wait()
	l.record("", keyclient.PutResult{}, nil) // the stretch up to the stop
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.acked, "")
	inline := 0
	for _, ki := range l.acked {
		if len(ki.Blocks) == 0 {
			inline++
		}
	}
	t.Logf("%d puts acknowledged (%d inline), %d failed; longest stretch without a put %v (%s); failures: %v",
		len(l.acked), inline, l.failed, l.longest.Round(time.Millisecond), l.longestAt, l.failures)
	return maps.Clone(l.acked)
}

// readBack reads every acknowledged key with the first writer's client:
// each as written.
func (l *hostLossLoad) readBack(t *testing.T, acked map[string]metaapi.KeyInfo) {
	t.Helper()
	for w := range hostLossWriters {
		for i := range hostLossMaxPuts {
			key := hostLossKey(w, i)
			if _, ok := acked[key]; !ok {
				continue
			}
			var got bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), operationsTimeout)
			_, err := l.kcs[0].Get(ctx, "test", key, &got, keyclient.GetOptions{})
			cancel()
			if err != nil {
				t.Fatalf("get %s: %v", key, err)
			}
			if !bytes.Equal(got.Bytes(), hostLossValue(w, i)) {
				t.Fatalf("%s reads back %d bytes, not as written (%d)", key, got.Len(), len(hostLossValue(w, i)))
			}
		}
	}
}

// waitThreeReplicas polls, up to a minute from returned, until the meta
// members are three, led, and caught up (admin meta: lag 0; inline keys
// live there), nothing is under-replicated (admin replication), and every
// container holding a block of an acknowledged key has three replicas at
// its BCSID, none behind (admin containers).
func waitThreeReplicas(t *testing.T, run func(stdin string, args ...string) string, acked map[string]metaapi.KeyInfo, returned time.Time) {
	t.Helper()
	want := map[uint64]bool{}
	for _, ki := range acked {
		for _, b := range ki.Blocks {
			want[b.Container] = true
		}
	}
	const within = time.Minute
	for {
		var missing []string
		var group metaGroupView
		if err := json.Unmarshal([]byte(run("", "admin", "meta", "--json")), &group); err != nil {
			t.Fatalf("admin meta --json: %v", err)
		}
		if group.LeaderID == 0 || len(group.Members) != 3 {
			missing = append(missing, fmt.Sprintf("meta: leader %d, %d members", group.LeaderID, len(group.Members)))
		}
		for _, m := range group.Members {
			if m.Error != "" || m.Lag != 0 || m.Role == "recovering" {
				missing = append(missing, fmt.Sprintf("meta member %d: role %s, lag %d %s", m.ID, m.Role, m.Lag, m.Error))
			}
		}
		var repl metaapi.ReplicationStatus
		if err := json.Unmarshal([]byte(run("", "admin", "replication", "--json")), &repl); err != nil {
			t.Fatalf("admin replication --json: %v", err)
		}
		if repl.SafeMode || repl.UnderReplicated != 0 {
			missing = append(missing, fmt.Sprintf("replication: safe mode %v, %d under-replicated (%d OPEN)", repl.SafeMode, repl.UnderReplicated, repl.UnderReplicatedOpen))
		}
		// The pipelines whole again (every member HEALTHY and serving,
		// a leader), or closed and replaced.
		var ps []metaapi.Pipeline
		if err := json.Unmarshal([]byte(run("", "admin", "pipelines", "--json")), &ps); err != nil {
			t.Fatalf("admin pipelines --json: %v", err)
		}
		open := 0
		for _, p := range ps {
			if p.State == metaapi.PipelineOpen {
				open++
				if !p.Allocatable || p.Leader == 0 || len(p.Members) != 3 {
					missing = append(missing, fmt.Sprintf("pipeline %d: %+v", p.ID, p))
				}
			}
		}
		if open == 0 {
			missing = append(missing, "no OPEN pipeline")
		}
		var cs []metaapi.ContainerInfo
		if err := json.Unmarshal([]byte(run("", "admin", "containers", "--json")), &cs); err != nil {
			t.Fatalf("admin containers --json: %v", err)
		}
		seen := 0
		for _, c := range cs {
			if !want[c.ID] {
				continue
			}
			seen++
			nodes := map[uint64]bool{}
			for _, r := range c.ReplicaDetails {
				if r.BCSID == c.BCSID && !r.Behind && (r.State == metaapi.ContainerOpen || r.State == metaapi.ContainerClosed) {
					nodes[r.Node] = true
				}
			}
			if len(nodes) < 3 || c.UnderReplicated || len(c.Missing) > 0 {
				missing = append(missing, fmt.Sprintf("container %d %s bcsid %d: %+v", c.ID, c.State, c.BCSID, c.ReplicaDetails))
			}
		}
		if seen != len(want) {
			missing = append(missing, fmt.Sprintf("%d of the %d containers listed", seen, len(want)))
		}
		if len(missing) == 0 {
			t.Logf("3 replicas of every acknowledged key (%d containers, the meta members caught up) %v after the host's return",
				len(want), time.Since(returned).Round(time.Millisecond))
			return
		}
		if time.Since(returned) > within {
			t.Fatalf("%v after the host's return, not 3 replicas of every acknowledged key: %v", within, missing)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// deployLoopback returns the test's hosts' addresses: 127.0.0.1-3 with
// the guide's ports (9860, 9870, 9871) free on each, else another three
// of 127.0.0.0/8 (Linux routes all of it to lo). The ports are below the
// kernel's ephemeral range, so none is handed to another socket between
// this check and the processes' binds.
func deployLoopback(t *testing.T) []string {
	t.Helper()
	for _, net3 := range []string{"127.0.0", "127.0.86", "127.0.87", "127.0.88"} {
		var addrs []string
		free := true
		for h := 1; h <= 3 && free; h++ {
			a := fmt.Sprintf("%s.%d", net3, h)
			for _, port := range []string{"9860", "9870", "9871"} {
				ln, err := stdnet.Listen("tcp", a+":"+port)
				if err == nil {
					err = ln.Close()
				}
				if err != nil {
					t.Logf("%s:%s: %v", a, port, err)
					free = false
					break
				}
			}
			addrs = append(addrs, a)
		}
		if free {
			return addrs
		}
	}
	t.Skip("the guide's ports are taken on every set of loopback addresses tried")
	return nil
}
