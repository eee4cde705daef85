package pipeline

import "go.etcd.io/raft/v3/raftpb"

// cachedEntry is an entry decoded once by the loop (when a MsgApp brings
// it, or the leader appends its own proposal), with its WriteChunks'
// bytes, for the append worker, the peer writers and the apply worker.
// Immutable once handed to another goroutine (through a queue, which
// orders the loop's writes before their reads).
type cachedEntry struct {
	term uint64
	cmds []Command
	// segs holds one payload per WriteChunk command, in command order;
	// nil where this node does not have the bytes in memory. A command
	// carrying its bytes (Inline) has them here always.
	segs [][]byte
	// verified[i]: segs[i] is this leader's own proposal's payload,
	// verified against its checksums when it arrived (nil: none is).
	verified []bool
	// gone[i], when set, is the index of the committed DeleteBlock of the
	// i-th WriteChunk's block, which its leader sent instead of the bytes
	// it could not read back (gone.go); nil: none.
	gone []uint64
	err  error // the data does not decode
	// lease is the raft budget of the received frame the bytes came in
	// (nil: a leader's own proposal's, or none).
	lease *rxLease
}

// verifiedAt reports whether the i-th WriteChunk's bytes were verified
// when they arrived here.
func (ce *cachedEntry) verifiedAt(i int) bool { return i < len(ce.verified) && ce.verified[i] }

// goneAt returns gone[i] (0: none).
func (ce *cachedEntry) goneAt(i int) uint64 {
	if i < len(ce.gone) {
		return ce.gone[i]
	}
	return 0
}

// hasBytes reports whether every WriteChunk's bytes are in memory.
func (ce *cachedEntry) hasBytes() bool {
	for _, s := range ce.segs {
		if s == nil {
			return false
		}
	}
	return true
}

// rxLease is the raft budget held for one received RaftMessage frame's
// payload, whose chunk bytes the cached entries lo..hi (of the frame's
// group) hold.
type rxLease struct {
	free   func() // the transport's Frame.Release
	lo, hi uint64
}

// release gives the budget back (nil-safe; once).
func (l *rxLease) release() {
	if l != nil {
		l.free()
	}
}

// releaseLeases releases the frames' budgets, and first drops their bytes
// from the cache (loop only): each lease's entries are either durable here
// (its append job is done: a peer writer reads them back when it needs
// them) or were never taken by raft. An entry since replaced by another
// frame's is that frame's to drop.
func (n *Node) releaseLeases(g *group, ls []*rxLease) {
	for _, l := range ls {
		if n.groups[g.id] == g {
			for i := l.lo; i <= l.hi && i != 0; i++ {
				if ce := g.cache[i]; ce != nil && ce.lease == l {
					nce := &cachedEntry{term: ce.term, cmds: ce.cmds, segs: make([][]byte, len(ce.segs)), err: ce.err}
					nce.fillInline() // those bytes are the entry's own
					g.cache[i] = nce
				}
			}
		}
		l.release()
	}
}

func decodeCached(e *raftpb.Entry) *cachedEntry {
	ce := &cachedEntry{term: e.GetTerm()}
	if e.GetType() != raftpb.EntryType_EntryNormal || len(e.GetData()) == 0 {
		return ce
	}
	ce.cmds, ce.err = DecodeCommands(e.GetData())
	n := 0
	for i := range ce.cmds {
		if ce.cmds[i].Kind == KindWriteChunk {
			n++
		}
	}
	if n > 0 {
		ce.segs = make([][]byte, n)
		ce.fillInline()
	}
	return ce
}

// fillInline sets segs for the WriteChunks whose bytes the entry carries
// (Command.Inline): they are always in memory.
func (ce *cachedEntry) fillInline() {
	w := 0
	for i := range ce.cmds {
		c := &ce.cmds[i]
		if c.Kind != KindWriteChunk {
			continue
		}
		if c.Inline != nil {
			ce.segs[w] = c.Inline
		}
		w++
	}
}

// entry returns e decoded, from the cache when it holds e (same index and
// term), else decoded now and, with store, cached (only at or above
// payloadLow: below it entries are applied and their bytes in the engine).
func (g *group) entry(e *raftpb.Entry, store bool) *cachedEntry {
	idx := e.GetIndex()
	if ce := g.cache[idx]; ce != nil && ce.term == e.GetTerm() {
		return ce
	}
	ce := decodeCached(e)
	if store && idx >= g.payloadLow {
		g.cache[idx] = ce
	}
	return ce
}
