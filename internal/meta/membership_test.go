package meta

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestMemberAddRefusedWhileOneIsDown: with one of three members down, a
// fourth voter added (down until it has caught up) would leave 2 of 4 up,
// under a quorum of 3: refused unless forced. Added as a learner it is
// taken (no quorum changes), and its promotion is refused while it is
// down; removing the down member is taken (2 of 2 up).
func TestMemberAddRefusedWhileOneIsDown(t *testing.T) {
	g := newRGroup(t, 3)
	ld := g.leader()
	down := (ld + 1) % 3
	g.stop(down)
	// Down exactly the stopped one: the leader has heard from the other
	// (a leader elected a moment ago has heard from no one yet, and every
	// change below would be refused as leaving 1 of 3 up).
	waitFor(t, "the leader sees the stopped member down and the other up", func() bool {
		return slices.Equal(g.srvs[ld].Service().MetaStatus().Down, []uint64{uint64(down + 1)})
	})
	svc := g.srvs[ld].Service()
	if _, err := svc.ChangeMembers(metaapi.MemberChange{Op: "add", ID: 4, Addr: "127.0.0.1:1", Voter: true}); !errors.Is(err, metaapi.ErrPrecondition) {
		t.Fatalf("adding a fourth voter with one of three down: %v, want a refusal (precondition)", err)
	}
	if st := svc.MetaStatus(); len(st.Members) != 3 {
		t.Fatalf("members after a refused add: %+v", st.Members)
	}
	st, err := svc.ChangeMembers(metaapi.MemberChange{Op: "add", ID: 4, Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatalf("adding a fourth member as a learner with one of three down: %v", err)
	}
	if i := slices.IndexFunc(st.Members, func(m metaapi.MetaMember) bool { return m.ID == 4 }); i < 0 || !st.Members[i].Learner {
		t.Fatalf("members after adding a learner: %+v, want 4 a learner", st.Members)
	}
	if _, err := svc.ChangeMembers(metaapi.MemberChange{Op: "promote", ID: 4}); !errors.Is(err, metaapi.ErrPrecondition) {
		t.Fatalf("promoting a learner that never caught up: %v, want a refusal (precondition)", err)
	}
	for _, id := range []uint64{4, uint64(down + 1)} {
		if _, err := svc.ChangeMembers(metaapi.MemberChange{Op: "remove", ID: id}); err != nil {
			t.Fatalf("removing member %d: %v", id, err)
		}
	}
	if st := svc.MetaStatus(); len(st.Members) != 2 {
		t.Fatalf("members after removing the learner and the down one: %+v", st.Members)
	}
}

// TestReplaceMemberOnEmptyDisk: the operator's way for a member whose
// disk is replaced (spindle admin meta replace ID): the voter is made a
// learner first, then started with --join on an empty directory; it
// catches up from the leader, is promoted, and serves every key once it
// leads. A replace of a member that is not one is refused.
func TestReplaceMemberOnEmptyDisk(t *testing.T) {
	g := newRGroupWith(t, 3, smallSnapshots)
	ld := g.leader()
	g.dns()
	_, err := g.cl.CreateBucket(bg, "repb")
	mustNo(t, err)
	keys := putKeys(t, g.cl, "repb", "before-", 20)
	f := (ld + 1) % 3
	g.stop(f)
	mustNo(t, os.RemoveAll(g.dirs[f]))
	if _, err := g.cl.ChangeMembers(bg, metaapi.MemberChange{Op: "replace", ID: 9}); !errors.Is(err, metaapi.ErrNotFound) {
		t.Fatalf("replace of a member that is not one: %v, want not found", err)
	}
	st, err := g.cl.ChangeMembers(bg, metaapi.MemberChange{Op: "replace", ID: uint64(f + 1)})
	if err != nil {
		t.Fatalf("replace member %d: %v", f+1, err)
	}
	if i := slices.IndexFunc(st.Members, func(m metaapi.MetaMember) bool { return m.ID == uint64(f+1) }); i < 0 || !st.Members[i].Learner {
		t.Fatalf("members after replace: %+v, want %d a learner", st.Members, f+1)
	}
	keys = append(keys, putKeys(t, g.cl, "repb", "while-learner-", 20)...)
	g.tweak = func(c *state.Config) { c.Join = c.ID == uint64(f+1) }
	g.restart(f)
	waitFor(t, "the replaced member promoted", func() bool {
		st := g.srvs[g.leader()].Service().MetaStatus()
		return !slices.ContainsFunc(st.Members, func(m metaapi.MetaMember) bool { return m.Learner })
	})
	g.handOver(f)
	fc, err := metaapi.NewClient(g.addrs[f], metaapi.ClientOptions{Attempts: 1})
	mustNo(t, err)
	for _, k := range keys {
		if _, err := fc.GetKey(bg, "repb", k); err != nil {
			t.Fatalf("get %s from the replaced member: %v", k, err)
		}
	}
}
