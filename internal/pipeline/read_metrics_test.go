package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// TestReadMetrics: a datanode counts the client reads it serves and their
// bytes, and a read refused because the bytes on disk fail their CRC32C
// as read_errors_total{kind="checksum"} — what an operator watches for
// rot before the scrubber exists.
func TestReadMetrics(t *testing.T) {
	nodes, _ := startCluster(t)
	leader := waitLeader(t, nodes)
	cl := dial(t, leader.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const size = 3000
	cs := writeChunks(t, cl, 1, 0, 1, size)
	if _, err := cl.Call(ctx, &transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 5, LocalID: 1, Length: size, BytesPerChecksum: bpc, Chunks: cs}}); err != nil {
		t.Fatal(err)
	}
	read := func() error {
		_, err := cl.Call(ctx, &transport.ReadChunk{PipelineID: 1, ContainerID: 5, LocalID: 1, Offset: 0, Length: size})
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	m := leader.node.metrics
	if r, b := testCounter(t, m.chunkReads), testCounter(t, m.chunkReadBytes); r != 1 || b != size {
		t.Fatalf("reads %v, bytes %v; want 1 read of %d bytes", r, b, size)
	}
	flipBlockByte(t, leader.dataDir, 5, 1, 100)
	if err := read(); err == nil {
		t.Fatal("a read of damaged bytes succeeded")
	}
	if got := testCounter(t, m.readErrors.WithLabelValues("checksum")); got != 1 {
		t.Fatalf("checksum read errors %v, want 1", got)
	}
	if _, err := cl.Call(ctx, &transport.ReadChunk{PipelineID: 1, ContainerID: 5, LocalID: 77, Offset: 0, Length: size}); err == nil {
		t.Fatal("a read of a block that does not exist succeeded")
	}
	if got := testCounter(t, m.readErrors.WithLabelValues("not_found")); got != 1 {
		t.Fatalf("not_found read errors %v, want 1", got)
	}
}

// flipBlockByte damages one byte of a block file under a node's data
// directory (the bytes on disk, not through the engine).
func flipBlockByte(t *testing.T, dataDir string, container, local uint64, at int64) {
	t.Helper()
	if err := engine.FlipBlockByte(dataDir, engine.BlockID{Container: engine.ContainerID(container), Local: local}, at, 0xff); err != nil {
		t.Fatal(err)
	}
}
