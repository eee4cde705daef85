package meta

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestBlockTokenKeysRotate: the first heartbeat makes a signing key; one
// BlockKeyRotation later a heartbeat makes a second and hands out both, so
// a token minted just before the rotation still verifies at a datanode with the
// new keys; at the next rotation the oldest key is dropped (its tokens,
// expired by then, are refused). The keys are stored: a restarted service
// hands out the same ones. A lifetime longer than the rotation is refused.
// Fails if rotation kept only the newest key: the old token is refused
// after the first rotation.
func TestBlockTokenKeysRotate(t *testing.T) {
	dir, clk := t.TempDir(), newClock()
	s := open(t, testConfig(dir, clk))
	hb := &metaapi.Heartbeat{UUID: "dn-1", Addr: "127.0.0.1:1"}
	keys := func() []blocktoken.Key {
		t.Helper()
		resp, err := s.Heartbeat(hb)
		if err != nil {
			t.Fatal(err)
		}
		hb.NodeID = resp.NodeID
		return resp.BlockTokenKeys
	}
	mint := func() []byte {
		t.Helper()
		tok, err := s.tokens.Mint(httptest.NewRequest("GET", "/", nil), blocktoken.OpRead, 3, []uint64{1})
		if err != nil {
			t.Fatal(err)
		}
		return []byte(tok)
	}
	v := blocktoken.NewVerifier(0, clk.Now)
	check := func(tok []byte) error { return v.Check(tok, 3, 1, blocktoken.OpRead, "") }

	k1 := keys()
	if len(k1) != 1 || len(k1[0].Secret) != blocktoken.SecretBytes {
		t.Fatalf("first heartbeat's keys %+v, want one", k1)
	}
	if again := keys(); len(again) != 1 || again[0].ID != k1[0].ID {
		t.Fatalf("a second heartbeat before the rotation: keys %+v, want the same one", again)
	}
	clk.Advance(s.Cfg.BlockKeyRotation - time.Minute)
	old := mint() // a minute before the rotation: valid for most of an hour after it
	clk.Advance(time.Minute)
	k2 := keys()
	if len(k2) != 2 || k2[0].ID != k1[0].ID || k2[1].ID == k1[0].ID {
		t.Fatalf("after one rotation: keys %+v, want the old and a new one", k2)
	}
	v.SetKeys(k2)
	if err := check(old); err != nil {
		t.Fatalf("a token of the previous key after the rotation: %v", err)
	}
	fresh := mint()
	if err := check(fresh); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	clk.Advance(s.Cfg.BlockKeyRotation)
	k3 := keys()
	if len(k3) != 2 || k3[0].ID != k2[1].ID {
		t.Fatalf("after two rotations: keys %+v, want the second and a third", k3)
	}
	v.SetKeys(k3)
	if err := check(old); !errors.Is(err, blocktoken.ErrUnknownKey) {
		t.Errorf("a token of the dropped key: %v", err)
	}

	mustClose(t, s)
	s = open(t, testConfig(dir, clk))
	if got := keys(); len(got) != 2 || got[0].ID != k3[0].ID || got[1].ID != k3[1].ID || string(got[1].Secret) != string(k3[1].Secret) {
		t.Errorf("after a restart: keys %+v, want %+v", got, k3)
	}

	cfg := testConfig(t.TempDir(), clk)
	cfg.BlockTokenLifetime, cfg.BlockKeyRotation = 2*s.Cfg.BlockKeyRotation, s.Cfg.BlockKeyRotation
	if _, err := Open(cfg); err == nil {
		t.Error("a token lifetime longer than the key rotation was accepted")
	}
}
