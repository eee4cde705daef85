package datanode

import (
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

func TestReportQueue(t *testing.T) {
	q := newReportQueue[int](5)
	q.add(1, 2, 3)
	q.add(4, 5, 6, 7) // 6 and 7 do not fit
	if got := q.take(2); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("take 2: %v", got)
	}
	q.putBack([]int{1, 2}) // a failed heartbeat: back in front
	if got := q.take(10); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("take all: %v", got)
	}
	q.add(8, 9, 10, 11)
	q.putBack([]int{1, 2}) // no longer fits: dropped
	if got := q.take(10); !slices.Equal(got, []int{8, 9, 10, 11}) {
		t.Fatalf("after a put-back that does not fit: %v", got)
	}
	if got := q.take(3); len(got) != 0 {
		t.Fatalf("empty queue gave %v", got)
	}
}

// TestContainerReportsCarryTheBCSID: a heartbeat's container reports carry
// each replica's BCSID, state and bytes.
func TestContainerReportsCarryTheBCSID(t *testing.T) {
	e, err := engine.Open(engine.Config{DataDirs: []string{t.TempDir()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, e)
	put := func(cid engine.ContainerID, bcsid uint64) {
		t.Helper()
		b := engine.BlockID{Container: cid, Local: 1}
		data := make([]byte, 1000)
		sums := engine.ComputeChecksums(nil, data, 512)
		if err := e.WriteChunk(b, 0, data, 512, sums); err != nil {
			t.Fatal(err)
		}
		if err := e.PutBlock(&engine.BlockData{ID: b, Length: 1000, BytesPerChecksum: 512,
			Chunks: []engine.ChunkInfo{{Length: 1000, Checksums: sums}}}, bcsid); err != nil {
			t.Fatal(err)
		}
	}
	for _, cid := range []engine.ContainerID{7, 8, 9} {
		if err := e.CreateContainer(cid); err != nil {
			t.Fatal(err)
		}
	}
	put(7, 33)
	if err := e.CloseContainer(7); err != nil {
		t.Fatal(err)
	}
	put(8, 12)
	got, used := containerReports(e)
	want := []metaapi.ContainerReport{
		{ID: 7, State: metaapi.ContainerClosed, UsedBytes: 1000, BCSID: 33},
		{ID: 8, State: metaapi.ContainerOpen, UsedBytes: 1000, BCSID: 12},
		{ID: 9, State: metaapi.ContainerOpen},
	}
	if !reflect.DeepEqual(got, want) || used != 2000 {
		t.Fatalf("reports %+v (%d bytes), want %+v (2000)", got, used, want)
	}
	// On the wire, as the meta service reads it.
	b, err := json.Marshal(got[0])
	if err != nil || !strings.Contains(string(b), `"bcsid":33`) {
		t.Fatalf("report JSON %s: %v", b, err)
	}
}
