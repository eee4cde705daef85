package bulk

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// TestExportOnlyToTheNamedTarget: a source checking export tokens
// (Server.Tokens, as a datanode run by the meta service does) gives a
// CLOSED container to a datanode certificate only with an export token for
// that container minted for that certificate (the meta service's
// replicate_container names the target so). Refused: no token, a token
// naming another datanode (a datanode that is not the target, holding the
// target's token), a token for another container, a read token, a token
// of an unknown key and an expired one; the named target gets the
// container. Fails with the token check removed from authorizeExport: the
// refused fetches succeed.
func TestExportOnlyToTheNamedTarget(t *testing.T) {
	pki, err := tlsconf.EnsureLocal(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.Settings(tlsconf.RoleDatanode)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tlsconf.LoadCA(filepath.Join(pki.Dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	datanode := func(name string) *tlsconf.Settings {
		c, k, err := ca.Issue(tlsconf.IssueRequest{Name: name, Role: tlsconf.RoleDatanode, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		cp, kp, err := tlsconf.WritePair(certDir, name, c, k)
		if err != nil {
			t.Fatal(err)
		}
		s, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: pki.CA})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	target, other := datanode("dn-target"), datanode("dn-other")

	src := openEngine(t)
	fill(t, src, 7, false, 64<<10, 1000)
	key := blocktoken.Key{ID: 4, Secret: []byte(strings.Repeat("k", blocktoken.SecretBytes))}
	s := NewServer(src, 0, quiet)
	s.Tokens = blocktoken.NewVerifier(0, nil)
	s.Tokens.SetKeys([]blocktoken.Key{key})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := NewDemux(ln, srvTLS, s.Handle, 0)
	t.Cleanup(func() { stopDemux(t, d, s) })

	sign := func(k blocktoken.Key, tok blocktoken.Token) string {
		t.Helper()
		if tok.Ops == 0 {
			tok.Ops = blocktoken.OpExport
		}
		if tok.Container == 0 {
			tok.Container = 7
		}
		if tok.Expiry.IsZero() {
			tok.Expiry = time.Now().Add(time.Hour)
		}
		if tok.Principal == "" {
			tok.Principal = "dn-target"
		}
		tok.Blocks = blocktoken.ExportBlocks
		out, err := blocktoken.Sign(tok, k)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	fetch := func(sec *tlsconf.Settings, token string) error {
		dst := openEngine(t)
		var im *engine.Importer
		_, err := FetchWithToken(context.Background(), sec, d.Addr().String(), 7, token, func(h ContainerHeader) (Sink, error) {
			var err error
			im, err = dst.ImportContainer(7, h.MaxSizeBytes, h.BCSID)
			return im, err
		})
		if err == nil {
			err = im.Commit()
		}
		if err != nil {
			err = abortInto(err, im)
		}
		return err
	}
	valid := sign(key, blocktoken.Token{})
	for _, c := range []struct {
		name, reason string
		sec          *tlsconf.Settings
		token        string
	}{
		{"the target without a token", "block token required", target, ""},
		{"another datanode with the target's token", "another principal", other, valid},
		{"another datanode with a token for itself, another container", "does not cover", other, sign(key, blocktoken.Token{Container: 8, Principal: "dn-other"})},
		{"the target with a read token", "does not cover", target, sign(key, blocktoken.Token{Ops: blocktoken.OpRead})},
		{"the target with an unknown key's token", "unknown key", target, sign(blocktoken.Key{ID: 5, Secret: key.Secret}, blocktoken.Token{})},
		{"the target with an expired token", "expired", target, sign(key, blocktoken.Token{Expiry: time.Now().Add(-time.Second)})},
	} {
		if err := fetch(c.sec, c.token); err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want forbidden (%s)", c.name, err, c.reason)
		}
	}
	if err := fetch(target, valid); err != nil {
		t.Fatalf("the named target: %v", err)
	}
}
