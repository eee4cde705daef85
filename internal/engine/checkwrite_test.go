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
	defer closeT(t, e)
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
	// The room is not CheckWrite's to judge (WriteReplicatedChunk does
	// not check it): CheckRoom does, for the leader.
	if _, err = e.CheckWrite(b, 1024, 8192, testBPC, sums(1024, 8192)); err != nil {
		t.Fatalf("a chunk past the room: %v; CheckWrite does not judge the room", err)
	}
	wantErr(t, e.CheckRoom(1, 8192), ErrContainerFull)
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
	defer closeT(t, e)
	b := BlockID{Container: 7, Local: 3}
	mustNo(t, e.CreateContainer(b.Container))
	bd := writeBlock(t, e, b, 1000)
	mustNo(t, e.PutBlock(bd, 1))
	got, err := os.ReadFile(BlockFilePath(dir, b))
	if err != nil || !bytes.Equal(got, content(b, 0, 1000)) {
		t.Fatalf("BlockFilePath(%s, %v): %d bytes (%v), want the block's 1000", dir, b, len(got), err)
	}
}

// TestReplicatedWriteIgnoresTheRoom: WriteReplicatedChunk stores a chunk
// past the container's maximum size (its log's leader decided the room,
// CheckRoom), where WriteChunk refuses it; CheckRoom then refuses more;
// the block commits, and a chunk past the room adopted after a reopen is
// adopted (it was written).
func TestReplicatedWriteIgnoresTheRoom(t *testing.T) {
	fs := vfs.NewMem()
	cfg := func(c *Config) { c.MaxContainerSizeBytes = 4096 }
	e := openMem(t, fs, cfg)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	bd := writeBlock(t, e, b, 3072)
	mustNo(t, e.CheckRoom(1, 1024))
	wantErr(t, e.CheckRoom(1, 2048), ErrContainerFull)
	mustNo(t, e.CheckRoom(9, 1<<40)) // not here: a pipeline's first write creates it
	data := content(b, 3072, 2048)
	sums := ComputeChecksums(nil, data, testBPC)
	wantErr(t, e.WriteChunk(b, 3072, data, testBPC, sums), ErrContainerFull)
	mustNo(t, e.WriteReplicatedChunk(b, 3072, data, testBPC, sums, false, false))
	bd.Chunks = append(bd.Chunks, ChunkInfo{Offset: 3072, Length: 2048, Checksums: sums})
	bd.Length += 2048
	mustNo(t, e.PutBlock(bd, 4))
	wantErr(t, e.CheckRoom(1, 1), ErrContainerFull)

	// A chunk past the room, durable, not committed: adopted after a reopen.
	more := content(b, 5120, 1024)
	moreSums := ComputeChecksums(nil, more, testBPC)
	mustNo(t, e.WriteReplicatedChunk(b, 5120, more, testBPC, moreSums, false, false))
	mustNo(t, e.Sync())
	mustNo(t, e.Close())
	e = openMem(t, fs, cfg)
	defer closeT(t, e)
	mustNo(t, e.AdoptChunk(b, 5120, 1024, testBPC, moreSums))
	got, err := e.ReadChunk(b, 5120, 1024, nil)
	if err != nil || !bytes.Equal(got, more) {
		t.Fatalf("adopted chunk read back: %v", err)
	}
}

// TestCheckRoomRefusesAClosedContainer: a pipeline's leader does not
// propose a chunk to a CLOSED container (the log would refuse it on every
// replica, and a follower caught up later would get it without its bytes
// and fail): CheckRoom says ErrNotOpen, however much room is left. Without
// the state check it says nil.
func TestCheckRoomRefusesAClosedContainer(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	mustNo(t, e.CreateContainer(1))
	writeBlock(t, e, BlockID{Container: 1, Local: 1}, 1024)
	mustNo(t, e.CheckRoom(1, 1024))
	mustNo(t, e.CloseContainer(1))
	wantErr(t, e.CheckRoom(1, 1), ErrNotOpen)
}
