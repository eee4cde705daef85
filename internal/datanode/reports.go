package datanode

import (
	"sync"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// containerReports is the container part of a heartbeat: every container
// of eng with its state, bytes and BCSID (the meta service ranks a CLOSED
// container's replicas by it) and its damaged blocks (at most
// metaapi.MaxDamagedBlocksReport in all, the lowest container IDs first),
// and the bytes of them all.
func containerReports(eng *engine.Engine) (reports []metaapi.ContainerReport, usedBytes uint64) {
	damageLeft := metaapi.MaxDamagedBlocksReport
	for _, c := range eng.ListContainers() {
		r := metaapi.ContainerReport{ID: uint64(c.ID), State: c.State.String(), UsedBytes: c.UsedBytes, BCSID: c.BCSID}
		if c.State == engine.StateClosed && len(c.DamagedBlocks) > 0 && damageLeft > 0 {
			r.DamagedBlocks = c.DamagedBlocks[:min(len(c.DamagedBlocks), damageLeft)]
			damageLeft -= len(r.DamagedBlocks)
		}
		reports = append(reports, r)
		usedBytes += c.UsedBytes
	}
	return reports, usedBytes
}

// reportQueue holds reports for the next heartbeats — deletion
// acknowledgements, copy failures — at most max of them: beyond, new ones
// are dropped (the meta service resends what it does not hear of). A
// heartbeat takes at most a report's worth; a failed heartbeat puts what
// it took back in front, when it fits. Safe for concurrent use.
type reportQueue[T any] struct {
	mu    sync.Mutex
	max   int
	items []T
}

func newReportQueue[T any](max int) *reportQueue[T] { return &reportQueue[T]{max: max} }

// add appends vs, as many as fit.
func (q *reportQueue[T]) add(vs ...T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	vs = vs[:min(len(vs), max(q.max-len(q.items), 0))]
	q.items = append(q.items, vs...)
}

// take removes and returns the first n (at most).
func (q *reportQueue[T]) take(n int) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(len(q.items), n)
	out := append([]T(nil), q.items[:n]...)
	q.items = append(q.items[:0], q.items[n:]...)
	return out
}

// putBack returns vs, taken for a heartbeat that failed, in front, unless
// they no longer fit.
func (q *reportQueue[T]) putBack(vs []T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items)+len(vs) <= q.max {
		q.items = append(vs, q.items...)
	}
}
