package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/wal"
)

// What a failed chunk write (at append time) or a failed apply means for
// the replica that saw it. The rule (docs/ARCHITECTURE.md §12.3): a replica
// acknowledges a raft entry only when every chunk it carries is written
// and fsynced here, or was refused for a reason every replica shares — so
// that the leader refuses it too and no client is told it is stored.
type failureClass uint8

const (
	// refusalShared: every replica refuses the command the same way (it
	// depends only on the command and on the replicated history): a
	// checksum mismatch, a malformed request, a hole, a full container, a
	// write to a container the log closed. Answered as an error; the entry
	// is acknowledged (nothing of it is claimed stored).
	refusalShared failureClass = iota + 1
	// replicaLost: this replica alone could not store it (EIO, ENOSPC, an
	// UNHEALTHY or missing container, an overlap with a divergent chunk
	// left by an earlier leader). The entry is never acknowledged; the
	// replica stops serving the pipeline, its container replica is marked
	// UNHEALTHY, and the heartbeat tells the meta service, which closes the
	// pipeline and has the container copied from the healthy replicas.
	replicaLost
	// nodeLost: the engine or the log failed for good (a failed fsync is
	// sticky): the whole node stops.
	nodeLost
)

func (c failureClass) String() string {
	switch c {
	case refusalShared:
		return "refusal"
	case replicaLost:
		return "replica_lost"
	case nodeLost:
		return "node_lost"
	}
	return "unknown"
}

// classifyWrite says what err, from the chunk write (at append time) of a
// WriteChunk to container cid, means for this replica; proposedHere: this
// node proposed the chunk (as the pipeline's leader).
func (n *Node) classifyWrite(err error, cid uint64, proposedHere bool) failureClass {
	switch {
	case errors.Is(err, engine.ErrFailed), errors.Is(err, wal.ErrFailed), errors.Is(err, engine.ErrClosed):
		return nodeLost
	case errors.Is(err, engine.ErrChecksumMismatch) && !proposedHere:
		// Its leader verified these checksums against the bytes before
		// proposing them (handle, peer.go): bytes that fail them here are
		// not the ones it verified (damaged on the way, or sent wrong), so
		// this replica does not hold what the others hold.
		return replicaLost
	case errors.Is(err, engine.ErrChecksumMismatch), errors.Is(err, engine.ErrInvalid),
		errors.Is(err, engine.ErrHole), errors.Is(err, engine.ErrContainerFull):
		return refusalShared
	case errors.Is(err, engine.ErrNotOpen):
		return n.notOpenClass(cid)
	}
	// ErrOverlap (a divergent chunk an earlier leader's uncommitted entry
	// left here), ErrNotFound (the container could not be created),
	// ErrCorrupt, and every I/O error (EIO, ENOSPC).
	return replicaLost
}

// classifyApply says what err, from applying a committed PutBlock to
// container cid, means for this replica. The leader proposes a PutBlock
// only once its own engine holds every chunk it names (engine.CheckPut,
// peer.go), so chunks missing here — a hole, a block or container not
// found — mean this replica diverged: it must not count. A malformed
// block, a checksum or an overlap the block's own description contradicts,
// or a full container are refused alike everywhere; an UNHEALTHY
// container, damage and I/O errors are this replica's own.
func (n *Node) classifyApply(err error, cid uint64) failureClass {
	switch {
	case errors.Is(err, engine.ErrFailed), errors.Is(err, wal.ErrFailed), errors.Is(err, engine.ErrClosed):
		return nodeLost
	case errors.Is(err, engine.ErrNotOpen):
		return n.notOpenClass(cid)
	case errors.Is(err, engine.ErrCorrupt), errors.Is(err, engine.ErrHole), errors.Is(err, engine.ErrNotFound):
		return replicaLost
	case errors.Is(err, engine.ErrChecksumMismatch), errors.Is(err, engine.ErrInvalid),
		errors.Is(err, engine.ErrContainerFull), errors.Is(err, engine.ErrOverlap), errors.Is(err, engine.ErrExists):
		return refusalShared
	}
	return replicaLost
}

// notOpenClass classifies ErrNotOpen by the container's state. CLOSED
// (or OPEN again: busy being created or closed for a moment) comes from the
// log's CloseContainer: a later PutBlock of the block is refused on every
// replica alike (applies run in log order), so nothing written here is
// missing from a committed block. UNHEALTHY, DELETING or missing is this
// replica's own state.
func (n *Node) notOpenClass(cid uint64) failureClass {
	info, err := n.eng.Container(engine.ContainerID(cid))
	if err == nil && (info.State == engine.StateClosed || info.State == engine.StateOpen) {
		return refusalShared
	}
	return replicaLost
}

// MaxFailedPipelinesKept bounds the failed pipelines a node remembers (and
// reports); the oldest are forgotten first.
const MaxFailedPipelinesKept = 1024

// PipelineFailure is a pipeline this node stopped serving because its
// replica could not store what the pipeline committed or was about to.
type PipelineFailure struct {
	ID        uint64
	Container uint64 // the container whose replica failed (0: none)
	Reason    string
}

// FailedPipelines returns the pipelines this node stopped serving after a
// local failure, in pipeline ID order (for the heartbeat).
func (n *Node) FailedPipelines() []PipelineFailure {
	n.groupsMu.RLock()
	defer n.groupsMu.RUnlock()
	out := make([]PipelineFailure, 0, len(n.failedGroups))
	for _, f := range n.failedGroups {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// replicaFailed is called by a worker that saw a replicaLost failure of
// group g on container cid: the container is marked UNHEALTHY here (before
// anything else can be acknowledged for it), the event logged and
// counted, and the loop told to stop serving the group.
func (n *Node) replicaFailed(g *group, cid uint64, index uint64, op string, err error) {
	g.failed.Store(true)
	reason := fmt.Sprintf("%s at index %d failed on this replica: %v", op, index, err)
	n.metrics.replicaFailures.WithLabelValues(op).Inc()
	n.log.Error("replica failed: not acknowledging, leaving the pipeline", "pipeline", g.id, "container", cid, "index", index, "op", op, "err", err)
	if cid != 0 {
		if merr := n.eng.MarkUnhealthy(engine.ContainerID(cid), reason); merr != nil && !errors.Is(merr, engine.ErrNotFound) {
			// Its state could not be persisted: the engine is failing
			// too; nothing here may be trusted any more.
			n.fail(fmt.Errorf("pipeline %d: marking container %d UNHEALTHY: %w", g.id, cid, merr))
			return
		}
	}
	n.post(event{kind: evGroupFailed, group: g.id, failure: PipelineFailure{ID: g.id, Container: cid, Reason: reason}})
}

// stopFailedGroup stops serving a group whose replica failed (loop only):
// its waiting clients are answered UNAVAILABLE (they go to the other
// members or another pipeline), it is removed as by RemovePipeline, and it
// is remembered so that a join_pipeline does not start it again before
// the meta service has closed it.
func (n *Node) stopFailedGroup(f PipelineFailure) {
	g := n.groups[f.ID]
	if g != nil {
		for id, p := range g.pending {
			delete(g.pending, id)
			n.replyErr(p, transport.StatusUnavailable, fmt.Sprintf("pipeline %d: replica on node %d failed: %s", f.ID, n.cfg.ID, f.Reason), "")
		}
	}
	n.groupsMu.Lock()
	if len(n.failedGroups) >= MaxFailedPipelinesKept {
		var oldest uint64
		for id := range n.failedGroups {
			if oldest == 0 || id < oldest {
				oldest = id
			}
		}
		delete(n.failedGroups, oldest)
	}
	n.failedGroups[f.ID] = f
	n.groupsMu.Unlock()
	if g != nil {
		_ = n.removeGroup(f.ID)
	}
	n.pipelinesChanged.Add(1)
}

// PipelinesChanged counts the changes the node made by itself to the
// pipelines it serves (a failed replica leaving one): the owner persisting
// the list saves it again when the count moves.
func (n *Node) PipelinesChanged() uint64 { return n.pipelinesChanged.Load() }

// markBehind records that follower id is behind this leader's compacted
// log (loop only).
func (g *group) markBehind(id uint64) {
	var cur []uint64
	if b := g.behind.Load(); b != nil {
		cur = *b
	}
	if slices.Contains(cur, id) {
		return
	}
	next := append(slices.Clone(cur), id)
	slices.Sort(next)
	g.behind.Store(&next)
}
