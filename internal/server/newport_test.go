package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/keyclient"
)

// TestDatanodesRestartedOnNewPorts: two of four datanodes are killed and
// restarted on new ports while 8 writers run. Writes go on (puts succeed
// after the restarts, with no other restart), the restarted datanodes serve
// their pipelines again at their new addresses, and every acknowledged key
// reads back. Before, their peers kept the old addresses ("member N has two
// addresses" every second) and every pipeline with a restarted member
// wedged. The longest stretch without a successful put is logged (the
// budget, 10 s, is measured, not asserted).
func TestDatanodesRestartedOnNewPorts(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, func(c *Config) {
		c.Datanodes = 4
	})
	defer testutil.CloseT(t, s)
	kc := keyClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	if _, err := kc.CreateBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	const writers, maxPuts = 8, 4000
	var (
		mu       sync.Mutex
		acked    = map[string]int{}
		last     = time.Now()
		longest  time.Duration
		after    atomic.Int64 // puts acknowledged after the restarts
		restarts atomic.Bool
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		seq      atomic.Int64
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				i := int(seq.Add(1))
				if i > maxPuts {
					return
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := kc.Put(pctx, "data", key, bytes.NewReader(value(i, 8<<10)), keyclient.PutOptions{})
				pcancel()
				if err != nil {
					continue
				}
				now := time.Now()
				mu.Lock()
				acked[key] = i
				longest = max(longest, now.Sub(last))
				last = now
				mu.Unlock()
				if restarts.Load() {
					after.Add(1)
				}
			}
		}()
	}
	waitFor(t, ctx, "puts before the restarts", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 50, nil
	})
	cl := s.Cluster()
	old := map[int]string{}
	for _, id := range []int{1, 2} {
		old[id] = cl.Nodes()[id-1].Addr
		if err := cl.Kill(id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []int{1, 2} {
		if err := cl.RestartOnNewPort(ctx, id); err != nil {
			t.Fatal(err)
		}
		if cl.Nodes()[id-1].Addr == old[id] {
			t.Fatalf("member %d came back on its old address %s", id, old[id])
		}
	}
	restarts.Store(true)
	restarted := time.Now()
	waitFor(t, ctx, "puts after the restarts", func() (bool, error) { return after.Load() >= 200 || seq.Load() >= maxPuts, nil })
	// The restarted datanodes serve their pipelines at the new addresses.
	waitFor(t, ctx, "restarted datanodes in allocatable pipelines", func() (bool, error) {
		ps, err := s.Meta().Pipelines(ctx)
		if err != nil {
			return false, err
		}
		in := map[string]bool{}
		for _, p := range ps {
			if !p.Allocatable {
				continue
			}
			for _, m := range p.Members {
				in[m.Addr] = true
			}
		}
		ok := in[cl.Nodes()[0].Addr] && in[cl.Nodes()[1].Addr]
		if !ok && time.Since(restarted) > time.Minute {
			for _, p := range ps {
				t.Logf("pipeline %+v", p)
			}
			for _, n := range cl.Nodes() {
				t.Logf("node %d %s log:\n%s", n.ID, n.Addr, tailFile(n.LogPath, 3000))
			}
			return false, fmt.Errorf("not there a minute after the restarts")
		}
		return ok, nil
	})
	close(stop)
	wg.Wait()
	if after.Load() == 0 {
		t.Fatal("no put succeeded after the restarts")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d puts acknowledged (%d after the restarts, which ended %v after the kills); longest stretch without a put: %v",
		len(acked), after.Load(), time.Since(restarted).Round(time.Millisecond), longest.Round(time.Millisecond))
	for key, i := range acked {
		if got := get(t, kc, "data", key); !bytes.Equal(got, value(i, 8<<10)) {
			t.Fatalf("key %s reads back wrong", key)
		}
	}
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
