package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/testutil"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// certServer starts `spindle server` (TLS) with certificates valid
// validity and returns the command, its meta address and --dir.
func certServer(t *testing.T, validity string) (cmd *exec.Cmd, exited <-chan struct{}, metaAddr, srvDir string, stderr *lockedBuffer) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	srvDir = filepath.Join(dir, "srv")
	cmd = exec.Command(exe, "server", "--dir", srvDir, "--meta-listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0", "--console-listen", "off",
		"--ready-file", ready, "--log-level", "warn", "--cert-validity", validity)
	cmd.Env = append(os.Environ(), asSpindleEnv+"=1")
	stderr = &lockedBuffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = stopAtEnd(t, cmd)
	waitFor(t, "spindle server ready", func() bool {
		b, err := os.ReadFile(ready)
		if err == nil && bytes.Count(b, []byte("\n")) >= 2 {
			metaAddr = strings.SplitN(string(b), "\n", 2)[0]
			return true
		}
		return false
	})
	return cmd, exited, metaAddr, srvDir, stderr
}

func certFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tlsconf.ParseCert(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mtlsPorts are the server's mutual-TLS ports by kind (probePort's): the
// meta service, each datanode's data address and /metrics.
func mtlsPorts(t *testing.T, metaAddr string) map[string]string {
	t.Helper()
	out, _, err := runIn(t, nil, "admin", "nodes", "--json", "--meta", metaAddr)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []metaapi.NodeInfo
	if err := json.Unmarshal([]byte(out), &nodes); err != nil || len(nodes) != 3 {
		t.Fatalf("admin nodes: %v: %s", err, out)
	}
	ports := map[string]string{metaAddr: "meta"}
	for _, n := range nodes {
		ports[n.Addr] = "datanode"
		ports[strings.TrimSuffix(strings.TrimPrefix(n.MetricsURL, "https://"), "/metrics")] = "metrics"
	}
	return ports
}

// keepAlive opens an HTTP/1.1 connection to addr (path: its GET) with cfg
// and reads one answer; the connection stays open.
func keepAlive(t *testing.T, addr, path string, cfg *tls.Config) *tls.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // closed by the server, the test hopes
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s at %s: %d, %v", path, addr, resp.StatusCode, err)
	}
	return c
}

// TestCertsRevokedAndRenewed is issue 33's certificate acceptance against
// a real `spindle server` (this test binary as spindle, its datanodes
// child processes) with certificates of 20 s:
//
//   - renewal without a restart: every process's certificate (meta, S3,
//     each datanode, the operator's) is replaced by a renewed one; once
//     every first certificate has expired the cluster serves a put and a
//     get, and the processes listen where they did (none restarted);
//   - revocation: an admin certificate answered on every mutual-TLS port
//     (meta, each datanode's data address and metrics) is refused on each
//     within 5 s of `admin cert revoke SERIAL`, and its open keep-alive
//     connections (meta, each metrics port) are closed within 5 s;
//   - the S3 port's HTTPS serves the renewed certificate;
//   - admin cert ls lists the renewed certificates.
//
// Fails without the Guard's deny check (the probes are answered) or
// without SetDenied closing the tracked connections (they stay open), and
// without the renewal (the put fails once the first certificates expire).
func TestCertsRevokedAndRenewed(t *testing.T) {
	if testing.Short() {
		t.Skip("a server for about a minute")
	}
	cmd, exited, metaAddr, srvDir, stderr := certServer(t, "20s")
	tlsDir := filepath.Join(srvDir, tlsconf.LocalDir)
	files := []string{"local-meta.crt", "local-s3.crt", "local-admin.crt", "local-datanode-1.crt", "local-datanode-2.crt", "local-datanode-3.crt"}
	first := map[string]*x509.Certificate{}
	var lastExpiry time.Time
	for _, f := range files {
		c := certFile(t, filepath.Join(tlsDir, f))
		first[f] = c
		if c.NotAfter.After(lastExpiry) {
			lastExpiry = c.NotAfter
		}
		if life := c.NotAfter.Sub(c.NotBefore); life > time.Minute {
			t.Fatalf("%s valid %v, want about 20 s (--cert-validity)", f, life)
		}
	}
	listening := listeningAddrs(t, cmd.Process.Pid)
	ports := mtlsPorts(t, metaAddr)

	// Revocation, while the first certificates are still valid.
	ca, err := tlsconf.LoadCA(filepath.Join(tlsDir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	ec, ek, err := ca.Issue(tlsconf.IssueRequest{Name: "eve", Role: tlsconf.RoleAdmin, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(ec, ek)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	eve := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{pair}}
	var open []*tls.Conn
	for addr, kind := range ports {
		if got := probePort(addr, kind, eve); got != answered {
			t.Fatalf("%s %s before the revocation: %s", kind, addr, got)
		}
		switch kind {
		case "meta":
			open = append(open, keepAlive(t, addr, "/v1/buckets", eve))
		case "metrics":
			open = append(open, keepAlive(t, addr, "/metrics", eve))
		}
	}
	serial := tlsconf.SerialOf(pair.Leaf)
	out, _, err := runIn(t, nil, "admin", "cert", "revoke", serial, "--meta", metaAddr)
	revoked := time.Now()
	if err != nil || !strings.Contains(out, serial) {
		t.Fatalf("admin cert revoke: %q, %v", out, err)
	}
	for addr, kind := range ports {
		for probePort(addr, kind, eve) == answered {
			if time.Since(revoked) > 5*time.Second {
				t.Fatalf("%s %s still answers the revoked certificate %v after the revocation", kind, addr, time.Since(revoked))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("revoked certificate refused on %d ports within %v", len(ports), time.Since(revoked))
	for _, c := range open {
		if err := c.SetReadDeadline(revoked.Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		_, err := c.Read(b[:])
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the revoked certificate's open connection to %s: %v, want closed within 5 s", c.RemoteAddr(), err)
		}
	}
	t.Logf("its %d open connections closed within %v", len(open), time.Since(revoked))
	if got := probePort(metaAddr, "meta", &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "127.0.0.1",
		Certificates: []tls.Certificate{mustPair(t, filepath.Join(tlsDir, "local-admin.crt"), filepath.Join(tlsDir, "local-admin.key"))}}); got != answered {
		t.Fatalf("the operator's certificate after another's revocation: %s", got)
	}

	// Renewal: each file replaced by a renewed certificate, no restart.
	waitFor(t, "every certificate renewed", func() bool {
		for _, f := range files {
			c := certFile(t, filepath.Join(tlsDir, f))
			if tlsconf.SerialOf(c) == tlsconf.SerialOf(first[f]) {
				return false
			}
		}
		return true
	})
	for time.Now().Before(lastExpiry.Add(time.Second)) {
		time.Sleep(200 * time.Millisecond) // until every first certificate has expired
	}
	// The S3 port's HTTPS (versitygw's) serves the renewed certificate:
	// a handshake verifying it succeeds after the first one expired.
	hs, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s3ListenAddr(t, cmd.Process.Pid, metaAddr),
		&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("the S3 port after its first certificate expired: %v", err)
	}
	testutil.CloseT(t, hs)
	src := filepath.Join(t.TempDir(), "value")
	value := bytes.Repeat([]byte("after the renewal "), 100_000) // through the datanodes, not inline
	if err := os.WriteFile(src, value, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"bucket", "create", "--meta", metaAddr, "renewed"}, {"put", "--meta", metaAddr, "renewed/k", src}} {
		if _, _, err := runIn(t, nil, args...); err != nil {
			t.Fatalf("%v after every first certificate expired: %v; server: %s", args, err, stderr.String())
		}
	}
	got, _, err := runIn(t, nil, "get", "--meta", metaAddr, "renewed/k", "-")
	if err != nil || got != string(value) {
		t.Fatalf("get after the renewal: %v (%d bytes)", err, len(got))
	}
	select {
	case <-exited:
		t.Fatalf("the server exited: %s", stderr.String())
	default:
	}
	if after := listeningAddrs(t, cmd.Process.Pid); !slices.Equal(after, listening) {
		t.Errorf("listening addresses after the renewal %v, before %v: a process restarted", after, listening)
	}
	out, _, err = runIn(t, nil, "admin", "cert", "ls", "--meta", metaAddr)
	if err != nil || !strings.Contains(out, "local-datanode-1") || !strings.Contains(out, "renew") || !strings.Contains(out, serial) {
		t.Fatalf("admin cert ls: %v\n%s", err, out)
	}
}

func mustPair(t *testing.T, cert, key string) tls.Certificate {
	t.Helper()
	p, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClientRefusesDatanodeAtMetaAddress: a command given a meta address
// where a server presents a datanode certificate of the cluster's own CA
// (one a join could yield for that address) refuses it: the handshake
// fails with the role named. Fails without Pin in metaapi's transport
// (the command gets the fake's answer).
func TestClientRefusesDatanodeAtMetaAddress(t *testing.T) {
	p := newCertPKI(t)
	dn := p.issue("dn-evil", tlsconf.RoleDatanode, "127.0.0.1")
	admin := p.issue("ops", tlsconf.RoleAdmin)
	s, err := tlsconf.NewSettings(dn)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("[]")) // any answer: an empty list
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(s.Listener(raw)) }()
	t.Cleanup(func() { testutil.CloseT(t, srv) })
	_, errOut, err := runIn(t, nil, "bucket", "ls", "--meta", raw.Addr().String(), "--tls-cert", admin.Cert, "--tls-key", admin.Key, "--tls-ca", admin.CA)
	if err == nil || !strings.Contains(err.Error()+errOut, "unexpected role") {
		t.Fatalf("a client of the meta address meeting a datanode certificate: %v %s, want the role refused", err, errOut)
	}
}

type certPKI struct {
	t   *testing.T
	dir string
	ca  *tlsconf.CA
}

func newCertPKI(t *testing.T) *certPKI {
	dir := t.TempDir()
	ca, err := tlsconf.CreateCA(filepath.Join(dir, "ca"), "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	return &certPKI{t: t, dir: dir, ca: ca}
}

func (p *certPKI) issue(name string, r tlsconf.Role, hosts ...string) tlsconf.Files {
	c, k, err := p.ca.Issue(tlsconf.IssueRequest{Name: name, Role: r, Hosts: hosts})
	if err != nil {
		p.t.Fatal(err)
	}
	cp, kp, err := tlsconf.WritePair(p.dir, name, c, k)
	if err != nil {
		p.t.Fatal(err)
	}
	return tlsconf.Files{Cert: cp, Key: kp, CA: filepath.Join(p.dir, "ca", tlsconf.CACertFile)}
}
