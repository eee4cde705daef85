// Package raftmsg holds small decisions about go.etcd.io/raft messages
// that a raft host's transport makes: SameProbe, which says whether an
// append message repeats one still waiting to be sent.
//
// Invariants: the functions are pure (they read their arguments only).
// Concurrency: none of its own; safe for concurrent use on messages no
// one is changing.
package raftmsg

import raftpb "go.etcd.io/raft/v3/raftpb"

// SameProbe says whether append message m repeats queued, an append of
// the same group not yet sent: the same leader term, the same previous
// entry, and no entry m has that queued lacks. A leader that has not heard
// from a follower sends its probe again at each heartbeat response
// (raft's StateProbe): while the follower's catch-up append runs longer
// than a heartbeat, or the link is slower than the probes, the copies pile
// up in the queue, each with the chunk bytes of its entries read back
// again, and push the heartbeats and the real progress behind them.
// Dropping m loses nothing raft needs: it tolerates a lost message, and
// queued carries the same entries; the commit index goes with heartbeats.
func SameProbe(queued, m *raftpb.Message) bool {
	app := raftpb.MessageType_MsgApp
	return queued.GetType() == app && m.GetType() == app && len(m.GetEntries()) > 0 &&
		queued.GetTerm() == m.GetTerm() && queued.GetIndex() == m.GetIndex() && queued.GetLogTerm() == m.GetLogTerm() &&
		len(queued.GetEntries()) >= len(m.GetEntries())
}
