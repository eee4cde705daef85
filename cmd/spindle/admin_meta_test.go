package main

import (
	"testing"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestMetaLeader: the leader is a member serving as leader in the highest
// term; without one, the leader the highest term names; unreachable
// members and stale terms do not count.
func TestMetaLeader(t *testing.T) {
	m := func(id, term, leader uint64, role string, serving bool, errMsg string) metaMemberView {
		return metaMemberView{MetaStatus: metaapi.MetaStatus{ID: id, Term: term, LeaderID: leader, Role: role, Serving: serving}, Error: errMsg}
	}
	cases := []struct {
		name     string
		ms       []metaMemberView
		id, term uint64
	}{
		{"serving leader", []metaMemberView{m(1, 3, 2, "follower", false, ""), m(2, 3, 2, "leader", true, ""), m(3, 3, 2, "follower", false, "")}, 2, 3},
		{"a deposed leader in an older term", []metaMemberView{m(1, 2, 1, "leader", true, ""), m(2, 4, 3, "follower", false, ""), m(3, 4, 3, "leader", true, "")}, 3, 4},
		{"elected, not serving yet", []metaMemberView{m(1, 5, 3, "follower", false, ""), m(3, 5, 3, "leader", false, "")}, 3, 5},
		{"the leader down", []metaMemberView{m(1, 5, 0, "candidate", false, ""), m(0, 0, 0, "", false, "connection refused")}, 0, 0},
	}
	for _, c := range cases {
		if id, term := metaLeader(c.ms); id != c.id || term != c.term {
			t.Errorf("%s: leader %d term %d, want %d %d", c.name, id, term, c.id, c.term)
		}
	}
}
