package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestRestoreIntoNewGroupAndGrow: a backup of a running three-member group
// (taken while a writer goes on) is restored into a new group of one
// (--restore), which serves every key committed before the backup, holds
// the backup's index, and grows to three members (spindle admin meta add,
// each new member catching up from a snapshot) that all hold the keys.
// Without --restore the member refuses the store (an empty raft log
// under a store that applied 247 entries was the operator's dead end).
func TestRestoreIntoNewGroupAndGrow(t *testing.T) {
	old := newRGroup(t, 3)
	if _, err := old.cl.CreateBucket(bg, "bkt"); err != nil {
		t.Fatal(err)
	}
	keys := putInline(t, old.cl, "before-", 20)
	stop, writer := make(chan struct{}), make(chan error, 1)
	go func() { // writes go on while the backup is taken
		for i := 0; ; i++ {
			select {
			case <-stop:
				writer <- nil
				return
			default:
			}
			if _, err := old.cl.CommitKey(bg, "bkt", fmt.Sprintf("during-%04d", i), *inlineCommit(inlineValue(int64(i), 64))); err != nil {
				writer <- err
				return
			}
		}
	}()
	body, err := old.cl.Backup(bg)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := io.ReadAll(body)
	mustNo(t, errors.Join(err, body.Close()))
	close(stop)
	mustNo(t, <-writer)
	dir := filepath.Join(t.TempDir(), "restored")
	if _, _, err := UnpackBackup(bytes.NewReader(stream), dir); err != nil {
		t.Fatal(err)
	}

	probe, err := net.Listen("tcp", "127.0.0.1:0")
	mustNo(t, err)
	cfg := state.Config{Dir: dir, Logger: quiet, ID: 1, Peers: map[uint64]string{1: probe.Addr().String()}, TickInterval: -1,
		DisableSafeMode: true, RaftTickInterval: 20 * time.Millisecond, Listener: probe}
	if srv, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "--restore") {
		if srv != nil {
			mustNo(t, srv.Close())
		}
		t.Fatalf("a restored store without --restore: %v, want a refusal naming --restore", err)
	}
	_ = probe.Close() // Start failed before serving on it (may have closed it already)

	g := &rgroup{t: t, peers: map[uint64]string{}, srvs: make([]*Server, 1), dirs: []string{dir}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustNo(t, err)
	g.addrs = []string{ln.Addr().String()}
	g.peers[1] = ln.Addr().String()
	g.tweak = func(c *state.Config) { c.RestoreAsNewGroup = c.ID == 1 }
	g.start(0, ln)
	t.Cleanup(func() {
		for i := range g.srvs {
			g.stop(i)
		}
	})
	if g.cl, err = metaapi.NewClient(g.addrs[0], metaapi.ClientOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	g.leader()
	backupIndex := g.srvs[0].Service().MetaStatus().AppliedIndex
	for _, k := range keys {
		if _, err := g.cl.GetKey(bg, "bkt", k); err != nil {
			t.Fatalf("restored group: %s: %v", k, err)
		}
	}
	added := putInline(t, g.cl, "after-", 5)
	for range 2 {
		g.addMember(filepath.Join(t.TempDir(), fmt.Sprintf("meta%d", len(g.srvs)+1)))
	}
	st := g.srvs[g.leader()].Service().MetaStatus()
	if len(st.Members) != 3 {
		t.Fatalf("grown group has members %+v, want 3", st.Members)
	}
	if backupIndex < 2 {
		t.Fatalf("the restored member applied %d entries, want the backup's index", backupIndex)
	}
	for i := range g.srvs {
		waitFor(t, fmt.Sprintf("member %d applies what the leader has", i+1), func() bool {
			return g.srvs[i].Service().MetaStatus().AppliedIndex >= st.AppliedIndex
		})
	}
	// Every member, made the leader, serves every key.
	for i := range g.srvs {
		g.handOver(i)
		for _, k := range append(keys, added...) {
			if _, err := g.srvs[i].Service().GetKey("bkt", k); err != nil {
				t.Fatalf("member %d leading: %s: %v", i+1, k, err)
			}
		}
	}
}

// putInline commits n small keys PREFIX000.. inline in bucket bkt.
func putInline(t *testing.T, cl *metaapi.Client, prefix string, n int) []string {
	t.Helper()
	var keys []string
	for i := range n {
		k := fmt.Sprintf("%s%03d", prefix, i)
		if _, err := cl.CommitKey(bg, "bkt", k, *inlineCommit(inlineValue(int64(i), 100))); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		keys = append(keys, k)
	}
	return keys
}
