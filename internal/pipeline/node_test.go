package pipeline

import (
	"context"
	"errors"
	"fmt"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/vfs"
	"github.com/spindle-store/spindle/internal/wal"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testNode is one in-process datanode on real directories and a real
// 127.0.0.1 listener.
type testNode struct {
	id   uint64
	addr string
	// ln, when set, is the socket bound for the node's next start (its
	// peers must know its address before it starts: bound on port 0 and
	// kept, not picked and closed).
	ln      net.Listener
	dataDir string
	logDir  string
	eng     *engine.Engine
	log     *wal.Log
	node    *Node
	retain  uint64 // Config.RetainEntries and CompactEveryEntries (0: defaults)
	every   uint64
	// maxRetain is Config.MaxRetainEntries (0: default).
	maxRetain uint64
	budget    int64 // Config.MaxInflight(Raft)PayloadBytes (0: defaults)
	inline    int   // Config.LogInlineMaxBytes (0: never)
	// fs is the engine's filesystem (nil: the OS's).
	fs vfs.FS
	// containerMax is the engine's MaxContainerSizeBytes (0: default).
	containerMax uint64
	// tls: mutual TLS on its listener and peer connections (nil:
	// plaintext); requireNames is Config.RequirePeerCertNames.
	tls          *tlsconf.Settings
	requireNames bool
	tokens       *blocktoken.Verifier // Config.BlockTokens
	certName     string               // Member.CertName (startClusterWith)
	// moved: listen found tn.addr taken and moved the node to a new port
	// that the other nodes have not been told yet (announceMoved).
	moved bool
}

// testElectionTicks makes the test nodes' election timeout 0.5-1 s (20 ms
// ticks), not the default 0.2-0.4 s: under make test beside two busy
// processes a heartbeat late by 200 ms moved a leader between a test's
// waitLeader and its first write (NOT_LEADER in
// TestPeerRestartedOnANewAddress); the tests of failover wait for a new
// leader with deadlines of seconds.
const testElectionTicks = 25

// waitBound bounds every wait of these tests for something the cluster
// does by itself (a leader elected, a block committed, a failure seen).
// It is a bound, not a claim of speed: under make test's -race run beside
// the meta package's, ticks are dropped when a node's loop is not
// scheduled, and a failover's election took longer than 10 s once
// (TestLeaderFailedWriteIsNotAcknowledged, CI); quiet, it takes 0.5-1 s.
const waitBound = 60 * time.Second

func (tn *testNode) start(t testing.TB, pcs ...PipelineConfig) {
	t.Helper()
	var err error
	tn.eng, err = engine.Open(engine.Config{DataDirs: []string{tn.dataDir}, FS: tn.fs, Logger: quiet, MaxContainerSizeBytes: tn.containerMax})
	if err != nil {
		t.Fatal(err)
	}
	tn.log, err = wal.Open(wal.Config{Dir: tn.logDir, Logger: quiet, SegmentSizeBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ln := tn.tls.Listener(tn.listen(t))
	tn.node, err = Start(Config{ID: tn.id, Listener: ln, Engine: tn.eng, Log: tn.log, Pipelines: pcs,
		Conn: transport.ConnConfig{TLS: tn.tls}, RequirePeerCertNames: tn.requireNames, BlockTokens: tn.tokens,
		TickInterval: 20 * time.Millisecond, ElectionTicks: testElectionTicks, Logger: quiet, RetainEntries: tn.retain, CompactEveryEntries: tn.every, MaxRetainEntries: tn.maxRetain,
		MaxInflightPayloadBytes: tn.budget, MaxInflightRaftPayloadBytes: tn.budget, LogInlineMaxBytes: tn.inline})
	if err != nil {
		t.Fatal(err)
	}
}

// listen returns tn.ln if set, else listens on tn.addr; if that port was taken since the node's last
// life closed it (an outgoing connection's ephemeral port, from this or any
// other process), on a new port, which becomes tn.addr: the caller tells the
// other members with announce.
func (tn *testNode) listen(t testing.TB) net.Listener {
	t.Helper()
	if tn.ln != nil {
		ln := tn.ln
		tn.ln = nil
		return ln
	}
	ln, err := net.Listen("tcp", tn.addr)
	if err == nil {
		return ln
	}
	if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d: %s was taken; listening on %s", tn.id, tn.addr, ln.Addr())
	tn.addr, tn.moved = ln.Addr().String(), true
	return ln
}

// restart starts tn again after stop and tells the other running nodes
// where it listens now (see listen).
func (tn *testNode) restart(t testing.TB, nodes []*testNode, pcs ...PipelineConfig) {
	t.Helper()
	tn.start(t, pcs...)
	tn.announce(t, nodes)
}

// announceMoved announces every node that listen moved.
func announceMoved(t testing.TB, nodes []*testNode) {
	t.Helper()
	for _, tn := range nodes {
		if tn.moved {
			tn.announce(t, nodes)
		}
	}
}

// announce gives every other running node tn's current address.
func (tn *testNode) announce(t testing.TB, nodes []*testNode) {
	t.Helper()
	tn.moved = false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, o := range nodes {
		if o != tn && o.node != nil {
			if err := o.node.UpdatePeers(ctx, []Member{{ID: tn.id, Addr: tn.addr}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (tn *testNode) stop(t testing.TB) {
	t.Helper()
	if tn.node == nil {
		return
	}
	if err := tn.node.Close(); err != nil {
		t.Errorf("node %d close: %v", tn.id, err)
	}
	closeT(t, tn.log)
	closeT(t, tn.eng)
	tn.node = nil
}

func startCluster(t testing.TB) ([]*testNode, PipelineConfig) {
	t.Helper()
	return startClusterWith(t, nil)
}

// startClusterWith is startCluster with each node's settings changed by
// set (nil: none) before it starts.
func startClusterWith(t testing.TB, set func(*testNode)) ([]*testNode, PipelineConfig) {
	t.Helper()
	var nodes []*testNode
	pc := PipelineConfig{ID: 1}
	for i := uint64(1); i <= 3; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		dir := t.TempDir()
		nodes = append(nodes, &testNode{id: i, addr: addr, ln: ln, dataDir: dir + "/data", logDir: dir + "/log"})
		pc.Members = append(pc.Members, Member{ID: i, Addr: addr})
	}
	for i, tn := range nodes {
		if set != nil {
			set(tn)
		}
		pc.Members[i].CertName = tn.certName
	}
	for _, tn := range nodes {
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	t.Cleanup(func() {
		for _, tn := range nodes {
			tn.stop(t)
		}
	})
	return nodes, pc
}

// waitLeader polls (bounded) until the running nodes agree on a leader.
func waitLeader(t testing.TB, nodes []*testNode) *testNode {
	t.Helper()
	return waitLeaderOf(t, nodes, 1)
}

func waitLeaderOf(t testing.TB, nodes []*testNode, pipeline uint64) *testNode {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) {
		for _, tn := range nodes {
			if tn.node == nil {
				continue
			}
			if l, _ := tn.node.Leader(pipeline); l == tn.id {
				return tn
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	var views []string
	for _, tn := range nodes {
		if tn.node == nil {
			views = append(views, fmt.Sprintf("node %d: stopped", tn.id))
			continue
		}
		l, term := tn.node.Leader(pipeline)
		views = append(views, fmt.Sprintf("node %d: leader %d term %d", tn.id, l, term))
	}
	t.Fatalf("pipeline %d: no leader within %v (%s)", pipeline, waitBound, strings.Join(views, "; "))
	return nil
}

func chunkData(b uint64, off uint64, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		x := b*1_000_003 + off + uint64(i)
		x ^= x >> 7
		x *= 0x9E3779B97F4A7C15
		out[i] = byte(x >> 56)
	}
	return out
}

const bpc = 512

func TestPipelineReplicatesWrites(t *testing.T) {
	nodes, _ := startCluster(t)
	leader := waitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := transport.DialClient(ctx, leader.addr, transport.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, cl)

	// Non-leader redirects.
	for _, tn := range nodes {
		if tn == leader {
			continue
		}
		c2, err := transport.DialClient(ctx, tn.addr, transport.ClientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		data := chunkData(9, 0, 100)
		_, err = c2.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 9, LocalID: 1, Length: 100, BytesPerChecksum: bpc, Checksums: engine.ComputeChecksums(nil, data, bpc)}, data)
		var se *transport.StatusError
		if !errors.As(err, &se) || se.Status != transport.StatusNotLeader || se.Leader != leader.addr {
			t.Fatalf("write to follower: %v, want NOT_LEADER naming %s", err, leader.addr)
		}
		closeT(t, c2)
		break
	}

	const blocks, chunks, size = 4, 20, 3000
	errc := make(chan error, blocks)
	for b := uint64(1); b <= blocks; b++ {
		go func() {
			var bd transport.BlockData
			bd.ContainerID, bd.LocalID, bd.BytesPerChecksum = 5, b, bpc
			for i := 0; i < chunks; i++ {
				off := uint64(i * size)
				data := chunkData(b, off, size)
				sums := engine.ComputeChecksums(nil, data, bpc)
				if _, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: b, Offset: off, Length: size, BytesPerChecksum: bpc, Checksums: sums}, data); err != nil {
					errc <- fmt.Errorf("block %d chunk %d: %w", b, i, err)
					return
				}
				bd.Chunks = append(bd.Chunks, transport.ChunkInfo{Offset: off, Length: size, Checksums: sums})
				bd.Length += size
			}
			_, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: bd})
			errc <- err
		}()
	}
	for range blocks {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// A bad checksum is refused by the leader's engine and reported.
	data := chunkData(77, 0, 100)
	sums := engine.ComputeChecksums(nil, data, bpc)
	sums[0] ^= 1
	_, err = cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: 77, Length: 100, BytesPerChecksum: bpc, Checksums: sums}, data)
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusChecksumMismatch {
		t.Fatalf("bad checksum: %v, want CHECKSUM_MISMATCH", err)
	}
	// Every replica holds every block once it has applied the PutBlocks.
	// (The leader answers a PutBlock once applied, but may read back a
	// lower Applied for a moment after: its index is stored once the whole
	// apply job is done. So each block is waited for, not an index.)
	for _, tn := range nodes {
		for b := uint64(1); b <= blocks; b++ {
			id := engine.BlockID{Container: 5, Local: b}
			waitUntil(t, fmt.Sprintf("node %d block %d committed", tn.id, b), func() bool {
				bd, err := tn.eng.GetBlock(id)
				return err == nil && bd.Length == chunks*size
			})
			bd, err := tn.eng.GetBlock(id)
			if err != nil {
				t.Fatalf("node %d block %d: %v", tn.id, b, err)
			}
			got, err := tn.eng.ReadChunk(id, 0, bd.Length, nil)
			if err != nil || string(got) != string(chunkData(b, 0, chunks*size)) {
				t.Fatalf("node %d block %d: wrong data (%v)", tn.id, b, err)
			}
		}
	}
}

// The datanode's half of a block's ordered stream: WriteChunks pipelined
// on one connection (each queued once the previous one is, many blocks'
// interleaved) are proposed in the order they arrived, so the leader's
// engine never finds one past its block's end (StatusHole) and every write
// succeeds; every replica ends with the blocks' bytes contiguous.
func TestConnectionWritesProposedInArrivalOrder(t *testing.T) {
	nodes, _ := startCluster(t)
	leader := waitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := transport.DialClient(ctx, leader.addr, transport.ClientConfig{Window: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, cl)
	const blocks, chunks, size = 4, 150, 4096
	errc := make(chan error, blocks*chunks)
	var wg sync.WaitGroup
	for b := uint64(1); b <= blocks; b++ {
		gate := make(chan struct{})
		close(gate)
		for i := range chunks {
			prev, mine := gate, make(chan struct{})
			gate = mine
			off := uint64(i * size)
			data := chunkData(b, off, size)
			sums := engine.ComputeChecksums(nil, data, bpc)
			wg.Go(func() {
				<-prev
				res, err := cl.CallQueued(ctx, func() { close(mine) }, &transport.WriteChunk{PipelineID: 1, ContainerID: 6, LocalID: b, Offset: off, Length: size, BytesPerChecksum: bpc, Checksums: sums}, data)
				if err != nil {
					errc <- fmt.Errorf("block %d offset %d: %w", b, off, err)
					return
				}
				res.Release()
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for _, tn := range nodes {
		for b := uint64(1); b <= blocks; b++ {
			readBackFrom(t, tn, 6, b, chunks*size)
		}
	}
}

// writeChunks writes n chunks of size to block b from offset off through cl
// and returns the chunk infos.
func writeChunks(t testing.TB, cl *transport.Client, b, off uint64, n, size int) []transport.ChunkInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []transport.ChunkInfo
	for i := 0; i < n; i++ {
		data := chunkData(b, off, size)
		sums := engine.ComputeChecksums(nil, data, bpc)
		if _, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 5, LocalID: b, Offset: off, Length: uint64(size), BytesPerChecksum: bpc, Checksums: sums}, data); err != nil {
			t.Fatalf("block %d offset %d: %v", b, off, err)
		}
		out = append(out, transport.ChunkInfo{Offset: off, Length: uint64(size), Checksums: sums})
		off += uint64(size)
	}
	return out
}

// readBack polls (bounded) until node tn has block b's first length bytes,
// then checks them.
func readBack(t testing.TB, tn *testNode, b, length uint64) {
	t.Helper()
	readBackFrom(t, tn, 5, b, length)
}

// readBackFrom is readBack of a block of container c.
func readBackFrom(t testing.TB, tn *testNode, c, b, length uint64) {
	t.Helper()
	id := engine.BlockID{Container: engine.ContainerID(c), Local: b}
	deadline := time.Now().Add(waitBound)
	for {
		got, err := tn.eng.ReadChunk(id, 0, length, nil)
		if err == nil {
			if string(got) != string(chunkData(b, 0, int(length))) {
				t.Fatalf("node %d block %d: wrong bytes", tn.id, b)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d block %d: %d bytes not readable: %v", tn.id, b, length, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dial(t testing.TB, addr string) *transport.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := transport.DialClient(ctx, addr, transport.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeT(t, cl) })
	return cl
}

// TestPipelineRestartAndCatchUp: a follower stopped while writes go on
// catches up when it comes back; after every node restarts, chunks written
// past their block's last PutBlock are found again from the log's headers
// (adopted), read back on every replica, and the block can be continued and
// committed.
func TestPipelineRestartAndCatchUp(t *testing.T) {
	nodes, pc := startCluster(t)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	const size = 2048
	c1 := writeChunks(t, cl, 1, 0, 10, size)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: 10 * size, BytesPerChecksum: bpc, Chunks: c1}}); err != nil {
		t.Fatal(err)
	}
	var follower *testNode
	for _, tn := range nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	follower.stop(t)
	writeChunks(t, cl, 1, 10*size, 5, size) // past the PutBlock
	writeChunks(t, cl, 2, 0, 7, size)       // no PutBlock at all
	follower.restart(t, nodes, pc)
	for _, tn := range nodes {
		readBack(t, tn, 1, 15*size)
		readBack(t, tn, 2, 7*size)
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
		readBack(t, tn, 1, 15*size)
		readBack(t, tn, 2, 7*size)
	}
	leader = waitLeader(t, nodes)
	cl = dial(t, leader.addr)
	// Block 2 continues where it was and commits whole.
	more := writeChunks(t, cl, 2, 7*size, 3, size)
	var all []transport.ChunkInfo
	for i := 0; i < 7; i++ {
		data := chunkData(2, uint64(i*size), size)
		all = append(all, transport.ChunkInfo{Offset: uint64(i * size), Length: size, Checksums: engine.ComputeChecksums(nil, data, bpc)})
	}
	all = append(all, more...)
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 2, Length: 10 * size, BytesPerChecksum: bpc, Chunks: all}}); err != nil {
		t.Fatal(err)
	}
	for _, tn := range nodes {
		readBack(t, tn, 2, 10*size)
		deadline := time.Now().Add(waitBound)
		for {
			bd, err := tn.eng.GetBlock(engine.BlockID{Container: 5, Local: 2})
			if err == nil && bd.Length == 10*size {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: block 2 not committed: %v %v", tn.id, bd, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestSeveralPipelinesPerDatanode: four datanodes, two pipelines sharing two
// of them; one event loop and one log per datanode serve both, and each
// pipeline's writes land on its own members only.
func TestSeveralPipelinesPerDatanode(t *testing.T) {
	var nodes []*testNode
	for i := uint64(1); i <= 4; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		nodes = append(nodes, &testNode{id: i, addr: ln.Addr().String(), ln: ln, dataDir: dir + "/data", logDir: dir + "/log"})
	}
	member := func(ids ...int) PipelineConfig {
		pc := PipelineConfig{ID: uint64(ids[0])}
		for _, i := range ids[1:] {
			pc.Members = append(pc.Members, Member{ID: nodes[i-1].id, Addr: nodes[i-1].addr})
		}
		return pc
	}
	p1, p2 := member(1, 1, 2, 3), member(2, 2, 3, 4)
	nodes[0].start(t, p1)
	nodes[1].start(t, p1, p2)
	nodes[2].start(t, p1, p2)
	nodes[3].start(t, p2)
	// A port picked above may have been taken since (listen): the
	// others must be told where such a node listens now.
	announceMoved(t, nodes)
	t.Cleanup(func() {
		for _, tn := range nodes {
			tn.stop(t)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, pid := range []uint64{1, 2} {
		var members []*testNode
		if pid == 1 {
			members = nodes[:3]
		} else {
			members = nodes[1:]
		}
		leader := waitLeaderOf(t, members, pid)
		cl := dial(t, leader.addr)
		cid := 10 * pid
		data := chunkData(pid, 0, 4096)
		sums := engine.ComputeChecksums(nil, data, bpc)
		if _, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: pid, ContainerID: cid, LocalID: 1, Length: 4096, BytesPerChecksum: bpc, Checksums: sums}, data); err != nil {
			t.Fatalf("pipeline %d: %v", pid, err)
		}
		for _, tn := range members {
			id := engine.BlockID{Container: engine.ContainerID(cid), Local: 1}
			deadline := time.Now().Add(waitBound)
			for {
				got, err := tn.eng.ReadChunk(id, 0, 4096, nil)
				if err == nil && string(got) == string(data) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pipeline %d node %d: %v", pid, tn.id, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	// Containers of one pipeline exist only on its members.
	if _, err := nodes[0].eng.Container(20); err == nil {
		t.Fatal("pipeline 2's container on node 1, not a member")
	}
	if _, err := nodes[3].eng.Container(10); err == nil {
		t.Fatal("pipeline 1's container on node 4, not a member")
	}
	groups, err := nodes[1].log.Groups()
	if err != nil || len(groups) != 2 {
		t.Fatalf("node 2's log holds groups %v (%v), want both pipelines", groups, err)
	}
}

// TestCompactionKeepsWhatOnlyTheLogKnows: the log is compacted as entries
// apply, but never past the first chunk of a block with no PutBlock yet;
// after a restart of every node that block's chunks are still found (from
// the log) and read back on every replica.
func TestCompactionKeepsWhatOnlyTheLogKnows(t *testing.T) {
	nodes, pc := startCluster(t)
	for _, tn := range nodes {
		tn.stop(t)
		tn.retain, tn.every = 10, 10
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size = 1024
	// Block 1: written, never committed.
	writeChunks(t, cl, 1, 0, 3, size)
	firstOpen, err := leader.log.LastIndex(1)
	if err != nil {
		t.Fatal(err)
	}
	// Blocks 2..: many entries, each block committed.
	for b := uint64(2); b < 12; b++ {
		cs := writeChunks(t, cl, b, 0, 10, size)
		if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: b, Length: 10 * size, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := leader.log.FirstIndex(1)
	if first > firstOpen-2 {
		t.Fatalf("log compacted to first index %d, past the open block's chunks (from index %d)", first, firstOpen-2)
	}
	// Commit block 1 now: compaction may move past it afterwards.
	var cs []transport.ChunkInfo
	for i := 0; i < 3; i++ {
		d := chunkData(1, uint64(i*size), size)
		cs = append(cs, transport.ChunkInfo{Offset: uint64(i * size), Length: size, Checksums: engine.ComputeChecksums(nil, d, bpc)})
	}
	// Before that, restart everything: block 1 is known only from the log.
	closeT(t, cl)
	for _, tn := range nodes {
		tn.stop(t)
	}
	for _, tn := range nodes {
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	for _, tn := range nodes {
		readBack(t, tn, 1, 3*size)
	}
	leader = waitLeader(t, nodes)
	cl = dial(t, leader.addr)
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: 3 * size, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
		t.Fatal(err)
	}
	for b := uint64(20); b < 26; b++ {
		cs := writeChunks(t, cl, b, 0, 10, size)
		if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: b, Length: 10 * size, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
			t.Fatal(err)
		}
	}
	if f, _ := leader.log.FirstIndex(1); f <= firstOpen {
		t.Fatalf("log not compacted past the committed block: first index %d", f)
	}
}

// TestLeaderKeepsTheLogForADownFollower: with a small retention, a leader
// still keeps the entries a stopped follower lacks (up to MaxRetainEntries),
// so that the follower catches up from the log when it returns.
func TestLeaderKeepsTheLogForADownFollower(t *testing.T) {
	nodes, pc := startCluster(t)
	for _, tn := range nodes {
		tn.stop(t)
		tn.retain, tn.every = 10, 10
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size = 1024
	var follower *testNode
	for _, tn := range nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	cs := writeChunks(t, cl, 1, 0, 2, size)
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: 2 * size, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
		t.Fatal(err)
	}
	readBack(t, follower, 1, 2*size)
	follower.stop(t)
	for b := uint64(2); b < 12; b++ {
		cs := writeChunks(t, cl, b, 0, 10, size)
		if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: b, Length: 10 * size, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
			t.Fatal(err)
		}
	}
	follower.restart(t, nodes, pc)
	for b := uint64(2); b < 12; b++ {
		readBack(t, follower, b, 10*size)
	}
}

// TestDynamicPipelines: pipelines added at run time (as the meta service
// hands them out) elect a leader and take writes; Propose on the leader
// deletes a block on every replica; a removed pipeline serves nothing.
func TestDynamicPipelines(t *testing.T) {
	nodes, pc := startCluster(t)
	for _, tn := range nodes {
		tn.stop(t)
		tn.start(t) // no pipeline
	}
	announceMoved(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pc.ID = 42
	bad := pc
	bad.Members = append([]Member(nil), pc.Members...)
	bad.Members[0].ID = 9 // another member set (another address is taken as the member's new one)
	for _, tn := range nodes {
		if err := tn.node.AddPipeline(ctx, pc); err != nil {
			t.Fatal(err)
		}
		if err := tn.node.AddPipeline(ctx, pc); err != nil {
			t.Fatalf("second add: %v", err)
		}
		if err := tn.node.AddPipeline(ctx, PipelineConfig{ID: 42, Members: bad.Members}); err == nil {
			t.Fatal("pipeline re-added with other members")
		}
	}
	leader := waitLeaderOf(t, nodes, 42)
	cl := dial(t, leader.addr)
	data := chunkData(3, 0, 1000)
	sums := engine.ComputeChecksums(nil, data, bpc)
	if _, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 42, ContainerID: 7, LocalID: 3, Length: 1000, BytesPerChecksum: bpc, Checksums: sums}, data); err != nil {
		t.Fatal(err)
	}
	for _, tn := range nodes {
		if tn == leader {
			continue
		}
		err := tn.node.Propose(ctx, 42, []Command{{Kind: KindDeleteBlock, Ref: transport.GetBlock{ContainerID: 7, LocalID: 3}}})
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("propose on a follower: %v, want ErrNotLeader", err)
		}
		break
	}
	if err := leader.node.Propose(ctx, 42, []Command{{Kind: KindDeleteBlock, Ref: transport.GetBlock{ContainerID: 7, LocalID: 3}}}); err != nil {
		t.Fatal(err)
	}
	for _, tn := range nodes {
		deadline := time.Now().Add(waitBound)
		for {
			_, err := tn.eng.ReadChunk(engine.BlockID{Container: 7, Local: 3}, 0, 1000, nil)
			if errors.Is(err, engine.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: block not deleted: %v", tn.id, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, tn := range nodes {
		if err := tn.node.RemovePipeline(ctx, 42); err != nil {
			t.Fatal(err)
		}
		if len(tn.node.Pipelines()) != 0 {
			t.Fatalf("node %d still serves %v", tn.id, tn.node.Pipelines())
		}
	}
	_, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 42, ContainerID: 7, LocalID: 4, Length: 1000, BytesPerChecksum: bpc, Checksums: sums}, data)
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != transport.StatusNotFound {
		t.Fatalf("write to a removed pipeline: %v, want NOT_FOUND", err)
	}
}

// TestPeerRestartedOnANewAddress: a follower restarts on another port (as
// `--listen 127.0.0.1:0` does). Once the others are told its new address
// (UpdatePeers, from the meta service's heartbeat response) they reach it
// there, without a restart: it catches up and takes new writes. Before,
// a peer kept one address per process and the restarted follower was never
// reached again.
func TestPeerRestartedOnANewAddress(t *testing.T) {
	nodes, pc := startCluster(t)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	const size = 2048
	writeChunks(t, cl, 1, 0, 4, size)
	var follower *testNode
	for _, tn := range nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	follower.stop(t)
	writeChunks(t, cl, 1, 4*size, 4, size)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	follower.addr, follower.ln = ln.Addr().String(), ln
	// Its own pipeline list still names the others where they are.
	follower.start(t, pc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tn := range nodes {
		if tn != follower {
			if err := tn.node.UpdatePeers(ctx, []Member{{ID: follower.id, Addr: follower.addr}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeChunks(t, cl, 1, 8*size, 4, size)
	readBack(t, follower, 1, 12*size)
	for _, st := range leader.node.Pipelines() {
		for _, m := range st.Members {
			if m.ID == follower.id && m.Addr != follower.addr {
				t.Fatalf("leader lists member %d at %s, want %s", m.ID, m.Addr, follower.addr)
			}
		}
	}
}

// TestListenerDeathFailsTheNode: the listener the node serves on goes away
// under it (as a demux closes it): the node can take no raft message and
// no client request any more, so it fails (its process exits and the meta
// service sees it DEAD) instead of running on as if healthy. Before, the
// Serve error was written to a channel nobody read.
func TestListenerDeathFailsTheNode(t *testing.T) {
	dir := t.TempDir()
	eng, err := engine.Open(engine.Config{DataDirs: []string{dir + "/data"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, eng)
	wl, err := wal.Open(wal.Config{Dir: dir + "/log", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, wl)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(Config{ID: 1, Listener: ln, Engine: eng, Log: wl, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// Its listener is closed under it on purpose: Close reports the node's failure.
	defer func() { _ = n.Close() }()
	closeT(t, ln)
	select {
	case <-n.Stopped():
	case <-time.After(waitBound):
		t.Fatal("the node runs on without its listener")
	}
	if err := n.Err(); err == nil || !strings.Contains(err.Error(), "serving") {
		t.Fatalf("node error %v, want the serving failure", err)
	}
}

// TestLeaderReportsAFollowerBehindItsCompactedLog: a follower down while
// the leader's log moved past MaxRetainEntries cannot be caught up from
// the log; the leader lists it as behind in its pipeline status (the
// heartbeat carries it to the meta service, which closes the pipeline and
// has the replica replaced).
func TestLeaderReportsAFollowerBehindItsCompactedLog(t *testing.T) {
	nodes, pc := startCluster(t)
	for _, tn := range nodes {
		tn.stop(t)
		tn.retain, tn.every, tn.maxRetain = 10, 10, 20
		tn.start(t, pc)
	}
	announceMoved(t, nodes)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var follower *testNode
	for _, tn := range nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	follower.stop(t)
	for b := uint64(2); b < 10; b++ {
		cs := writeChunks(t, cl, b, 0, 10, 1024)
		if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: b, Length: 10 * 1024, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := leader.log.FirstIndex(1)
	if err != nil || first < 10 {
		t.Fatalf("leader's log starts at %d (%v): not compacted past the follower", first, err)
	}
	follower.restart(t, nodes, pc)
	deadline := time.Now().Add(waitBound)
	for {
		st := leader.node.Pipelines()
		if len(st) == 1 && slices.Contains(st[0].Behind, follower.id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader status %+v: follower %d not reported behind", st, follower.id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closeT closes c and fails the test on an error: a Close that fails is a
// bug of the code under test (make lint's errcheck).
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
