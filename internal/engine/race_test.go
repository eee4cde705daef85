package engine

import (
	"sync"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestPutBlockDuringLaterChunkWrite: a PutBlock of a block's first chunks
// while a later chunk of the same block is being written (as a pipeline's
// apply worker does while its append worker writes) must not make that
// write fail. Each round races the two; the bug this guards against (the
// write finding its pending entry moved by the PutBlock) failed within a
// few hundred rounds.
func TestPutBlockDuringLaterChunkWrite(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer e.Close()
	mustNo(t, e.CreateContainer(1))
	const rounds, size = 2000, 512
	b := BlockID{Container: 1, Local: 1}
	bd := &BlockData{ID: b, BytesPerChecksum: testBPC}
	ch, err := writeChunk(e, b, 0, size)
	mustNo(t, err)
	bd.Chunks = append(bd.Chunks, ch)
	bd.Length = size
	for i := 1; i < rounds; i++ {
		put := &BlockData{ID: b, BytesPerChecksum: testBPC, Length: bd.Length, Chunks: append([]ChunkInfo(nil), bd.Chunks...)}
		var wg sync.WaitGroup
		var werr, perr error
		var next ChunkInfo
		wg.Add(2)
		go func() { defer wg.Done(); next, werr = writeChunk(e, b, uint64(i*size), size) }()
		go func() { defer wg.Done(); perr = e.PutBlock(put, 0) }()
		wg.Wait()
		if werr != nil {
			t.Fatalf("round %d: chunk write during a PutBlock of earlier chunks: %v", i, werr)
		}
		if perr != nil {
			t.Fatalf("round %d: put: %v", i, perr)
		}
		bd.Chunks = append(bd.Chunks, next)
		bd.Length += size
	}
	mustNo(t, e.PutBlock(bd, 0))
	checkBlock(t, e, b, bd.Length)
}
