package engine

import (
	"bytes"
	"os"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestCheckWrite: CheckWrite answers, without bytes, what WriteChunk would
// do — and the WriteChunk that follows agrees with it.
func TestCheckWrite(t *testing.T) {
	e := openMem(t, vfs.NewMem(), func(c *Config) { c.MaxContainerSizeBytes = 8192 })
	defer e.Close()
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	first := writeBlock(t, e, b, 1024)
	sums := func(off uint64, n int) []uint32 { return ComputeChecksums(nil, content(b, off, n), testBPC) }

	stored, err := e.CheckWrite(b, 0, 1024, testBPC, first.Chunks[0].Checksums)
	if err != nil || !stored {
		t.Fatalf("the chunk written: stored %v, err %v; want stored", stored, err)
	}
	stored, err = e.CheckWrite(b, 1024, 1024, testBPC, sums(1024, 1024))
	if err != nil || stored {
		t.Fatalf("the next chunk: stored %v, err %v; want to be written", stored, err)
	}
	_, err = e.CheckWrite(b, 4096, 1024, testBPC, sums(4096, 1024))
	wantErr(t, err, ErrHole)
	_, err = e.CheckWrite(b, 0, 1024, testBPC, sums(1024, 1024)) // other bytes at 0
	wantErr(t, err, ErrOverlap)
	_, err = e.CheckWrite(b, 1024, 1024, 1024, ComputeChecksums(nil, content(b, 1024, 1024), 1024))
	wantErr(t, err, ErrInvalid)
	_, err = e.CheckWrite(b, 1024, 8192, testBPC, sums(1024, 8192))
	wantErr(t, err, ErrContainerFull)
	_, err = e.CheckWrite(BlockID{Container: 2, Local: 1}, 0, 1024, testBPC, sums(0, 1024))
	wantErr(t, err, ErrNotFound)

	// The write it said would happen happens.
	if _, err := writeChunk(e, b, 1024, 1024); err != nil {
		t.Fatal(err)
	}
	mustNo(t, e.CloseContainer(1))
	_, err = e.CheckWrite(b, 2048, 1024, testBPC, sums(2048, 1024))
	wantErr(t, err, ErrNotOpen)
}

// TestBlockFilePath: BlockFilePath names the file a block's bytes are in.
func TestBlockFilePath(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(Config{DataDirs: []string{dir}, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	b := BlockID{Container: 7, Local: 3}
	mustNo(t, e.CreateContainer(b.Container))
	bd := writeBlock(t, e, b, 1000)
	mustNo(t, e.PutBlock(bd, 1))
	got, err := os.ReadFile(BlockFilePath(dir, b))
	if err != nil || !bytes.Equal(got, content(b, 0, 1000)) {
		t.Fatalf("BlockFilePath(%s, %v): %d bytes (%v), want the block's 1000", dir, b, len(got), err)
	}
}
