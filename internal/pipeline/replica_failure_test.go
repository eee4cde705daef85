package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/vfs"
)

// memCluster starts a 3-member pipeline whose engines keep their block
// files and metadata on one MemFS each (so faults can be injected into one
// replica's storage); the logs are on real directories.
func memCluster(t *testing.T, opts ...func(*testNode)) ([]*testNode, []*vfs.MemFS) {
	t.Helper()
	pc := PipelineConfig{ID: 1}
	var nodes []*testNode
	var fss []*vfs.MemFS
	for i := uint64(1); i <= 3; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fs := vfs.NewMem()
		nodes = append(nodes, &testNode{id: i, addr: ln.Addr().String(), ln: ln, dataDir: "/data", fs: fs, logDir: t.TempDir()})
		for _, o := range opts {
			o(nodes[i-1])
		}
		fss = append(fss, fs)
		pc.Members = append(pc.Members, Member{ID: i, Addr: nodes[i-1].addr})
	}
	for _, tn := range nodes {
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	t.Cleanup(func() {
		for _, tn := range nodes {
			if tn.node == nil {
				continue
			}
			// A failed node failed on purpose (its storage broken by the test): its Close errors are expected.
			broken := tn.node.Err() != nil
			if err := errors.Join(tn.node.Close(), tn.log.Close(), tn.eng.Close()); err != nil && !broken {
				t.Errorf("node %d close: %v", tn.id, err)
			}
			tn.node = nil
		}
	})
	return nodes, fss
}

// failBlockFiles makes every operation of kind on a block file of fs fail
// with errno.
func failBlockFiles(fs *vfs.MemFS, kind vfs.OpKind, errno error) {
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == kind && strings.HasSuffix(op.Path, ".blk") {
			return errno
		}
		return nil
	})
}

// waitFailed waits (bounded) until tn stopped serving pipeline 1 after a
// replica failure, or stopped altogether; it reports which.
func waitFailed(t *testing.T, tn *testNode) (replica, node bool) {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		if len(tn.node.FailedPipelines()) > 0 {
			return true, false
		}
		select {
		case <-tn.node.Stopped():
			return false, true
		case <-deadline:
			t.Fatalf("node %d: no failure seen within %v", tn.id, waitBound)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestFollowerNeverAcknowledgesAChunkItFailedToStore: one follower's
// storage fails in each way a chunk write can fail on one replica alone.
// The write is acknowledged by the leader and the other follower only: the
// failed follower's log never holds the entry (a replica sends its
// MsgAppResp only after its log append), it stops serving the pipeline (or
// the whole node stops, for a failed fsync), and its container replica is
// UNHEALTHY. Before this was fixed the follower logged the failure at
// Debug, appended the entry and acknowledged it.
func TestFollowerNeverAcknowledgesAChunkItFailedToStore(t *testing.T) {
	cases := []struct {
		name string
		// arm breaks follower f just before the write of block 2.
		arm        func(t *testing.T, f *testNode, fs *vfs.MemFS)
		nodeFailed bool // the whole node stops (sticky engine failure)
		op         string
	}{
		{name: "write EIO", arm: func(t *testing.T, f *testNode, fs *vfs.MemFS) { failBlockFiles(fs, vfs.OpWrite, syscall.EIO) }, op: "write_chunk"},
		{name: "full volume", arm: func(t *testing.T, f *testNode, fs *vfs.MemFS) { failBlockFiles(fs, vfs.OpWrite, syscall.ENOSPC) }, op: "write_chunk"},
		{name: "sync EIO", arm: func(t *testing.T, f *testNode, fs *vfs.MemFS) { failBlockFiles(fs, vfs.OpSyncData, syscall.EIO) }, nodeFailed: true},
		{name: "unhealthy container", arm: func(t *testing.T, f *testNode, fs *vfs.MemFS) {
			if err := f.eng.MarkUnhealthy(5, "test: damage found by a scan"); err != nil {
				t.Fatal(err)
			}
		}, op: "write_chunk"},
		{name: "overlap", arm: func(t *testing.T, f *testNode, fs *vfs.MemFS) {
			// A divergent chunk at the same offset, as an earlier
			// leader's uncommitted entry leaves it.
			other := chunkData(99, 0, 3000)
			if err := f.eng.WriteChunk(engine.BlockID{Container: 5, Local: 2}, 0, other, bpc, engine.ComputeChecksums(nil, other, bpc)); err != nil {
				t.Fatal(err)
			}
		}, op: "write_chunk"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes, fss := memCluster(t)
			leader := waitLeader(t, nodes)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := dial(t, leader.addr)
			// Block 1 reaches every replica (and creates container 5).
			b1 := writeChunks(t, cl, 1, 0, 1, 3000)
			if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: 3000, BytesPerChecksum: bpc, Chunks: b1}}); err != nil {
				t.Fatal(err)
			}
			var f, other *testNode
			var ffs *vfs.MemFS
			for i, tn := range nodes {
				if tn == leader {
					continue
				}
				if f == nil {
					f, ffs = tn, fss[i]
				} else {
					other = tn
				}
			}
			// Both followers applied block 1's PutBlock (the leader
			// answers before its own Applied moves: wait on the block).
			for _, tn := range []*testNode{f, other} {
				waitUntil(t, fmt.Sprintf("node %d committed block 1", tn.id), func() bool {
					bd, err := tn.eng.GetBlock(engine.BlockID{Container: 5, Local: 1})
					return err == nil && bd.Length == 3000
				})
			}
			before, err := f.log.LastIndex(1)
			if err != nil {
				t.Fatal(err)
			}
			leaderLast, err := leader.log.LastIndex(1)
			if err != nil {
				t.Fatal(err)
			}
			tc.arm(t, f, ffs)

			// The write of block 2 is acknowledged by the two others.
			writeChunks(t, cl, 2, 0, 1, 3000)
			replica, node := waitFailed(t, f)
			if node != tc.nodeFailed || replica == tc.nodeFailed {
				t.Fatalf("replica failed %v, node failed %v (err %v); want node failed %v", replica, node, f.node.Err(), tc.nodeFailed)
			}
			after, err := f.log.LastIndex(1)
			if err != nil {
				t.Fatal(err)
			}
			if after > leaderLast {
				t.Fatalf("the failed follower's log holds index %d (it held %d, the write's entry is past %d): it acknowledged a chunk it did not store", after, before, leaderLast)
			}
			if !tc.nodeFailed {
				info, err := f.eng.Container(5)
				if err != nil || info.State != engine.StateUnhealthy {
					t.Fatalf("follower's container 5: %+v, %v; want UNHEALTHY", info, err)
				}
				fp := f.node.FailedPipelines()
				if len(fp) != 1 || fp[0].ID != 1 || fp[0].Container != 5 {
					t.Fatalf("failed pipelines %+v, want pipeline 1, container 5", fp)
				}
				if got := testCounter(t, f.node.metrics.replicaFailures.WithLabelValues(tc.op)); got != 1 {
					t.Fatalf("replica failures (%s) counted %v, want 1", tc.op, got)
				}
				// It does not take the pipeline back.
				err = f.node.AddPipeline(ctx, PipelineConfig{ID: 1, Members: []Member{{ID: 1, Addr: nodes[0].addr}, {ID: 2, Addr: nodes[1].addr}, {ID: 3, Addr: nodes[2].addr}}})
				if err == nil {
					t.Fatal("the failed replica joined its pipeline again")
				}
			}
			// The pipeline goes on with the two others, which hold it all.
			writeChunks(t, cl, 3, 0, 2, 3000)
			readBack(t, other, 2, 3000)
			readBack(t, leader, 2, 3000)
		})
	}
}

// TestLeaderFailedWriteIsNotAcknowledged: the leader's own chunk write
// fails: the client is not told it is stored, and the leader stops serving
// the pipeline, whose other members elect a new leader.
func TestLeaderFailedWriteIsNotAcknowledged(t *testing.T) {
	nodes, fss := memCluster(t)
	leader := waitLeader(t, nodes)
	var lfs *vfs.MemFS
	for i, tn := range nodes {
		if tn == leader {
			lfs = fss[i]
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dial(t, leader.addr)
	writeChunks(t, cl, 1, 0, 1, 3000)
	failBlockFiles(lfs, vfs.OpWrite, syscall.EIO)
	data := chunkData(2, 0, 3000)
	_, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: 2, Length: 3000, BytesPerChecksum: bpc, Checksums: engine.ComputeChecksums(nil, data, bpc)}, data)
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusUnavailable {
		t.Fatalf("write on a failing leader: %v, want UNAVAILABLE", err)
	}
	waitFailed(t, leader)
	var rest []*testNode
	for _, tn := range nodes {
		if tn != leader {
			rest = append(rest, tn)
		}
	}
	nl := waitLeader(t, rest)
	cl2 := dial(t, nl.addr)
	writeChunks(t, cl2, 2, 0, 1, 3000)
}

// TestFollowerFailedPutBlockLeavesThePipeline: a committed PutBlock that a
// follower cannot apply (its container replica was found damaged and
// marked UNHEALTHY meanwhile) makes it leave the pipeline, so that its
// replica, which lacks a committed block, is never counted.
func TestFollowerFailedPutBlockLeavesThePipeline(t *testing.T) {
	nodes, _ := memCluster(t)
	leader := waitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dial(t, leader.addr)
	b1 := writeChunks(t, cl, 1, 0, 1, 3000)
	var f *testNode
	for _, tn := range nodes {
		if tn != leader {
			f = tn
			break
		}
	}
	// Wait until the follower holds the chunk, then damage its replica.
	// The follower appended the chunk's entry (its chunk is written
	// before its log record).
	want, err := leader.log.LastIndex(1)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the follower appended the chunk", func() bool {
		last, err := f.log.LastIndex(1)
		return err == nil && last >= want
	})
	if err := f.eng.MarkUnhealthy(5, "test: damage"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: 3000, BytesPerChecksum: bpc, Chunks: b1}}); err != nil {
		t.Fatal(err)
	}
	if replica, _ := waitFailed(t, f); !replica {
		t.Fatal("follower did not leave the pipeline")
	}
	if got := testCounter(t, f.node.metrics.replicaFailures.WithLabelValues("put_block")); got != 1 {
		t.Fatalf("put_block failures counted %v, want 1", got)
	}
}

func testCounter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestDiskStallFailsTheNode: a follower's block-file fdatasync hangs. Past
// DiskStallThreshold the node fails with ErrDiskStall (it stops serving;
// its process exits and the meta service closes its pipelines) instead of
// holding its append worker, and its pipelines' acknowledgements, forever
// while it looks healthy; the two others go on.
func TestDiskStallFailsTheNode(t *testing.T) {
	nodes, fss := memCluster(t)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	writeChunks(t, cl, 1, 0, 1, 3000)
	var f *testNode
	var ffs *vfs.MemFS
	for i, tn := range nodes {
		if tn != leader {
			f, ffs = tn, fss[i]
			break
		}
	}
	// Restart f with a short threshold, on the same storage.
	closeT(t, f.node)
	release := make(chan struct{})
	defer close(release)
	ln := f.listen(t)
	var err error
	f.node, err = Start(Config{ID: f.id, Listener: ln, Engine: f.eng, Log: f.log, Pipelines: []PipelineConfig{{ID: 1, Members: []Member{{ID: 1, Addr: nodes[0].addr}, {ID: 2, Addr: nodes[1].addr}, {ID: 3, Addr: nodes[2].addr}}}},
		TickInterval: 20 * time.Millisecond, Logger: quiet, DiskStallThreshold: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	announceMoved(t, nodes)
	ffs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpSyncData && strings.HasSuffix(op.Path, ".blk") {
			<-release // hangs until the test ends
		}
		return nil
	})
	writeChunks(t, cl, 2, 0, 2, 3000)
	select {
	case <-f.node.Stopped():
	case <-time.After(30 * time.Second):
		t.Fatal("the node with a hung fdatasync runs on")
	}
	if !errors.Is(f.node.Err(), ErrDiskStall) {
		t.Fatalf("node error %v, want ErrDiskStall", f.node.Err())
	}
	writeChunks(t, cl, 3, 0, 2, 3000)
	// Let the hung sync return before the cluster is torn down.
	ffs.InjectErrors(nil)
}

// waitUntil polls cond (bounded: waitBound) and fails the test if it never holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitBound)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestPutBlockOfMissingChunks: the leader refuses a PutBlock naming chunks
// its engine does not hold before proposing it (nothing reaches the log,
// no replica leaves); and a follower that, when it applies a committed
// PutBlock, lacks the block's chunks (it diverged: here its copy was
// deleted under it) leaves the pipeline with its container UNHEALTHY
// instead of going on silently short, as it did when a hole or a missing
// block counted as a refusal every replica shares.
func TestPutBlockOfMissingChunks(t *testing.T) {
	nodes, _ := memCluster(t)
	leader := waitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dial(t, leader.addr)
	b1 := writeChunks(t, cl, 1, 0, 1, 3000)
	// Chunks never written: refused by the leader, not proposed.
	before, _ := leader.log.LastIndex(1)
	ghost := transport.BlockData{ContainerID: 5, LocalID: 9, Length: 3000, BytesPerChecksum: bpc, Chunks: []transport.ChunkInfo{{Offset: 0, Length: 3000, Checksums: b1[0].Checksums}}}
	_, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: ghost})
	var se *transport.StatusError
	if !errors.As(err, &se) || (se.Status != transport.StatusNotFound && se.Status != transport.StatusHole) {
		t.Fatalf("PutBlock of chunks never written: %v, want NOT_FOUND or HOLE", err)
	}
	if after, _ := leader.log.LastIndex(1); after != before {
		t.Fatalf("the refused PutBlock reached the log (last index %d → %d)", before, after)
	}
	// A follower whose copy of block 1 vanished.
	var f *testNode
	for _, tn := range nodes {
		if tn != leader {
			f = tn
			break
		}
	}
	want, _ := leader.log.LastIndex(1)
	waitUntil(t, "the follower appended the chunk", func() bool {
		last, err := f.log.LastIndex(1)
		return err == nil && last >= want
	})
	if err := f.eng.DeleteBlock(engine.BlockID{Container: 5, Local: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: 3000, BytesPerChecksum: bpc, Chunks: b1}}); err != nil {
		t.Fatal(err)
	}
	if replica, _ := waitFailed(t, f); !replica {
		t.Fatal("the diverged follower did not leave the pipeline")
	}
	if info, err := f.eng.Container(5); err != nil || info.State != engine.StateUnhealthy {
		t.Fatalf("diverged follower's container 5: %+v, %v; want UNHEALTHY", info, err)
	}
	for _, tn := range nodes {
		if tn != f && len(tn.node.FailedPipelines()) != 0 {
			t.Fatalf("node %d left the pipeline too: %+v", tn.id, tn.node.FailedPipelines())
		}
	}
}

// TestFollowerNeverAcknowledgesAChunkItsLeaderCouldNotSend: a follower
// catches up after a restart on entries whose bytes the leader no longer
// caches, and the leader cannot read them back (its block files fail
// reads). Two entries: a write refused everywhere (a hole: nothing of it
// is stored anywhere), which the follower may acknowledge without bytes,
// and a stored chunk, which it must not. The leader sends no bytes
// rather than invented ones; the follower acknowledges the refused write
// and leaves the pipeline at the stored one. Before this was fixed the
// leader sent zeros, the follower refused them by checksum as a refusal
// every replica shares, acknowledged the entry without the chunk and
// stayed in the pipeline (found while studying CRASH_SAFETY §9.3): this test
// then failed at waitFailed.
func TestFollowerNeverAcknowledgesAChunkItsLeaderCouldNotSend(t *testing.T) {
	nodes, fss := memCluster(t)
	leader := waitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dial(t, leader.addr)
	pc, f := commitThenStopFollower(t, nodes, leader, cl)

	hole := chunkData(2, 3000, 3000)
	if _, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: 2, Offset: 3000, Length: 3000,
		BytesPerChecksum: bpc, Checksums: engine.ComputeChecksums(nil, hole, bpc)}, hole); err == nil {
		t.Fatal("a chunk past the end of an empty block was accepted")
	}
	writeChunks(t, cl, 3, 0, 1, 3000)
	last, err := leader.log.LastIndex(1)
	if err != nil {
		t.Fatal(err)
	}
	// Applied on both survivors: their caches let go of the bytes, and
	// neither can read them back — whichever of them leads when the
	// follower returns (an election may move the lead meanwhile). The
	// messages for the follower still queued from before (raft probes it
	// while it is down) may carry the bytes: they are dropped, as a
	// failed dial drops them, so that no copy of the bytes is left.
	// Without this the test failed about 1 run in 30 under CPU load: the
	// queued message reached the restarted follower, which stored the
	// chunk it was sent.
	for i, tn := range nodes {
		if tn != f {
			waitUntil(t, fmt.Sprintf("node %d applied the writes", tn.id), func() bool { return tn.node.Applied(1) >= last })
			failBlockFiles(fss[i], vfs.OpRead, syscall.EIO)
			dropQueued(tn.node, f.id)
		}
	}

	f.restart(t, nodes, pc)
	if replica, node := waitFailed(t, f); !replica || node {
		t.Fatalf("replica failed %v, node failed %v (%v)", replica, node, f.node.Err())
	}
	fails := f.node.FailedPipelines()
	if len(fails) != 1 || !strings.Contains(fails[0].Reason, errPayloadUnavailable.Error()) {
		t.Fatalf("failed pipelines %+v: want pipeline 1 failed for %q", fails, errPayloadUnavailable)
	}
	fLast, err := f.log.LastIndex(1)
	if err != nil {
		t.Fatal(err)
	}
	if fLast >= last {
		t.Fatalf("the follower's log holds index %d, the stored chunk's entry is at most %d: it acknowledged a chunk it did not store", fLast, last)
	}
	if _, err := f.eng.ReadChunk(engine.BlockID{Container: 5, Local: 3}, 0, 3000, nil); err == nil {
		t.Fatal("the follower holds block 3's chunk: the test did not make the leader lose it")
	}
	misses := 0.0
	for _, tn := range nodes {
		if tn != f {
			misses += testCounter(t, tn.node.metrics.readBackMisses)
		}
	}
	if misses < 2 {
		t.Fatalf("read-back misses counted %v on the leaders, want ≥ 2 (the refused and the stored chunk)", misses)
	}
}

// TestFollowerRefusesBytesItsLeaderDidNotVerify: a MsgApp brings a chunk
// whose bytes do not match its checksums. Its leader verified them before
// proposing (a client's bad chunk is refused there, never proposed), so the
// bytes went wrong on the way: the follower does not hold what the others
// hold and must not acknowledge the entry. Before, a checksum mismatch was
// a refusal every replica shares: the follower appended and acknowledged
// the entry without the chunk (this test then failed at waitFailed).
func TestFollowerRefusesBytesItsLeaderDidNotVerify(t *testing.T) {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, sink)
	// The fake leader's peers: accept and discard. Their connections end
	// when the node's Close (a later cleanup, so run before this one)
	// hangs up; their Close errors are reported here.
	var peers sync.WaitGroup
	var peerMu sync.Mutex
	var peerErrs []error
	t.Cleanup(func() {
		peers.Wait()
		for _, err := range peerErrs {
			t.Errorf("fake peer connection close: %v", err)
		}
	})
	peers.Go(func() { // counted, so that the connections' Go happen before Wait
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			peers.Go(func() {
				_, _ = io.Copy(io.Discard, c)
				if err := c.Close(); err != nil {
					peerMu.Lock()
					peerErrs = append(peerErrs, err)
					peerMu.Unlock()
				}
			})
		}
	})
	addr := sink.Addr().String()
	n := startLone(t, Config{TickInterval: 10 * time.Millisecond,
		Pipelines: []PipelineConfig{{ID: 1, Members: []Member{{ID: 1, Addr: addr}, {ID: 2, Addr: addr}, {ID: 3, Addr: addr}}}}}, false)
	tn := &testNode{id: 1, node: n}
	good := chunkData(1, 0, 4096)
	bad := slices.Clone(good)
	bad[100] ^= 0x01
	wc := transport.WriteChunk{ContainerID: 5, LocalID: 1, Length: 4096, BytesPerChecksum: bpc, Checksums: engine.ComputeChecksums(nil, good, bpc)}
	c := sendMsgApp(t, n.Addr(), 5, 5, wc, 2, bad)
	defer closeT(t, c)
	if replica, node := waitFailed(t, tn); !replica || node {
		t.Fatalf("replica failed %v, node failed %v (%v)", replica, node, n.Err())
	}
	if last, err := n.cfg.Log.LastIndex(1); err != nil || last != 1 {
		t.Fatalf("the follower's log ends at %d (%v), want 1 (the bootstrap entry): it appended the entry of a chunk it did not store", last, err)
	}
}

// dropQueued drops the messages n has queued for peer id and not yet
// taken to send (what a failed dial does to them).
func dropQueued(n *Node, id uint64) {
	n.peersMu.Lock()
	p := n.peers[id]
	n.peersMu.Unlock()
	if p == nil {
		return
	}
	p.mu.Lock()
	clear(p.q)
	p.q = p.q[:0]
	p.mu.Unlock()
}

// TestRemovedPipelineCreatesNoContainer: once a pipeline is removed here,
// an append job of it still running creates no container for a chunk
// whose container is not here (it would bring back a replica the meta
// service had deleted since: bench chaos found one reported again after
// its trim). Fails without the check in inContainer (the container is
// created), or without removeGroup marking the group.
func TestRemovedPipelineCreatesNoContainer(t *testing.T) {
	nodes, _ := memCluster(t)
	tn := waitLeader(t, nodes)
	g := tn.node.group(1)
	if g == nil {
		t.Fatal("node serves no pipeline 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tn.node.RemovePipeline(ctx, 1); err != nil {
		t.Fatal(err)
	}
	data := chunkData(1, 0, 3000)
	w := &transport.WriteChunk{ContainerID: 77, LocalID: 1, Length: 3000, BytesPerChecksum: bpc, Checksums: engine.ComputeChecksums(nil, data, bpc)}
	if err := tn.node.writeChunk(g, w, data, false, false); !errors.Is(err, errGroupGone) {
		t.Fatalf("write for a removed pipeline: %v, want %v", err, errGroupGone)
	}
	if _, err := tn.eng.Container(77); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("container 77 after the removed pipeline's write: %v, want not found", err)
	}
	live := &group{id: 2}
	if err := tn.node.writeChunk(live, w, data, false, false); err != nil {
		t.Fatalf("write for a served pipeline: %v", err)
	}
	if _, err := tn.eng.Container(77); err != nil {
		t.Fatalf("container 77 not created for a served pipeline: %v", err)
	}
}

// TestRoomIsTheLeadersDecision: the replicas' counts of a container's
// bytes differ (here a follower holds 4,000 bytes of an uncommitted block
// the others never saw, as after a restart the counts can differ the
// other way); a chunk that fits by the leader's count but not by the
// follower's is stored on every replica, and its block committed
// everywhere, the follower staying in the pipeline. A chunk that does not
// fit by the leader's count is refused by the leader with CONTAINER_FULL
// before it is proposed. Before, the follower refused the chunk as a
// refusal every replica shares and acknowledged its entry without it,
// counting towards a quorum that did not hold the chunk; this test then
// failed at FailedPipelines (the follower left at the block's PutBlock).
func TestRoomIsTheLeadersDecision(t *testing.T) {
	nodes, _ := memCluster(t, func(tn *testNode) { tn.containerMax = 10000 })
	leader := waitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dial(t, leader.addr)
	putBlock(t, cl, 1, writeChunks(t, cl, 1, 0, 1, 3000))
	f := firstFollower(nodes, leader)
	waitUntil(t, "the follower committed block 1", func() bool {
		bd, err := f.eng.GetBlock(engine.BlockID{Container: 5, Local: 1})
		return err == nil && bd.Length == 3000
	})
	extra := chunkData(99, 0, 4000)
	if err := f.eng.WriteChunk(engine.BlockID{Container: 5, Local: 99}, 0, extra, bpc, engine.ComputeChecksums(nil, extra, bpc)); err != nil {
		t.Fatal(err)
	}

	putBlock(t, cl, 2, writeChunks(t, cl, 2, 0, 1, 4000)) // 7,000 of 10,000 by the leader's count, 11,000 by the follower's
	waitUntil(t, "the follower committed block 2 or left", func() bool {
		bd, err := f.eng.GetBlock(engine.BlockID{Container: 5, Local: 2})
		return (err == nil && bd.Length == 4000) || len(f.node.FailedPipelines()) != 0
	})
	if fails := f.node.FailedPipelines(); len(fails) != 0 {
		t.Fatalf("the follower left the pipeline: %+v", fails)
	}
	readBack(t, f, 2, 4000)

	before, err := leader.log.LastIndex(1)
	if err != nil {
		t.Fatal(err)
	}
	data := chunkData(3, 0, 4000) // 11,000 by the leader's count
	_, err = cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: 3, Length: 4000, BytesPerChecksum: bpc, Checksums: engine.ComputeChecksums(nil, data, bpc)}, data)
	if err == nil || !strings.Contains(err.Error(), transport.StatusContainerFull.String()) {
		t.Fatalf("a chunk past the leader's room: %v, want %s", err, transport.StatusContainerFull)
	}
	if after, err := leader.log.LastIndex(1); err != nil || after != before {
		t.Fatalf("log went from index %d to %d (%v): the refused chunk was proposed", before, after, err)
	}
}

// TestReceivedRaftSnapshotStopsTheNode: Spindle's leaders never send raft
// snapshots (a follower behind the compacted log is replaced by a
// container copy); a follower that receives one anyway (from its leader,
// at its term, past its log) would be told to drop its log for a state it
// cannot install, so its node stops with the reason rather than go on
// without the entries (the review's 3.4#4: this path had no test).
func TestReceivedRaftSnapshotStopsTheNode(t *testing.T) {
	nodes, _ := memCluster(t)
	leader := waitLeader(t, nodes)
	f := firstFollower(nodes, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	writeChunks(t, dial(t, leader.addr), 1, 0, 1, 1000)
	_, term := f.node.Leader(1)
	last, err := f.log.LastIndex(1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.DialConn(ctx, f.addr, transport.ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, c)
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Index: proto.Uint64(last + 1000), Term: proto.Uint64(term)}}
	m := &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), From: proto.Uint64(leader.id), To: proto.Uint64(f.id),
		Term: proto.Uint64(term), Snapshot: snap}
	if err := c.Send(&transport.RaftMessage{GroupID: 1, Message: m}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the follower stopped", func() bool { return f.node.Err() != nil })
	if err := f.node.Err(); !strings.Contains(err.Error(), "raft snapshot") {
		t.Fatalf("the follower stopped with %v, want the raft snapshot named", err)
	}
}

// firstFollower returns the first node of nodes that is not leader.
func firstFollower(nodes []*testNode, leader *testNode) *testNode {
	for _, tn := range nodes {
		if tn != leader {
			return tn
		}
	}
	return nil
}

// commitThenStopFollower commits block 1 of container 5 (one chunk of
// 3,000 bytes) through cl, waits until the first follower holds it, stops
// that follower and returns it with the pipeline's config (to restart it).
func commitThenStopFollower(t *testing.T, nodes []*testNode, leader *testNode, cl *transport.Client) (PipelineConfig, *testNode) {
	t.Helper()
	putBlock(t, cl, 1, writeChunks(t, cl, 1, 0, 1, 3000))
	pc := PipelineConfig{ID: 1}
	for _, tn := range nodes {
		pc.Members = append(pc.Members, Member{ID: tn.id, Addr: tn.addr})
	}
	f := firstFollower(nodes, leader)
	waitUntil(t, "the follower committed block 1", func() bool {
		bd, err := f.eng.GetBlock(engine.BlockID{Container: 5, Local: 1})
		return err == nil && bd.Length == 3000
	})
	f.stop(t)
	return pc, f
}
