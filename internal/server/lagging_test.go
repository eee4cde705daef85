package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestFollowerBackAfterTheLogMovedOn: a datanode is killed -9 during
// writes and comes back after its pipelines' leaders wrote more than
// --max-retain-entries past it (the 10 minutes, scaled down with
// small retain settings; it is not down long enough to be DEAD). It cannot
// be caught up from the log: its leader reports it behind, the meta
// service closes the pipeline, the member closes its short replicas, and
// they are replaced by copies — no operator action. Every acknowledged key
// reads back, and no CLOSED container is left under-replicated.
func TestFollowerBackAfterTheLogMovedOn(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, func(c *Config) {
		c.Datanodes = 4
		c.Meta = meta.Config{HeartbeatInterval: 100 * time.Millisecond, StaleAfter: 10 * time.Second, DeadAfter: 5 * time.Minute,
			CopyRetryAfter: 200 * time.Millisecond, DisableSafeMode: true,
			// A block abandoned by a put that failed over (its leader was killed)
			// pins its pipeline's log until the meta service deletes it.
			AllocationGrace: 3 * time.Second}
		c.DatanodeArgs = append(c.DatanodeArgs, "--retain-entries", "10", "--max-retain-entries", "50")
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kc.CreateBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int{}
	put := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			key := fmt.Sprintf("k%04d", i)
			if _, err := kc.Put(ctx, "data", key, bytes.NewReader(value(i, 100<<10)), keyclient.PutOptions{}); err != nil {
				t.Logf("put %s: %v", key, err)
				continue
			}
			acked[key] = i
		}
	}
	put(0, 20)
	cl := s.Cluster()
	if err := cl.Kill(2); err != nil {
		t.Fatal(err)
	}
	put(20, 420) // ≥ 2 entries per key and pipeline: far past 50 retained entries
	if err := cl.Restart(ctx, 2); err != nil {
		t.Fatal(err)
	}
	put(420, 440)
	// Its leader reports it behind (it is not DEAD: the meta service
	// learns it from the leader's report).
	waitFor(t, ctx, "a leader reporting member 2 behind its compacted log", func() (bool, error) {
		hc := &http.Client{Transport: s.ClientTLS().HTTPTransport(&http.Transport{})}
		resp, err := hc.Get(s.ClientTLS().Scheme() + "://" + s.MetaAddr() + "/metrics")
		if err != nil {
			return false, err
		}
		body, err := io.ReadAll(resp.Body)
		if cerr := resp.Body.Close(); err == nil {
			err = cerr
		}
		return regexp.MustCompile(`(?m)^spindle_meta_members_behind_total [1-9]`).Match(body), err
	})
	waitFor(t, ctx, "the lagging member's pipelines closed and its replicas replaced", func() (bool, error) {
		ps, err := s.Meta().Pipelines(ctx)
		if err != nil {
			return false, err
		}
		st, err := s.Meta().Replication(ctx)
		if err != nil {
			return false, err
		}
		cs, err := s.Meta().Containers(ctx)
		if err != nil {
			return false, err
		}
		for _, p := range ps {
			if p.State == metaapi.PipelineOpen {
				for _, m := range p.Members {
					if m.NodeID == 2 && !p.Allocatable {
						return false, nil
					}
				}
			}
		}
		for _, c := range cs {
			if c.State != metaapi.ContainerClosed && c.State != metaapi.ContainerOpen {
				return false, nil // CLOSING: not settled yet
			}
		}
		return st.UnderReplicated == 0 && len(st.Inflight) == 0, nil
	})
	for key, i := range acked {
		if got := get(t, kc, "data", key); !bytes.Equal(got, value(i, 100<<10)) {
			t.Fatalf("key %s reads back wrong", key)
		}
	}
	t.Logf("%d keys acknowledged and read back", len(acked))
}
