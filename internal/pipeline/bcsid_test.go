package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// waitCommitted polls (bounded) until node tn has block b of container 5
// committed with length bytes, and returns the container's BCSID then.
func waitCommitted(t testing.TB, tn *testNode, b, length uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		bd, err := tn.eng.GetBlock(engine.BlockID{Container: 5, Local: b})
		if err == nil && bd.Length == length {
			ci, err := tn.eng.Container(5)
			if err != nil {
				t.Fatal(err)
			}
			return ci.BCSID
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d: block %d not committed with %d bytes: %v %v", tn.id, b, length, bd, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReplicasRecordTheCommitSequence: every replica's container BCSID is
// the raft index of the last PutBlock it applied — the same on all three —
// and a restart of every node, which re-applies the log (a checkpoint put
// below the BCSID among it), leaves it and the blocks as they were; the
// next put raises it on all three alike.
func TestReplicasRecordTheCommitSequence(t *testing.T) {
	nodes, pc := startCluster(t)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size = 2048
	put := func(cl *transport.Client, b uint64, chunks []transport.ChunkInfo) {
		t.Helper()
		var length uint64
		for _, c := range chunks {
			length += c.Length
		}
		if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: b, Length: length, BytesPerChecksum: bpc, Chunks: chunks}}); err != nil {
			t.Fatal(err)
		}
	}
	c1 := writeChunks(t, cl, 1, 0, 4, size)
	put(cl, 1, c1[:2]) // a checkpoint
	put(cl, 1, c1)
	put(cl, 2, writeChunks(t, cl, 2, 0, 2, size))
	sequences := func(b, length uint64) uint64 {
		t.Helper()
		var first uint64
		for i, tn := range nodes {
			got := waitCommitted(t, tn, b, length)
			if i == 0 {
				first = got
			}
			if got == 0 || got != first {
				t.Fatalf("node %d: BCSID %d, node %d has %d (want equal, > 0)", tn.id, got, nodes[0].id, first)
			}
		}
		return first
	}
	before := sequences(2, 2*size)
	closeT(t, cl)

	for _, tn := range nodes {
		tn.stop(t)
	}
	for _, tn := range nodes {
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	leader = waitLeader(t, nodes)
	cl = dial(t, leader.addr)
	put(cl, 3, writeChunks(t, cl, 3, 0, 1, size))
	after := sequences(3, size)
	if after <= before {
		t.Fatalf("BCSID %d after a put past the restart, %d before", after, before)
	}
	for _, tn := range nodes {
		waitCommitted(t, tn, 1, 4*size) // the replayed checkpoint did not shrink it
		readBack(t, tn, 1, 4*size)
	}
}
