package tlsconf

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"
)

// pki is a CA in a temporary directory with helpers to issue pairs.
type pki struct {
	t   *testing.T
	dir string
	ca  *CA
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	ca, err := CreateCA(dir, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, dir: dir, ca: ca}
}

// files issues a pair for name/role and returns the files of a Reloader.
func (p *pki) files(name string, role Role, hosts ...string) Files {
	p.t.Helper()
	c, k, err := p.ca.Issue(IssueRequest{Name: name, Role: role, Hosts: hosts})
	if err != nil {
		p.t.Fatal(err)
	}
	cp, kp, err := WritePair(p.dir, name, c, k)
	if err != nil {
		p.t.Fatal(err)
	}
	return Files{Cert: cp, Key: kp, CA: filepath.Join(p.dir, CACertFile)}
}

func reloader(t *testing.T, f Files) *Reloader {
	t.Helper()
	r, err := NewReloader(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serve accepts TLS connections with cfg on 127.0.0.1; for each it
// completes the handshake, sends the peer's name and role (or the
// handshake error) on the returned channel, and writes "ok".
func serve(t *testing.T, cfg *tls.Config) (string, <-chan string) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	t.Cleanup(func() { testutil.CloseT(t, ln); <-stopped }) // no t.Errorf from the loop after its test
	seen := make(chan string, 16)
	go func() {
		defer close(stopped)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Errorf("serve: %v", err)
			}
			if err := tc.Handshake(); err != nil {
				seen <- "refused: " + err.Error()
				testutil.CloseT(t, tc)
				continue
			}
			name, role, err := PeerIdentity(tc.ConnectionState())
			if err != nil {
				seen <- "no identity: " + err.Error()
			} else {
				seen <- name + "/" + string(role)
			}
			if _, err := tc.Write([]byte("ok")); err != nil {
				t.Errorf("serve: write: %v", err)
			}
			testutil.CloseT(t, tc)
		}
	}()
	return ln.Addr().String(), seen
}

// dial connects with cfg and reads the server's "ok"; the error of the
// handshake or of the read, with the Close's.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	var b []byte
	if err = c.SetDeadline(time.Now().Add(10 * time.Second)); err == nil {
		b, err = io.ReadAll(c)
	}
	return string(b), errors.Join(err, c.Close())
}

// TestMutualTLS: a client with a certificate of the cluster CA is served
// and known by its name and role; a client without a certificate, with one
// of another CA, or offering only TLS 1.2 is refused, and the server goes
// on serving.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t, "cluster")
	srv := reloader(t, p.files("meta-1", RoleMeta, "127.0.0.1"))
	addr, seen := serve(t, srv.ServerConfig())

	cli := reloader(t, p.files("dn-7", RoleDatanode))
	if got, err := dial(addr, cli.ClientConfig("127.0.0.1")); err != nil || got != "ok" {
		t.Fatalf("a cluster client: %q, %v", got, err)
	}
	if who := <-seen; who != "dn-7/datanode" {
		t.Fatalf("the server saw %q, want dn-7/datanode", who)
	}

	other := newPKI(t, "other")
	stranger := reloader(t, other.files("dn-7", RoleDatanode))
	noCert := cli.ClientConfig("127.0.0.1")
	noCert.Certificates, noCert.GetClientCertificate = nil, nil
	tls12 := cli.ClientConfig("127.0.0.1")
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	strangerCfg := stranger.ClientConfig("127.0.0.1")
	strangerCfg.RootCAs = cli.ClientConfig("127.0.0.1").RootCAs // it trusts the server; the server must not trust it
	for name, cfg := range map[string]*tls.Config{"no certificate": noCert, "another CA": strangerCfg, "TLS 1.2": tls12} {
		if got, err := dial(addr, cfg); err == nil && got == "ok" {
			t.Fatalf("%s: served", name)
		}
		if who := <-seen; !strings.HasPrefix(who, "refused") {
			t.Fatalf("%s: the server saw %q, want a refused handshake", name, who)
		}
	}
	if got, err := dial(addr, cli.ClientConfig("127.0.0.1")); err != nil || got != "ok" {
		t.Fatalf("after the refusals: %q, %v", got, err)
	}
	<-seen

	// A server certificate for another address is refused by the client.
	if _, err := dial(addr, cli.ClientConfig("10.9.9.9")); err == nil {
		t.Fatal("a server certificate without the dialled address was accepted")
	}
}

// TestReloadWithoutRestart: a certificate replaced on disk is served on the
// next handshake after Reload, without a new listener; a broken
// replacement keeps the old pair and says why.
func TestReloadWithoutRestart(t *testing.T) {
	p := newPKI(t, "cluster")
	f := p.files("meta-1", RoleMeta, "127.0.0.1")
	srv := reloader(t, f)
	addr, seen := serve(t, srv.ServerConfig())
	cli := reloader(t, p.files("admin", RoleAdmin))
	name := func() string {
		cfg := cli.ClientConfig("127.0.0.1")
		var got string
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0].Subject.CommonName
			return nil
		}
		if _, err := dial(addr, cfg); err != nil {
			t.Fatal(err)
		}
		<-seen
		return got
	}
	if n := name(); n != "meta-1" {
		t.Fatalf("served %q", n)
	}
	c, k, err := p.ca.Issue(IssueRequest{Name: "meta-1-rotated", Role: RoleMeta, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, k, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Cert, c, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := name(); n != "meta-1-rotated" {
		t.Fatalf("after the rotation the server presents %q", n)
	}
	if err := os.WriteFile(f.Cert, []byte("not a certificate, and longer than before"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil {
		t.Fatal("a broken certificate file reloaded without an error")
	}
	if n := name(); n != "meta-1-rotated" {
		t.Fatalf("after a failed reload the server presents %q", n)
	}
}

// TestCAFiles: the CA and issued keys are 0600, certificates 0644; a second
// CreateCA in the same directory is refused (ErrExists) and the first CA
// still loads; issuing needs a name and a known role; IdentityOf of a
// certificate without a Spindle role is an error.
func TestCAFiles(t *testing.T) {
	p := newPKI(t, "cluster")
	f := p.files("dn-1", RoleDatanode)
	for path, want := range map[string]os.FileMode{
		filepath.Join(p.dir, CAKeyFile): 0o600, filepath.Join(p.dir, CACertFile): 0o644, f.Key: 0o600, f.Cert: 0o644,
	} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != want {
			t.Fatalf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, want)
		}
	}
	if _, err := CreateCA(p.dir, "again", 0); !errors.Is(err, ErrExists) {
		t.Fatalf("a second CA in one directory: %v", err)
	}
	ca, err := LoadCA(p.dir)
	if err != nil || !ca.Cert.Equal(p.ca.Cert) {
		t.Fatalf("the first CA after a refused second: %v", err)
	}
	for _, req := range []IssueRequest{{Name: "", Role: RoleClient}, {Name: "a/b", Role: RoleClient}, {Name: "x", Role: "root"}} {
		if _, _, err := ca.Issue(req); err == nil {
			t.Fatalf("issued %+v", req)
		}
	}
	if _, _, err := IdentityOf(ca.Cert); err == nil {
		t.Fatal("the CA certificate has a Spindle identity")
	}
}
