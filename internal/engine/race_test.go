package engine

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestPutBlockDuringLaterChunkWrite: a PutBlock of a block's first chunks
// while a later chunk of the same block is being written (as a pipeline's
// apply worker does while its append worker writes) must not make that
// write fail. The interleaving is forced: the later chunk's pwrite is
// parked in the file system (its range already reserved, its pending entry
// behind the earlier chunks') while the PutBlock commits some or all of the
// earlier chunks, which moves that entry down the pending list; then the
// pwrite is let go. The bug this guards against was the write looking for
// its entry where it had left it.
func TestPutBlockDuringLaterChunkWrite(t *testing.T) {
	const size = 512
	const written = 3 // chunks written (not committed) before the parked one
	for commit := 1; commit <= written; commit++ {
		t.Run(fmt.Sprintf("commit %d of %d", commit, written), func(t *testing.T) {
			fs := vfs.NewMem()
			e := openMem(t, fs)
			defer closeT(t, e)
			mustNo(t, e.CreateContainer(1))
			b := BlockID{Container: 1, Local: 1}
			sizes := make([]int, written)
			for i := range sizes {
				sizes[i] = size
			}
			bd := writeBlock(t, e, b, sizes...)

			parked, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			fs.InjectErrors(func(op vfs.Op) error {
				if op.Kind == vfs.OpWrite && strings.HasSuffix(op.Path, ".blk") && op.Offset == written*size {
					once.Do(func() { close(parked); <-release })
				}
				return nil
			})
			var next ChunkInfo
			done := make(chan error)
			go func() {
				var err error
				next, err = writeChunk(e, b, written*size, size)
				done <- err
			}()
			<-parked // the later chunk is reserved and its pwrite is in progress
			put := &BlockData{ID: b, BytesPerChecksum: testBPC, Length: uint64(commit * size), Chunks: bd.Chunks[:commit]}
			mustNo(t, e.PutBlock(put, 0))
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("chunk write during a PutBlock of earlier chunks: %v", err)
			}
			fs.InjectErrors(nil)

			bd.Chunks = append(bd.Chunks, next)
			bd.Length += size
			mustNo(t, e.PutBlock(bd, 0))
			mustNo(t, e.Sync())
			checkBlock(t, e, b, bd.Length)
			e2 := openMem(t, fs.CrashClone(0, nil))
			defer closeT(t, e2)
			checkBlock(t, e2, b, bd.Length)
		})
	}
}
