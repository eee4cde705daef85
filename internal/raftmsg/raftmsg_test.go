package raftmsg

import (
	"testing"

	raftpb "go.etcd.io/raft/v3/raftpb"
)

func app(term, index, logTerm uint64, entries int) *raftpb.Message {
	m := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), Term: &term, Index: &index, LogTerm: &logTerm}
	for i := range entries {
		e := index + 1 + uint64(i)
		m.Entries = append(m.Entries, &raftpb.Entry{Index: &e, Term: &term})
	}
	return m
}

// TestSameProbe: only an append of the same term from the same previous
// entry, with no entry the queued one lacks, is a repeat; heartbeats,
// empty appends and appends that carry more are not.
func TestSameProbe(t *testing.T) {
	hb := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum()}
	for _, c := range []struct {
		name      string
		queued, m *raftpb.Message
		want      bool
	}{
		{"the same probe", app(3, 10, 2, 5), app(3, 10, 2, 5), true},
		{"fewer entries", app(3, 10, 2, 5), app(3, 10, 2, 4), true},
		{"more entries", app(3, 10, 2, 5), app(3, 10, 2, 6), false},
		{"another previous entry", app(3, 10, 2, 5), app(3, 11, 2, 5), false},
		{"another previous term", app(3, 10, 2, 5), app(3, 10, 3, 5), false},
		{"another leader term", app(3, 10, 2, 5), app(4, 10, 2, 5), false},
		{"an empty append", app(3, 10, 2, 5), app(3, 10, 2, 0), false},
		{"a heartbeat queued", hb, app(3, 10, 2, 5), false},
		{"a heartbeat", app(3, 10, 2, 5), hb, false},
	} {
		if got := SameProbe(c.queued, c.m); got != c.want {
			t.Errorf("%s: SameProbe %v, want %v", c.name, got, c.want)
		}
	}
}
