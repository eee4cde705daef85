package datanode

import (
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Block counts in container reports (metaapi.ContainerReport.Blocks, shown
// by spindle admin containers). The engine keeps no count: blockCounter
// counts a container's block records with engine.ListBlocks and keeps the
// count while the container's BCSID, state and bytes stay as they were
// (a new block comes with a PutBlock, which moves the BCSID; a deleted one
// lowers the bytes, unless it was empty), and counts every container again
// every recountEveryReports reports in any case. Counting is bounded per
// report (maxBlocksCountedPerReport records): a container not counted yet
// is reported without a count (0, omitted) until a later report counts it.
//
// Concurrency: the heartbeat goroutine only.

const (
	// maxBlocksCountedPerReport bounds the block records one report reads.
	maxBlocksCountedPerReport = 50000
	// recountEveryReports is how often every count is taken again.
	recountEveryReports = 60
)

// blockCount is a container's count and what it was taken at.
type blockCount struct {
	bcsid, usedBytes uint64
	state            string
	blocks           uint64
}

type blockCounter struct {
	counts  map[uint64]blockCount
	reports uint64
	budget  int // block records one report may read (maxBlocksCountedPerReport)
}

func newBlockCounter() *blockCounter {
	return &blockCounter{counts: map[uint64]blockCount{}, budget: maxBlocksCountedPerReport}
}

// fill sets Blocks in reports (those of eng's containers), counting the
// containers whose count is missing or stale within the report's budget,
// and forgets the containers no longer reported.
func (bc *blockCounter) fill(eng *engine.Engine, reports []metaapi.ContainerReport) {
	bc.reports++
	recountAll := bc.reports%recountEveryReports == 0
	budget := bc.budget
	seen := make(map[uint64]bool, len(reports))
	for i := range reports {
		r := &reports[i]
		seen[r.ID] = true
		old, ok := bc.counts[r.ID]
		if ok && !recountAll && old.bcsid == r.BCSID && old.state == r.State && old.usedBytes <= r.UsedBytes &&
			(old.usedBytes == r.UsedBytes || r.State == metaapi.ContainerOpen) {
			// Unchanged, or an OPEN container whose chunks grew without
			// a PutBlock: the same committed blocks.
			r.Blocks = old.blocks
			continue
		}
		n, complete := countBlocks(eng, engine.ContainerID(r.ID), &budget)
		if !complete {
			if ok {
				r.Blocks = old.blocks // the last count, until a full one
			}
			continue
		}
		bc.counts[r.ID] = blockCount{bcsid: r.BCSID, usedBytes: r.UsedBytes, state: r.State, blocks: n}
		r.Blocks = n
	}
	for id := range bc.counts {
		if !seen[id] {
			delete(bc.counts, id)
		}
	}
}

// countBlocks counts container id's block records, page by page, charging
// *budget; complete is false when the budget ran out or a page failed.
func countBlocks(eng *engine.Engine, id engine.ContainerID, budget *int) (n uint64, complete bool) {
	var after uint64
	for first := true; *budget > 0; first = false {
		// One more than the budget: a page shorter than asked is the end.
		limit := min(*budget+1, engine.ListBlocksMax)
		page, err := eng.ListBlocks(id, after, first, limit)
		if err != nil {
			return n, false
		}
		*budget -= len(page)
		n += uint64(len(page))
		if len(page) < limit {
			return n, true
		}
		after = page[len(page)-1].ID.Local
	}
	return n, false
}
