package raftgroup

import (
	"testing"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/vfs"
)

// TestLostMemberVotesAfterBackToBackDemotionAndPromotion: a member that
// lost its directory is made a learner at index 129 and promoted at 130,
// and the apply worker takes both in one batch: the member set it
// publishes never shows the member as a learner. Its recovery must still
// end once it has caught up (it was a learner, at 129). Without
// sawLearners it stayed recovering, refusing every vote for good (CI on
// 62602db, -race: TestEmptiedMemberCatchesUpFromSnapshot timed out).
func TestLostMemberVotesAfterBackToBackDemotionAndPromotion(t *testing.T) {
	r, members := lostMember(t)

	// The batch: demotion, then promotion (applyConfChange on one map).
	learners := map[uint64]bool{}
	learners[2] = true
	r.Rec.sawLearners(learners)
	delete(learners, 2)
	r.setMembers(members, learners)
	r.Rec.caughtUp(130)

	if r.Rec.on.Load() {
		t.Fatalf("member demoted and promoted in one applied batch, caught up to 130 of 127: still recovering (no vote ever)")
	}
	if _, err := vfs.ReadFile(r.s.Cfg.FS, "/m2/"+recoveryMarker); err == nil {
		t.Fatalf("recovery marker still there after the member caught up")
	}
}

// TestLostMemberStaysOutOfVotesUntilPromoted: the same member, caught up
// but not yet a learner, or a learner not yet promoted, stays recovering.
func TestLostMemberStaysOutOfVotesUntilPromoted(t *testing.T) {
	r, members := lostMember(t)

	r.Rec.caughtUp(200)
	if !r.Rec.on.Load() {
		t.Fatalf("a member that lost entries votes again without having been a learner")
	}
	learners := map[uint64]bool{2: true}
	r.Rec.sawLearners(learners)
	r.setMembers(members, learners)
	r.Rec.caughtUp(201)
	if !r.Rec.on.Load() {
		t.Fatalf("a learner not yet promoted left its recovery")
	}
	r.setMembers(members, map[uint64]bool{})
	r.Rec.caughtUp(202)
	if r.Rec.on.Load() {
		t.Fatalf("a promoted, caught-up member is still recovering")
	}
}

// lostMember is member 2 of three, voter, recovering from a lost directory
// (on a MemFS), with 127 as the commit index to catch up to.
func lostMember(t *testing.T) (*Member, map[uint64]string) {
	t.Helper()
	members := map[uint64]string{1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: "127.0.0.1:3"}
	r := bareReplicator(2, members)
	r.s = &state.State{Cfg: state.Config{FS: vfs.NewMem(), Dir: "/m2", Peers: members}}
	mustNil(t, r.s.Cfg.FS.MkdirAll("/m2", 0o755))
	r.Rec.r = r
	r.setMembers(members, nil)
	mustNil(t, r.Rec.start(true))
	r.Rec.target.Store(127)
	return r, members
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
