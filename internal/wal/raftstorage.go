package wal

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// RaftStorage serves one group of a Log as etcd raft's raft.Storage. The
// snapshot metadata a group records (SnapshotRecord / SnapshotMetaRecord)
// is taken to be an encoded raftpb.ConfState; a group without a snapshot
// has an empty ConfState (the pipeline bootstraps its members).
//
// Concurrency: as the Log, safe for concurrent use; raft calls it from the
// goroutine that drives the group.
type RaftStorage struct {
	log   *Log
	group uint64
}

var _ raft.Storage = (*RaftStorage)(nil)

// RaftStorage returns the raft.Storage of group.
func (l *Log) RaftStorage(group uint64) *RaftStorage { return &RaftStorage{log: l, group: group} }

// mapRaftErr turns the Log's read errors into the ones raft expects.
func mapRaftErr(err error) error {
	switch {
	case errors.Is(err, ErrCompacted):
		return raft.ErrCompacted
	case errors.Is(err, ErrUnavailable):
		return raft.ErrUnavailable
	}
	return err
}

// InitialState returns the group's HardState and ConfState.
func (s *RaftStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	hs, err := s.log.HardState(s.group)
	if err != nil {
		return nil, nil, err
	}
	cs, err := s.confState()
	if err != nil {
		return nil, nil, err
	}
	// The compaction point was applied, so committed, but its marker may
	// be durable before the HardState that carried that commit index: the
	// apply runs ahead of the HardState's append (asynchronous storage
	// writes), and a crash between the two left commit < first index - 1,
	// which raft refuses at start (state.commit out of range).
	first, err := s.FirstIndex()
	if err != nil {
		return nil, nil, err
	}
	commit := max(hs.Commit, first-1)
	return &pb.HardState{Term: proto.Uint64(hs.Term), Vote: proto.Uint64(hs.Vote), Commit: proto.Uint64(commit)}, cs, nil
}

func (s *RaftStorage) confState() (*pb.ConfState, error) {
	meta, ok, err := s.log.Snapshot(s.group)
	if err != nil {
		return nil, err
	}
	cs := &pb.ConfState{}
	if ok && len(meta.Meta) > 0 {
		if err := proto.Unmarshal(meta.Meta, cs); err != nil {
			return nil, fmt.Errorf("%w: group %d: snapshot metadata is not a ConfState: %v", ErrCorrupt, s.group, err)
		}
	}
	return cs, nil
}

// Entries returns entries [lo, hi), at least one, up to maxSize bytes.
func (s *RaftStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	es, err := s.log.Entries(s.group, lo, hi, maxSize)
	if err != nil {
		return nil, mapRaftErr(err)
	}
	out := make([]*pb.Entry, len(es))
	for i := range es {
		t := pb.EntryType(es[i].Type)
		out[i] = &pb.Entry{Term: proto.Uint64(es[i].Term), Index: proto.Uint64(es[i].Index), Type: &t, Data: es[i].Data}
	}
	return out, nil
}

// Term returns the term of entry i.
func (s *RaftStorage) Term(i uint64) (uint64, error) {
	t, err := s.log.Term(s.group, i)
	return t, mapRaftErr(err)
}

// LastIndex returns the index of the group's last entry.
func (s *RaftStorage) LastIndex() (uint64, error) { return s.log.LastIndex(s.group) }

// FirstIndex returns the index of the group's first available entry.
func (s *RaftStorage) FirstIndex() (uint64, error) { return s.log.FirstIndex(s.group) }

// Snapshot returns the group's latest snapshot metadata (Spindle's
// snapshots carry no data in raft: a lagging follower is caught up with a
// container copy, outside raft).
func (s *RaftStorage) Snapshot() (*pb.Snapshot, error) {
	meta, ok, err := s.log.Snapshot(s.group)
	if err != nil {
		return nil, err
	}
	cs, err := s.confState()
	if err != nil {
		return nil, err
	}
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: cs, Index: proto.Uint64(0), Term: proto.Uint64(0)}}
	if ok {
		snap.Metadata.Index, snap.Metadata.Term = proto.Uint64(meta.Index), proto.Uint64(meta.Term)
	}
	return snap, nil
}
