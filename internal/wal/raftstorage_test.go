package wal

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/vfs"
)

// TestRaftStorageContract: the adapter answers as raft's MemoryStorage does
// for the same log: indexes, terms, entries with maxSize, the errors for
// compacted and unavailable indexes, the HardState and the ConfState.
func TestRaftStorageContract(t *testing.T) {
	l, err := Open(Config{Dir: "/log", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, l)
	const g = 7
	var recs []Record
	for i := uint64(1); i <= 10; i++ {
		recs = append(recs, EntryRecord(g, 1+i/6, i, uint8(pb.EntryType_EntryNormal), []byte{byte(i)}))
	}
	recs = append(recs, HardStateRecord(g, HardState{Term: 2, Vote: 3, Commit: 8}))
	seq, err := l.Append(recs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(seq); err != nil {
		t.Fatal(err)
	}
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	meta, err := proto.Marshal(cs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(SnapshotMetaRecord(g, 4, 1, meta)); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(g, 4); err != nil {
		t.Fatal(err)
	}
	var s raft.Storage = l.RaftStorage(g)
	hs, gotCS, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetTerm() != 2 || hs.GetVote() != 3 || hs.GetCommit() != 8 || len(gotCS.GetVoters()) != 3 {
		t.Fatalf("initial state %v %v", hs, gotCS)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 5 || last != 10 {
		t.Fatalf("first %d last %d, want 5 10", first, last)
	}
	if _, err := s.Entries(3, 6, 1<<20); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("entries below the compaction point: %v", err)
	}
	if _, err := s.Entries(8, 12, 1<<20); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("entries past the end: %v", err)
	}
	if _, err := s.Term(2); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("term of a compacted index: %v", err)
	}
	if term, err := s.Term(4); err != nil || term != 1 {
		t.Fatalf("term at the compaction point: %d %v", term, err)
	}
	es, err := s.Entries(5, 11, 1<<20)
	if err != nil || len(es) != 6 || es[0].GetIndex() != 5 || es[5].GetTerm() != 2 || es[5].GetData()[0] != 10 {
		t.Fatalf("entries: %v %v", es, err)
	}
	// maxSize: always at least one entry.
	if es, err := s.Entries(5, 11, 1); err != nil || len(es) != 1 {
		t.Fatalf("entries with maxSize 1: %d %v", len(es), err)
	}
	snap, err := s.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() != 4 || len(snap.GetMetadata().GetConfState().GetVoters()) != 3 {
		t.Fatalf("snapshot %v %v", snap, err)
	}
	// An unknown group is raft's initial state.
	u := l.RaftStorage(99)
	if f, _ := u.FirstIndex(); f != 1 {
		t.Fatalf("unknown group first index %d", f)
	}
	if li, _ := u.LastIndex(); li != 0 {
		t.Fatalf("unknown group last index %d", li)
	}
}

// TestRaftStorageCommitAtLeastCompactionPoint: a compaction marker made
// durable before the HardState that carried its commit index (the apply
// runs ahead of the HardState's append) leaves commit below the
// compaction point; the storage answers the compaction point as committed
// (it was applied), and raft starts instead of panicking with "state.commit
// 6 is out of range [8, 10]" (as it did without it).
func TestRaftStorageCommitAtLeastCompactionPoint(t *testing.T) {
	l, err := Open(Config{Dir: "/log", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, l)
	const g = 3
	cs, err := proto.Marshal(&pb.ConfState{Voters: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	recs := []Record{SnapshotRecord(g, 1, 1, cs)}
	for i := uint64(2); i <= 10; i++ {
		recs = append(recs, EntryRecord(g, 1, i, uint8(pb.EntryType_EntryNormal), []byte{byte(i)}))
	}
	recs = append(recs, HardStateRecord(g, HardState{Term: 1, Vote: 1, Commit: 6}))
	seq, err := l.Append(recs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(seq); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(g, 8); err != nil {
		t.Fatal(err)
	}
	s := l.RaftStorage(g)
	hs, _, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetCommit() != 8 || hs.GetTerm() != 1 || hs.GetVote() != 1 {
		t.Fatalf("initial state %v, want commit 8 (the compaction point), term 1, vote 1", hs)
	}
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: s, Applied: 8,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 16, Logger: RaftLogger{L: quietLogger}})
	if err != nil {
		t.Fatal(err)
	}
	if c := rn.Status().HardState.GetCommit(); c != 8 {
		t.Fatalf("raft commit %d, want 8", c)
	}
}
