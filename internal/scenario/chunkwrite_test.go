package scenario

import (
	"context"
	"io"
	"os"
	"testing"
)

func TestChunkWriteLocalBounded(t *testing.T) {
	dir := t.TempDir()
	res, err := RunChunkWriteLocal(context.Background(), ChunkWriteLocalConfig{
		DataDirs: []string{dir}, ChunkSizeBytes: 4096, Clients: 4, Count: 400,
		BlockSizeBytes: 16384, RetainBytes: 4 * 65536, Containers: 2, Progress: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 400 || res.Bytes != 400*4096 {
		t.Fatalf("ops %d bytes %d, want 400 and %d", res.Ops, res.Bytes, 400*4096)
	}
	if res.Baseline == nil || res.Baseline.Ops != 400 || res.RatioToBaseline == nil {
		t.Fatalf("baseline missing: %+v", res.Baseline)
	}
	if res.Extra["sync_rounds"].(uint64) == 0 {
		t.Fatalf("no sync rounds counted: %+v", res.Extra)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("bench left %d entries in its data dir (%v)", len(left), err)
	}
}

func TestChunkWriteLocalRejectsBadConfig(t *testing.T) {
	for _, cfg := range []ChunkWriteLocalConfig{
		{ChunkSizeBytes: -1, Count: 1},
		{Clients: -3, Count: 1},
		{DataDirs: []string{"/proc/version"}, Count: 1}, // a file, not a directory
		{ChunkSizeBytes: 1024},                          // no duration, no count
	} {
		cfg.Progress = io.Discard
		if _, err := RunChunkWriteLocal(context.Background(), cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
