package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	jitter "github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/raftmsg"
	"github.com/spindle-store/spindle/internal/transport"
)

// outMsg is a raft message for a peer, with the chunk bytes of its
// WriteChunk entries: segs[i] is nil where the loop's cache did not have
// them (the writer reads them back from the engine).
type outMsg struct {
	group uint64
	msg   *raftpb.Message
	segs  [][]byte
	miss  []missing
	// gone is the group's record of applied deletes, for the missing
	// chunks that cannot be read back (gone.go).
	gone *goneBlocks
	// perEntry[i] is the number of segments of msg.Entries[i] (a MsgApp's),
	// from the decoded entries: what a split needs, without decoding again.
	perEntry []int
}

type missing struct {
	seg int
	wc  transport.WriteChunk
}

// send queues m for its peer, with its payloads.
func (n *Node) send(g *group, m *raftpb.Message) {
	to := m.GetTo()
	if m.GetType() == raftpb.MessageType_MsgSnap {
		// The follower needs entries compacted away: a raft snapshot
		// would have to carry containers. Spindle catches such a
		// replica up with a container copy, outside raft.
		if now := time.Now(); now.Sub(g.snapWarnedAt) > 10*time.Second {
			g.snapWarnedAt = now
			n.log.Warn("follower is behind the compacted log: it needs a container copy (reported to the meta service, which closes the pipeline)", "pipeline", g.id, "follower", to)
		}
		g.markBehind(to)
		g.rn.ReportSnapshot(to, raft.SnapshotFailure)
		return
	}
	om := outMsg{group: g.id, msg: m, gone: &g.gone}
	if m.GetType() == raftpb.MessageType_MsgApp {
		for _, e := range m.GetEntries() {
			ce := g.entry(e, true)
			w, k := 0, 0 // WriteChunk commands, payload segments
			for ci := range ce.cmds {
				c := &ce.cmds[ci]
				if c.Kind != KindWriteChunk {
					continue
				}
				w++
				if c.Inline != nil {
					continue // its bytes travel in the entry
				}
				if seg := ce.segs[w-1]; seg != nil {
					om.segs = append(om.segs, seg)
				} else {
					om.miss = append(om.miss, missing{seg: len(om.segs), wc: c.WriteChunk})
					om.segs = append(om.segs, nil)
				}
				k++
			}
			om.perEntry = append(om.perEntry, k)
		}
	}
	p := n.peer(to)
	if p == nil {
		return
	}
	if !p.push(om) {
		g.rn.ReportUnreachable(to)
	}
}

func (n *Node) peer(id uint64) *peer {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if p := n.peers[id]; p != nil {
		return p
	}
	addr, ok := n.addrs[id]
	if !ok {
		return nil
	}
	p := &peer{n: n, id: id, addr: addr, signal: make(chan struct{}, 1), done: make(chan struct{})}
	n.peers[id] = p
	go p.run()
	return p
}

// peer writes raft messages to one datanode over one connection (dialled
// lazily, redialled after an error with a bounded backoff), batching
// everything queued into one gathered write.
type peer struct {
	n  *Node
	id uint64
	mu sync.Mutex
	// addr is where the peer is dialled; redial is set when it changed
	// (the connection to the old address is dropped before the next
	// send). Both under mu.
	addr   string
	redial bool
	q      []outMsg
	signal chan struct{}
	done   chan struct{}
	once   sync.Once
	conn   *transport.Conn
	// read, when set (tests), replaces the engine's read-back.
	read func(*transport.WriteChunk) []byte
}

func (p *peer) push(m outMsg) bool {
	p.mu.Lock()
	if len(p.q) >= peerQueueMax {
		p.mu.Unlock()
		return false
	}
	if !slices.ContainsFunc(p.q, func(q outMsg) bool { return q.group == m.group && raftmsg.SameProbe(q.msg, m.msg) }) {
		p.q = append(p.q, m) // (a repeated probe is dropped: raftmsg.SameProbe)
	}
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
	return true
}

func (p *peer) close() { p.once.Do(func() { close(p.done) }) }

// setAddr points the peer at a new address.
func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	p.addr, p.redial = addr, true
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

func (p *peer) run() {
	var batch []outMsg
	var enc transport.Encoder
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-p.signal:
		case <-p.done:
			if p.conn != nil {
				closeQuietly(p.conn)
			}
			return
		case <-p.n.stop:
			if p.conn != nil {
				closeQuietly(p.conn)
			}
			return
		}
		p.mu.Lock()
		batch = append(batch[:0], p.q...)
		clear(p.q)
		p.q = p.q[:0]
		addr, redial := p.addr, p.redial
		p.redial = false
		p.mu.Unlock()
		if redial && p.conn != nil {
			closeQuietly(p.conn)
			p.conn = nil
			backoff = 50 * time.Millisecond
		}
		if len(batch) == 0 {
			continue
		}
		if p.conn == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err := transport.DialConn(ctx, addr, transport.ConnConfig{WriteTimeout: 10 * time.Second, TLS: p.n.cfg.Conn.TLS})
			cancel()
			if err != nil {
				p.n.log.Debug("peer unreachable", "peer", p.id, "addr", addr, "err", err)
				p.n.post(event{kind: evUnreachable, peer: p.id})
				// Jittered: the peers of a restarted node do not redial
				// it in step.
				pause := time.NewTimer(jitter.Jitter(backoff))
				select {
				case <-pause.C:
				case <-p.done:
				case <-p.n.stop:
				}
				pause.Stop()
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			p.conn = c
		}
		// Frames go out whenever maxPeerBatchBytes are encoded: the
		// chunk bytes read back for a follower's catch-up are bounded by
		// bytes, not by the number of messages queued.
		var sendErr error
		flush := func() error {
			if enc.Frames() > 0 && sendErr == nil {
				sendErr = p.conn.SendBatch(&enc)
			}
			enc.Reset()
			return sendErr
		}
		enc.Reset()
		for i := range batch {
			if err := p.encode(&enc, &batch[i], flush); err != nil {
				if sendErr != nil {
					break
				}
				p.n.log.Warn("raft message not sent", "peer", p.id, "err", err)
			}
		}
		if flush() != nil {
			p.n.log.Debug("peer write failed", "peer", p.id, "err", sendErr)
			closeQuietly(p.conn)
			p.conn = nil
			p.n.post(event{kind: evUnreachable, peer: p.id})
		}
		clear(batch)
	}
}

// encode appends om to enc, split into several MsgApps when its chunk bytes
// exceed one frame's bound (framePayloadBytes), the missing payloads read back
// from the engine one part at a time; it calls flush (which sends and resets
// enc) whenever enc holds maxPeerBatchBytes or more. So the chunk bytes read
// back and held at once stay below maxPeerBatchBytes plus one part, however
// many entries a catch-up MsgApp names. An error of flush is returned as is.
func (p *peer) encode(enc *transport.Encoder, om *outMsg, flush func() error) error {
	m := om.msg
	// segLen is a segment's length, read back or not.
	lens := make([]int, len(om.segs))
	for i, s := range om.segs {
		lens[i] = len(s)
	}
	for _, ms := range om.miss {
		lens[ms.seg] = int(ms.wc.Length)
	}
	total := 0
	for _, l := range lens {
		total += l
	}
	ents := m.GetEntries()
	limit := maxRaftPayloadBytes
	if p.n != nil {
		limit = p.n.framePayloadBytes()
	}
	split := m.GetType() == raftpb.MessageType_MsgApp && total > limit && len(ents) >= 2
	// Consecutive runs of entries, each a valid MsgApp whose previous
	// entry is the last of the run before (one run: the message as is).
	segAt, miss := 0, om.miss
	prevIndex, prevTerm := m.GetIndex(), m.GetLogTerm()
	for start := 0; start == 0 || start < len(ents); {
		end, bytes, segEnd := len(ents), total, len(om.segs)
		if split {
			end, bytes, segEnd = start, 0, segAt
			for end < len(ents) {
				cnt, sz := om.perEntry[end], 0
				for _, l := range lens[segEnd : segEnd+cnt] {
					sz += l
				}
				if end > start && bytes+sz > limit {
					break
				}
				bytes += sz
				segEnd += cnt
				end++
			}
		}
		var gone []uint64 // the part's GoneAt, if any segment has one
		for len(miss) > 0 && miss[0].seg < segEnd {
			data, d := p.readBack(&miss[0].wc, om.gone)
			om.segs[miss[0].seg] = data
			if d != 0 {
				if gone == nil {
					gone = make([]uint64, segEnd-segAt)
				}
				gone[miss[0].seg-segAt] = d
			}
			miss = miss[1:]
		}
		part := m
		if split {
			part = &raftpb.Message{
				Type: m.Type, To: m.To, From: m.From, Term: m.Term,
				LogTerm: &prevTerm, Index: &prevIndex, Commit: m.Commit,
				Entries: ents[start:end],
			}
		}
		segs := om.segs[segAt:segEnd]
		rm := &transport.RaftMessage{GroupID: om.group, Message: part, GoneAt: gone}
		rm.SetPayloads(segs)
		err := enc.Append(rm, segs...)
		// enc holds the bytes now (until flushed): om lets go of them.
		clear(segs)
		if err != nil {
			return err
		}
		if enc.Len() >= maxPeerBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		if end == 0 {
			break // no entries: one message
		}
		prevIndex, prevTerm = ents[end-1].GetIndex(), ents[end-1].GetTerm()
		start, segAt = end, segEnd
	}
	return nil
}

// readBack reads a chunk the loop's cache no longer holds from the engine.
// When it cannot (the block was deleted since, the write was refused on
// every replica, or this replica's copy is damaged or lost) it returns nil
// and the chunk goes out with no bytes: never invented ones, which a
// follower could not tell from a refused write. The follower decides
// whether it can do without them (writeMissing): deleteIndex, when gone
// remembers the block's delete, tells it that it can (gone.go).
func (p *peer) readBack(w *transport.WriteChunk, gone *goneBlocks) (data []byte, deleteIndex uint64) {
	var err error
	if p.read != nil {
		data = p.read(w)
	} else {
		b := engine.BlockID{Container: engine.ContainerID(w.ContainerID), Local: w.LocalID}
		data, err = p.n.eng.ReadChunk(b, w.Offset, w.Length, nil)
	}
	if err == nil && uint64(len(data)) == w.Length {
		return data, 0
	}
	deleteIndex = gone.deletedAt(w.ContainerID, w.LocalID)
	if p.n == nil {
		return nil, deleteIndex
	}
	p.n.metrics.readBackMisses.Inc()
	level := slog.LevelWarn
	if deleteIndex != 0 {
		level = slog.LevelDebug // the expected case: a block deleted since
	}
	p.n.log.Log(context.Background(), level, "chunk not read back for a follower: sent without its bytes", "peer", p.id,
		"container", w.ContainerID, "block", w.LocalID, "offset", w.Offset, "length", w.Length, "deleted_at", deleteIndex, "err", err)
	return nil, deleteIndex
}

// releasePayload gives a proposal's payload admission back (the client
// budget): the request is answered, its bytes no longer needed here.
func (p *proposal) releasePayload() {
	if p.release != nil {
		p.release()
		p.release = nil
	}
}

func (n *Node) replyErr(p *proposal, st transport.Status, msg, leader string) {
	p.releasePayload()
	n.metrics.answered(p, st)
	if p.done != nil {
		if st == transport.StatusNotLeader {
			p.done <- fmt.Errorf("%w: %s", ErrNotLeader, msg)
		} else {
			p.done <- fmt.Errorf("pipeline: %s: %s", st, msg)
		}
		return
	}
	n.pushReply(reply{conn: p.conn, resp: &transport.Response{RequestID: p.reqID, Status: st, Message: msg, Leader: leader}})
}

func (n *Node) replyResult(p *proposal, err error) {
	p.releasePayload()
	n.metrics.answered(p, statusOf(err))
	if p.done != nil {
		p.done <- err
		return
	}
	r := &transport.Response{RequestID: p.reqID, Status: statusOf(err)}
	if err != nil {
		r.Message = err.Error()
	}
	n.pushReply(reply{conn: p.conn, resp: r})
}

// handle serves one frame from a peer or a client.
func (n *Node) handle(ctx context.Context, c *transport.Conn, f transport.Frame) (transport.Message, []byte) {
	if f.Type != transport.TypeRaftMessage {
		if err := n.authorizeClient(c); err != nil {
			if f.Release != nil {
				f.Release()
			}
			n.refuse(c, "request", err)
			closeQuietly(c) // a caller whose role may not use the data path
			return nil, nil
		}
	}
	if f.CheckErr != nil {
		return n.handleRefused(f)
	}
	if f.Skipped > 0 {
		return n.handleSkipped(f)
	}
	switch f.Type {
	case transport.TypeRaftMessage:
		rm := &transport.RaftMessage{}
		var lease *rxLease
		if f.Release != nil {
			lease = &rxLease{free: f.Release}
		}
		if err := f.Decode(rm); err != nil {
			lease.release()
			n.log.Warn("bad raft frame", "remote", c.RemoteAddr(), "err", err)
			closeQuietly(c)
			return nil, nil
		}
		if err := n.authorizeRaft(c, rm.GroupID, rm.Message.GetFrom()); err != nil {
			lease.release()
			n.refuse(c, "raft message", err)
			return nil, nil
		}
		segs, err := rm.Segments(f.Payload, nil)
		if err != nil { // Decode checked the lengths already: a bug if it fails
			lease.release()
			n.log.Warn("bad raft frame", "remote", c.RemoteAddr(), "err", err)
			closeQuietly(c)
			return nil, nil
		}
		if !n.post(event{kind: evRaft, group: rm.GroupID, msg: rm.Message, segs: segs, gone: rm.GoneAt, lease: lease}) {
			lease.release()
		}
		return nil, nil
	case transport.TypeWriteChunk:
		// Admitted (payloadAlloc, which made the proposal and decoded the
		// header: Frame.Decoded) before it was read; held until answered.
		p, decoded := f.Decoded.(*proposal)
		if !decoded {
			p = &proposal{kind: KindWriteChunk}
		}
		p.payload, p.release, p.conn, p.arrived = f.Payload, f.Release, c, time.Now()
		wc := &p.wc
		if !decoded {
			if err := f.Decode(wc); err != nil { // in place: no copy per chunk
				p.releasePayload()
				return badRequest(0, err)
			}
		}
		p.reqID = wc.RequestID
		if r := n.cfg.BlockTokens.Request(c, wc.Token, wc.ContainerID, wc.LocalID, blocktoken.OpWrite, wc.RequestID); r != nil {
			p.releasePayload()
			return r, nil
		}
		wc.Token = nil // aliases the frame; never in the log
		// Its pieces were verified as they arrived (chunkCheck; a mismatch
		// is handleRefused's): this leader's append writes a checked chunk
		// (f.Checked) without a second pass; each follower's engine
		// verifies the bytes it received.
		if f.Checked && engine.CheckChunkArgs(uint64(len(f.Payload)), wc.BytesPerChecksum, wc.Checksums) == nil {
			p.verified = true
		}
		// The room in the container is the leader's decision alone, made
		// before the chunk is proposed: the replicas write what the log
		// says (writeChunk); their counts of the container's bytes may
		// differ, and one refusing a chunk the others store would
		// acknowledge an entry it does not hold.
		if g := n.group(wc.PipelineID); g != nil && g.leader.Load() == n.cfg.ID {
			if err := n.eng.CheckRoom(engine.ContainerID(wc.ContainerID), wc.Length); err != nil {
				p.releasePayload()
				n.metrics.refusals.WithLabelValues(KindWriteChunk.String()).Inc()
				return &transport.Response{RequestID: wc.RequestID, Status: statusOf(err), Message: err.Error()}, nil
			}
		}
		if !n.post(event{kind: evPropose, group: wc.PipelineID, prop: p}) {
			p.releasePayload()
			return unavailable(wc.RequestID)
		}
		return nil, nil
	case transport.TypePutBlock:
		pb := &transport.PutBlock{}
		if err := f.Decode(pb); err != nil {
			return badRequest(0, err)
		}
		if r := n.cfg.BlockTokens.Request(c, pb.Token, pb.Block.ContainerID, pb.Block.LocalID, blocktoken.OpWrite, pb.RequestID); r != nil {
			return r, nil
		}
		pb.Token = nil
		// On the leader, a PutBlock naming chunks this engine does not
		// hold is refused before it is proposed: a PutBlock in the log
		// names chunks its leader held, so a replica that finds them
		// missing when it applies it has diverged (classifyApply).
		if g := n.group(pb.PipelineID); g != nil && g.leader.Load() == n.cfg.ID {
			if err := n.eng.CheckPut(toEngineBlock(&pb.Block)); err != nil {
				n.metrics.refusals.WithLabelValues(KindPutBlock.String()).Inc()
				return &transport.Response{RequestID: pb.RequestID, Status: statusOf(err), Message: err.Error()}, nil
			}
		}
		p := &proposal{kind: KindPutBlock, pb: *pb, conn: c, reqID: pb.RequestID, arrived: time.Now()}
		if !n.post(event{kind: evPropose, group: pb.PipelineID, prop: p}) {
			return unavailable(pb.RequestID)
		}
		return nil, nil
	case transport.TypeReadChunk:
		rc := &transport.ReadChunk{}
		if err := f.Decode(rc); err != nil {
			return badRequest(0, err)
		}
		if r := n.cfg.BlockTokens.Request(c, rc.Token, rc.ContainerID, rc.LocalID, blocktoken.OpRead, rc.RequestID); r != nil {
			return r, nil
		}
		b := engine.BlockID{Container: engine.ContainerID(rc.ContainerID), Local: rc.LocalID}
		// The bytes go out from the connection's scratch buffer (pooled,
		// given back once sent): no allocation per aligned read.
		var dst []byte
		if rc.Length <= engine.MaxChunkSizeBytes {
			dst = c.Scratch(int(rc.Length))
		}
		// The pieces' checksums go with the bytes: the stored ones (just
		// verified) on their grid, else computed (~50 µs per MiB, cached).
		data, sums, bpc, err := n.eng.ReadChunkSums(b, rc.Offset, rc.Length, dst)
		if err != nil {
			n.metrics.readErrors.WithLabelValues(readErrorKind(err)).Inc()
			return &transport.Response{RequestID: rc.RequestID, Status: statusOf(err), Message: err.Error()}, nil
		}
		n.metrics.chunkReads.Inc()
		n.metrics.chunkReadBytes.Add(float64(len(data)))
		if sums == nil {
			bpc = engine.DefaultBytesPerChecksum
			sums = engine.ComputeChecksums(nil, data, bpc)
		}
		return &transport.Response{RequestID: rc.RequestID, Offset: rc.Offset, BytesPerChecksum: bpc, Checksums: sums}, data
	case transport.TypeGetBlock:
		gb := &transport.GetBlock{}
		if err := f.Decode(gb); err != nil {
			return badRequest(0, err)
		}
		if r := n.cfg.BlockTokens.Request(c, gb.Token, gb.ContainerID, gb.LocalID, blocktoken.OpRead, gb.RequestID); r != nil {
			return r, nil
		}
		bd, err := n.eng.GetBlock(engine.BlockID{Container: engine.ContainerID(gb.ContainerID), Local: gb.LocalID})
		if err != nil {
			return &transport.Response{RequestID: gb.RequestID, Status: statusOf(err), Message: err.Error()}, nil
		}
		return &transport.Response{RequestID: gb.RequestID, Block: fromEngineBlock(bd), HasBlock: true}, nil
	}
	return &transport.Response{Status: transport.StatusUnsupported, Message: fmt.Sprintf("message type %v is not served by a datanode", f.Type)}, nil
}

// readErrorKind labels a failed client read for
// spindle_datanode_read_errors_total: "checksum" (the bytes on disk did not
// match their CRC32C: the container is marked UNHEALTHY and the client
// reads another replica), "not_found", "invalid", or "other".
func readErrorKind(err error) string {
	switch {
	case errors.Is(err, engine.ErrCorrupt):
		return "checksum"
	case errors.Is(err, engine.ErrNotFound):
		return "not_found"
	case errors.Is(err, engine.ErrInvalid):
		return "invalid"
	}
	return "other"
}

// handleRefused answers a frame whose payload its check refused as it
// arrived (chunkCheck): a WriteChunk with a piece that does not match its
// checksum, answered CHECKSUM_MISMATCH, never proposed. The transport
// Server has already given its admission back and dropped the rest of its
// bytes.
func (n *Node) handleRefused(f transport.Frame) (transport.Message, []byte) {
	wc := &transport.WriteChunk{}
	if err := f.Decode(wc); err != nil {
		return badRequest(0, err)
	}
	var pm *pieceMismatch
	if !errors.As(f.CheckErr, &pm) {
		return &transport.Response{RequestID: wc.RequestID, Status: transport.StatusInternal, Message: f.CheckErr.Error()}, nil
	}
	n.metrics.refusals.WithLabelValues(KindWriteChunk.String()).Inc()
	return &transport.Response{RequestID: wc.RequestID, Status: transport.StatusChecksumMismatch,
		Message: fmt.Sprintf("chunk %d/%d@%d: checksum mismatch at offset %d", wc.ContainerID, wc.LocalID, wc.Offset, wc.Offset+pm.offsetBytes)}, nil
}

// handleSkipped answers a frame whose payload payloadAlloc skipped: a
// WriteChunk that does not decode or is not a well-formed chunk write
// (INVALID), not served here (NOT_FOUND) or not led here (NOT_LEADER, with
// the leader's address when known); a raft message of a group not served
// here is dropped, as the loop would.
func (n *Node) handleSkipped(f transport.Frame) (transport.Message, []byte) {
	if f.Type != transport.TypeWriteChunk {
		return nil, nil
	}
	wc := &transport.WriteChunk{}
	if err := f.Decode(wc); err != nil {
		return badRequest(0, err)
	}
	if err := engine.CheckChunkArgs(wc.Length, wc.BytesPerChecksum, wc.Checksums); err != nil {
		return badRequest(wc.RequestID, err)
	}
	r := &transport.Response{RequestID: wc.RequestID}
	n.groupsMu.RLock()
	if g := n.groups[wc.PipelineID]; g == nil {
		r.Status, r.Message = transport.StatusNotFound, fmt.Sprintf("pipeline %d is not served here", wc.PipelineID)
	} else {
		r.Status, r.Message = transport.StatusNotLeader, fmt.Sprintf("node %d is not the leader of pipeline %d", n.cfg.ID, g.id)
		if lead := g.leader.Load(); lead != n.cfg.ID {
			r.Leader = g.members[lead]
		}
	}
	n.groupsMu.RUnlock()
	n.metrics.proposals.WithLabelValues(KindWriteChunk.String(), r.Status.String()).Inc()
	return r, nil
}

func badRequest(id uint64, err error) (transport.Message, []byte) {
	return &transport.Response{RequestID: id, Status: transport.StatusInvalid, Message: err.Error()}, nil
}

func unavailable(id uint64) (transport.Message, []byte) {
	return &transport.Response{RequestID: id, Status: transport.StatusUnavailable, Message: "datanode stopping"}, nil
}
