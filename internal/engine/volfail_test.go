package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestFailedVolume: a volume removed under a running engine fails at the
// next CheckVolumes; its containers leave the engine, the other volume's
// still read and take new containers, and space counts only it. At Open,
// a volume that cannot be opened is left out when tolerated, refused
// otherwise.
func TestFailedVolume(t *testing.T) {
	root := t.TempDir()
	d1, d2 := filepath.Join(root, "v1"), filepath.Join(root, "v2")
	e, err := Open(Config{DataDirs: []string{d1, d2}, FS: vfs.Default})
	mustNo(t, err)
	defer func() { closeT(t, e) }() // the engine open last: the test reopens it
	for id := ContainerID(1); id <= 4; id++ {
		mustNo(t, e.CreateContainer(id))
		mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{id, 1}, 1000), 0))
	}
	mustNo(t, e.Sync())
	on := map[string][]ContainerID{}
	for _, c := range e.ListContainers() {
		on[c.Volume] = append(on[c.Volume], c.ID)
	}
	if len(on[d1]) != 2 || len(on[d2]) != 2 {
		t.Fatalf("containers per volume: %v", on)
	}
	if got := e.CheckVolumes(); len(got) != 0 {
		t.Fatalf("healthy volumes failed: %+v", got)
	}
	mustNo(t, os.RemoveAll(d1))
	got := e.CheckVolumes()
	if len(got) != 1 || got[0].Dir != d1 || got[0].Containers != 2 {
		t.Fatalf("CheckVolumes after removing %s: %+v", d1, got)
	}
	if again := e.CheckVolumes(); len(again) != 0 {
		t.Fatalf("a failed volume failed again: %+v", again)
	}
	for _, id := range on[d1] {
		if _, err := e.Container(id); err == nil {
			t.Fatalf("container %d of the failed volume still listed", id)
		}
		if _, err := e.ReadChunk(BlockID{id, 1}, 0, 1000, nil); err == nil {
			t.Fatalf("container %d of the failed volume still read", id)
		}
	}
	for _, id := range on[d2] {
		if _, err := e.ReadChunk(BlockID{id, 1}, 0, 1000, nil); err != nil {
			t.Fatalf("container %d of the healthy volume: %v", id, err)
		}
	}
	mustNo(t, e.CreateContainer(9))
	if c, _ := e.Container(9); c.Volume != d2 {
		t.Fatalf("new container on %s, want %s", c.Volume, d2)
	}
	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{9, 1}, 1000), 0))
	mustNo(t, e.Sync())
	if len(e.FailedVolumes()) != 1 {
		t.Fatalf("failed volumes: %+v", e.FailedVolumes())
	}
	mustNo(t, e.Close())

	// At Open: a data directory that cannot be one (a file in its place).
	mustNo(t, os.WriteFile(d1, []byte("not a directory"), 0o644))
	if _, err := Open(Config{DataDirs: []string{d1, d2}, FS: vfs.Default}); err == nil {
		t.Fatal("Open with a broken volume and none tolerated succeeded")
	}
	e, err = Open(Config{DataDirs: []string{d1, d2}, FS: vfs.Default, FailedVolumesTolerated: 1})
	mustNo(t, err)
	if f := e.FailedVolumes(); len(f) != 1 || f[0].Dir != d1 {
		t.Fatalf("failed volumes at open: %+v", f)
	}
	if _, err := e.ReadChunk(BlockID{9, 1}, 0, 1000, nil); err != nil {
		t.Fatalf("the healthy volume's container after the reopen: %v", err)
	}
}
