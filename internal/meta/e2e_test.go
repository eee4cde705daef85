package meta

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"

	dto "github.com/prometheus/client_model/go"

	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// The meta client is what the key client talks to.
var _ keyclient.Meta = (*metaapi.Client)(nil)

// waitForSeconds bounds waitFor: a bound on a condition, not on speed.
// Membership steps (a member made a learner, caught up from a snapshot,
// promoted) took over 20 s beside two CPU hogs and other builds.
const waitForSeconds = 60

// waitFor polls cond every 10 ms until it holds, failing after
// waitForSeconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitForSeconds * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out (%d s) waiting for %s", waitForSeconds, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startDatanodes runs three datanodes in this process, registered with mc
// (metricsListen: their metrics' listen address, "" none), until the test
// ends (an error of theirs fails it), and waits until they form one
// pipeline with a leader. It returns the context they run in, cancelled at
// the test's cleanup.
func startDatanodes(t *testing.T, mc *metaapi.Client, metricsListen string) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("datanode: %v", err)
			}
		}
	})
	for i := range 3 {
		data, log := datanode.DefaultDirs(filepath.Join(t.TempDir(), "dn", string(rune('a'+i))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- datanode.Run(ctx, datanode.Config{ListenAddr: "127.0.0.1:0", DataDirs: []string{data}, LogDir: log,
				Meta: mc, HeartbeatInterval: 50 * time.Millisecond, Logger: quiet, MetricsListen: metricsListen})
		}()
	}
	waitFor(t, "a pipeline of 3 registered datanodes with a leader", func() bool {
		ps, err := mc.Pipelines(ctx)
		return err == nil && len(ps) == 1 && ps[0].Leader != 0
	})
	return ctx
}

// TestEndToEndWithDatanodes: a meta service and three real datanodes in
// this process: registration, a pipeline joined with a leader, keys put
// and read back through the key client, and the blocks of a replaced and
// a deleted key deleted on the datanodes and acknowledged.
func TestEndToEndWithDatanodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three datanodes")
	}
	cfg := state.Config{Dir: filepath.Join(t.TempDir(), "meta"), Logger: quiet, PipelinesPerNode: 1,
		HeartbeatInterval: 50 * time.Millisecond, StaleAfter: 2 * time.Second, DeadAfter: 10 * time.Second,
		DeleteRedeliverAfter: time.Second}
	srv, mc := serve(t, cfg)
	svc := srv.Service()
	ctx := startDatanodes(t, mc, "")

	kc, err := keyclient.New(mc, keyclient.Options{ChunkSize: 64 << 10, BlockSize: 256 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, kc)
	if _, err := kc.CreateBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	value := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	v1, v2 := value(600<<10), value(100<<10)
	for _, v := range [][]byte{v1, v2} { // v2 replaces v1
		if _, err := kc.Put(ctx, "bkt", "dir/key", bytes.NewReader(v), keyclient.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kc.Put(ctx, "bkt", "other", bytes.NewReader(v1), keyclient.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	ki, err := kc.Get(ctx, "bkt", "dir/key", &got, keyclient.GetOptions{})
	if err != nil || !bytes.Equal(got.Bytes(), v2) || ki.Size != uint64(len(v2)) {
		t.Fatalf("get: %d bytes (want %d), equal %v, %v", got.Len(), len(v2), bytes.Equal(got.Bytes(), v2), err)
	}
	if err := kc.Delete(ctx, "bkt", "other"); err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		svc.Mu.RLock()
		defer svc.Mu.RUnlock()
		return svc.NDeletes
	}
	// v1's 3 blocks and other's 3.
	if n := pending(); n == 0 {
		t.Fatal("no deletion scheduled for a replaced and a deleted key")
	}
	waitFor(t, "every scheduled deletion acknowledged by the datanodes", func() bool { return pending() == 0 })
	// Acknowledged, not given up.
	var m dto.Metric
	if err := svc.Metrics.DeletesDropped.Write(&m); err != nil || m.GetCounter().GetValue() != 0 {
		t.Fatalf("%v deletions dropped (%v)", m.GetCounter().GetValue(), err)
	}
	got.Reset()
	if _, err := kc.Get(ctx, "bkt", "dir/key", &got, keyclient.GetOptions{}); err != nil || !bytes.Equal(got.Bytes(), v2) {
		t.Fatalf("the live key after the deletions: %v", err)
	}
}
