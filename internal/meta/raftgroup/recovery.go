package raftgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/spindle-store/spindle/internal/vfs"
)

// Recovery of a member that lost its directory (issue 31): a member that
// starts from an empty directory while its peers' logs are past the
// bootstrap (rejoinTerm: history) may have acknowledged entries, and voted,
// before it lost them. Until it holds them again its vote could elect a
// member that lacks them, and lose acknowledged writes: so it grants no
// vote and asks none (it drops MsgVote and MsgPreVote, and raft's own
// campaign messages never leave a member that is not stepped) until it has
// applied the commit index of the first append or snapshot a leader sent
// it since its start. That leader was elected without its vote, by a
// quorum of the others, so it holds every committed entry, the ones the
// member acknowledged among them. The state survives a restart: the
// marker file DIR/raft-recovering is created (durably) before the
// bootstrap and removed once the member has caught up.

// recovery is a member's recovery state (Member.rec).
type recovery struct {
	r *Member
	// on: the member is recovering; target: the commit index of the
	// first append or snapshot of a leader since its start (0: none
	// yet); votesRefused counts the vote requests dropped.
	on                   atomic.Bool
	target, votesRefused atomic.Uint64
	// lost: the leader said the member held entries it no longer has
	// (not merely a member that starts late): it asks to be made a
	// learner (learners.go, demoteSelf). Set before the member starts.
	lost bool
	// wasLearner: a lost member has been a learner since its start; its
	// recovery ends once it has caught up and been promoted again.
	wasLearner atomic.Bool
}

// Recovery marker contents: why the member is recovering.
const (
	markerLost = "lost: the member held entries its directory no longer has; no vote until it holds the group's log again\n"
	markerLate = "late: catching up; no vote until it holds the group's log\n"
)

// recoveryMarker is the file that says a member is recovering.
const recoveryMarker = "raft-recovering"

// start marks the member recovering, durably, before its log is
// bootstrapped; lost: it held entries (rejoinTerm).
func (rc *recovery) start(lost bool) error {
	r := rc.r
	fs, dir := r.s.Cfg.FS, r.s.Cfg.Dir
	marker := markerLate
	if lost {
		marker = markerLost
	}
	if err := vfs.WriteFileAtomic(fs, filepath.Join(dir, recoveryMarker), []byte(marker)); err != nil {
		return fmt.Errorf("meta: mark the member recovering: %w", err)
	}
	rc.on.Store(true)
	rc.lost = lost
	r.log.Warn("meta member starts from an empty directory in a group with a history: it will not vote before it has caught up")
	return nil
}

// load sets recovering when the marker is there (OpenMember).
func (rc *recovery) load() error {
	r := rc.r
	b, err := vfs.ReadFile(r.s.Cfg.FS, filepath.Join(r.s.Cfg.Dir, recoveryMarker))
	switch {
	case err == nil:
		rc.on.Store(true)
		rc.lost = string(b) == markerLost
		r.log.Warn("meta member still recovering from a lost directory: no vote before it has caught up")
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("meta: read the recovery marker: %w", err)
	}
	return nil
}

// step says whether a message is stepped by a recovering member
// (run goroutine): votes are dropped; the first append or snapshot from
// a leader sets the index to catch up to.
func (rc *recovery) step(m *pb.Message) bool {
	r := rc.r
	switch m.GetType() {
	case pb.MessageType_MsgVote, pb.MessageType_MsgPreVote:
		rc.votesRefused.Add(1)
		return false
	}
	if m.GetTerm() < r.Term.Load() {
		return true // a deposed leader's: its commit index may be behind
	}
	switch m.GetType() {
	case pb.MessageType_MsgApp:
		if m.GetCommit() > 0 {
			rc.target.CompareAndSwap(0, m.GetCommit())
		}
	case pb.MessageType_MsgSnap:
		if idx := m.GetSnapshot().GetMetadata().GetIndex(); idx > 0 {
			rc.target.CompareAndSwap(0, idx)
		}
	}
	return true
}

// sawLearners records that a member set applied (apply worker, at each
// change of a batch) or installed makes this lost member a learner: its
// demotion and promotion can be applied in one batch, and without this
// record its recovery would never end (no vote ever: CI, -race).
func (rc *recovery) sawLearners(learners map[uint64]bool) {
	if rc.on.Load() && rc.lost && learners[rc.r.id] {
		rc.wasLearner.Store(true)
	}
}

// caughtUp ends the recovery once applied reaches the target, and for a
// member that lost entries once it has been a learner and is a voter again
// (apply worker, snapshot install: after the member set of what was applied
// is published, so that a promotion applied last ends it at once). The
// marker is removed first: a crash in between leaves the member recovering,
// which is safe.
func (rc *recovery) caughtUp(applied uint64) {
	r := rc.r
	if !rc.on.Load() {
		return
	}
	if rc.lost {
		// A member that lost entries votes again only once it has been a
		// learner and the leader (or an operator) promoted it.
		if r.learnerSet()[r.id] {
			rc.wasLearner.Store(true)
			return
		}
		if !rc.wasLearner.Load() {
			return
		}
	}
	target := rc.target.Load()
	if target == 0 || applied < target {
		return
	}
	fs, dir := r.s.Cfg.FS, r.s.Cfg.Dir
	err := fs.Remove(filepath.Join(dir, recoveryMarker))
	if err == nil || errors.Is(err, os.ErrNotExist) {
		err = fs.SyncDir(dir)
	}
	if err != nil {
		r.log.Error("meta member caught up but cannot clear its recovery marker; it still does not vote", "err", err)
		return
	}
	rc.on.Store(false)
	r.log.Info("meta member caught up after a lost directory: it votes again", "applied", applied, "target", target)
}

// WasLearner says whether a member recovering from a lost directory has
// been a learner since its start (it is promoted once it has caught up).
func (rc *recovery) WasLearner() bool { return rc.wasLearner.Load() }
