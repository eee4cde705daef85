package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestWritesThroughADeadDatanode (issue 31 item 4): three datanodes, one
// killed with kill -9. Puts keep succeeding past DeadAfter, on the
// pipelines of the two survivors (kept OPEN: no replacement exists), the
// containers reported under-replicated meanwhile; once the datanode is
// restarted, every acknowledged key's containers have three replicas at
// the same BCSID within a bounded wait, and every key reads back. Logs
// the longest stretch without a put. Without the meta change the puts
// fail from DeadAfter on ("2 healthy datanodes, 3 needed").
func TestWritesThroughADeadDatanode(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process: kill -9 and restart of a datanode")
	}
	const deadAfter = 3 * time.Second
	s := startServer(t, t.TempDir(), func(c *Config) {
		c.Meta.StaleAfter = 1 * time.Second
		c.Meta.DeadAfter = deadAfter
	})
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the server: %v", err)
		}
	}()
	kc := keyClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	if _, err := kc.CreateBucket(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	const size = keyclient.DefaultInlineMaxBytes + 4<<10 // in a block, not inline

	var (
		mu       sync.Mutex
		acked    []int // seeds of the keys whose put succeeded
		last     = time.Now()
		longest  time.Duration
		failures []string
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := kc.Put(ctx, "data", fmt.Sprintf("k%05d", i), bytes.NewReader(value(i, size)), keyclient.PutOptions{})
			now := time.Now()
			mu.Lock()
			if err == nil {
				acked = append(acked, i)
				longest = max(longest, now.Sub(last))
				last = now
			} else if len(failures) < 20 {
				failures = append(failures, fmt.Sprintf("%s: %v", now.Format("15:04:05.000"), err))
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitMore := func(n int, within time.Duration, what string) {
		t.Helper()
		want, deadline := ackedCount()+n, time.Now().Add(within)
		for ackedCount() < want {
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s: %d puts acknowledged in %s, want %d more; failures: %v", what, len(acked), within, n, failures)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitMore(10, 30*time.Second, "before the kill")
	const victim = 3
	if err := s.Cluster().Kill(victim); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Past DeadAfter (and a few ticks): the pipelines would be closed now.
	time.Sleep(deadAfter + 2*time.Second)
	waitMore(20, 20*time.Second, "with the datanode DEAD")
	st, err := s.Meta().Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.UnderReplicatedOpen == 0 || st.UnderReplicated == 0 {
		t.Fatalf("with a datanode DEAD: under-replicated %d (open %d), want some", st.UnderReplicated, st.UnderReplicatedOpen)
	}
	t.Logf("%s after the kill: %d under-replicated containers (%d OPEN)", time.Since(killed).Round(time.Millisecond), st.UnderReplicated, st.UnderReplicatedOpen)
	if err := s.Cluster().Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitMore(10, 20*time.Second, "after the restart")
	close(stop)
	<-done
	mu.Lock()
	keys, gap := slices.Clone(acked), longest
	mu.Unlock()
	t.Logf("%d puts acknowledged; longest stretch without a put %s; failures: %v", len(keys), gap.Round(time.Millisecond), failures)

	// Every acknowledged key's containers: three replicas, at one BCSID.
	want := map[uint64]bool{}
	for _, i := range keys {
		ki, err := s.Meta().GetKey(ctx, "data", fmt.Sprintf("k%05d", i))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range ki.Blocks {
			want[b.Container] = true
		}
	}
	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		cs, err := s.Meta().Containers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for _, c := range cs {
			if !want[c.ID] {
				continue
			}
			at := 0
			for _, r := range c.ReplicaDetails {
				if r.BCSID == c.BCSID && r.State != metaapi.ContainerUnhealthy && !r.Behind {
					at++
				}
			}
			if at < 3 || c.UnderReplicated {
				missing = append(missing, fmt.Sprintf("%d %s bcsid %d %+v", c.ID, c.State, c.BCSID, c.ReplicaDetails))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the restart, containers without 3 replicas at their BCSID: %v", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("every acknowledged key's %d containers have 3 replicas %s after the restart", len(want), time.Since(restarted).Round(time.Millisecond))
	for _, i := range keys {
		if got := get(t, kc, "data", fmt.Sprintf("k%05d", i)); !bytes.Equal(got, value(i, size)) {
			t.Fatalf("key k%05d reads back wrong", i)
		}
	}
	if gap > deadAfter {
		t.Errorf("longest stretch without a put %s, more than DeadAfter %s", gap, deadAfter)
	}
}
