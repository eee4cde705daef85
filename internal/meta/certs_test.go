package meta

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/meta/certreg"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

func certServer(t *testing.T, pki *testPKI, logs *logBuffer) *Server {
	t.Helper()
	srv, err := Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), TLS: pki.settings("meta-1", tlsconf.RoleMeta), JoinCA: pki.ca,
		CertValidity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, srv) })
	return srv
}

// TestJoinCannotBeStretched: a datanode join token for 127.0.0.1 yields a
// datanode certificate for exactly 127.0.0.1, whatever the joiner asks:
// a request naming another host (the meta service's name, say) is refused
// without using the token; a token for the meta or admin role cannot be
// made; the token is checked before the request's signature (a garbage
// request with an unknown token is 403, not 400); joins beyond the rate
// are refused busy. Fails without the host check (the joiner's extra host
// is signed) or with the request's hosts issued instead of the token's.
func TestJoinCannotBeStretched(t *testing.T) {
	pki := newTestPKI(t)
	srv := certServer(t, pki, &logBuffer{})
	ctx := context.Background()
	admin := clientAs(t, srv, pki.settings("alice", tlsconf.RoleAdmin))
	for _, role := range []string{"meta", "admin", "root"} {
		if _, err := certapi.CreateJoinToken(ctx, admin, certapi.JoinTokenRequest{Role: role, Hosts: []string{"127.0.0.1"}}); !errors.Is(err, metaapi.ErrInvalid) {
			t.Fatalf("a join token for role %s: %v, want invalid", role, err)
		}
	}
	if _, err := certapi.CreateJoinToken(ctx, admin, certapi.JoinTokenRequest{}); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("a datanode join token without hosts: %v, want invalid", err)
	}
	tok, err := certapi.CreateJoinToken(ctx, admin, certapi.JoinTokenRequest{Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(pki.dir, "ca", tlsconf.CACertFile)
	if _, err := metaapi.Join(ctx, srv.Addr(), caFile, metaapi.JoinRequest{Token: "00", CSR: "garbage", Hosts: []string{"127.0.0.1"}}); !errors.Is(err, metaapi.ErrForbidden) {
		t.Fatalf("an unknown token with a garbage request: %v, want 403 (the token checked first)", err)
	}
	csr, _, err := tlsconf.NewKeyRequest()
	if err != nil {
		t.Fatal(err)
	}
	stretch := metaapi.JoinRequest{Token: tok.Token, CSR: string(csr), Hosts: []string{"127.0.0.1", "meta.example"}}
	if _, err := metaapi.Join(ctx, srv.Addr(), caFile, stretch); !errors.Is(err, metaapi.ErrForbidden) {
		t.Fatalf("a join asking for a host beyond its token's: %v, want 403", err)
	}
	resp, err := metaapi.Join(ctx, srv.Addr(), caFile, metaapi.JoinRequest{Token: tok.Token, CSR: string(csr)})
	if err != nil {
		t.Fatalf("the token after a refused stretch: %v", err)
	}
	c, err := tlsconf.ParseCert([]byte(resp.Cert))
	if err != nil {
		t.Fatal(err)
	}
	name, role, err := tlsconf.IdentityOf(c)
	if err != nil || role != tlsconf.RoleDatanode || name != resp.Name || len(c.DNSNames) != 0 || len(c.IPAddresses) != 1 || c.IPAddresses[0].String() != "127.0.0.1" {
		t.Fatalf("joined as %s:%s (%v) for %v %v, want a datanode for exactly 127.0.0.1", role, name, err, c.DNSNames, c.IPAddresses)
	}
	if c.VerifyHostname("meta.example") == nil {
		t.Fatal("the joined certificate is valid for another name")
	}
	l, err := certapi.List(ctx, admin)
	if err != nil || len(l) != 1 || l[0].Serial != tlsconf.SerialOf(c) || l[0].Name != resp.Name || l[0].How != "join" {
		t.Fatalf("registry after the join: %+v, %v", l, err)
	}
	busy := 0
	for range 3 * certreg.JoinsPerSecond {
		_, err := metaapi.Join(ctx, srv.Addr(), caFile, metaapi.JoinRequest{Token: "00", CSR: "x"})
		if errors.Is(err, metaapi.ErrBusy) {
			busy++
		}
	}
	if busy == 0 {
		t.Fatalf("%d joins in a row: none refused by the rate limit", 3*certreg.JoinsPerSecond)
	}
}

// TestRenewRevoke: a holder renews its own certificate (same name, role
// and hosts, a new serial, recorded); revoking its name lists every
// serial of that name in the deny-list; a revoked certificate cannot
// renew; revoking an unknown name is not found, an unrecorded serial is
// listed.
func TestRenewRevoke(t *testing.T) {
	pki := newTestPKI(t)
	srv := certServer(t, pki, &logBuffer{})
	ctx := context.Background()
	admin := clientAs(t, srv, pki.settings("alice", tlsconf.RoleAdmin))
	dnTLS := pki.settings("dn-1", tlsconf.RoleDatanode)
	dn := clientAs(t, srv, dnTLS)
	csr, _, err := tlsconf.NewKeyRequest()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := certapi.Renew(ctx, dn, csr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tlsconf.ParseCert([]byte(resp.Cert))
	if err != nil {
		t.Fatal(err)
	}
	old := dnTLS.Leaf()
	if name, role, _ := tlsconf.IdentityOf(c); name != "dn-1" || role != tlsconf.RoleDatanode || tlsconf.SerialOf(c) == tlsconf.SerialOf(old) ||
		!slices.EqualFunc(c.IPAddresses, old.IPAddresses, net.IP.Equal) {
		t.Fatalf("renewed as %s:%s %v, serial %s (old %s)", role, name, c.IPAddresses, tlsconf.SerialOf(c), tlsconf.SerialOf(old))
	}
	if d := time.Until(c.NotAfter); d > time.Hour || d < 50*time.Minute {
		t.Fatalf("renewed certificate valid %v more, want about CertValidity (1h)", d)
	}
	if _, err := certapi.Revoke(ctx, admin, "nobody"); !errors.Is(err, metaapi.ErrNotFound) {
		t.Fatalf("revoking an unknown name: %v", err)
	}
	rv, err := certapi.Revoke(ctx, admin, "dn-1")
	if err != nil || len(rv.Serials) != 1 || rv.Serials[0] != tlsconf.SerialOf(c) {
		t.Fatalf("revoke dn-1: %+v, %v (the recorded renewal)", rv, err)
	}
	if _, err := certapi.Revoke(ctx, admin, tlsconf.SerialOf(old)); err != nil {
		t.Fatal(err)
	}
	d, err := certapi.Denied(ctx, dn)
	if err != nil || !slices.Contains(d.Serials, tlsconf.SerialOf(c)) || !slices.Contains(d.Serials, tlsconf.SerialOf(old)) || d.Version == 0 {
		t.Fatalf("deny-list %+v, %v", d, err)
	}
	if _, err := certapi.Renew(ctx, dn, csr); !errors.Is(err, metaapi.ErrForbidden) {
		t.Fatalf("renewal under a revoked certificate: %v, want 403", err)
	}
	if _, err := certapi.Revoke(ctx, dn, "alice"); !errors.Is(err, metaapi.ErrForbidden) {
		t.Fatalf("a datanode revoking: %v, want 403", err)
	}
}
