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
