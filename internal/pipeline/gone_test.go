package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// TestFollowerCaughtUpOverADeletedBlockStays: a follower is down while a
// block is written, committed and deleted. Caught up from the leaders'
// engines (their caches let go of the bytes), the block's chunks cannot
// be read back; the leader sends the index of the delete instead, and
// the follower, instead of leaving the pipeline, marks the block gone,
// applies the put and the delete, and ends like the others: the blocks
// written around it stored, the deleted one absent, no mark left.
// Without the leader's index (CHAOS_FINDINGS §1) this test fails at the
// FailedPipelines check: the follower leaves with "chunk bytes
// unavailable from the leader".
func TestFollowerCaughtUpOverADeletedBlockStays(t *testing.T) {
	nodes, _ := memCluster(t)
	leader := waitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dial(t, leader.addr)
	pc, f := commitThenStopFollower(t, nodes, leader, cl)

	putBlock(t, cl, 2, writeChunks(t, cl, 2, 0, 2, 3000))
	if err := leader.node.Propose(ctx, 1, []Command{{Kind: KindDeleteBlock, Ref: transport.GetBlock{ContainerID: 5, LocalID: 2}}}); err != nil {
		t.Fatal(err)
	}
	putBlock(t, cl, 3, writeChunks(t, cl, 3, 0, 1, 3000))
	last, err := leader.log.LastIndex(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range nodes {
		if tn != f {
			waitUntil(t, fmt.Sprintf("node %d applied the writes", tn.id), func() bool { return tn.node.Applied(1) >= last })
			dropQueued(tn.node, f.id) // no queued message may bring block 2's bytes
		}
	}

	f.restart(t, nodes, pc)
	waitUntil(t, "the follower applied the leader's log or left", func() bool {
		return f.node.Applied(1) >= last || len(f.node.FailedPipelines()) != 0
	})
	if fails := f.node.FailedPipelines(); len(fails) != 0 {
		t.Fatalf("the caught-up follower left the pipeline: %+v", fails)
	}
	if _, err := f.eng.ReadChunk(engine.BlockID{Container: 5, Local: 3}, 0, 3000, nil); err != nil {
		t.Fatalf("the follower lacks block 3: %v", err)
	}
	gone := engine.BlockID{Container: 5, Local: 2}
	if _, err := f.eng.GetBlock(gone); err == nil {
		t.Fatal("the follower holds the deleted block 2")
	}
	if d := f.eng.GoneAt(gone); d != 0 {
		t.Fatalf("block 2's gone mark (delete at %d) outlived the delete", d)
	}
	if n := testCounter(t, f.node.metrics.goneChunks); n != 2 {
		t.Fatalf("%v chunks excused on the follower, want block 2's 2: the catch-up did not go through the leaders' engines", n)
	}
}
