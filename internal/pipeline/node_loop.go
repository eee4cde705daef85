package pipeline

// The node's loop (one goroutine, run): events in (raft messages,
// proposals, ticks, pipeline changes), proposals batched into raft
// entries, each group's Ready handled (append, send, apply), and the
// watchdog of a stalled disk.

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/wal"
)

// run is the event loop: it owns every RawNode.
func (n *Node) run() {
	defer n.wg.Done()
	defer func() {
		// Stopping: connections waiting for budget give up.
		n.inflight.close()
		n.raftBuf.close()
	}()
	// raft panics when its storage answers an error other than
	// ErrCompacted or ErrUnavailable: a failed log (wal.ErrFailed, sticky
	// after a failed write or fdatasync) serves no reads, and the loop may
	// still step or propose before it sees the failure. That panic is the
	// log's failure reaching the loop: the node fails (as after a failed
	// engine sync) instead of the process dying; no RawNode is touched
	// again. Any other panic is a bug and goes on.
	defer func() {
		if r := recover(); r != nil {
			// raft panics with the error, or with a message holding it
			// (Logger.Panicf): ask the log whether it failed.
			_, lerr := n.wal.Groups()
			if !errors.Is(lerr, wal.ErrFailed) {
				panic(r)
			}
			n.fail(fmt.Errorf("raft stopped on the failed log (%v): %w", r, lerr))
			n.failAllPending()
		}
	}()
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.stop:
			n.failAllPending()
			return
		case <-ticker.C:
			for _, g := range n.order {
				g.rn.Tick()
				if g.eagerTicks > 0 {
					g.eagerTicks--
					switch st := g.rn.BasicStatus(); {
					case st.Lead != raft.None:
						g.eagerTicks = 0
					case st.RaftState == raft.StateFollower || st.RaftState == raft.StatePreCandidate:
						_ = g.rn.Campaign() // refused only when it cannot campaign: the timeout still applies
					}
				}
			}
		case ev := <-n.events:
			n.onEvent(ev)
		drain:
			for i := 0; i < maxEventsPerTurn; i++ {
				select {
				case ev := <-n.events:
					n.onEvent(ev)
				default:
					break drain
				}
			}
		}
		for _, g := range n.order {
			if g.failed.Load() {
				continue // evGroupFailed removes it
			}
			n.flushProposals(g)
			if g.rn.HasReady() {
				n.onReady(g)
			} else if len(g.leases) > 0 {
				// Stepped without effect: nothing of them is kept.
				n.releaseLeases(g, g.leases)
				g.leases = nil
			}
		}
	}
}

func (n *Node) onEvent(ev event) {
	g := n.groups[ev.group]
	switch ev.kind {
	case evRaft:
		if g == nil || g.failed.Load() {
			ev.lease.release()
			return
		}
		m := ev.msg
		stashed := false
		if m.GetType() == raftpb.MessageType_MsgApp && len(m.GetEntries()) > 0 {
			if err := g.stashPayloads(m, ev.segs, ev.gone, ev.lease); err != nil {
				n.log.Warn("raft message dropped", "pipeline", g.id, "from", m.GetFrom(), "err", err)
				ev.lease.release()
				return
			}
			stashed = ev.lease != nil
		}
		if err := g.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			n.log.Debug("raft step", "pipeline", g.id, "type", m.GetType(), "err", err)
		}
		if stashed {
			g.leases = append(g.leases, ev.lease)
		} else {
			ev.lease.release()
		}
	case evPropose:
		if g == nil && ev.prop.done != nil {
			ev.prop.done <- fmt.Errorf("%w: pipeline %d is not served here", engine.ErrNotFound, ev.group)
			return
		}
		if g == nil {
			n.replyErr(ev.prop, transport.StatusNotFound, fmt.Sprintf("pipeline %d is not served here", ev.group), "")
			return
		}
		g.queue = append(g.queue, ev.prop)
	case evAppendDone:
		for _, j := range ev.appends {
			// The chunks are durable here (read back when needed):
			// the frames' bytes are let go.
			n.releaseLeases(j.g, j.leases)
			j.leases = nil
			if j.g.failed.Load() || n.groups[j.g.id] != j.g {
				continue
			}
			for _, r := range j.results {
				if p := j.g.pending[r.proposal]; p != nil {
					p.appended, p.appendErr = true, r.err
				}
			}
			for _, resp := range j.msg.GetResponses() {
				n.deliver(j.g, resp)
			}
		}
	case evApplyDone:
		j := ev.apply
		if j.g.failed.Load() || n.groups[j.g.id] != j.g {
			return
		}
		j.g.applied.Store(j.last)
		for i := j.g.payloadLow; i <= j.last; i++ {
			delete(j.g.cache, i)
		}
		j.g.payloadLow = max(j.g.payloadLow, j.last+1)
		for _, resp := range j.msg.GetResponses() {
			n.deliver(j.g, resp)
		}
	case evAddPipeline:
		ev.done <- n.addGroup(ev.pc, ev.opened)
	case evInstallGroup:
		delete(n.opening, ev.pc.ID)
		if ev.g != nil {
			n.groupsMu.Lock()
			n.groups[ev.pc.ID] = ev.g
			n.order = append(n.order, ev.g)
			n.groupsMu.Unlock()
			n.log.Info("pipeline added", "pipeline", ev.pc.ID, "members", ev.pc.Members)
		}
		ev.done <- nil
	case evRemovePipeline:
		ev.done <- n.removeGroup(ev.pc.ID)
	case evGroupFailed:
		n.stopFailedGroup(ev.failure)
	case evPeers:
		n.onPeers(ev.members)
		ev.done <- nil
	case evUnreachable:
		for _, g := range n.order {
			if _, ok := g.members[ev.peer]; ok {
				g.rn.ReportUnreachable(ev.peer)
			}
		}
	}
}

// deliver steps a local response into the group or sends it to a peer.
func (n *Node) deliver(g *group, m *raftpb.Message) {
	if m.GetTo() == n.cfg.ID {
		if err := g.rn.Step(m); err != nil {
			n.log.Debug("raft step (local)", "pipeline", g.id, "type", m.GetType(), "err", err)
		}
		return
	}
	n.send(g, m)
}

// stashPayloads decodes the entries of a received MsgApp and keeps them
// with the chunk bytes that came in its frame, for the append worker (and
// for this node's own MsgApps should it become leader before they are
// durable here), marked with the frame's lease. An entry cached already
// with its bytes (same index and term: the same entry) is kept.
func (g *group) stashPayloads(m *raftpb.Message, segs [][]byte, gone []uint64, l *rxLease) error {
	k := 0
	for i, e := range m.GetEntries() {
		if i > 0 && e.GetIndex() != m.GetEntries()[i-1].GetIndex()+1 {
			return fmt.Errorf("entry %d follows entry %d", e.GetIndex(), m.GetEntries()[i-1].GetIndex())
		}
	}
	if l != nil && len(m.GetEntries()) > 0 {
		l.lo, l.hi = m.GetEntries()[0].GetIndex(), m.GetEntries()[len(m.GetEntries())-1].GetIndex()
	}
	for _, e := range m.GetEntries() {
		ce := decodeCached(e)
		ce.lease = l
		if ce.err != nil {
			return fmt.Errorf("entry %d: %w", e.GetIndex(), ce.err)
		}
		w := 0
		for i := range ce.cmds {
			c := &ce.cmds[i]
			if c.Kind != KindWriteChunk {
				continue
			}
			if c.Inline != nil {
				w++ // its bytes came in the entry (decodeCached)
				continue
			}
			switch {
			case k >= len(segs):
				return fmt.Errorf("entry %d: WriteChunk %d has no payload segment", e.GetIndex(), w)
			case len(segs[k]) == 0:
				// The leader could not read the bytes back (peer.readBack):
				// none rather than wrong ones (writeMissing), with the
				// index of the block's delete if it knows one (gone.go).
				ce.segs[w] = nil
				if k < len(gone) && gone[k] != 0 {
					if ce.gone == nil {
						ce.gone = make([]uint64, len(ce.segs))
					}
					ce.gone[w] = gone[k]
				}
			case uint64(len(segs[k])) != c.WriteChunk.Length:
				return fmt.Errorf("entry %d: WriteChunk %d has a payload segment of %d bytes, want %d", e.GetIndex(), w, len(segs[k]), c.WriteChunk.Length)
			default:
				ce.segs[w] = segs[k]
			}
			w++
			k++
		}
		if old := g.cache[e.GetIndex()]; old != nil && old.term == ce.term && old.hasBytes() {
			continue
		}
		if e.GetIndex() >= g.payloadLow {
			g.cache[e.GetIndex()] = ce
		}
	}
	if k != len(segs) {
		return fmt.Errorf("%d payload segments for %d WriteChunk", len(segs), k)
	}
	return nil
}

// flushProposals puts the requests that arrived since the last turn into
// as few entries as the limits allow (the batch grows with the load):
// MaxCommandsPerEntry commands, maxEntryBytes of headers and
// maxRaftPayloadBytes of chunk bytes (one entry always fits one frame).
func (n *Node) flushProposals(g *group) {
	if len(g.queue) == 0 {
		return
	}
	q := g.queue
	g.queue = g.queue[:0:0]
	if !g.isLeader {
		lead := g.leader.Load()
		for _, p := range q {
			n.replyErr(p, transport.StatusNotLeader, fmt.Sprintf("node %d is not the leader of pipeline %d", n.cfg.ID, g.id), g.members[lead])
		}
		return
	}
	// The batch's commands are collected first and the entry built at
	// its exact size: appended to a growing slice, the copies of its
	// growth were 14 % of a leader's CPU at 4 KiB inline chunks.
	cmds := n.cmds[:0]
	var batch []*proposal
	entryBytes := 0 // the entry's size so far: version byte and commands
	payload := 0    // chunk bytes of the batch's payload segments
	propose := func() {
		if len(batch) == 0 {
			return
		}
		data := make([]byte, 0, entryBytes)
		for i := range cmds {
			data = AppendCommand(data, &cmds[i])
		}
		if len(data) != entryBytes {
			panic(fmt.Sprintf("pipeline: entry of %d bytes, sized at %d", len(data), entryBytes))
		}
		if err := g.rn.Propose(data); err != nil {
			for _, p := range batch {
				delete(g.pending, p.id)
				n.replyErr(p, transport.StatusUnavailable, "proposal dropped: "+err.Error(), "")
			}
		}
		clear(cmds) // the chunks' bytes are the entry's now, or dropped
		cmds, batch, entryBytes, payload = cmds[:0], nil, 0, 0
	}
	entryMax := n.entryBytesMax()
	for _, p := range q {
		// A small chunk travels in the entry; its command counts towards
		// the entry's size, which stays within one log record and one
		// frame header. Other chunks travel as payload segments; an
		// entry's segments fit one RaftMessage frame, so that a MsgApp
		// can always be split between entries.
		c := Command{Kind: p.kind} // its ProposalID (fixed size) is set below
		switch p.kind {
		case KindWriteChunk:
			c.WriteChunk = p.wc
			c.WriteChunk.RequestID = 0
			if len(p.payload) > 0 && len(p.payload) <= n.cfg.LogInlineMaxBytes {
				c.Inline = p.payload
			}
		case KindPutBlock:
			c.PutBlock = p.pb
			c.PutBlock.RequestID = 0
		case KindDeleteBlock, KindCloseContainer:
			c.Ref = p.ref
		}
		size := CommandBytes(&c)
		if c.Inline != nil && 1+size > entryMax {
			c.Inline = nil // too large for an entry of its own: a payload segment
			size = CommandBytes(&c)
		}
		if c.Inline != nil {
			if len(batch) > 0 && entryBytes+size > entryMax {
				propose()
			}
		} else {
			if len(batch) > 0 && payload+len(p.payload) > n.framePayloadBytes() {
				propose()
			}
			payload += len(p.payload)
		}
		n.propSeq++
		p.id = n.cfg.ID<<48 | n.propSeq&(1<<48-1)
		c.ProposalID = p.id
		if len(batch) == 0 {
			entryBytes = 1 // the version byte
		}
		entryBytes += size
		cmds = append(cmds, c)
		g.pending[p.id] = p
		batch = append(batch, p)
		if entryBytes >= maxEntryBytes || len(batch) >= MaxCommandsPerEntry {
			propose()
		}
	}
	propose()
	n.cmds = cmds
}

// entryBytesMax bounds the data of an entry into which this leader puts a
// chunk's bytes: one log record's payload, and one frame header's room for
// a MsgApp's entries. (A batch of header-only commands is cut at
// maxEntryBytes, after the command that reaches it, as before.)
func (n *Node) entryBytesMax() int {
	return min(n.wal.MaxPayloadBytes(), maxMsgEntriesBytes)
}

// onReady handles one Ready of a group: local appends first (they register
// the payloads this Ready's MsgApps carry), then applies, then the network.
func (n *Node) onReady(g *group) {
	rd := g.rn.Ready()
	if rd.SoftState != nil {
		was := g.isLeader
		g.isLeader = rd.SoftState.RaftState == raft.StateLeader
		g.leader.Store(rd.SoftState.Lead)
		if was && !g.isLeader {
			n.failPending(g, "leadership lost")
		}
		if g.leader.Load() != 0 {
			n.metrics.leaderChanges.Inc()
		}
		if g.isLeader && !was {
			st := g.rn.BasicStatus()
			n.log.Info("became leader", "pipeline", g.id, "term", st.GetTerm())
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		g.term.Store(rd.HardState.GetTerm())
	}
	if g.isLeader {
		var lo uint64 = math.MaxUint64
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id != n.cfg.ID {
				lo = min(lo, pr.Match)
			}
		})
		if lo == math.MaxUint64 {
			lo = 0
		}
		g.minMatch.Store(lo + 1)
	} else {
		g.minMatch.Store(0)
	}
	var appends []*appendJob
	for _, m := range rd.Messages {
		if m.GetTo() == raft.LocalAppendThread {
			appends = append(appends, n.newAppendJob(g, m))
		}
	}
	// The frames stepped since the last Ready: what raft took of them is
	// in this Ready's append, and their budget is released once it is
	// durable; nothing of them is kept without one.
	if len(g.leases) > 0 {
		if len(appends) > 0 {
			j := appends[len(appends)-1]
			j.leases = append(j.leases, g.leases...)
		} else {
			n.releaseLeases(g, g.leases)
		}
		g.leases = nil
	}
	for _, j := range appends {
		n.appendq.Push(j)
	}
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
		case raft.LocalApplyThread:
			n.applyq.Push(n.newApplyJob(g, m))
		default:
			n.send(g, m)
		}
	}
}

func (n *Node) failPending(g *group, why string) {
	lead := g.leader.Load()
	for id, p := range g.pending {
		delete(g.pending, id)
		n.replyErr(p, transport.StatusNotLeader, why, g.members[lead])
	}
}

func (n *Node) failAllPending() {
	for _, g := range n.order {
		for id, p := range g.pending {
			delete(g.pending, id)
			n.replyErr(p, transport.StatusUnavailable, "datanode stopping", "")
		}
		for _, p := range g.queue {
			n.replyErr(p, transport.StatusUnavailable, "datanode stopping", "")
		}
		g.queue = nil
	}
}

// stallWatchdog fails the node when an append or apply round has been
// running for longer than DiskStallThreshold (a hung write or fdatasync):
// the node stops serving and heartbeating, so that the meta service sees
// it go and closes its pipelines, instead of a replica that holds up its
// pipelines' acknowledgements forever while it looks healthy. It checks
// four times per threshold.
func (n *Node) stallWatchdog() {
	every := max(n.cfg.DiskStallThreshold/4, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			for _, w := range []struct {
				name  string
				since *atomic.Int64
			}{{"append", &n.appendSince}, {"apply", &n.applySince}} {
				s := w.since.Load()
				if s == 0 {
					continue
				}
				if d := now.Sub(time.Unix(0, s)); d > n.cfg.DiskStallThreshold {
					n.fail(fmt.Errorf("%w: the %s worker's round has run for %v (threshold %v): a write or fdatasync hangs", ErrDiskStall, w.name, d.Round(time.Millisecond), n.cfg.DiskStallThreshold))
					return
				}
			}
		}
	}
}
