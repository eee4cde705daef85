package meta

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestBacklogHoldsWritesBackNotTheLeader: while the leader's store does
// not apply (its apply worker held), the proposals it made pile up; once
// they hold MaxProposalBacklogBytes a client write waits, then is refused
// BUSY, and the leader goes on serving in the same term; its own writes
// (Tick, heartbeats) still go through; once the store applies again, writes are taken again.
// (Without the bound every write is taken and the backlog grows until
// raft drops a proposal at its own bound and the leader stops serving.)
func TestBacklogHoldsWritesBackNotTheLeader(t *testing.T) {
	const bound = 64 << 10
	g := newRGroupWith(t, 3, func(c *state.Config) {
		c.MaxProposalBacklogBytes = bound
		c.ProposalBacklogWait = 300 * time.Millisecond
		// An election timeout of seconds, not the group's 200 ms: what is
		// tested is that the backlog does not depose the leader; a
		// heartbeat late by 200 ms on a loaded machine would (make test
		// beside two busy processes lost the term that way).
		c.RaftTickInterval = 250 * time.Millisecond
	})
	if _, err := g.cl.CreateBucket(bg, "bkt"); err != nil {
		t.Fatal(err)
	}
	li := g.leader()
	ld := g.srvs[li].Service()
	before := ld.MetaStatus()
	ld.rep.StoreMu.Lock() // the apply worker waits for it
	held := true
	defer func() {
		if held {
			ld.rep.StoreMu.Unlock()
		}
	}()
	v := inlineValue(1, 4<<10)
	taken, busy := 0, false
	for i := range 4 * bound / len(v) {
		_, err := ld.CommitKey("bkt", fmt.Sprintf("k%03d", i), inlineCommit(v))
		if errors.Is(err, metaapi.ErrBusy) {
			busy = true
			break
		}
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		taken++
	}
	if !busy {
		t.Fatalf("%d commits of %d bytes taken with the store not applying: none held back at %d bytes", taken, len(v), bound)
	}
	if taken*len(v) < bound/2 {
		t.Fatalf("refused BUSY after %d commits of %d bytes, well under the bound of %d", taken, len(v), bound)
	}
	after := ld.MetaStatus()
	if !after.Serving || after.Term != before.Term || after.LeaderID != before.LeaderID {
		t.Fatalf("the leader stopped serving or changed: before %+v, after %+v", before, after)
	}
	if err := ld.Tick(); err != nil {
		t.Fatalf("the cluster manager's Tick was held back by the client backlog: %v", err)
	}
	ld.rep.StoreMu.Unlock()
	held = false
	waitFor(t, "a commit taken again once the store applies", func() bool {
		_, err := ld.CommitKey("bkt", "after", inlineCommit(v))
		return err == nil
	})
}
