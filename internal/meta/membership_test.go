package meta

import (
	"errors"
	"slices"
	"testing"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestMemberAddRefusedWhileOneIsDown: with one of three members down, a
// fourth member added (down until it has caught up) would leave 2 of 4 up,
// under a quorum of 3: refused unless forced; removing the down member is
// taken (2 of 2 up).
func TestMemberAddRefusedWhileOneIsDown(t *testing.T) {
	g := newRGroup(t, 3)
	ld := g.leader()
	down := (ld + 1) % 3
	g.stop(down)
	waitFor(t, "the leader sees the stopped member down", func() bool {
		return slices.Contains(g.srvs[ld].Service().MetaStatus().Down, uint64(down+1))
	})
	if _, err := g.srvs[ld].Service().ChangeMembers(true, 4, "127.0.0.1:1", false); !errors.Is(err, metaapi.ErrPrecondition) {
		t.Fatalf("adding a fourth member with one of three down: %v, want a refusal (precondition)", err)
	}
	if st := g.srvs[ld].Service().MetaStatus(); len(st.Members) != 3 {
		t.Fatalf("members after a refused add: %+v", st.Members)
	}
	if _, err := g.srvs[ld].Service().ChangeMembers(false, uint64(down+1), "", false); err != nil {
		t.Fatalf("removing the down member: %v", err)
	}
	if st := g.srvs[ld].Service().MetaStatus(); len(st.Members) != 2 {
		t.Fatalf("members after removing the down one: %+v", st.Members)
	}
}
