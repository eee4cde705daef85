package datanode

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestScrubberPass: one pass verifies the CLOSED containers only (not the
// OPEN one), finds a flipped byte without any read, counts it, and the
// container report lists the damaged block; a second pass within the
// interval scrubs nothing.
func TestScrubberPass(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.Open(engine.Config{DataDirs: []string{dir}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, e)
	put := func(b engine.BlockID) {
		t.Helper()
		data := make([]byte, 3000)
		for i := range data {
			data[i] = byte(i * 7)
		}
		sums := engine.ComputeChecksums(nil, data, 512)
		if err := e.WriteChunk(b, 0, data, 512, sums); err != nil {
			t.Fatal(err)
		}
		if err := e.PutBlock(&engine.BlockData{ID: b, Length: 3000, BytesPerChecksum: 512,
			Chunks: []engine.ChunkInfo{{Length: 3000, Checksums: sums}}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, cid := range []engine.ContainerID{1, 2} {
		if err := e.CreateContainer(cid); err != nil {
			t.Fatal(err)
		}
		put(engine.BlockID{Container: cid, Local: 1})
		put(engine.BlockID{Container: cid, Local: 2})
	}
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := e.CloseContainer(1); err != nil {
		t.Fatal(err)
	}
	for _, b := range []engine.BlockID{{Container: 1, Local: 2}, {Container: 2, Local: 1}} {
		f, err := os.OpenFile(engine.BlockFilePath(dir, b), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{0xee}, 1000); err != nil {
			t.Fatal(err)
		}
		closeT(t, f)
	}
	s := newScrubber(e, 1e9, time.Hour, log)
	s.pass(context.Background())
	r := s.progress()
	if r.Passes != 1 || r.ScannedBlocks != 2 || r.ScannedBytes != 6000 || r.DamageFound != 1 {
		t.Fatalf("after a pass: %+v; want 1 pass over the CLOSED container's 2 blocks, 1 damaged", r)
	}
	select {
	case <-s.found:
	default:
		t.Fatal("damage found without waking the heartbeat")
	}
	reports, _ := containerReports(e)
	for _, c := range reports {
		want := []uint64(nil)
		if c.ID == 1 {
			want = []uint64{2}
		}
		if !slices.Equal(c.DamagedBlocks, want) {
			t.Fatalf("report of container %d: damaged %v, want %v (the OPEN one is not scrubbed)", c.ID, c.DamagedBlocks, want)
		}
	}
	s.pass(context.Background())
	if r := s.progress(); r.ScannedBlocks != 2 || r.Passes != 1 {
		t.Fatalf("a second pass within the interval: %+v; want nothing scrubbed", r)
	}
	hb := &metaapi.Heartbeat{UUID: "u", Addr: "127.0.0.1:1", Containers: reports, Scrub: s.progress()}
	if err := hb.Validate(); err != nil {
		t.Fatalf("heartbeat with damage: %v", err)
	}
}

// TestVolumeCheckerBound: more failed volumes than tolerated, or all of
// them, stop the datanode; -1 tolerates any number while one works.
func TestVolumeCheckerBound(t *testing.T) {
	for _, tc := range []struct {
		tolerated, total, failed int
		stop                     bool
	}{
		{-1, 3, 2, false}, {-1, 3, 3, true}, {0, 3, 1, true}, {1, 3, 1, false}, {1, 3, 2, true}, {5, 2, 2, true},
	} {
		v := &volumeChecker{tolerated: tc.tolerated, total: tc.total}
		if got := v.tooMany(tc.failed) != ""; got != tc.stop {
			t.Errorf("tolerated %d, %d of %d failed: stop %v, want %v", tc.tolerated, tc.failed, tc.total, got, tc.stop)
		}
	}
}
