package meta

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

func offlineUUID(i int) string { return fmt.Sprintf("%032x", 0xabc0+i) }

// offlineState writes 4 nodes, pipelines 1 {1,2,3} and 2 {2,3,4},
// containers 1 (pipeline 1: blocks 1, 2; 300 bytes) and 2 (pipeline 2:
// block 1; 100 bytes), bucket "gen" with keys "a" (1/1 + 1/2) and "b"
// (2/1).
func offlineState(t *testing.T, w *OfflineWriter) {
	t.Helper()
	for i := 1; i <= 4; i++ {
		if err := w.AddNode(uint64(i), offlineUUID(i), "127.0.0.1:1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		w.AddPipeline(1, []uint64{1, 2, 3}),
		w.AddPipeline(2, []uint64{2, 3, 4}),
		w.AddContainer(1, 1, 300, 3),
		w.AddContainer(2, 2, 100, 2),
		w.AddBucket("gen"),
		w.AddKey("gen", "a", 300, 0xdeadbeef, []metaapi.KeyBlock{
			{BlockRef: metaapi.BlockRef{Container: 1, Local: 1}, Length: 100},
			{BlockRef: metaapi.BlockRef{Container: 1, Local: 2}, Pipeline: 1, Length: 200}}),
		w.AddKey("gen", "b", 100, 7, []metaapi.KeyBlock{{BlockRef: metaapi.BlockRef{Container: 2, Local: 1}, Length: 100}}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestOfflineWriterStoreOpens: what the offline writer writes, the service
// opens: nodes, CLOSED pipelines and containers, buckets with their counts,
// keys with their blocks and replicas; counters past the highest IDs (a new
// datanode gets the next ID); a known datanode's heartbeat is accepted and
// updates its address.
func TestOfflineWriterStoreOpens(t *testing.T) {
	dir := t.TempDir()
	w, err := CreateOffline(dir)
	if err != nil {
		t.Fatal(err)
	}
	offlineState(t, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateOffline(dir); !errors.Is(err, metaapi.ErrExists) {
		t.Fatalf("CreateOffline over a store: %v, want ErrExists", err)
	}

	s, err := Open(state.Config{Dir: dir, TickInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, s)
	nodes, err := s.Nodes()
	if err != nil || len(nodes.Nodes) != 4 {
		t.Fatalf("nodes %+v %v", nodes, err)
	}
	for i, n := range nodes.Nodes {
		if n.NodeID != uint64(i+1) || n.UUID != offlineUUID(i+1) || n.Addr != "127.0.0.1:1" || len(n.Pipelines) != 0 {
			t.Fatalf("node %d: %+v", i+1, n)
		}
	}
	pl, err := s.Pipelines()
	if err != nil || len(pl.Pipelines) != 2 {
		t.Fatalf("pipelines %+v %v", pl, err)
	}
	for i, want := range [][]uint64{{1, 2, 3}, {2, 3, 4}} {
		p := pl.Pipelines[i]
		var got []uint64
		for _, m := range p.Members {
			got = append(got, m.NodeID)
		}
		if p.ID != uint64(i+1) || p.State != metaapi.PipelineClosed || !slices.Equal(got, want) {
			t.Fatalf("pipeline %d: %+v", i+1, p)
		}
	}
	cl, err := s.Containers()
	if err != nil || len(cl.Containers) != 2 {
		t.Fatalf("containers %+v %v", cl, err)
	}
	for i, c := range cl.Containers {
		if c.ID != uint64(i+1) || c.Pipeline != uint64(i+1) || c.State != metaapi.ContainerClosed {
			t.Fatalf("container %d: %+v", i+1, c)
		}
	}
	bl, err := s.ListBuckets()
	if err != nil || len(bl.Buckets) != 1 || bl.Buckets[0].Name != "gen" || bl.Buckets[0].Keys != 2 || bl.Buckets[0].Bytes != 400 {
		t.Fatalf("buckets %+v %v", bl, err)
	}
	ki, err := s.GetKey("gen", "a")
	if err != nil {
		t.Fatal(err)
	}
	if ki.Size != 300 || ki.CRC32C != 0xdeadbeef || len(ki.Blocks) != 2 {
		t.Fatalf("key a: %+v", ki)
	}
	for i, b := range ki.Blocks {
		if b.Container != 1 || b.Local != uint64(i+1) || b.Pipeline != 1 || b.Length != uint64(100*(i+1)) || len(b.Members) != 3 {
			t.Fatalf("key a block %d: %+v", i, b)
		}
	}
	kl, err := s.List("gen", namespace.ListOptions{})
	if err != nil || len(kl.Keys) != 2 || kl.Keys[1].Key != "b" || kl.Keys[1].Size != 100 || kl.Keys[1].CRC32C != 7 {
		t.Fatalf("list %+v %v", kl, err)
	}

	// The datanodes come up as the nodes the store knows.
	if _, err := s.Heartbeat(&metaapi.Heartbeat{UUID: offlineUUID(2), NodeID: 2, Addr: "127.0.0.1:7002"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(&metaapi.Heartbeat{UUID: offlineUUID(3), NodeID: 1, Addr: "127.0.0.1:7003"}); !errors.Is(err, metaapi.ErrInvalid) {
		t.Fatalf("a heartbeat claiming another node's ID: %v", err)
	}
	resp, err := s.Heartbeat(&metaapi.Heartbeat{UUID: offlineUUID(9), Addr: "127.0.0.1:7009"})
	if err != nil || resp.NodeID != 5 {
		t.Fatalf("a new datanode registers as %+v, %v; want node 5", resp, err)
	}
	ki, err = s.GetKey("gen", "b")
	if err != nil || ki.Blocks[0].Members[0].NodeID != 2 || ki.Blocks[0].Members[0].Addr != "127.0.0.1:7002" {
		t.Fatalf("key b after node 2's heartbeat: %+v %v", ki, err)
	}
}

// TestOfflineWriterRefusesBadInput: every rule is checked, and a refused
// call changes nothing (the same valid call succeeds afterwards).
func TestOfflineWriterRefusesBadInput(t *testing.T) {
	w, err := CreateOffline(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, w)
	offlineState(t, w)
	if err := w.AddContainer(3, 1, 50, 2); err != nil {
		t.Fatal(err)
	}
	blk := func(c, l, p, n uint64) metaapi.KeyBlock {
		return metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: c, Local: l}, Pipeline: p, Length: n}
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"node ID 0", w.AddNode(0, offlineUUID(5), "127.0.0.1:1"), metaapi.ErrInvalid},
		{"node ID too large", w.AddNode(state.MaxNodeID+1, offlineUUID(5), "127.0.0.1:1"), metaapi.ErrInvalid},
		{"bad UUID", w.AddNode(5, "not a uuid!", "127.0.0.1:1"), metaapi.ErrInvalid},
		{"bad address", w.AddNode(5, offlineUUID(5), "nowhere"), metaapi.ErrInvalid},
		{"node twice", w.AddNode(1, offlineUUID(5), "127.0.0.1:1"), metaapi.ErrExists},
		{"UUID twice", w.AddNode(5, offlineUUID(1), "127.0.0.1:1"), metaapi.ErrExists},
		{"pipeline ID 0", w.AddPipeline(0, []uint64{1, 2, 3}), metaapi.ErrInvalid},
		{"pipeline twice", w.AddPipeline(1, []uint64{1, 2, 3}), metaapi.ErrExists},
		{"two members", w.AddPipeline(3, []uint64{1, 2}), metaapi.ErrInvalid},
		{"member twice", w.AddPipeline(3, []uint64{1, 2, 2}), metaapi.ErrInvalid},
		{"unknown member", w.AddPipeline(3, []uint64{1, 2, 9}), metaapi.ErrInvalid},
		{"container ID 0", w.AddContainer(0, 1, 0, 1), metaapi.ErrInvalid},
		{"container twice", w.AddContainer(1, 1, 0, 1), metaapi.ErrExists},
		{"unknown pipeline", w.AddContainer(4, 9, 0, 1), metaapi.ErrInvalid},
		{"next local 0", w.AddContainer(4, 1, 0, 0), metaapi.ErrInvalid},
		{"bad bucket", w.AddBucket("Gen"), metaapi.ErrInvalid},
		{"bucket twice", w.AddBucket("gen"), metaapi.ErrExists},
		{"unknown bucket", w.AddKey("nope", "c", 50, 0, []metaapi.KeyBlock{blk(3, 1, 0, 50)}), metaapi.ErrNotFound},
		{"bad key", w.AddKey("gen", "/c", 50, 0, []metaapi.KeyBlock{blk(3, 1, 0, 50)}), metaapi.ErrInvalid},
		{"key twice", w.AddKey("gen", "a", 50, 0, []metaapi.KeyBlock{blk(3, 1, 0, 50)}), metaapi.ErrExists},
		{"unknown container", w.AddKey("gen", "c", 50, 0, []metaapi.KeyBlock{blk(9, 1, 0, 50)}), metaapi.ErrInvalid},
		{"local 0", w.AddKey("gen", "c", 50, 0, []metaapi.KeyBlock{blk(3, 0, 0, 50)}), metaapi.ErrInvalid},
		{"local not below next", w.AddKey("gen", "c", 50, 0, []metaapi.KeyBlock{blk(3, 2, 0, 50)}), metaapi.ErrInvalid},
		{"wrong pipeline", w.AddKey("gen", "c", 50, 0, []metaapi.KeyBlock{blk(3, 1, 2, 50)}), metaapi.ErrInvalid},
		{"length 0", w.AddKey("gen", "c", 0, 0, []metaapi.KeyBlock{blk(3, 1, 0, 0)}), metaapi.ErrInvalid},
		{"block of another key", w.AddKey("gen", "c", 100, 0, []metaapi.KeyBlock{blk(2, 1, 0, 100)}), metaapi.ErrInvalid},
		{"block twice", w.AddKey("gen", "c", 50, 0, []metaapi.KeyBlock{blk(3, 1, 0, 25), blk(3, 1, 0, 25)}), metaapi.ErrInvalid},
		{"past committed bytes", w.AddKey("gen", "c", 51, 0, []metaapi.KeyBlock{blk(3, 1, 0, 51)}), metaapi.ErrInvalid},
		{"size mismatch", w.AddKey("gen", "c", 49, 0, []metaapi.KeyBlock{blk(3, 1, 0, 50)}), metaapi.ErrInvalid},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	// Nothing refused was recorded: the valid forms go through now.
	for _, err := range []error{
		w.AddNode(5, offlineUUID(5), "127.0.0.1:1"),
		w.AddPipeline(3, []uint64{1, 2, 5}),
		w.AddContainer(4, 3, 0, 1),
		w.AddKey("gen", "c", 50, 0, []metaapi.KeyBlock{blk(3, 1, 1, 50)}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.AddBucket("later"); err == nil {
		t.Fatal("AddBucket after Close succeeded")
	}
}
