package datanode

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestCopyOfAContainerPastItsMaximumSize: a pipeline's container can hold
// more than its maximum size (the leader alone decides the room and does
// not count the chunks in flight, engine.CheckRoom), and its copy must
// still import: the target takes the larger of the maximum size and the
// bytes used. Before, the import refused the last block with
// ErrContainerFull, and such a container could never be re-replicated.
func TestCopyOfAContainerPastItsMaximumSize(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: quiet, MaxContainerSizeBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, src)
	if err := src.CreateContainer(3); err != nil {
		t.Fatal(err)
	}
	b := engine.BlockID{Container: 3, Local: 1}
	data := make([]byte, 6000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	sums := engine.ComputeChecksums(nil, data, 512)
	if err := src.WriteReplicatedChunk(b, 0, data, 512, sums, false, false); err != nil {
		t.Fatal(err)
	}
	bd := &engine.BlockData{ID: b, BytesPerChecksum: 512, Length: 6000, Chunks: []engine.ChunkInfo{{Offset: 0, Length: 6000, Checksums: sums}}}
	if err := src.PutBlock(bd, 2); err != nil {
		t.Fatal(err)
	}
	if err := src.CloseContainer(3); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := bulk.NewServer(src, 0, quiet)
	d := bulk.NewDemux(ln, nil, s.Handle, 0)
	defer func() { closeT(t, d); d.Wait(); s.Close() }()

	dst, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: quiet, MaxContainerSizeBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, dst)
	cc := newContainerCopier(dst, nil, 2, 1, quiet)
	defer cc.cancel()
	if err := cc.copyFrom(3, "", metaapi.Member{NodeID: 1, Addr: ln.Addr().String()}); err != nil {
		t.Fatalf("copy of a container holding 6,000 bytes of a 4,096-byte maximum: %v", err)
	}
	got, err := dst.ReadChunk(b, 0, 6000, nil)
	if err != nil || string(got) != string(data) {
		t.Fatalf("copied block read back: %v", err)
	}
}
