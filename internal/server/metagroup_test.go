package server

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// metaLeaderID asks every member of s's meta group which one serves as
// leader (0: none serves).
func metaLeaderID(ctx context.Context, t *testing.T, s *Server) int {
	t.Helper()
	for i, a := range strings.Split(s.MetaAddr(), ",") {
		mc, err := metaapi.NewClient(a, metaapi.ClientOptions{Attempts: 1, Timeout: time.Second, TLS: s.ClientTLS()})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := mc.MetaStatus(ctx); err == nil && st.Serving {
			return i + 1
		}
	}
	return 0
}

// TestServerWithMetaReplicas: spindle server --meta-replicas 3 runs three
// meta member processes; the datanodes and clients get every address; the
// leader's process killed with SIGKILL, puts and gets go on through the
// new leader; restarted, the member rejoins; the whole server restarted on
// its directory has every key.
func TestServerWithMetaReplicas(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cfg := func() Config {
		c := testConfig(dir)
		c.MetaReplicas = 3
		c.MetaArgs = []string{"--heartbeat-interval=100ms"}
		return c
	}
	s, err := Start(ctx, cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { testutil.CloseT(t, s) }() // s is the last server started
	if n := len(strings.Split(s.MetaAddr(), ",")); n != 3 {
		t.Fatalf("meta address %q: want 3 members", s.MetaAddr())
	}
	if _, err := s.Meta().CreateBucket(ctx, "replicas"); err != nil {
		t.Fatal(err)
	}
	// Adding or removing a meta member is an admin's call: a client
	// certificate of the cluster's CA is refused (403), on the leader.
	ca, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.LocalDir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	cc, ck, err := ca.Issue(tlsconf.IssueRequest{Name: "mallory", Role: tlsconf.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	cp, kp, err := tlsconf.WritePair(t.TempDir(), "mallory", cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := tlsconf.NewSettings(tlsconf.Files{Cert: cp, Key: kp, CA: filepath.Join(dir, tlsconf.LocalDir, "ca", tlsconf.CACertFile)})
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := metaapi.NewClient(s.MetaAddr(), metaapi.ClientOptions{TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []metaapi.MemberChange{{Op: "add", ID: 9, Addr: "127.0.0.1:1"}, {Op: "remove", ID: 3}} {
		if _, err := mallory.ChangeMembers(ctx, ch); !errors.Is(err, metaapi.ErrForbidden) {
			t.Fatalf("meta members %s with a client certificate: %v, want 403", ch.Op, err)
		}
	}
	kc := keyClient(t, s)
	put := func(key string, seed int) {
		t.Helper()
		if _, err := kc.Put(ctx, "replicas", key, bytes.NewReader(value(seed, 3000)), keyclient.PutOptions{}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put("before", 1)
	var ld int
	waitUntil(t, "a meta leader", func() bool { ld = metaLeaderID(ctx, t, s); return ld != 0 })
	if err := s.MetaGroup().Kill(ld); err != nil {
		t.Fatal(err)
	}
	put("after-kill", 2)
	if !bytes.Equal(get(t, kc, "replicas", "before"), value(1, 3000)) {
		t.Fatal("key put before the kill reads back wrong")
	}
	if err := s.MetaGroup().Restart(ld); err != nil {
		t.Fatal(err)
	}
	put("after-restart", 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Start(ctx, cfg()); err != nil {
		t.Fatal(err)
	}
	kc = keyClient(t, s)
	for i, k := range []string{"before", "after-kill", "after-restart"} {
		if !bytes.Equal(get(t, kc, "replicas", k), value(i+1, 3000)) {
			t.Fatalf("key %s reads back wrong after the server restarted", k)
		}
	}
	one := testConfig(dir)
	if _, err := Start(ctx, one); err == nil || !strings.Contains(err.Error(), "meta replicas") {
		t.Fatalf("a directory of 3 meta replicas started with one: %v", err)
	}
}

// waitUntil polls cond (bounded: 30 s).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out (30 s) waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
