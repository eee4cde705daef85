package meta

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// testPKI is a CA in a temporary directory and the pairs it issued.
type testPKI struct {
	t   *testing.T
	dir string
	ca  *tlsconf.CA
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsconf.CreateCA(filepath.Join(dir, "ca"), "test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, dir: dir, ca: ca}
}

// settings issues a pair named name with role r (valid for 127.0.0.1)
// and loads it.
func (p *testPKI) settings(name string, r tlsconf.Role) *tlsconf.Settings {
	p.t.Helper()
	c, k, err := p.ca.Issue(tlsconf.IssueRequest{Name: name, Role: r, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		p.t.Fatal(err)
	}
	cp, kp, err := tlsconf.WritePair(p.dir, name, c, k)
	if err != nil {
		p.t.Fatal(err)
	}
	s, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: filepath.Join(p.dir, "ca", tlsconf.CACertFile)})
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// cert issues a certificate and returns it parsed (for a
// tls.ConnectionState made by hand).
func (p *testPKI) cert(name string, r tlsconf.Role) *x509.Certificate {
	p.t.Helper()
	c, _, err := p.ca.Issue(tlsconf.IssueRequest{Name: name, Role: r})
	if err != nil {
		p.t.Fatal(err)
	}
	blk, _ := pem.Decode(c)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		p.t.Fatal(err)
	}
	return cert
}

// logBuffer is a slog handler's output, safe to read while written.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// has says some line holds every one of words.
func (l *logBuffer) has(words ...string) bool { return len(l.lines(words...)) > 0 }

// lines are the log lines that contain every one of words.
func (l *logBuffer) lines(words ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, w := range words {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// serveTLS starts a meta server with mutual TLS (the meta pair of pki)
// logging to the returned buffer, and a client per role.
func serveTLS(t *testing.T, pki *testPKI) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	srv, err := Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), TLS: pki.settings("meta-1", tlsconf.RoleMeta)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, srv) })
	return srv, logs
}

func clientAs(t *testing.T, srv *Server, s *tlsconf.Settings) *metaapi.Client {
	t.Helper()
	c, err := metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{TLS: s, Timeout: 5 * time.Second, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGuardRoles is the role middleware alone: each access class lets its
// roles through and answers every other role 403, over a connection state
// made by hand; a connection without TLS on a TLS service is refused too.
func TestGuardRoles(t *testing.T) {
	pki := newTestPKI(t)
	s := open(t, state.Config{Dir: t.TempDir(), TickInterval: -1, Logger: quiet, TLS: pki.settings("meta-1", tlsconf.RoleMeta)})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	allowed := map[string][]tlsconf.Role{
		"heartbeat":     {tlsconf.RoleDatanode},
		"commit_key":    {tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin},
		"delete_key":    {tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin}, // then the grants (package access)
		"delete_bucket": {tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin},
		"safemode_exit": {tlsconf.RoleAdmin},
		"node_op":       {tlsconf.RoleAdmin},
		"node_remove":   {tlsconf.RoleAdmin},
		"create_user":   {tlsconf.RoleS3, tlsconf.RoleAdmin},
		"delete_user":   {tlsconf.RoleS3, tlsconf.RoleAdmin},
		"meta_members":  {tlsconf.RoleAdmin},
		"backup":        {tlsconf.RoleAdmin},
		"meta_raft":     {tlsconf.RoleMeta},
		"meta_snapshot": {tlsconf.RoleMeta},
		"nodes":         tlsconf.Roles,
	}
	for route, roles := range allowed {
		h := s.guard(route, ok)
		for _, role := range tlsconf.Roles {
			cert := pki.cert("x-"+string(role), role)
			req := httptest.NewRequest(http.MethodPost, "/x", nil)
			req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			want := http.StatusForbidden
			for _, r := range roles {
				if r == role {
					want = http.StatusTeapot
				}
			}
			if w.Code != want {
				t.Errorf("route %s, role %s: status %d, want %d", route, role, w.Code, want)
			}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/x", nil))
		if w.Code != http.StatusForbidden {
			t.Errorf("route %s without TLS on a TLS service: status %d, want 403", route, w.Code)
		}
	}
	// Over plaintext (--insecure) nothing is authenticated: let through.
	plain := open(t, state.Config{Dir: t.TempDir(), TickInterval: -1, Logger: quiet})
	w := httptest.NewRecorder()
	plain.guard("safemode_exit", ok).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/x", nil))
	if w.Code != http.StatusTeapot {
		t.Errorf("plaintext service: status %d, want the handler's", w.Code)
	}
}

// TestAdminCallsNeedAdminCertificate: every destructive or administrative
// call of the meta API made with a client, datanode or gateway certificate
// (the gateway may delete keys and buckets and manage users, for the S3
// requests whose signatures it checked; nothing else of these) is
// refused with 403 (ErrForbidden) and logged with the caller; with the
// admin certificate the same calls are served and audited. Fails without
// guard: the calls succeed.
func TestAdminCallsNeedAdminCertificate(t *testing.T) {
	pki := newTestPKI(t)
	srv, logs := serveTLS(t, pki)
	ctx := context.Background()
	admin := clientAs(t, srv, pki.settings("alice", tlsconf.RoleAdmin))
	client := clientAs(t, srv, pki.settings("bob", tlsconf.RoleClient))
	dn := clientAs(t, srv, pki.settings("dn-1", tlsconf.RoleDatanode))
	gw := clientAs(t, srv, pki.settings("gw", tlsconf.RoleS3))

	// A bucket with a key, made by the admin: bob, a client, has no
	// grant on it (its deletions are refused by the grants, issue 32).
	must[metaapi.Bucket](t)(admin.CreateBucket(ctx, "bkt"))
	must[metaapi.KeyInfo](t)(admin.CommitKey(ctx, "bkt", "k", *inlineCommit([]byte("v"))))

	type call struct {
		name    string
		gateway bool // the gateway may make it
		do      func(c *metaapi.Client) error
	}
	calls := []call{
		{"delete_key", true, func(c *metaapi.Client) error { return c.DeleteKey(ctx, "bkt", "k") }},
		{"delete_bucket", true, func(c *metaapi.Client) error { return c.DeleteBucket(ctx, "bkt") }},
		{"safemode_exit", false, func(c *metaapi.Client) error { _, err := c.ExitSafeMode(ctx); return err }},
		{"node_op", false, func(c *metaapi.Client) error {
			_, err := c.NodeOp(ctx, 1, metaapi.OpDecommission, 0)
			return err
		}},
		{"node_remove", false, func(c *metaapi.Client) error {
			_, err := c.RemoveNode(ctx, 1)
			return err
		}},
		{"create_user", true, func(c *metaapi.Client) error {
			_, err := c.CreateUser(ctx, metaapi.CreateUser{Name: "carol"})
			return err
		}},
		{"list_users", true, func(c *metaapi.Client) error { _, err := c.Users(ctx); return err }},
		{"delete_user", true, func(c *metaapi.Client) error { return c.DeleteUser(ctx, "carol") }},
		{"backup", false, func(c *metaapi.Client) error {
			rc, err := c.Backup(ctx)
			if err == nil {
				mustClose(t, rc)
			}
			return err
		}},
	}
	callers := []struct {
		who string
		c   *metaapi.Client
		gw  bool
	}{{"client:bob", client, false}, {"datanode:dn-1", dn, false}, {"s3:gw", gw, true}}
	for _, cl := range callers {
		for _, c := range calls {
			if c.gateway && cl.gw {
				continue
			}
			err := c.do(cl.c)
			if !errors.Is(err, metaapi.ErrForbidden) {
				t.Errorf("%s by %s: %v, want 403 forbidden", c.name, cl.who, err)
			}
			byGrant := cl.who == "client:bob" && strings.HasPrefix(c.name, "delete_")
			if byGrant && len(logs.lines("audit", "action="+c.name, "who=cert:bob", "outcome=refused", "remote=127.0.0.1:")) == 0 {
				t.Errorf("%s by %s: no audit line of the refusal", c.name, cl.who)
			}
			if !byGrant && len(logs.lines("request refused", "route="+c.name, "caller="+cl.who, "remote=127.0.0.1:")) == 0 {
				t.Errorf("%s by %s: no log line of the refusal", c.name, cl.who)
			}
		}
	}
	// Nothing was deleted.
	must[metaapi.KeyInfo](t)(admin.GetKey(ctx, "bkt", "k"))
	// The admin certificate may: each call is served (an answer other
	// than 403) and audited.
	for _, c := range calls {
		if err := c.do(admin); errors.Is(err, metaapi.ErrForbidden) {
			t.Errorf("%s by the admin: %v", c.name, err)
		}
		if len(logs.lines("audit: allowed", "route="+c.name, "caller=admin:alice")) == 0 {
			t.Errorf("%s by the admin: no audit line", c.name)
		}
	}
	if _, err := admin.GetKey(ctx, "bkt", "k"); !errors.Is(err, metaapi.ErrNotFound) {
		t.Errorf("key after the admin's delete: %v, want not found", err)
	}
}

// TestHeartbeatBoundToCertificate: a datanode registers under its
// certificate; another datanode's certificate heartbeating with the
// stolen UUID (and node ID) is refused 403 and does not change the node's
// address; a client certificate cannot heartbeat at all; the node's
// members carry the certificate name its peers check. Fails without the
// binding: the stolen UUID rewrites the node's address.
func TestHeartbeatBoundToCertificate(t *testing.T) {
	pki := newTestPKI(t)
	srv, logs := serveTLS(t, pki)
	ctx := context.Background()
	dn1 := clientAs(t, srv, pki.settings("dn-1", tlsconf.RoleDatanode))
	dn2 := clientAs(t, srv, pki.settings("dn-2", tlsconf.RoleDatanode))
	cli := clientAs(t, srv, pki.settings("bob", tlsconf.RoleClient))
	const uuid = "0123456789abcdef0123456789abcdef"
	resp, err := dn1.Heartbeat(ctx, &metaapi.Heartbeat{UUID: uuid, Addr: "127.0.0.1:7001"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.NodeID
	for _, hb := range []metaapi.Heartbeat{{UUID: uuid, Addr: "127.0.0.1:6666"}, {UUID: uuid, NodeID: id, Addr: "127.0.0.1:6666"}} {
		if _, err := dn2.Heartbeat(ctx, &hb); !errors.Is(err, metaapi.ErrForbidden) {
			t.Errorf("heartbeat of node %d under another datanode certificate: %v, want 403", hb.NodeID, err)
		}
		if _, err := cli.Heartbeat(ctx, &hb); !errors.Is(err, metaapi.ErrForbidden) {
			t.Errorf("heartbeat under a client certificate: %v, want 403", err)
		}
	}
	if len(logs.lines("heartbeat refused", "caller=datanode:dn-2")) == 0 {
		t.Error("no log line of the refused heartbeat")
	}
	nodes := must[[]metaapi.NodeInfo](t)(dn1.Nodes(ctx))
	if len(nodes) != 1 || nodes[0].Addr != "127.0.0.1:7001" {
		t.Fatalf("nodes after the stolen UUID's heartbeats: %+v, want one at 127.0.0.1:7001", nodes)
	}
	// The owner's heartbeats go on.
	if _, err := dn1.Heartbeat(ctx, &metaapi.Heartbeat{UUID: uuid, NodeID: id, Addr: "127.0.0.1:7001"}); err != nil {
		t.Fatal(err)
	}
}

// TestJoinToken: an admin certificate gets a one-time token (a client
// certificate cannot); a datanode without a certificate, offering
// tlsconf.JoinALPN, joins with it and gets a datanode certificate of a
// name the meta service drew, with which it registers; the token does not
// work twice, nor an unknown or expired one (403 and a log line). A
// connection without a certificate may call nothing but the join route,
// and without the join ALPN it does not even complete its handshake.
// Fails without guard's check (the cert-less caller lists the nodes) or
// without the token being consumed (the second join succeeds).
func TestJoinToken(t *testing.T) {
	pki := newTestPKI(t)
	clk := newClock()
	logs := &logBuffer{}
	srv, err := Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), TLS: pki.settings("meta-1", tlsconf.RoleMeta), JoinCA: pki.ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, srv) })
	ctx := context.Background()
	admin := clientAs(t, srv, pki.settings("alice", tlsconf.RoleAdmin))
	client := clientAs(t, srv, pki.settings("bob", tlsconf.RoleClient))
	if _, err := certapi.CreateJoinToken(ctx, client, certapi.JoinTokenRequest{Hosts: []string{"127.0.0.1"}}); !errors.Is(err, metaapi.ErrForbidden) {
		t.Fatalf("join token for a client certificate: %v, want 403", err)
	}
	tok, err := certapi.CreateJoinToken(ctx, admin, certapi.JoinTokenRequest{Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(pki.dir, "ca", tlsconf.CACertFile)
	csr, keyPEM, err := tlsconf.NewKeyRequest()
	if err != nil {
		t.Fatal(err)
	}
	req := metaapi.JoinRequest{Token: tok.Token, CSR: string(csr), Hosts: []string{"127.0.0.1"}}
	resp, err := metaapi.Join(ctx, srv.Addr(), caFile, req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Name, "dn-") || !logs.has("joined: certificate issued", "name="+resp.Name) {
		t.Errorf("joined as %q; logs:\n%s", resp.Name, logs.String())
	}
	// The certificate works: the new datanode registers under it.
	cp, kp, err := tlsconf.WritePair(t.TempDir(), resp.Name, []byte(resp.Cert), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	dnTLS, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: caFile})
	if err != nil {
		t.Fatal(err)
	}
	dn := clientAs(t, srv, dnTLS)
	if _, err := dn.Heartbeat(ctx, &metaapi.Heartbeat{UUID: "00112233445566778899aabbccddeeff", Addr: "127.0.0.1:7001"}); err != nil {
		t.Fatalf("heartbeat under the joined certificate: %v", err)
	}
	// Used, unknown, expired: refused.
	if _, err := metaapi.Join(ctx, srv.Addr(), caFile, req); !errors.Is(err, metaapi.ErrForbidden) {
		t.Errorf("the token a second time: %v, want 403", err)
	}
	req.Token = strings.Repeat("0", 32)
	if _, err := metaapi.Join(ctx, srv.Addr(), caFile, req); !errors.Is(err, metaapi.ErrForbidden) {
		t.Errorf("an unknown token: %v, want 403", err)
	}
	old, err := certapi.CreateJoinToken(ctx, admin, certapi.JoinTokenRequest{TTLSeconds: 60, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	req.Token = old.Token
	if _, err := metaapi.Join(ctx, srv.Addr(), caFile, req); !errors.Is(err, metaapi.ErrForbidden) {
		t.Errorf("an expired token: %v, want 403", err)
	}
	if len(logs.lines("join refused")) != 3 {
		t.Errorf("%d join refusals logged, want 3", len(logs.lines("join refused")))
	}
	// Without a certificate: the join route only.
	tc, err := tlsconf.JoinClientConfig(caFile, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	for _, path := range []string{"/v1/nodes", "/v1/buckets"} {
		r, err := hc.Get("https://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		mustClose(t, r.Body)
		if r.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s without a certificate: %d, want 403", path, r.StatusCode)
		}
	}
	tc2 := tc.Clone()
	tc2.NextProtos = nil
	c, err := tls.Dial("tcp", srv.Addr(), tc2)
	if err == nil {
		// TLS 1.3: the server's refusal arrives with the first read.
		mustNo(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = c.Read(make([]byte, 1))
		mustClose(t, c)
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a connection without certificate nor join ALPN: %v, want the handshake refused", err)
	}
}

// TestAdminTokenWithoutTLS: a plaintext meta service with an admin token
// refuses the admin classes' calls without it (403 and a log line) and
// serves them with it (audited as the token's); data calls need none; a
// plaintext service without a token lets everything through. Fails
// without the token check: the deletion without it succeeds.
func TestAdminTokenWithoutTLS(t *testing.T) {
	const token = "s3cr3t-admin-token-0123456789"
	logs := &logBuffer{}
	srv, err := Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), AdminToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, srv) })
	ctx := context.Background()
	plain := must[*metaapi.Client](t)(metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Attempts: 1}))
	wrong := must[*metaapi.Client](t)(metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Attempts: 1, AdminToken: "not-the-token-0123456789"}))
	admin := must[*metaapi.Client](t)(metaapi.NewClient(srv.Addr(), metaapi.ClientOptions{Attempts: 1, AdminToken: token}))
	must[metaapi.Bucket](t)(plain.CreateBucket(ctx, "bkt"))
	for _, c := range []*metaapi.Client{plain, wrong} {
		if err := c.DeleteBucket(ctx, "bkt"); !errors.Is(err, metaapi.ErrForbidden) {
			t.Errorf("delete bucket without the admin token: %v, want 403", err)
		}
		if _, err := c.ExitSafeMode(ctx); !errors.Is(err, metaapi.ErrForbidden) {
			t.Errorf("safe-mode exit without the admin token: %v, want 403", err)
		}
	}
	if len(logs.lines("request refused", "route=delete_bucket", "no valid admin token")) != 2 {
		t.Errorf("refusals not logged:\n%s", logs.String())
	}
	if err := admin.DeleteBucket(ctx, "bkt"); err != nil {
		t.Fatalf("delete bucket with the admin token: %v", err)
	}
	if !logs.has("audit: allowed", "route=delete_bucket", "caller=admin:bearer-token") {
		t.Error("the token's deletion not audited")
	}
	// Without a token configured, plaintext is open (as --insecure says).
	open, err := Start(state.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TickInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, open) })
	oc := must[*metaapi.Client](t)(metaapi.NewClient(open.Addr(), metaapi.ClientOptions{Attempts: 1}))
	must[metaapi.Bucket](t)(oc.CreateBucket(ctx, "bkt"))
	if err := oc.DeleteBucket(ctx, "bkt"); err != nil {
		t.Errorf("delete bucket on a plaintext service without a token: %v", err)
	}
}
