package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// writeMixed writes block b's chunks of the given sizes from offset off and
// returns their infos.
func writeMixed(t testing.TB, cl *transport.Client, b, off uint64, sizes ...int) []transport.ChunkInfo {
	t.Helper()
	var out []transport.ChunkInfo
	for _, n := range sizes {
		out = append(out, writeChunks(t, cl, b, off, 1, n)...)
		off += uint64(n)
	}
	return out
}

func putBlock(t testing.TB, cl *transport.Client, b uint64, cs []transport.ChunkInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var length uint64
	for _, c := range cs {
		length += c.Length
	}
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: b, Length: length, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
		t.Fatalf("put block %d: %v", b, err)
	}
}

// TestInlineChunksReplicateRecoverAndCatchUp: with LogInlineMaxBytes, small
// chunks travel in their entries (large ones as payload segments, in the
// same blocks); a follower stopped meanwhile catches up from the leader's
// log, which carries those bytes; compaction runs (its checkpoint syncs the
// logged writes first); after every node restarts, the chunks past their
// block's last PutBlock are replayed from the log; every byte reads back on
// every node and the blocks commit.
func TestInlineChunksReplicateRecoverAndCatchUp(t *testing.T) {
	const small, large = 2048, 8192
	nodes, pc := startClusterWith(t, func(tn *testNode) {
		tn.inline = 4096
		tn.retain, tn.every = 40, 10
	})
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	// Many committed blocks of small chunks: the log is compacted past
	// them (the checkpoint first).
	for b := uint64(10); b < 30; b++ {
		putBlock(t, cl, b, writeChunks(t, cl, b, 0, 4, 1024))
	}
	if f, _ := leader.log.FirstIndex(1); f < 10 {
		t.Fatalf("log not compacted: first index %d", f)
	}
	c1 := writeMixed(t, cl, 1, 0, small, large, small, small, large)
	var follower *testNode
	for _, tn := range nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	follower.stop(t)
	c1 = append(c1, writeMixed(t, cl, 1, 22528, small, large)...) // past what the follower has
	c2 := writeMixed(t, cl, 2, 0, small, small, small)            // no PutBlock yet
	follower.restart(t, nodes, pc)
	const len1, len2 = 32768, 3 * small
	for _, tn := range nodes {
		readBack(t, tn, 1, len1)
		readBack(t, tn, 2, len2)
	}
	for _, tn := range nodes {
		if n := tn.node.inlineWrites.Load(); n == 0 {
			t.Fatalf("node %d wrote no chunk from its entry", tn.id)
		}
	}
	closeT(t, cl)

	for _, tn := range nodes {
		tn.stop(t)
	}
	for _, tn := range nodes {
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	for _, tn := range nodes {
		readBack(t, tn, 1, len1)
		readBack(t, tn, 2, len2)
		for b := uint64(10); b < 30; b++ {
			readBack(t, tn, b, 4096)
		}
		if n := tn.node.inlineWrites.Load(); n == 0 {
			t.Fatalf("node %d replayed no chunk from its log", tn.id)
		}
	}
	leader = waitLeader(t, nodes)
	cl = dial(t, leader.addr)
	c2 = append(c2, writeMixed(t, cl, 2, len2, large)...)
	putBlock(t, cl, 1, c1)
	putBlock(t, cl, 2, c2)
	for _, tn := range nodes {
		for _, x := range []struct{ b, n uint64 }{{1, len1}, {2, len2 + large}} {
			deadline := time.Now().Add(waitBound)
			for {
				bd, err := tn.eng.GetBlock(engine.BlockID{Container: 5, Local: x.b})
				if err == nil && bd.Length == x.n {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("node %d: block %d not committed at %d: %v %v", tn.id, x.b, x.n, bd, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			readBack(t, tn, x.b, x.n)
		}
	}
}

// TestInlineWritesToManyBlocksCheckpoint: a file written from its entry
// stays open (unsynced) until a PutBlock or a checkpoint; with more than
// maxLoggedFiles such files the append worker checkpoints, so that they
// do not pile up (here 600 blocks, one chunk each, no PutBlock and no
// compaction: without the bound every node would hold 600).
func TestInlineWritesToManyBlocksCheckpoint(t *testing.T) {
	const blocks = maxLoggedFiles + 88
	nodes, _ := startClusterWith(t, func(tn *testNode) { tn.inline = 4096 })
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	for b := uint64(1); b <= blocks; b++ {
		writeChunks(t, cl, b, 0, 1, 512)
	}
	for _, tn := range nodes {
		readBack(t, tn, blocks, 512) // every node has appended them all
		if n := tn.eng.LoggedFiles(); n >= blocks {
			t.Fatalf("node %d holds %d files of unsynced inline writes (bound %d)", tn.id, n, maxLoggedFiles)
		}
	}
	for b := uint64(1); b <= blocks; b += 97 {
		for _, tn := range nodes {
			readBack(t, tn, b, 512)
		}
	}
}
