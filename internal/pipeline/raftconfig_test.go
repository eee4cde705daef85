package pipeline

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/wal"
)

// TestProposalsAreNotForwarded: a follower's raft drops a proposal rather
// than forwarding it to its leader. A pipeline's chunk bytes travel beside
// the entry, not in the MsgProp raft would forward: under a CPU hog a
// leader that had just lost leadership (its Ready not yet seen) proposed
// WriteChunk 5/5@4096, raft forwarded it, the new leader appended an entry
// whose bytes no member had, and all three replicas left the pipeline
// ("chunk bytes unavailable from the leader", TestCrashComposition). It
// fails with DisableProposalForwarding unset in groupRaftConfig.
func TestProposalsAreNotForwarded(t *testing.T) {
	st := raft.NewMemoryStorage()
	if err := st.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(1), Term: proto.Uint64(1),
		ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}); err != nil {
		t.Fatal(err)
	}
	rn, err := raft.NewRawNode(groupRaftConfig(Config{ID: 1, ElectionTicks: 10, HeartbeatTicks: 1}, st, 1, wal.RaftLogger{L: quiet}))
	if err != nil {
		t.Fatal(err)
	}
	// A heartbeat from node 2 at term 2: a follower that knows its leader
	// (one that does not drops proposals in any configuration).
	if err := rn.Step(heartbeatFrom(2, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if lead := rn.Status().Lead; lead != 2 {
		t.Fatalf("leader %d after node 2's heartbeat, want 2", lead)
	}
	err = rn.Propose([]byte("a WriteChunk whose bytes stay here"))
	if !errors.Is(err, raft.ErrProposalDropped) {
		t.Fatalf("a follower's proposal: %v, want raft.ErrProposalDropped", err)
	}
	if rn.HasReady() {
		for _, m := range rn.Ready().Messages {
			if m.GetType() == raftpb.MessageType_MsgProp {
				t.Fatalf("a follower forwarded a proposal to node %d", m.GetTo())
			}
		}
	}
}
