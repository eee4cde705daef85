package pipeline

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/wal"
)

// appendJob is one MsgStorageAppend of one group, with its entries decoded
// and their chunk bytes (ents[i] is msg.Entries[i]).
type appendJob struct {
	g       *group
	msg     *raftpb.Message
	ents    []*cachedEntry
	results []proposalResult
	// leases: the raft budget of the frames whose entries this append
	// makes durable, released by the loop once it is done.
	leases []*rxLease
}

type proposalResult struct {
	proposal uint64
	err      error
}

// applyJob is one MsgStorageApply of one group, its entries decoded, with
// the client requests they answer.
type applyJob struct {
	g    *group
	msg  *raftpb.Message
	ents []*cachedEntry
	reqs map[uint64]*proposal
	last uint64
}

// newAppendJob finds every WriteChunk entry's payload: from the cache (a
// received MsgApp's), or from this leader's pending proposals, which it
// then caches (this Ready's MsgApps to the followers need them too).
func (n *Node) newAppendJob(g *group, m *raftpb.Message) *appendJob {
	j := &appendJob{g: g, msg: m, ents: make([]*cachedEntry, len(m.GetEntries()))}
	for i, e := range m.GetEntries() {
		ce := g.entry(e, true)
		w := 0
		for ci := range ce.cmds {
			c := &ce.cmds[ci]
			if c.Kind != KindWriteChunk {
				continue
			}
			if ce.segs[w] == nil || c.Inline != nil {
				if p := g.pending[c.ProposalID]; p != nil {
					if ce.segs[w] == nil {
						ce.segs[w] = p.payload
					}
					// (an inline chunk's bytes are the entry's
					// copy of that payload, made by this leader)
					if p.verified && p.payload != nil {
						if ce.verified == nil {
							ce.verified = make([]bool, len(ce.segs))
						}
						ce.verified[w] = true
					}
				}
			}
			w++
		}
		j.ents[i] = ce
	}
	return j
}

// newApplyJob takes the pending requests the committed entries answer.
func (n *Node) newApplyJob(g *group, m *raftpb.Message) *applyJob {
	ents := m.GetEntries()
	j := &applyJob{g: g, msg: m, ents: make([]*cachedEntry, len(ents))}
	if len(ents) > 0 {
		j.last = ents[len(ents)-1].GetIndex()
	} else {
		j.last = g.applied.Load()
	}
	for i, e := range ents {
		ce := g.entry(e, false)
		j.ents[i] = ce
		if len(g.pending) == 0 {
			continue
		}
		for ci := range ce.cmds {
			id := ce.cmds[ci].ProposalID
			if p := g.pending[id]; p != nil {
				delete(g.pending, id)
				if j.reqs == nil {
					j.reqs = map[uint64]*proposal{}
				}
				j.reqs[id] = p
			}
		}
	}
	return j
}

// appendWorker makes MsgStorageAppends durable, many groups' and many
// Readies' at once: every WriteChunk's bytes are written into their block
// file, the engine syncs (one fdatasync per touched file), then the entries
// (headers only) and hard states are appended to the WAL and made durable
// (one write, one fdatasync). Only then do the responses go back to the
// loop: a replica acknowledges only what it has fsynced, log and data.
//
// Data before log record: a log record on disk implies its chunk bytes are
// durable, so recovery can always adopt them (adoptChunks) and a new leader
// can always send them. A chunk the entry carries (Command.Inline, at most
// Config.LogInlineMaxBytes) is its own record's data: its block file is
// written as a logged write, not synced in this round (no engine sync at
// all in a round of such chunks only); it is synced at its PutBlock
// (syncPutBlocks, then the engine's PutBlock) or at the checkpoint before
// compaction (maybeCompact), and replayed from the log at a restart.
// More than maxLoggedFiles files holding such writes: the round
// checkpoints.
func (n *Node) appendWorker() {
	defer n.wg.Done()
	var popped []*appendJob
	var recs []wal.Record
	for {
		popped = n.appendq.PopAll(popped[:0], n.stop)
		if popped == nil {
			return
		}
		wrote := false
		roundStart := time.Now()
		n.appendSince.Store(roundStart.UnixNano())
		chunks := 0
		// jobs, the ones to acknowledge, goes to the loop: a new slice
		// every round.
		jobs := make([]*appendJob, 0, len(popped))
		for _, j := range popped {
			if j.g.failed.Load() {
				// Nothing more of it is stored or acknowledged here.
				for _, l := range j.leases {
					l.release()
				}
				continue
			}
			var ok bool
			if chunks, wrote, ok = n.writeChunks(j, chunks, wrote); !ok {
				if n.Err() != nil {
					return
				}
				for _, l := range j.leases {
					l.release() // not acknowledged: its bytes are let go
				}
				continue
			}
			jobs = append(jobs, j)
		}
		switch {
		case n.eng.LoggedFiles() > maxLoggedFiles:
			// Too many files with inline chunks unsynced (each holds a
			// descriptor): a checkpoint, which also syncs this round's.
			if err := n.eng.SyncLogged(); err != nil {
				n.fail(fmt.Errorf("append: engine checkpoint: %w", err))
				return
			}
		case wrote:
			if err := n.eng.Sync(); err != nil {
				n.fail(fmt.Errorf("append: engine sync: %w", err))
				return
			}
		}
		recs = recs[:0]
		for _, j := range jobs {
			m := j.msg
			if s := m.GetSnapshot(); s != nil && s.GetMetadata().GetIndex() > 0 {
				// Spindle's leaders never send raft snapshots (a
				// follower behind the compacted log is caught up
				// by a container copy, outside raft).
				n.fail(fmt.Errorf("pipeline %d: raft snapshot at %d received: unsupported", j.g.id, s.GetMetadata().GetIndex()))
				return
			}
			for _, e := range m.GetEntries() {
				recs = append(recs, wal.EntryRecord(j.g.id, e.GetTerm(), e.GetIndex(), uint8(e.GetType()), e.GetData()))
			}
			if m.Term != nil {
				recs = append(recs, wal.HardStateRecord(j.g.id, wal.HardState{Term: m.GetTerm(), Vote: m.GetVote(), Commit: m.GetCommit()}))
			}
		}
		if len(recs) > 0 {
			seq, err := n.wal.Append(recs...)
			if err == nil {
				err = n.wal.WaitDurable(seq)
			}
			if err != nil {
				n.fail(fmt.Errorf("append: log: %w", err))
				return
			}
		}
		n.appendSince.Store(0)
		n.metrics.appendRounds.Inc()
		n.metrics.appendBatch.Observe(float64(chunks))
		n.metrics.appendSeconds.Observe(time.Since(roundStart).Seconds())
		if len(jobs) > 0 && !n.post(event{kind: evAppendDone, appends: jobs}) {
			return
		}
	}
}

// writeChunks writes the chunks of one append job into their block files.
// It returns false when the job must not be acknowledged: a chunk failed
// on this replica alone (the group is failed, see replicaFailed) or the
// engine failed (the node is failed). A refusal every replica shares is
// the proposal's result, answered to the client by the leader.
func (n *Node) writeChunks(j *appendJob, chunks int, wrote bool) (int, bool, bool) {
	for i, e := range j.msg.GetEntries() {
		if j.g.failed.Load() {
			return chunks, wrote, false // removed or failed meanwhile: nothing more of it here
		}
		ce := j.ents[i]
		if ce.err != nil {
			// The leader encoded it: a bug or damage. The entry's
			// commands have no effect here, nor anywhere (every replica
			// decodes the same bytes).
			n.log.Error("undecodable entry", "pipeline", j.g.id, "index", e.GetIndex(), "err", ce.err)
			continue
		}
		w := 0
		for ci := range ce.cmds {
			c := &ce.cmds[ci]
			if c.Kind != KindWriteChunk {
				continue
			}
			var err error
			deleteIndex := ce.goneAt(w)
			excused := ce.segs[w] == nil && deleteIndex > e.GetIndex()
			if excused {
				err = n.excuseGone(j.g, &c.WriteChunk, deleteIndex)
			} else {
				err = n.writeChunk(j.g, &c.WriteChunk, ce.segs[w], ce.verifiedAt(w), c.Inline != nil)
			}
			w++
			// A chunk carried in its entry is durable with the log
			// record: its file is not synced in this round. (An excused
			// one's mark is synced by MarkGone.)
			wrote = wrote || (c.Inline == nil && !excused)
			chunks++
			if err == nil {
				if !excused { // (an excused chunk is counted by excuseGone)
					if c.Inline != nil {
						n.inlineWrites.Add(1)
					}
					n.metrics.chunkWrites.Inc()
					n.metrics.chunkBytes.Add(float64(c.WriteChunk.Length))
				}
			} else if errors.Is(err, errGroupGone) {
				return chunks, wrote, false // removed meanwhile: not a failure of this replica
			} else {
				switch n.classifyWrite(err, c.WriteChunk.ContainerID, c.ProposalID>>48 == n.cfg.ID) {
				case nodeLost:
					n.fail(fmt.Errorf("append: pipeline %d index %d: write chunk: %w", j.g.id, e.GetIndex(), err))
					return chunks, wrote, false
				case replicaLost:
					n.replicaFailed(j.g, c.WriteChunk.ContainerID, e.GetIndex(), "write_chunk", err)
					return chunks, wrote, false
				default:
					n.metrics.refusals.WithLabelValues("write_chunk").Inc()
					n.log.Debug("write chunk refused", "pipeline", j.g.id, "index", e.GetIndex(), "err", err)
				}
			}
			if c.ProposalID>>48 == n.cfg.ID {
				j.results = append(j.results, proposalResult{c.ProposalID, err})
			}
		}
	}
	return chunks, wrote, true
}

// writeChunk writes one replicated chunk, creating its container on first
// use (containers are implicit in a pipeline, as in Ozone). verified: data
// is this leader's own proposal's payload, verified when it arrived
// (handle), so the engine does not verify it again; every other chunk (a
// follower's, from its leader's frame) is verified by the engine. logged:
// the entry carries the bytes, so the write is a logged one (synced at
// its PutBlock or at a checkpoint). The container's room is not checked
// here (engine.WriteReplicatedChunk): the leader decided it before
// proposing the chunk (handle, engine.CheckRoom), so that every replica
// stores what the log says. A group removed or failed meanwhile creates
// no container (inContainer).
func (n *Node) writeChunk(g *group, w *transport.WriteChunk, data []byte, verified, logged bool) error {
	b := engine.BlockID{Container: engine.ContainerID(w.ContainerID), Local: w.LocalID}
	if data == nil {
		return n.writeMissing(b, w)
	}
	if uint64(len(data)) != w.Length {
		return fmt.Errorf("%w: payload of WriteChunk %d/%d@%d has %d bytes, want %d", engine.ErrInvalid, w.ContainerID, w.LocalID, w.Offset, len(data), w.Length)
	}
	return n.inContainer(g, b.Container, func() error {
		return n.eng.WriteReplicatedChunk(b, w.Offset, data, w.BytesPerChecksum, w.Checksums, verified, logged)
	})
}

// errGroupGone: a group's append reached a container this node does not
// have after the group was removed or failed here; the container is not
// created.
var errGroupGone = errors.New("pipeline: removed or failed here: no container is created for it")

// inContainer runs op, a write of group g into container id, and runs it
// again after creating the container when op did not find it: containers
// are implicit in a pipeline. Not once g is removed or failed
// (errGroupGone): an append job still running for a removed pipeline must
// not bring back a container that the meta service has had deleted here
// since (a replica it counts as gone, which would then be reported again,
// empty or short: found by bench chaos, a datanode caught up for seconds
// over a large log when the pipeline was closed and its replica trimmed).
func (n *Node) inContainer(g *group, id engine.ContainerID, op func() error) error {
	err := op()
	if !errors.Is(err, engine.ErrNotFound) {
		return err
	}
	if g.failed.Load() {
		return fmt.Errorf("%w: container %d, pipeline %d", errGroupGone, id, g.id)
	}
	if err := n.eng.CreateContainer(id); err != nil && !errors.Is(err, engine.ErrExists) {
		return err
	}
	return op()
}

// errPayloadUnavailable: a replicated chunk came without its bytes (its
// leader could not read them back, see peer.readBack) and this replica
// would have had to store it. Not a refusal every replica shares: the
// replica cannot acknowledge the entry (classifyWrite: replicaLost).
var errPayloadUnavailable = errors.New("pipeline: chunk bytes unavailable from the leader")

// writeMissing handles a replicated chunk whose bytes the leader could not
// send (it read them back from its engine for a catch-up and failed: the
// block was deleted since, the write was refused everywhere, or its own
// copy is damaged or lost). The leader sends no bytes rather than
// invented ones. The entry is acknowledged only if this replica needs no
// bytes for it: an identical chunk is stored here already, or the engine
// refuses it for a reason every replica shares (a hole, a closed
// container: the write was refused everywhere, and nothing of it is
// claimed stored). Otherwise errPayloadUnavailable: this replica cannot
// hold what the others hold, so it leaves the pipeline and the container
// is copied to a healthy node (ARCHITECTURE §12.3).
func (n *Node) writeMissing(b engine.BlockID, w *transport.WriteChunk) error {
	stored, err := n.eng.CheckWrite(b, w.Offset, w.Length, w.BytesPerChecksum, w.Checksums)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		// No container yet (writeChunk would create it) or a block being
		// deleted: the chunk would be written.
		return fmt.Errorf("%w: %v", errPayloadUnavailable, err)
	case err != nil:
		return err
	case stored:
		return nil
	}
	return fmt.Errorf("%w: WriteChunk %d/%d@%d of %d bytes", errPayloadUnavailable, w.ContainerID, w.LocalID, w.Offset, w.Length)
}

// applyWorker applies committed entries: PutBlock, DeleteBlock and
// CloseContainer change the engine (a WriteChunk's bytes were written at
// append time), then the waiting clients are answered and the responses go
// back to the loop. It also compacts the log.
func (n *Node) applyWorker() {
	defer n.wg.Done()
	var jobs []*applyJob
	open := map[uint64]*openBlocks{}
	compacted := map[uint64]uint64{}
	for {
		jobs = n.applyq.PopAll(jobs[:0], n.stop)
		if jobs == nil {
			return
		}
		n.applySince.Store(time.Now().UnixNano())
		if err := n.syncPutBlocks(jobs); err != nil {
			n.fail(fmt.Errorf("apply: engine sync: %w", err))
			return
		}
		for _, j := range jobs {
			if j.g.failed.Load() {
				n.refuseApply(j)
				continue
			}
			ob := open[j.g.id]
			if ob == nil {
				ob = newOpenBlocks()
				open[j.g.id] = ob
			}
			lost := false
			for i, e := range j.msg.GetEntries() {
				if lost {
					break
				}
				ce := j.ents[i]
				for ci := range ce.cmds {
					c := &ce.cmds[ci]
					var err error
					switch c.Kind {
					case KindWriteChunk:
						ob.wrote(c.WriteChunk.ContainerID, c.WriteChunk.LocalID, c.WriteChunk.Offset, c.WriteChunk.Length, e.GetIndex())
						if p := j.reqs[c.ProposalID]; p != nil {
							if !p.appended {
								err = fmt.Errorf("%w: append result unknown", engine.ErrFailed)
							} else {
								err = p.appendErr
							}
						}
					case KindPutBlock:
						err = n.eng.PutBlock(toEngineBlock(&c.PutBlock.Block), e.GetIndex())
						if err == nil {
							ob.committed(c.PutBlock.Block.ContainerID, c.PutBlock.Block.LocalID, c.PutBlock.Block.Length)
						} else if cls := n.classifyApply(err, c.PutBlock.Block.ContainerID); cls == nodeLost {
							n.fail(fmt.Errorf("apply: pipeline %d index %d: put block: %w", j.g.id, e.GetIndex(), err))
							return
						} else if cls == replicaLost {
							// Committed, so acknowledged by a quorum; this
							// replica lacks the block: it must not count.
							n.replicaFailed(j.g, c.PutBlock.Block.ContainerID, e.GetIndex(), "put_block", err)
							lost = true
						}
					case KindDeleteBlock:
						err = n.eng.DeleteBlock(engine.BlockID{Container: engine.ContainerID(c.Ref.ContainerID), Local: c.Ref.LocalID})
						ob.deleted(c.Ref.ContainerID, c.Ref.LocalID)
						if err == nil || errors.Is(err, engine.ErrNotFound) {
							// The block is not here from this index on,
							// nor on any replica that applies it.
							j.g.gone.note(c.Ref.ContainerID, c.Ref.LocalID, e.GetIndex())
						}
					case KindCloseContainer:
						err = n.eng.CloseContainer(engine.ContainerID(c.Ref.ContainerID))
					}
					if p := j.reqs[c.ProposalID]; p != nil {
						delete(j.reqs, c.ProposalID)
						n.replyResult(p, err)
					} else if c.Kind == KindDeleteBlock && errors.Is(err, engine.ErrNotFound) {
						// A delete applied again (raft re-applies the log
						// after a restart), or of a block never stored: the
						// block is not here, as the delete wants.
						n.log.Debug("delete of a block not here", "pipeline", j.g.id, "index", e.GetIndex(), "err", err)
					} else if err != nil && !lost {
						n.metrics.refusals.WithLabelValues(c.Kind.String()).Inc()
						n.log.Info("committed command refused here, as on every replica", "pipeline", j.g.id, "index", e.GetIndex(), "kind", c.Kind, "err", err)
					}
					if lost {
						break
					}
				}
			}
			if lost {
				n.refuseApply(j)
				continue
			}
			n.metrics.applied.Add(float64(len(j.ents)))
			if !n.post(event{kind: evApplyDone, group: j.g.id, apply: j}) {
				return
			}
			n.maybeCompact(j.g, j.last, ob, compacted)
		}
		n.applySince.Store(0)
	}
}

// syncPutBlocks makes durable, in one engine sync round, the inline
// chunks (logged writes) of every block the jobs' PutBlocks commit, so
// that each PutBlock finds its data durable instead of waiting for a
// round of its own, one after the other.
func (n *Node) syncPutBlocks(jobs []*applyJob) error {
	var ids map[engine.BlockID]struct{}
	for _, j := range jobs {
		for _, ce := range j.ents {
			for ci := range ce.cmds {
				if c := &ce.cmds[ci]; c.Kind == KindPutBlock {
					if ids == nil {
						ids = map[engine.BlockID]struct{}{}
					}
					ids[engine.BlockID{Container: engine.ContainerID(c.PutBlock.Block.ContainerID), Local: c.PutBlock.Block.LocalID}] = struct{}{}
				}
			}
		}
	}
	return n.eng.SyncLoggedBlocks(ids)
}

// refuseApply answers the clients still waiting on a job of a failed group
// (the entries after the failure are not applied here).
func (n *Node) refuseApply(j *applyJob) {
	for id, p := range j.reqs {
		delete(j.reqs, id)
		n.replyErr(p, transport.StatusUnavailable, fmt.Sprintf("pipeline %d: replica on node %d failed", j.g.id, n.cfg.ID), "")
	}
}

// maybeCompact compacts a group's log below what the engine holds durably
// and no lagging follower is likely to need: at most applied −
// RetainEntries; on a leader, not below what every follower holds unless
// that would keep more than MaxRetainEntries (a follower that far behind
// needs a container copy); and never past the first WriteChunk of a block
// with no PutBlock covering it yet (the engine forgets such chunks at a
// restart; the log's headers are how they are found again).
func (n *Node) maybeCompact(g *group, applied uint64, ob *openBlocks, compacted map[uint64]uint64) {
	if applied < n.cfg.RetainEntries+compacted[g.id]+n.cfg.CompactEveryEntries {
		return
	}
	to := applied - n.cfg.RetainEntries
	if m := g.minMatch.Load(); m != 0 && m-1 < to {
		floor := uint64(0)
		if applied > n.cfg.MaxRetainEntries {
			floor = applied - n.cfg.MaxRetainEntries
		}
		to = max(m-1, floor)
	}
	if lo := ob.lowest(); lo != 0 && lo-1 < to {
		to = lo - 1
	}
	if to <= compacted[g.id] {
		return
	}
	// The checkpoint: every chunk the log carried with its bytes, among
	// them those of the entries compaction forgets, is durable in its
	// block file before the log lets go of them.
	if err := n.eng.SyncLogged(); err != nil {
		n.fail(fmt.Errorf("compact: engine checkpoint: %w", err))
		return
	}
	if err := n.wal.Compact(g.id, to); err != nil {
		n.log.Warn("log compaction", "pipeline", g.id, "to", to, "err", err)
		return
	}
	compacted[g.id] = to
	g.gone.prune(to)
}

// openBlocks tracks, per block, the WriteChunk entries whose chunks no
// PutBlock covers yet (offset + length beyond the last committed length),
// in index order: the log must keep them, since the engine forgets such
// chunks at a restart and finds them again only through the log. A
// checkpoint PutBlock covering the block's first chunks unpins those
// only; a DeleteBlock unpins the whole block.
type openBlocks struct {
	open map[[2]uint64]*openQueue
	// last is the queue of the block written last (a writer's chunks
	// follow one another): found again without hashing its key.
	lastKey [2]uint64
	last    *openQueue
}

type openChunk struct{ end, index uint64 }

// openQueue is one block's open chunks in index order, in segments of
// openSegmentChunks: appending never copies the chunks already queued (a
// 64 MiB block of 1 KiB chunks queues 65,536 of them; one growing slice
// re-allocated and copied them, 6 % of a follower's CPU at 1 KiB
// writes), and a covered prefix is let go a segment at a time.
type openQueue struct {
	segs [][]openChunk
	head int // the first open chunk is segs[0][head]
}

const openSegmentChunks = 512

func newOpenBlocks() *openBlocks { return &openBlocks{open: map[[2]uint64]*openQueue{}} }

func (o *openBlocks) queue(k [2]uint64) *openQueue {
	if o.last != nil && o.lastKey == k {
		return o.last
	}
	q := o.open[k]
	if q != nil {
		o.lastKey, o.last = k, q
	}
	return q
}

func (o *openBlocks) forget(k [2]uint64) {
	delete(o.open, k)
	if o.lastKey == k {
		o.last = nil
	}
}

func (o *openBlocks) wrote(c, l, offset, length, index uint64) {
	k := [2]uint64{c, l}
	q := o.queue(k)
	if q == nil {
		q = &openQueue{}
		o.open[k] = q
		o.lastKey, o.last = k, q
	}
	n := len(q.segs)
	if n == 0 || len(q.segs[n-1]) == openSegmentChunks {
		q.segs = append(q.segs, make([]openChunk, 0, openSegmentChunks))
		n++
	}
	q.segs[n-1] = append(q.segs[n-1], openChunk{end: offset + length, index: index})
}

// committed: a PutBlock of length bytes; the chunks within them are
// covered. A block's chunks are written contiguously, in log order, so
// the covered ones are a prefix of its queue (and its first entry is its
// lowest index).
func (o *openBlocks) committed(c, l, length uint64) {
	k := [2]uint64{c, l}
	q := o.queue(k)
	if q == nil {
		return
	}
	for len(q.segs) > 0 {
		seg := q.segs[0]
		for q.head < len(seg) && seg[q.head].end <= length {
			q.head++
		}
		if q.head < len(seg) {
			return
		}
		q.segs[0] = nil
		q.segs, q.head = q.segs[1:], 0
	}
	o.forget(k)
}

func (o *openBlocks) deleted(c, l uint64) { o.forget([2]uint64{c, l}) }

func (o *openBlocks) lowest() uint64 {
	var lo uint64
	for _, q := range o.open {
		if i := q.segs[0][q.head].index; lo == 0 || i < lo {
			lo = i
		}
	}
	return lo
}

func toEngineBlock(b *transport.BlockData) *engine.BlockData {
	out := &engine.BlockData{
		ID:               engine.BlockID{Container: engine.ContainerID(b.ContainerID), Local: b.LocalID},
		Length:           b.Length,
		BytesPerChecksum: b.BytesPerChecksum,
		Chunks:           make([]engine.ChunkInfo, len(b.Chunks)),
	}
	for i, c := range b.Chunks {
		out.Chunks[i] = engine.ChunkInfo{Offset: c.Offset, Length: c.Length, Checksums: c.Checksums}
	}
	return out
}

func fromEngineBlock(b *engine.BlockData) transport.BlockData {
	out := transport.BlockData{
		ContainerID:      uint64(b.ID.Container),
		LocalID:          b.ID.Local,
		Length:           b.Length,
		BytesPerChecksum: b.BytesPerChecksum,
		Chunks:           make([]transport.ChunkInfo, len(b.Chunks)),
	}
	for i, c := range b.Chunks {
		out.Chunks[i] = transport.ChunkInfo{Offset: c.Offset, Length: c.Length, Checksums: c.Checksums}
	}
	return out
}

// statusOf maps an engine or log error to a wire status.
func statusOf(err error) transport.Status {
	switch {
	case err == nil:
		return transport.StatusOK
	case errors.Is(err, engine.ErrChecksumMismatch):
		return transport.StatusChecksumMismatch
	case errors.Is(err, engine.ErrCorrupt):
		return transport.StatusCorrupt
	case errors.Is(err, engine.ErrNotFound):
		return transport.StatusNotFound
	case errors.Is(err, engine.ErrExists):
		return transport.StatusExists
	case errors.Is(err, engine.ErrNotOpen):
		return transport.StatusNotOpen
	case errors.Is(err, engine.ErrContainerFull):
		return transport.StatusContainerFull
	case errors.Is(err, engine.ErrOverlap):
		return transport.StatusOverlap
	case errors.Is(err, engine.ErrHole):
		return transport.StatusHole
	case errors.Is(err, engine.ErrInvalid):
		return transport.StatusInvalid
	case errors.Is(err, engine.ErrFailed), errors.Is(err, wal.ErrFailed):
		return transport.StatusFailed
	case errors.Is(err, engine.ErrClosed), errors.Is(err, raft.ErrProposalDropped):
		return transport.StatusUnavailable
	}
	return transport.StatusInternal
}
