package raftgroup

// Learners (issue 31 item 2, the etcd way): a member joins as a learner
// (raft's AddLearnerNode: it receives the log and snapshots, acknowledges
// appends, and has no vote), and the leader promotes it to a voter once it
// has caught up (promotions, at each tick). A voter whose directory is
// gone is made a learner again (replace) before it has anything: a
// restarted member that finds its directory empty while its group has a
// history asks the leader for that itself (demoteSelf), besides refusing
// every vote until it has caught up (recovery.go). Until promoted it
// counts for no quorum, so no election can depend on entries it lost.
//
// Concurrency: the membership's maps are guarded by pmu; promotions runs
// on the raft goroutine; demoteSelf on a goroutine of its own, until the
// member has caught up or stops.

import (
	"context"
	"fmt"
	"net/http"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/wal"
)

// promoteSlackEntries: a learner whose match index is within this many
// entries of the leader's last index has caught up. Promotion with a few
// entries still in flight is safe (every committed entry is on a quorum
// of the old voters, and any quorum of the new set holds one of them);
// the slack only keeps a learner of a busy group from chasing the tail.
const promoteSlackEntries = 256

// promoteRetryPause: a learner's promotion is proposed at most this often.
const promoteRetryPause = time.Second

// DemoteRoute is where a member that restarted on an empty directory asks
// the leader to make it a learner (meta peers only): POST DemoteRequest.
const DemoteRoute = "/v1/meta/raft/demote"

// DemoteRequest names the member to make a learner.
type DemoteRequest struct {
	ID uint64 `json:"id"`
}

// changeDone says whether change ch is in effect in the member set m
// (learners among them), or can never be (an error).
func changeDone(ch metaapi.MemberChange, m map[uint64]string, learners map[uint64]bool) (bool, error) {
	id := ch.ID
	cur, ok := m[id]
	switch ch.Op {
	case "add":
		switch {
		case ok && cur == ch.Addr && (!ch.Voter || !learners[id]):
			return true, nil
		case ok && cur != ch.Addr:
			return false, fmt.Errorf("%w: member %d is already a member, at %s", metaapi.ErrExists, id, cur)
		}
	case "promote":
		if !ok {
			return false, fmt.Errorf("%w: member %d is not a member (add it first)", metaapi.ErrNotFound, id)
		}
		return !learners[id], nil
	case "remove":
		switch {
		case !ok:
			return true, nil
		case len(m) == 1:
			return false, fmt.Errorf("%w: member %d is the last member", metaapi.ErrInvalid, id)
		}
	case "replace":
		if !ok {
			return false, fmt.Errorf("%w: member %d is not a member (add it instead)", metaapi.ErrNotFound, id)
		}
		return learners[id] && (ch.Addr == "" || ch.Addr == cur), nil
	}
	return false, nil
}

// quorumAfter refuses a membership change that would leave fewer voters
// up than a quorum of the new voter set (etcd's strict reconfiguration
// check): with one of three down, adding a voter leaves 2 of 4 up, and
// one more failure stops the group. A voter added straight away counts
// as down until it has caught up; a promoted learner counts as up when
// the leader hears from it. "Up" is the leader's view: the members raft
// heard from within two election timeouts of its ticks. Adding or
// removing a learner changes no quorum and is always taken; a group of
// one may always grow.
func (ms *membership) quorumAfter(t pb.ConfChangeType, id uint64) error {
	members, learners := ms.memberSet(), ms.learnerSet()
	active, _ := ms.active.Load().(map[uint64]bool)
	_, member := members[id]
	voters := map[uint64]bool{}
	for m := range members {
		if !learners[m] {
			voters[m] = true
		}
	}
	n := len(voters)
	what := ""
	switch t {
	case pb.ConfChangeType_ConfChangeAddLearnerNode:
		if !voters[id] {
			return nil // a learner more (or its new address)
		}
		delete(voters, id)
		what = fmt.Sprintf("making member %d a learner", id)
	case pb.ConfChangeType_ConfChangeAddNode:
		if n <= 1 && !member {
			return nil
		}
		voters[id] = true
		what = fmt.Sprintf("promoting member %d", id)
		if !member {
			what = fmt.Sprintf("adding member %d as a voter (down until it has caught up)", id)
		}
	default:
		if !voters[id] {
			return nil // a learner (or no member) less: no quorum changes (as etcd's check)
		}
		delete(voters, id)
		what = fmt.Sprintf("removing member %d", id)
	}
	up := 0
	for v := range voters {
		if active[v] && (member || v != id) {
			up++
		}
	}
	n = len(voters)
	if quorum := n/2 + 1; n == 0 || up < quorum {
		return fmt.Errorf("%w: %s would leave %d of %d voters up, fewer than the %d of a quorum: "+
			"bring the down members back or remove them first, or force the change (spindle admin meta … --force)",
			metaapi.ErrPrecondition, what, up, n, quorum)
	}
	return nil
}

// learnerCaughtUp says why learner id may not be promoted yet (nil: it
// may): it must have acknowledged entries, the leader must have heard from
// it lately, and its match index must be within promoteSlackEntries of
// last.
func (ms *membership) learnerCaughtUp(id uint64, match map[uint64]uint64, last uint64) error {
	active, _ := ms.active.Load().(map[uint64]bool)
	got, ok := match[id]
	switch {
	case !ok:
		return fmt.Errorf("%w: member %d: no progress known (ask the leader)", metaapi.ErrPrecondition, id)
	case got == 0:
		// Never acknowledged an append or snapshot. (Raft counts a new
		// member as recently active until its next quorum check: a
		// learner that never answered looked caught up in a short log.)
		return fmt.Errorf("%w: member %d has acknowledged nothing yet: is it started (spindle meta --join)?", metaapi.ErrPrecondition, id)
	case !active[id]:
		return fmt.Errorf("%w: member %d is down: it is promoted once it is up and has caught up", metaapi.ErrPrecondition, id)
	case got+promoteSlackEntries < last:
		return fmt.Errorf("%w: member %d has not caught up (log to %d of %d): it is promoted once it has, or force it", metaapi.ErrPrecondition, id, got, last)
	}
	return nil
}

// transferTarget is an up voter other than self (0: none).
func (ms *membership) transferTarget(self uint64) uint64 {
	members, learners := ms.memberSet(), ms.learnerSet()
	active, _ := ms.active.Load().(map[uint64]bool)
	for id := range members {
		if id != self && !learners[id] && active[id] {
			return id
		}
	}
	return 0
}

// promotions lists the promotions the leader proposes now (raft
// goroutine, at a tick): every learner that has caught up and whose
// promotion keeps a quorum up, each at most once per promoteRetryPause
// (tried records when).
func (ms *membership) promotions(match map[uint64]uint64, last uint64, now time.Time, tried map[uint64]time.Time) []*pb.ConfChange {
	var out []*pb.ConfChange
	for id := range ms.learnerSet() {
		if now.Sub(tried[id]) < promoteRetryPause {
			continue
		}
		if ms.learnerCaughtUp(id, match, last) != nil || ms.quorumAfter(pb.ConfChangeType_ConfChangeAddNode, id) != nil {
			continue
		}
		tried[id] = now
		t := pb.ConfChangeType_ConfChangeAddNode
		out = append(out, &pb.ConfChange{Type: &t, NodeId: proto.Uint64(id), Context: []byte(ms.peerAddr(id))})
	}
	return out
}

// demoteSelfPause bounds how often a recovering member asks to be made a
// learner.
const demoteSelfPause = time.Second

// demoteSelf asks the group's leader, through any other member, to make
// this member a learner, until one says it is one, the member has caught
// up (it may vote again: recovery.go), or it stops. A refusal (no leader,
// or a quorum the demotion would break) is asked again; the member does
// not vote meanwhile either way.
func (rc *recovery) demoteSelf() {
	r := rc.r
	delay := demoteSelfPause
	var lastLog time.Time
	for rc.on.Load() {
		if r.learnerSet()[r.id] {
			r.log.Info("meta member is a learner now: it is promoted once it has caught up")
			return
		}
		err := rc.askDemotion()
		if err == nil {
			continue // the learner set says so once applied here
		}
		if time.Since(lastLog) > 30*time.Second {
			r.log.Warn("meta member cannot be made a learner yet; it still does not vote before it has caught up", "err", err)
			lastLog = time.Now()
		}
		select {
		case <-r.stop:
			return
		case <-time.After(backoff.Jitter(delay)):
		}
		delay = min(2*delay, 2*demoteSelfPause) // a small request: a recovering member asks often
	}
}

// askDemotion sends one DemoteRequest for this member to the other
// members in turn (the leader takes it; the others answer NOT_LEADER).
func (rc *recovery) askDemotion() error {
	r := rc.r
	var err error
	for id, addr := range r.s.Cfg.Peers {
		if id == r.id {
			continue
		}
		mc, cerr := metaapi.NewClient(addr, metaapi.ClientOptions{Attempts: 1, Timeout: confChangeTimeout, TLS: r.s.Cfg.TLS})
		if cerr != nil {
			return cerr
		}
		ctx, cancel := context.WithTimeout(context.Background(), confChangeTimeout+time.Second)
		err = mc.Do(ctx, http.MethodPost, DemoteRoute, DemoteRequest{ID: r.id}, nil, true)
		cancel()
		if err == nil {
			// Applied on the leader; wait until it is here too.
			select {
			case <-r.stop:
			case <-time.After(demoteSelfPause):
			}
			return nil
		}
	}
	return err
}

// joinAfterLoss prepares the log of a member joining (--join, empty
// directory) under an ID the group knows (spindle admin meta replace):
// the leader remembers how far that ID had acknowledged the log and would
// send it a commit index past its empty log (raft: tocommit out of range).
// As at the bootstrap of a lost directory (rejoinTerm), the member starts
// in a term past every running member's: the leader, deposed by it, is
// replaced by one with no such memory. It does not vote until it has
// caught up and been promoted (recovery.go). A new ID held nothing: its
// log starts empty, as before.
func joinAfterLoss(r *Member) error {
	rejoin, _ := rejoinTerm(r.s.Cfg.Peers, r.s.Cfg.TLS, r.id, r.log)
	if rejoin == 0 {
		return nil
	}
	if err := r.Rec.start(true); err != nil {
		return err
	}
	seq, err := r.WAL.Append(wal.HardStateRecord(WALGroup, wal.HardState{Term: rejoin}))
	if err == nil {
		err = r.WAL.WaitDurable(seq)
	}
	if err != nil {
		return fmt.Errorf("meta: join: record the term: %w", err)
	}
	return nil
}
