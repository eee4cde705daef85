package bench

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/vfs"
)

// A bounded floor run does exactly its writes, measures CPU and leaves
// nothing behind in its directory.
func TestReplicationFloorRunsItsWritesAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	f, err := RunReplicationFloor(context.Background(), FloorConfig{Dir: dir, Clients: 4, ChunkSizeBytes: 40 << 10, BytesPerChecksum: 16 << 10, MaxOps: 50})
	if err != nil {
		t.Fatal(err)
	}
	if f.Ops != 50 || f.Bytes != 50*40<<10 {
		t.Fatalf("ops %d bytes %d, want 50 and %d", f.Ops, f.Bytes, 50*40<<10)
	}
	if f.Seconds <= 0 || f.OpsPerS <= 0 || f.MBPerS <= 0 || f.CPUUse == nil || f.CPUSeconds <= 0 || f.CPUSecondsPerGB <= 0 || f.CPUUsPerOp <= 0 {
		t.Fatalf("rates and CPU not measured: %+v", f)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("left in %s: %v (%v)", dir, ents, err)
	}
}

// The replicas' files stay within MaxBytesPerReplica: past it they are
// written again from their start.
func TestReplicationFloorBoundsItsFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := FloorConfig{Dir: dir, Clients: 2, ChunkSizeBytes: 4 << 10, MaxOps: 40, MaxBytesPerReplica: 32 << 10}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	// Served by hand to look at a file before the run removes it.
	a, b := pipePair(t)
	f, err := os.Create(dir + "/r")
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, f)
	data := make([]byte, cfg.ChunkSizeBytes)
	FillPseudoRandom(data, 3)
	r := &floorReplica{cfg: &cfg, conn: b, file: f, fileMax: 16 << 10, sums: engine.ComputeChecksums(nil, data, cfg.BytesPerChecksum)}
	done := make(chan error, 1)
	go func() { done <- r.serve() }()
	var ack [1]byte
	for range 10 {
		if _, err := a.Write(data); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Read(ack[:]); err != nil {
			t.Fatal(err)
		}
	}
	testutil.CloseT(t, a)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 16<<10 {
		t.Fatalf("file of %v bytes (%v), want 16 KiB", st.Size(), err)
	}
}

// A chunk whose bytes do not match their checksums fails the replica.
func TestReplicationFloorReplicaChecksPieces(t *testing.T) {
	cfg, err := FloorConfig{Dir: t.TempDir(), Clients: 1, ChunkSizeBytes: 32 << 10, MaxOps: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	a, b := pipePair(t)
	f, err := os.Create(cfg.Dir + "/r")
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, f)
	data := make([]byte, cfg.ChunkSizeBytes)
	r := &floorReplica{cfg: &cfg, conn: b, file: f, fileMax: 1 << 20, sums: engine.ComputeChecksums(nil, data, cfg.BytesPerChecksum)}
	done := make(chan error, 1)
	go func() { done <- r.serve() }()
	data[20<<10] ^= 1 // the second piece
	if _, err := a.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "piece 1 does not match") {
		t.Fatalf("serve: %v, want piece 1's mismatch", err)
	}
}

func TestReplicationFloorRefusesBadConfigs(t *testing.T) {
	for _, c := range []FloorConfig{
		{Clients: 1, ChunkSizeBytes: 1, MaxOps: 1},
		{Dir: "x", Clients: 0, ChunkSizeBytes: 1, MaxOps: 1},
		{Dir: "x", Clients: MaxWorkers + 1, ChunkSizeBytes: 1, MaxOps: 1},
		{Dir: "x", Clients: 1, ChunkSizeBytes: 0, MaxOps: 1},
		{Dir: "x", Clients: 1, ChunkSizeBytes: MaxFloorChunkBytes + 1, MaxOps: 1},
		{Dir: "x", Clients: 1, ChunkSizeBytes: 1},
		{Dir: "x", Clients: 1, ChunkSizeBytes: 1, Duration: -time.Second, MaxOps: 1},
		{Dir: "x", Clients: 1, ChunkSizeBytes: 2, MaxOps: 1, MaxBytesPerReplica: 1},
	} {
		if _, err := RunReplicationFloor(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// pipePair is a synchronous in-memory connection (net.Pipe), closed at
// the end of the test.
func pipePair(t *testing.T) (net.Conn, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { testutil.CloseT(t, a); testutil.CloseT(t, b) })
	return a, b
}

// TestFloorBoundFollowsTheRoom: a replica's default bound is 8 GiB at
// most, and a quarter of the room on the directory's filesystem, so that
// three replicas on tmpfs (memory) leave a quarter of it free; a directory
// not made yet is measured on its nearest existing ancestor.
func TestFloorBoundFollowsTheRoom(t *testing.T) {
	if got := floorMaxBytes(24 << 30); got != 6<<30 {
		t.Fatalf("24 GiB of room: %d bytes per replica, want 6 GiB", got)
	}
	if got := floorMaxBytes(1 << 40); got != floorDefaultMaxBytes {
		t.Fatalf("1 TiB of room: %d bytes per replica, want %d", got, floorDefaultMaxBytes)
	}
	dir := t.TempDir()
	c, err := FloorConfig{Dir: filepath.Join(dir, "not", "yet"), Clients: 1, ChunkSizeBytes: 1, MaxOps: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	du, err := vfs.Default.GetDiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxBytesPerReplica <= 0 || c.MaxBytesPerReplica > int64(du.AvailBytes/4)+(1<<20) {
		t.Fatalf("default bound %d with %d bytes of room", c.MaxBytesPerReplica, du.AvailBytes)
	}
}
