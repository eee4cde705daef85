package tlsconf

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/spindle-store/spindle/internal/testutil"
)

// EnsureLocal makes the CA and a pair per role once (keys 0600); a later
// call keeps them, unless a host is missing from a certificate: then the
// same CA issues it again. Settings from its files speak mutual TLS to
// each other, and nil Settings is plaintext.
func TestEnsureLocal(t *testing.T) {
	dir := t.TempDir()
	l, err := EnsureLocal(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range localRoles {
		st, err := os.Stat(l.Files(r).Key)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s key: %v, %v", r, st, err)
		}
	}
	caBefore, _ := os.ReadFile(l.CA)
	certBefore, _ := os.ReadFile(l.Files(RoleMeta).Cert)
	if _, err := EnsureLocal(dir, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(l.Files(RoleMeta).Cert); string(b) != string(certBefore) {
		t.Fatal("a second start issued the meta certificate again")
	}
	if _, err := EnsureLocal(dir, []string{"127.0.0.1", "10.1.2.3"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(l.Files(RoleMeta).Cert); string(b) == string(certBefore) {
		t.Fatal("a new host did not issue the meta certificate again")
	}
	if b, _ := os.ReadFile(l.CA); string(b) != string(caBefore) {
		t.Fatal("the CA changed")
	}

	srv, err := l.Settings(RoleMeta)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := l.Settings(RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, ln)
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		tc, err := srv.Server(context.Background(), c)
		if err != nil {
			served <- err
			return
		}
		_, err = tc.Write([]byte("ok"))
		served <- errors.Join(err, tc.Close())
	}()
	c, err := cli.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "ok" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := <-served; err != nil { // before the client's Close: its close_notify then finds the client there
		t.Fatalf("server: %v", err)
	}
	testutil.CloseT(t, c)
	var plain *Settings
	if plain.Enabled() || plain.Mode() != ModeInsecure || plain.Scheme() != "http" || plain.Listener(ln) != ln || !(Files{}).IsZero() {
		t.Fatal("nil Settings is not plaintext")
	}
	if got := (Files{}).Args(); len(got) != 1 || got[0] != "--insecure" {
		t.Fatalf("zero Files' args %v", got)
	}
}

// A client profile is found by the meta address it was written for, and
// only by it.
func TestClientProfile(t *testing.T) {
	t.Setenv(ClientProfileEnv, filepath.Join(t.TempDir(), "clients"))
	p := ClientProfile{Meta: "127.0.0.1:9860,127.0.0.1:9861", Cert: "c", Key: "k", CA: "ca"}
	path, err := WriteClientProfile(p, []string{"127.0.0.1:9860", "127.0.0.1:9861"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("profile %s: %v, %v", path, st, err)
	}
	for _, a := range []string{"127.0.0.1:9860", "127.0.0.1:9861"} {
		got, _, found, err := LoadClientProfile(a)
		if err != nil || !found || got != p {
			t.Fatalf("profile of %s: %+v, %v, %v", a, got, found, err)
		}
	}
	if _, _, found, err := LoadClientProfile("127.0.0.1:9862"); err != nil || found {
		t.Fatalf("a profile for an address never written: %v, %v", found, err)
	}
}
