package server

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/testutil"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

// issueClient makes a client certificate of s's CA named name.
func issueClient(t *testing.T, s *Server, name string) *tlsconf.Settings {
	t.Helper()
	ca, err := tlsconf.LoadCA(filepath.Dir(s.pki.CA))
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := ca.Issue(tlsconf.IssueRequest{Name: name, Role: tlsconf.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cp, kp, err := tlsconf.WritePair(dir, name, c, k)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: s.pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// TestBlockTokensAtTheDatanodes: against a real spindle server (meta
// service and three datanode processes, mutual TLS), a client certificate
// that learned a key's block IDs reads them straight from a datanode only
// with the block token the meta service handed out with the key: without
// one it is answered FORBIDDEN "block token required"; with the token of
// another key's block, a token minted for another certificate, or one
// signed by a key the meta service never made, FORBIDDEN too; it cannot
// write into the block with its read token. Puts and gets through the key
// client (which passes the tokens) work. Fails with the datanodes' check
// removed (blocktoken.Verifier.Request answering nil): every refused read
// returns the bytes.
func TestBlockTokensAtTheDatanodes(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer testutil.CloseT(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	carolTLS := issueClient(t, s, "carol")
	carol, err := metaapi.NewClient(s.MetaAddr(), metaapi.ClientOptions{TLS: carolTLS})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := keyclient.New(carol, keyclient.Options{ChunkSize: testChunk, BlockSize: testBlock})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, kc)
	if _, err := kc.CreateBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	va, vb := value(1, 3*testChunk), value(2, 3*testChunk)
	for k, v := range map[string][]byte{"a": va, "b": vb} {
		if _, err := kc.Put(ctx, "data", k, bytes.NewReader(v), keyclient.PutOptions{}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		var got bytes.Buffer
		if _, err := kc.Get(ctx, "data", k, &got, keyclient.GetOptions{}); err != nil || !bytes.Equal(got.Bytes(), v) {
			t.Fatalf("get %s: %d bytes, %v", k, got.Len(), err)
		}
	}
	ka, err := carol.GetKey(ctx, "data", "a")
	if err != nil {
		t.Fatal(err)
	}
	kb, err := carol.GetKey(ctx, "data", "b")
	if err != nil {
		t.Fatal(err)
	}
	asAdmin, err := s.Meta().GetKey(ctx, "data", "a")
	if err != nil {
		t.Fatal(err)
	}
	blk := ka.Blocks[0]
	if blk.Token == "" || len(blk.Members) == 0 {
		t.Fatalf("key a's first block %+v: no token or no members", blk)
	}
	var addrs []string
	for _, m := range blk.Members {
		addrs = append(addrs, m.Addr)
	}
	pc, err := client.New(addrs, blk.Pipeline, client.Options{Conn: transport.ConnConfig{TLS: carolTLS}, MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, pc)
	n := min(blk.Length, testChunk)
	read := func(token string) error {
		ch, err := pc.ReadChunk(ctx, addrs[0], client.BlockID{Container: blk.Container, Local: blk.Local, Token: token}, 0, n)
		if err == nil && !bytes.Equal(ch.Data, va[:n]) {
			err = errors.New("wrong bytes")
		}
		return err
	}
	forged, err := blocktoken.Sign(blocktoken.Token{Ops: blocktoken.OpRead | blocktoken.OpWrite, Expiry: time.Now().Add(time.Hour), Container: blk.Container,
		Blocks: []blocktoken.Range{{First: blk.Local, Count: 1}}, Principal: "carol"}, blocktoken.Key{ID: 1 << 30, Secret: make([]byte, blocktoken.SecretBytes)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, token, reason string }{
		{"no token", "", "block token required"},
		{"key b's token", kb.Blocks[0].Token, "does not cover"},
		{"the admin's token for the same block", asAdmin.Blocks[0].Token, "another principal"},
		{"a token signed by an unknown key", forged, "unknown key"},
	} {
		var se *transport.StatusError
		if err := read(c.token); !errors.As(err, &se) || se.Status != transport.StatusForbidden || !strings.Contains(se.Message, c.reason) {
			t.Errorf("read with %s: %v, want FORBIDDEN (%s)", c.name, err, c.reason)
		}
	}
	if err := read(blk.Token); err != nil {
		t.Fatalf("read with the key's token: %v", err)
	}
	var se *transport.StatusError
	_, err = pc.WriteChunk(ctx, client.BlockID{Container: blk.Container, Local: blk.Local, Token: blk.Token}, blk.Length, []byte("more"))
	if !errors.As(err, &se) || se.Status != transport.StatusForbidden {
		t.Errorf("a write with a read token: %v, want FORBIDDEN", err)
	}
}
