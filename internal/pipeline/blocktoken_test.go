package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

// TestBlockTokensOnTheDataPath: three datanodes over mutual TLS checking
// block tokens (Config.BlockTokens, keys k1 and k2 as a heartbeat hands
// them). A client certificate writes, commits and reads a block only with
// a token covering it: without one it is answered FORBIDDEN "block token
// required"; with a token for another block, another container, the
// other operation, another principal, an expired one or one signed by an
// unknown key, FORBIDDEN too, and nothing is written. Tokens of both keys
// work (rotation keeps the previous key valid); once the keys move on to
// k2 and k3, a k1 token is refused. A datanode certificate needs no token
// (peers repairing and copying). Fails with the check removed from
// handle: the refused requests succeed.
func TestBlockTokensOnTheDataPath(t *testing.T) {
	certs := newTestCerts(t)
	k1 := blocktoken.Key{ID: 1, Secret: []byte(strings.Repeat("a", 32))}
	k2 := blocktoken.Key{ID: 2, Secret: []byte(strings.Repeat("b", 32))}
	k3 := blocktoken.Key{ID: 3, Secret: []byte(strings.Repeat("c", 32))}
	var verifiers []*blocktoken.Verifier
	nodes, _ := startClusterWith(t, func(tn *testNode) {
		tn.tls = certs.settings(nameOf(tn.id), tlsconf.RoleDatanode)
		tn.tokens = blocktoken.NewVerifier(0, nil)
		tn.tokens.SetKeys([]blocktoken.Key{k1, k2})
		verifiers = append(verifiers, tn.tokens)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := waitLeader(t, nodes)
	cl, err := transport.DialClient(ctx, leader.addr, transport.ClientConfig{Conn: transport.ConnConfig{TLS: certs.settings("carol", tlsconf.RoleClient)}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, cl)
	sign := func(k blocktoken.Key, tok blocktoken.Token) []byte {
		t.Helper()
		if tok.Expiry.IsZero() {
			tok.Expiry = time.Now().Add(time.Hour)
		}
		if tok.Principal == "" {
			tok.Principal = "carol"
		}
		s, err := blocktoken.Sign(tok, k)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(s)
	}
	rw := blocktoken.OpRead | blocktoken.OpWrite
	valid := sign(k2, blocktoken.Token{Ops: rw, Container: 5, Blocks: []blocktoken.Range{{First: 1, Count: 1}}})
	data := chunkData(1, 0, 100)
	sums := engine.ComputeChecksums(nil, data, bpc)
	write := func(token []byte) error {
		_, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: 1, Length: 100, BytesPerChecksum: bpc, Checksums: sums, Token: token}, data)
		return err
	}
	read := func(token []byte) error {
		res, err := cl.Call(ctx, &transport.ReadChunk{PipelineID: 1, ContainerID: 5, LocalID: 1, Length: 100, Token: token})
		if err == nil {
			if string(res.Payload) != string(data) {
				err = errors.New("wrong bytes")
			}
			res.Release()
		}
		return err
	}
	forbidden := func(what string, err error, reason string) {
		t.Helper()
		var se *transport.StatusError
		if !errors.As(err, &se) || se.Status != transport.StatusForbidden || !strings.Contains(se.Message, reason) {
			t.Errorf("%s: %v, want FORBIDDEN (%s)", what, err, reason)
		}
	}
	bad := []struct {
		name, reason string
		token        []byte
	}{
		{"no token", "block token required", nil},
		{"another block's token", "does not cover", sign(k1, blocktoken.Token{Ops: rw, Container: 5, Blocks: []blocktoken.Range{{First: 2, Count: 5}}})},
		{"another container's token", "does not cover", sign(k1, blocktoken.Token{Ops: rw, Container: 6, Blocks: []blocktoken.Range{{First: 1, Count: 1}}})},
		{"a read token", "does not cover", sign(k1, blocktoken.Token{Ops: blocktoken.OpRead, Container: 5, Blocks: []blocktoken.Range{{First: 1, Count: 1}}})},
		{"another principal's token", "another principal", sign(k1, blocktoken.Token{Ops: rw, Container: 5, Blocks: []blocktoken.Range{{First: 1, Count: 1}}, Principal: "mallory"})},
		{"an expired token", "expired", sign(k1, blocktoken.Token{Ops: rw, Container: 5, Blocks: []blocktoken.Range{{First: 1, Count: 1}}, Expiry: time.Now().Add(-time.Second)})},
		{"an unknown key's token", "unknown key", sign(k3, blocktoken.Token{Ops: rw, Container: 5, Blocks: []blocktoken.Range{{First: 1, Count: 1}}})},
		{"a forged token", "signature", sign(blocktoken.Key{ID: 2, Secret: []byte(strings.Repeat("x", 32))}, blocktoken.Token{Ops: rw, Container: 5, Blocks: []blocktoken.Range{{First: 1, Count: 1}}})},
	}
	for _, b := range bad {
		forbidden("write with "+b.name, write(b.token), b.reason)
	}
	if _, err := leader.eng.GetBlock(engine.BlockID{Container: 5, Local: 1}); err == nil {
		t.Fatal("a refused write was stored")
	}
	if err := write(valid); err != nil {
		t.Fatalf("write with a valid token: %v", err)
	}
	put := func(token []byte) error {
		_, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: 100, BytesPerChecksum: bpc,
			Chunks: []transport.ChunkInfo{{Length: 100, Checksums: sums}}}, Token: token})
		return err
	}
	forbidden("put block without a token", put(nil), "block token required")
	if err := put(valid); err != nil {
		t.Fatalf("put block with a valid token: %v", err)
	}
	for _, b := range bad {
		if b.name != "a read token" {
			forbidden("read with "+b.name, read(b.token), b.reason)
		}
	}
	_, err = cl.Call(ctx, &transport.GetBlock{PipelineID: 1, ContainerID: 5, LocalID: 1})
	forbidden("get block without a token", err, "block token required")
	readOnly := sign(k1, blocktoken.Token{Ops: blocktoken.OpRead, Container: 5, Blocks: []blocktoken.Range{{First: 1, Count: 1}}})
	for name, tok := range map[string][]byte{"a k2 read-write token": valid, "a k1 read token": readOnly} {
		if err := read(tok); err != nil {
			t.Errorf("read with %s: %v", name, err)
		}
	}
	if _, err := cl.Call(ctx, &transport.GetBlock{PipelineID: 1, ContainerID: 5, LocalID: 1, Token: readOnly}); err != nil {
		t.Errorf("get block with a read token: %v", err)
	}

	// Rotation: k2 current, k3 new; k1 is dropped, its tokens with it,
	// cached ones included.
	for _, v := range verifiers {
		v.SetKeys([]blocktoken.Key{k2, k3})
	}
	forbidden("read with a k1 token after k1 was dropped", read(readOnly), "unknown key")
	if err := read(valid); err != nil {
		t.Errorf("read with a k2 token after the rotation: %v", err)
	}

	// A datanode certificate reads without a token (its identity).
	dn, err := transport.DialClient(ctx, leader.addr, transport.ClientConfig{Conn: transport.ConnConfig{TLS: certs.settings("dn-9", tlsconf.RoleDatanode)}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, dn)
	res, err := dn.Call(ctx, &transport.ReadChunk{PipelineID: 1, ContainerID: 5, LocalID: 1, Length: 100})
	if err != nil {
		t.Fatalf("a datanode's read without a token: %v", err)
	}
	res.Release()
}
