package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// lockedBuffer is a log or a child's output, read while written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// has says some line holds every one of words.
func (l *lockedBuffer) has(words ...string) bool {
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, w := range words {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// waitFor polls (bounded: 60 s) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 600 {
			t.Fatalf("not within 60 s: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startLogged starts an embedded default server (TLS, its client profile
// written, three datanode processes) whose meta service logs (info and
// up) into the returned buffer; dir is the server's --dir.
func startLogged(t *testing.T) (srv *server.Server, dir string, logs *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, logs = t.TempDir(), &lockedBuffer{}
	s, err := server.Start(ctx, server.Config{
		Dir: dir, MetaListen: "127.0.0.1:0", DatanodeEnv: []string{asSpindleEnv + "=1"},
		Logger: slog.New(slog.NewTextHandler(logs, nil)), ClientProfile: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, s) })
	return s, dir, logs
}

// issue makes a pair of the server's CA with `spindle cert issue` and
// returns its certificate, key and the CA's certificate.
func issue(t *testing.T, srvDir, out, name string, role tlsconf.Role) tlsconf.Files {
	t.Helper()
	caDir := filepath.Join(srvDir, tlsconf.LocalDir, "ca")
	if _, stderr, err := runIn(t, nil, "cert", "issue", "--ca-dir", caDir, "--out", out, "--name", name, "--role", string(role), "--host", "127.0.0.1"); err != nil {
		t.Fatalf("cert issue %s: %v: %s", name, err, stderr)
	}
	return tlsconf.Files{Cert: filepath.Join(out, name+".crt"), Key: filepath.Join(out, name+".key"), CA: filepath.Join(caDir, tlsconf.CACertFile)}
}

// Issue 17's acceptance line "every destructive admin call without the
// admin credential: 403 and a log line", through the command line against
// a default server: with a client certificate of the cluster's CA (given
// by the environment, SPINDLE_TLS_*), deleting a key or a bucket, leaving
// safe mode, decommissioning a datanode, managing users and taking a
// backup each fail with exit status 6 ("forbidden"), the meta service logs
// each with the caller and its address, and nothing is deleted; the same
// certificate may put and get. The local operator's admin certificate
// (the client profile) may do them, each audited. A key file readable by
// others is refused as a credential. Fails without the meta service's
// role check: the calls succeed.
func TestAdminCommandsNeedAdminCertificate(t *testing.T) {
	srv, srvDir, logs := startLogged(t)
	t.Setenv("SPINDLE_META", srv.MetaAddr())
	dir := t.TempDir()
	value := filepath.Join(dir, "value")
	if err := os.WriteFile(value, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	// As the local operator (the admin certificate of the profile); the
	// client certificate gets write and read on the bucket, not delete
	// (issue 32's grants).
	for _, args := range [][]string{{"bucket", "create", "photos"}, {"put", "photos/k", value},
		{"admin", "grant", "cert:mallory", "photos", "write"}, {"admin", "grant", "cert:mallory", "photos", "read"}} {
		if _, stderr, err := runIn(t, nil, args...); err != nil {
			t.Fatalf("%v: %v: %s", args, err, stderr)
		}
	}
	mallory := issue(t, srvDir, dir, "mallory", tlsconf.RoleClient)
	t.Setenv("SPINDLE_TLS_CERT", mallory.Cert)
	t.Setenv("SPINDLE_TLS_KEY", mallory.Key)
	t.Setenv("SPINDLE_TLS_CA", mallory.CA)
	calls := []struct {
		route string
		args  []string
	}{
		{"delete_key", []string{"rm", "photos/k"}},
		{"delete_bucket", []string{"bucket", "rm", "photos"}},
		{"safemode_exit", []string{"admin", "safemode", "exit"}},
		{"node_op", []string{"admin", "datanode", "decommission", "1"}},
		{"node_remove", []string{"admin", "datanode", "remove", "1"}},
		{"create_user", []string{"admin", "user", "create", "eve"}},
		{"list_users", []string{"admin", "user", "ls"}},
		{"delete_user", []string{"admin", "user", "rm", "eve"}},
		{"backup", []string{"admin", "meta", "backup", filepath.Join(dir, "backup")}},
	}
	for _, c := range calls {
		_, _, err := runIn(t, nil, c.args...)
		if cli.ExitCode(err) != cli.ExitForbidden || !strings.Contains(fmt.Sprint(err), "forbidden") {
			t.Errorf("%v with a client certificate: exit %d (%v), want %d forbidden", c.args, cli.ExitCode(err), err, cli.ExitForbidden)
		}
		if strings.HasPrefix(c.route, "delete_") { // refused by the grants
			if !logs.has("audit", "action="+c.route, "who=cert:mallory", "outcome=refused", "remote=127.0.0.1:") {
				t.Errorf("%v with a client certificate: no audit line of the refusal", c.args)
			}
			continue
		}
		if !logs.has("request refused", "route="+c.route, "caller=client:mallory", "remote=127.0.0.1:") {
			t.Errorf("%v with a client certificate: no log line of the refusal", c.args)
		}
	}
	// Data calls are a client's, with its grants.
	if _, stderr, err := runIn(t, nil, "put", "photos/k2", value); err != nil {
		t.Fatalf("put with a client certificate: %v: %s", err, stderr)
	}
	if out, _, err := runIn(t, nil, "get", "photos/k", "-"); err != nil || out != "hello" {
		t.Fatalf("get after the refused rm: %q, %v", out, err)
	}
	// A key readable by others is no credential.
	if err := os.Chmod(mallory.Key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runIn(t, nil, "get", "photos/k", "-"); cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(fmt.Sprint(err), "chmod 600") {
		t.Errorf("a key of mode 0644: exit %d (%v), want %d and chmod 600", cli.ExitCode(err), err, cli.ExitUsage)
	}

	// The local operator: the client profile's admin certificate.
	for _, k := range []string{"SPINDLE_TLS_CERT", "SPINDLE_TLS_KEY", "SPINDLE_TLS_CA"} {
		if err := os.Unsetenv(k); err != nil { // t.Setenv restores them
			t.Fatal(err)
		}
	}
	admin := "caller=admin:" + tlsconf.LocalName(tlsconf.RoleAdmin)
	for _, c := range []struct {
		route string
		args  []string
	}{
		{"create_user", []string{"admin", "user", "create", "eve"}},
		{"delete_user", []string{"admin", "user", "rm", "eve"}},
		{"delete_key", []string{"rm", "photos/k"}},
		{"safemode_exit", []string{"admin", "safemode", "exit"}},
	} {
		if _, stderr, err := runIn(t, nil, c.args...); err != nil {
			t.Errorf("%v as the admin: %v: %s", c.args, err, stderr)
		}
		if !logs.has("audit: allowed", "route="+c.route, admin) {
			t.Errorf("%v as the admin: no audit line", c.args)
		}
	}
}

// Issue 17's acceptance line "a datanode started with a stolen UUID and
// no valid certificate cannot register, heartbeat or join a pipeline; a
// raft message from a non-member is dropped", with real datanode
// processes against a default server. A datanode process with datanode
// 1's identity (UUID and node ID) and its pipeline list, and a certificate
// of another CA, cannot reach the meta service (its heartbeats fail the
// handshake). Another with the same stolen identity and a valid datanode
// certificate of the cluster's CA (another name) has its heartbeats
// refused (403; the meta service logs the certificate it is bound to)
// and the raft messages it sends as member 1 of datanode 1's pipelines
// are dropped by the real members (spindle_datanode_refused_total). All
// along node 1 keeps its address and the cluster keeps serving. Fails
// without the binding (the rogue moves node 1 to its address) or without
// the members' check (nothing refused).
func TestStolenDatanodeIdentityRefused(t *testing.T) {
	srv, srvDir, logs := startLogged(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mc, err := metaapi.NewClient(srv.MetaAddr(), metaapi.ClientOptions{TLS: srv.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := mc.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := nodes[0]
	var victimLogDir string
	for _, n := range srv.Cluster().Nodes() {
		if n.Addr == victim.Addr {
			victimLogDir = n.LogDir
		}
	}
	if victimLogDir == "" {
		t.Fatalf("no member at %s", victim.Addr)
	}
	pipelines, err := os.ReadFile(filepath.Join(victimLogDir, "PIPELINES.json"))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// rogue starts a datanode process with the victim's identity and
	// pipeline list, and certificate files f.
	rogue := func(f tlsconf.Files) *lockedBuffer {
		t.Helper()
		d := t.TempDir()
		logDir := filepath.Join(d, "log")
		if err := datanode.WriteIdentity(logDir, victim.UUID, victim.NodeID); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(logDir, "PIPELINES.json"), pipelines, 0o644); err != nil {
			t.Fatal(err)
		}
		out := &lockedBuffer{}
		cmd := exec.Command(exe, append([]string{"datanode", "--meta", srv.MetaAddr(), "--listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(d, "data"), "--log-dir", logDir, "--metrics-listen", ""}, f.Args()...)...)
		cmd.Env = append(os.Environ(), asSpindleEnv+"=1")
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stopAtEnd(t, cmd)
		return out
	}
	victimAddr := func() string {
		ns, err := mc.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.NodeID == victim.NodeID {
				return n.Addr
			}
		}
		t.Fatalf("node %d is gone", victim.NodeID)
		return ""
	}

	// 1. A certificate of another CA: no handshake with the meta service.
	otherCA := filepath.Join(t.TempDir(), "ca")
	if _, stderr, err := runIn(t, nil, "cert", "init", "--dir", otherCA); err != nil {
		t.Fatalf("cert init: %v: %s", err, stderr)
	}
	foreignDir := t.TempDir()
	if _, stderr, err := runIn(t, nil, "cert", "issue", "--ca-dir", otherCA, "--out", foreignDir, "--name", tlsconf.DatanodeName(1), "--role", "datanode", "--host", "127.0.0.1"); err != nil {
		t.Fatalf("cert issue: %v: %s", err, stderr)
	}
	foreign := tlsconf.Files{Cert: filepath.Join(foreignDir, tlsconf.DatanodeName(1)+".crt"), Key: filepath.Join(foreignDir, tlsconf.DatanodeName(1)+".key"), CA: filepath.Join(otherCA, tlsconf.CACertFile)}
	out1 := rogue(foreign)
	waitFor(t, "the foreign-CA datanode's heartbeat failing", func() bool {
		return strings.Contains(out1.String(), "heartbeat failed") && strings.Contains(out1.String(), "certificate")
	})
	if a := victimAddr(); a != victim.Addr {
		t.Fatalf("node %d moved to %s after heartbeats under another CA's certificate", victim.NodeID, a)
	}

	// 2. A valid datanode certificate of the cluster, another name.
	valid := issue(t, srvDir, t.TempDir(), "rogue", tlsconf.RoleDatanode)
	out2 := rogue(valid)
	waitFor(t, "the meta service refusing the stolen UUID's heartbeat", func() bool {
		return logs.has("heartbeat refused", "caller=datanode:rogue", "bound_to="+tlsconf.DatanodeName(1))
	})
	waitFor(t, "the rogue datanode seeing its heartbeat refused", func() bool {
		return strings.Contains(out2.String(), "heartbeat failed") && strings.Contains(out2.String(), "forbidden")
	})
	// Its raft messages for datanode 1's pipelines reach the real
	// members, which drop them.
	refusedRaft := func() int {
		n := 0
		for _, m := range nodes[1:] {
			n += metricValue(t, srv.ClientTLS(), m.MetricsURL, `spindle_datanode_refused_total{what="raft message"}`)
		}
		return n
	}
	waitFor(t, "the members refusing the rogue's raft messages", func() bool { return refusedRaft() > 0 })
	if a := victimAddr(); a != victim.Addr {
		t.Fatalf("node %d moved to %s after the rogue's heartbeats", victim.NodeID, a)
	}
	// The cluster serves on.
	t.Setenv("SPINDLE_META", srv.MetaAddr())
	value := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(value, []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"bucket", "create", "after"}, {"put", "after/k", value}} {
		if _, stderr, err := runIn(t, nil, args...); err != nil {
			t.Fatalf("%v: %v: %s", args, err, stderr)
		}
	}
	if out, _, err := runIn(t, nil, "get", "after/k", "-"); err != nil || out != "still here" {
		t.Fatalf("get: %q, %v", out, err)
	}
}

// metricValue reads one sample (name with its labels, as exposed) from a
// datanode's /metrics over mutual TLS; 0 when absent.
func metricValue(t *testing.T, sec *tlsconf.Settings, url, sample string) int {
	t.Helper()
	hc := &http.Client{Transport: sec.HTTPTransport(&http.Transport{}), Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer testutil.CloseT(t, resp.Body)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("%s: sample %s %q: %v", url, sample, v, err)
			}
			return int(n)
		}
	}
	return 0
}

// A datanode joins a default server with a one-time token: `spindle admin
// join-token` (the admin profile) prints it; a datanode process started
// with it, the CA's certificate and paths for a certificate that does not
// exist yet gets its certificate (key 0600, a name the meta service drew),
// registers and turns HEALTHY; a second datanode with the same token is
// refused (exit, "forbidden") and never registers.
func TestDatanodeJoinsWithToken(t *testing.T) {
	srv, srvDir, logs := startLogged(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok, stderr, err := runIn(t, nil, "admin", "join-token", "--host", "127.0.0.1", "--meta", srv.MetaAddr())
	if err != nil {
		t.Fatalf("admin join-token: %v: %s", err, stderr)
	}
	tok = strings.TrimSpace(tok)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(srvDir, tlsconf.LocalDir, "ca", tlsconf.CACertFile)
	start := func() (*exec.Cmd, *lockedBuffer, tlsconf.Files) {
		d := t.TempDir()
		f := tlsconf.Files{Cert: filepath.Join(d, "node.crt"), Key: filepath.Join(d, "node.key"), CA: caFile}
		out := &lockedBuffer{}
		cmd := exec.Command(exe, append([]string{"datanode", "--meta", srv.MetaAddr(), "--listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(d, "data"), "--log-dir", filepath.Join(d, "log"), "--metrics-listen", "",
			"--join-token", tok}, f.Args()...)...)
		cmd.Env = append(os.Environ(), asSpindleEnv+"=1")
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out, f
	}
	cmd, out, f := start()
	stopAtEnd(t, cmd)
	mc, err := metaapi.NewClient(srv.MetaAddr(), metaapi.ClientOptions{TLS: srv.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the joined datanode HEALTHY", func() bool {
		ns, err := mc.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		healthy := 0
		for _, n := range ns {
			if n.Health == metaapi.HealthHealthy {
				healthy++
			}
		}
		return len(ns) == 4 && healthy == 4
	})
	if st, err := os.Stat(f.Key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the joined key: %v, %v; want mode 0600", st, err)
	}
	if !logs.has("datanode joined", "name=dn-") || !logs.has("datanode registered", "certificate=datanode:dn-") {
		t.Errorf("no log of the join and the registration under the new certificate:\n%s\n%s", logs.String(), out.String())
	}
	// The token is spent.
	cmd2, out2, f2 := start()
	exited := make(chan error, 1)
	go func() { exited <- cmd2.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(out2.String(), "forbidden") {
			t.Errorf("a second datanode with the same token: %v: %s", err, out2.String())
		}
	case <-time.After(60 * time.Second):
		killT(t, cmd2.Process)
		t.Fatalf("a second datanode with the same token still runs (killed: %v): %s", <-exited, out2.String())
	}
	if _, err := os.Stat(f2.Cert); err == nil {
		t.Error("a certificate was written for the spent token")
	}
	if ns, err := mc.Nodes(ctx); err != nil || len(ns) != 4 {
		t.Errorf("nodes after the refused join: %d, %v; want 4", len(ns), err)
	}
}

// On a plaintext (--insecure) meta service started with an admin token,
// the command line's deletion exits 6 without --admin-token-file and
// works with it; a token file others may read is refused.
func TestInsecureAdminTokenFile(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokFile, []byte("s3cr3t-admin-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := readAdminToken(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := meta.Start(meta.Config{Dir: filepath.Join(dir, "meta"), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quietLogger(), AdminToken: tok})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.CloseT(t, srv) })
	base := []string{"--meta", srv.Addr(), "--insecure"}
	if _, stderr, err := runIn(t, nil, append([]string{"bucket", "create", "bkt"}, base...)...); err != nil {
		t.Fatalf("bucket create: %v: %s", err, stderr)
	}
	if _, _, err := runIn(t, nil, append([]string{"bucket", "rm", "bkt"}, base...)...); cli.ExitCode(err) != cli.ExitForbidden {
		t.Errorf("bucket rm without the token: exit %d (%v), want %d", cli.ExitCode(err), err, cli.ExitForbidden)
	}
	if _, stderr, err := runIn(t, nil, append([]string{"bucket", "rm", "bkt", "--admin-token-file", tokFile}, base...)...); err != nil {
		t.Errorf("bucket rm with the token: %v: %s", err, stderr)
	}
	if err := os.Chmod(tokFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runIn(t, nil, append([]string{"bucket", "ls", "--admin-token-file", tokFile}, base...)...); cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(fmt.Sprint(err), "chmod 600") {
		t.Errorf("a token file of mode 0644: exit %d (%v), want %d and chmod 600", cli.ExitCode(err), err, cli.ExitUsage)
	}
}
