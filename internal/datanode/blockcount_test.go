package datanode

import (
	"io"
	"log/slog"
	"testing"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Container reports carry the containers' block counts: counted within a
// report's budget (a container that does not fit is counted by a later
// report), kept while nothing changed, counted again after a PutBlock or
// a deletion.
func TestContainerReportsCountBlocks(t *testing.T) {
	e, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, e)
	bcsid := uint64(0)
	put := func(cid engine.ContainerID, local uint64) {
		t.Helper()
		b := engine.BlockID{Container: cid, Local: local}
		data := make([]byte, 100)
		sums := engine.ComputeChecksums(nil, data, 512)
		if err := e.WriteChunk(b, 0, data, 512, sums); err != nil {
			t.Fatal(err)
		}
		bcsid++
		if err := e.PutBlock(&engine.BlockData{ID: b, Length: 100, BytesPerChecksum: 512,
			Chunks: []engine.ChunkInfo{{Length: 100, Checksums: sums}}}, bcsid); err != nil {
			t.Fatal(err)
		}
	}
	for _, cid := range []engine.ContainerID{1, 2} {
		if err := e.CreateContainer(cid); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 1)
	put(1, 2)
	for l := range uint64(3) {
		put(2, l+1)
	}
	bc := newBlockCounter()
	bc.budget = 3
	counts := func() map[uint64]uint64 {
		rs, _ := containerReports(e)
		bc.fill(e, rs)
		m := map[uint64]uint64{}
		for _, r := range rs {
			m[r.ID] = r.Blocks
		}
		return m
	}
	want := func(step string, got map[uint64]uint64, c1, c2 uint64) {
		t.Helper()
		if got[1] != c1 || got[2] != c2 {
			t.Errorf("%s: blocks %v, want 1:%d 2:%d", step, got, c1, c2)
		}
	}
	// Budget 3: container 1 (2 blocks) fits, container 2 (3 more) does not.
	want("first report", counts(), 2, 0)
	// Container 1 unchanged costs nothing: container 2 is counted now.
	want("second report", counts(), 2, 3)
	put(1, 3)
	want("after a PutBlock", counts(), 3, 3)
	if err := e.CloseContainer(2); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteBlock(engine.BlockID{Container: 2, Local: 2}); err != nil {
		t.Fatal(err)
	}
	want("after closing and a deletion", counts(), 3, 2)
	if err := e.DeleteContainer(1, true); err != nil {
		t.Fatal(err)
	}
	counts()
	if _, ok := bc.counts[1]; ok {
		t.Error("a deleted container's count is still kept")
	}
	// On the wire.
	rs, _ := containerReports(e)
	bc.fill(e, rs)
	if len(rs) != 1 || rs[0].Blocks != 2 || rs[0].State != metaapi.ContainerClosed {
		t.Errorf("reports %+v", rs)
	}
}
