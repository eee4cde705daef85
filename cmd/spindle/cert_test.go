package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// TestCertInitIssue: cert init makes a CA and refuses to replace it (exit
// 2); cert issue writes NAME.crt and a 0600 NAME.key carrying the name, the
// role and the hosts; a missing flag or an unknown role is a usage error.
func TestCertInitIssue(t *testing.T) {
	dir := t.TempDir()
	ca, out := filepath.Join(dir, "ca"), filepath.Join(dir, "dn")
	if _, _, err := run(t, []string{"cert", "init", "--dir", ca}); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, []string{"cert", "init", "--dir", ca})
	wantExit(t, err, cli.ExitUsage, "already exists")
	if _, _, err := run(t, []string{"cert", "issue", "--ca-dir", ca, "--name", "dn-1", "--role", "datanode", "--host", "127.0.0.1", "--out", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "dn-1.crt"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	name, role, err := tlsconf.IdentityOf(cert)
	if err != nil || name != "dn-1" || role != tlsconf.RoleDatanode || len(cert.IPAddresses) != 1 || cert.IPAddresses[0].String() != "127.0.0.1" {
		t.Fatalf("issued %s/%s for %v (%v)", name, role, cert.IPAddresses, err)
	}
	if st, err := os.Stat(filepath.Join(out, "dn-1.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v, %v", st.Mode().Perm(), err)
	}
	_, _, err = run(t, []string{"cert", "issue", "--ca-dir", ca, "--name", "x", "--role", "root"})
	wantExit(t, err, cli.ExitUsage, "role")
	_, _, err = run(t, []string{"cert", "issue", "--ca-dir", ca, "--role", "client"})
	wantExit(t, err, cli.ExitUsage, "required")
}
