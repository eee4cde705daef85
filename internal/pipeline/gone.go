package pipeline

import (
	"sync"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// Catch-up over a deleted block (CHAOS_FINDINGS §1). A leader catching a
// follower up reads back from its engine the chunks its cache no longer
// holds; a chunk of a block deleted since cannot be read back and goes
// without its bytes, which the follower would take for a chunk the leader
// lost, and leave the pipeline (writeMissing). So each node remembers, per
// pipeline, the blocks whose DeleteBlock it applied and at which index D
// (goneBlocks); the leader sends D with the missing chunk
// (transport.RaftMessage.GoneAt); and the follower, for a chunk at an
// index below D, records D durably in its engine (engine.MarkGone) before
// it acknowledges the entry instead of storing the chunk. The
// DeleteBlock at D is committed (the leader applied it), so every replica
// holds the same thing once it is applied here: no block. Until then the
// engine excuses the block's puts below D, also after a crash.

// maxGoneBlocks bounds a pipeline's goneBlocks: past it, deletes are not
// remembered, and a follower caught up over one leaves the pipeline as
// before (safe: its containers are copied).
const maxGoneBlocks = 1 << 16

// goneBlocks holds, for one pipeline, the blocks this node applied a
// DeleteBlock of while the log still holds entries before it, by that
// entry's index. Written by the apply worker (note, prune), read by peer
// writers (at): guarded by mu.
type goneBlocks struct {
	mu sync.Mutex
	at map[[2]uint64]uint64
}

// note records that the DeleteBlock of container/local was applied here
// at index.
func (gb *goneBlocks) note(container, local, index uint64) {
	gb.mu.Lock()
	defer gb.mu.Unlock()
	if _, ok := gb.at[[2]uint64{container, local}]; !ok && len(gb.at) >= maxGoneBlocks {
		return
	} else if gb.at == nil {
		gb.at = map[[2]uint64]uint64{}
	}
	gb.at[[2]uint64{container, local}] = index
}

// deletedAt returns the index at which this node applied the DeleteBlock
// of container/local (0: none remembered).
func (gb *goneBlocks) deletedAt(container, local uint64) uint64 {
	if gb == nil {
		return 0
	}
	gb.mu.Lock()
	defer gb.mu.Unlock()
	return gb.at[[2]uint64{container, local}]
}

// prune forgets the deletes at or below index compacted: the log keeps
// no entry before them, so no catch-up sends a chunk they excuse.
func (gb *goneBlocks) prune(compacted uint64) {
	gb.mu.Lock()
	defer gb.mu.Unlock()
	for k, d := range gb.at {
		if d <= compacted {
			delete(gb.at, k)
		}
	}
}

// excuseGone handles a chunk at index that came without its bytes because
// its block is deleted by the committed entry at deleteIndex > index: the
// engine records that durably (creating the container, as a write would)
// and the chunk is not stored.
func (n *Node) excuseGone(g *group, w *transport.WriteChunk, deleteIndex uint64) error {
	b := engine.BlockID{Container: engine.ContainerID(w.ContainerID), Local: w.LocalID}
	err := n.inContainer(g, b.Container, func() error { return n.eng.MarkGone(b, deleteIndex) })
	if err == nil {
		n.metrics.goneChunks.Inc()
	}
	return err
}
