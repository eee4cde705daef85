package meta

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta/holdmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// TestDatanodesKeepALockedVersionsBlocks (issue 35 item 2, defence in
// depth): a meta service and three real datanodes; a COMPLIANCE-locked
// version's blocks get their holds on every datanode holding them
// (acknowledged, so durable there); then the meta-side check is bypassed
// — the test schedules the version's blocks for deletion in the GC
// directly, as a bug or a compromised meta service would — and the
// datanodes refuse every delivery: the deletions run out of attempts and
// are dropped (never acknowledged as done), the hold records stay, and
// the version reads back whole. Fails with the datanodes' check removed
// (engine DeleteGuard not called): the deletions are acknowledged and the
// blocks gone.
func TestDatanodesKeepALockedVersionsBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three datanodes")
	}
	cfg := state.Config{Dir: filepath.Join(t.TempDir(), "meta"), Logger: quiet, PipelinesPerNode: 1,
		HeartbeatInterval: 50 * time.Millisecond, StaleAfter: 2 * time.Second, DeadAfter: 10 * time.Second,
		DeleteRedeliverAfter: 200 * time.Millisecond, MaxDeleteAttempts: 2, TickInterval: 50 * time.Millisecond}
	srv, mc := serve(t, cfg)
	svc := srv.Service()
	ctx := startDatanodes(t, mc, "127.0.0.1:0")
	kc, err := keyclient.New(mc, keyclient.Options{ChunkSize: 64 << 10, BlockSize: 256 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, kc)
	must[metaapi.Bucket](t)(mc.CreateBucket(ctx, "lkb"))
	if err := versionapi.PutLockConfig(ctx, mc, "lkb", versionapi.LockConfig{Enabled: true, Create: true}); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("locked!"), 600<<10/7)
	until := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	res, err := kc.Put(ctx, "lkb", "k", bytes.NewReader(value), keyclient.PutOptions{NoInline: true,
		Commit: func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
			ck.Object = &metaapi.ObjectMeta{ETag: "e", Headers: map[string]string{versionapi.ModeHeader: versionapi.Compliance, versionapi.UntilHeader: until}}
			return mc.CommitKey(ctx, "lkb", "k", ck)
		}})
	if err != nil {
		t.Fatal(err)
	}
	blocks := res.Key.Blocks
	if len(blocks) < 2 {
		t.Fatalf("%d blocks, want several", len(blocks))
	}
	var nodes []uint64
	var metricsURLs []string
	for _, n := range must[[]metaapi.NodeInfo](t)(mc.Nodes(ctx)) {
		nodes, metricsURLs = append(nodes, n.NodeID), append(metricsURLs, n.MetricsURL)
	}
	// refusals reads each datanode's spindle_datanode_locked_deletes_refused_total.
	refusals := func() []int {
		var out []int
		for _, u := range metricsURLs {
			resp, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			mustClose(t, resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			n := -1
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, "spindle_datanode_locked_deletes_refused_total "); ok {
					n = must[int](t)(strconv.Atoi(v))
				}
			}
			out = append(out, n)
		}
		return out
	}
	waitFor(t, "the holds acknowledged by the 3 datanodes", func() bool {
		svc.Mu.RLock()
		defer svc.Mu.RUnlock()
		for _, id := range nodes {
			if svc.BlockGC.Holds.Acked(id) < len(blocks) {
				return false
			}
		}
		return true
	})
	// The meta-side check bypassed: the GC told to delete the blocks.
	if _, err := state.MutateControl(svc.State, func() (struct{}, *pebble.Batch, error) {
		b := svc.Store.NewBatch()
		for _, kb := range blocks {
			svc.ScheduleDelete(b, state.BlockRef{Container: kb.Container, Local: kb.Local}, state.ReasonDeleted, svc.Cfg.Now())
		}
		return struct{}{}, b, nil
	}); err != nil {
		t.Fatal(err)
	}
	acked := func() float64 { return testutil.ToFloat64(svc.Metrics.DeletesAcked) }
	dropped := func() float64 { return testutil.ToFloat64(svc.Metrics.DeletesDropped) }
	waitFor(t, "every forced deletion settled (dropped or acknowledged)", func() bool {
		return int(acked()+dropped()) >= len(blocks)
	})
	if acked() != 0 || int(dropped()) != len(blocks) {
		t.Fatalf("forced deletions of a locked version's %d blocks: %v acknowledged (deleted), %v dropped; want all dropped", len(blocks), acked(), dropped())
	}
	for _, kb := range blocks {
		if _, closer, err := svc.Store.Get(holdmeta.Key(kb.Container, kb.Local)); err != nil {
			t.Fatalf("hold record of block %v: %v", kb.BlockRef, err)
		} else {
			mustClose(t, closer)
		}
	}
	var got bytes.Buffer
	if _, err := kc.Get(ctx, "lkb", "k", &got, keyclient.GetOptions{}); err != nil || !bytes.Equal(got.Bytes(), value) {
		t.Fatalf("the locked version after the forced deletions: %d bytes, equal %v, %v", got.Len(), bytes.Equal(got.Bytes(), value), err)
	}
	// Every replica refused (the leader's and the followers' applies).
	before := refusals()
	for i, n := range before {
		if n <= 0 {
			t.Fatalf("datanode %d refused %d deletions, want some (refusals %v)", nodes[i], n, before)
		}
	}
	// A GOVERNANCE version deleted with the bypass: the datanodes get the
	// release before the deletion, which they carry out.
	put := func(key, mode string) metaapi.KeyInfo {
		res, err := kc.Put(ctx, "lkb", key, bytes.NewReader(value), keyclient.PutOptions{NoInline: true,
			Commit: func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
				ck.Object = &metaapi.ObjectMeta{ETag: "e", Headers: map[string]string{versionapi.ModeHeader: mode, versionapi.UntilHeader: until}}
				return mc.CommitKey(ctx, "lkb", key, ck)
			}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Key
	}
	g := put("g", versionapi.Governance)
	waitFor(t, "the GOVERNANCE version's holds acknowledged", func() bool {
		svc.Mu.RLock()
		defer svc.Mu.RUnlock()
		for _, id := range nodes {
			if svc.BlockGC.Holds.Acked(id) < len(blocks)+len(g.Blocks) {
				return false
			}
		}
		return true
	})
	if _, err := versionapi.Delete(ctx, mc, versionapi.Ref{Bucket: "lkb", Key: "g", VersionID: g.VersionID, Bypass: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bypassed version's deletions settled", func() bool {
		return int(acked()+dropped()) >= len(blocks)+len(g.Blocks)
	})
	if int(acked()) != len(g.Blocks) || int(dropped()) != len(blocks) {
		t.Fatalf("deletions of a GOVERNANCE version deleted with the bypass: %v acknowledged, %v dropped in all; want %d acknowledged", acked(), dropped(), len(g.Blocks))
	}
	// No replica applied the deletion before its release (it would have
	// refused it and kept the block for good).
	if after := refusals(); !slices.Equal(after, before) {
		t.Fatalf("deletions refused by the datanodes %v before the bypassed deletion, %v after", before, after)
	}
}
