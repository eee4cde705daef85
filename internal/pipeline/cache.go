package pipeline

import "go.etcd.io/raft/v3/raftpb"

// cachedEntry is an entry decoded once, with the chunk bytes of its
// WriteChunk commands: the loop decodes each entry once (when a MsgApp
// brings it, or when the leader appends its own proposal) and the append
// worker, the peer writers and the apply worker use the result.
//
// Immutable once handed to another goroutine: the loop fills segs when it
// creates the entry (from a received frame, or from the leader's pending
// proposals in newAppendJob) and never after; readers in other goroutines
// get it through a queue, which orders the writes before their reads.
type cachedEntry struct {
	term uint64
	cmds []Command
	// segs holds one payload per WriteChunk command, in command order;
	// nil where this node does not have the bytes in memory.
	segs [][]byte
	err  error // the data does not decode
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
	}
	return ce
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
