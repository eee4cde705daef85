package raftgroup

// Membership of a replicated meta service (docs/ARCHITECTURE.md §16):
// the members, their addresses and which are learners are replicated
// state, changed one at a time by raft ConfChange entries (AddNode,
// AddLearnerNode, with the address as context; RemoveNode) that the leader
// proposes for `spindle admin meta add|promote|remove|replace` and for its
// promotions of learners that caught up (learners.go).
// Every member applies such an entry in log order: the new member set
// goes into the store in the entry's apply batch (membersKey), the
// transport starts or stops a sender, and raft's configuration changes
// (ApplyConfChange, by the raft goroutine). The store's member set is the
// ConfState raft restarts from and the one a checkpoint carries.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/wal"
)

// membersKey holds the member set (0x00 sorts before every record prefix).
var membersKey = []byte("\x00raft-members")

// confChangeTimeout bounds how long an admin request waits for its
// membership change to be applied on the leader.
const confChangeTimeout = 15 * time.Second

// confChangeRetryPause: a change not applied this long after its
// proposal is proposed again.
const confChangeRetryPause = 500 * time.Millisecond

// maxMemberAddrBytes bounds a member's address.
const maxMemberAddrBytes = 255

// Member set record versions: 1 holds voters only; 2 adds a flags byte
// per member (memberLearner).
const (
	membersVersionVoters   = 1
	membersVersionLearners = 2
	memberLearner          = 1 // flags bit: the member is a learner
)

// encodeMembers: version u8 = 2 | n u32 | n × (id u64 | flags u8 |
// addr length u16 | addr) | crc u32; flags bit 0: a learner.
func encodeMembers(m map[uint64]string, learners map[uint64]bool) []byte {
	ids := slices.Sorted(maps.Keys(m))
	b := []byte{membersVersionLearners}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
		var flags byte
		if learners[id] {
			flags = memberLearner
		}
		b = append(b, flags)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m[id])))
		b = append(b, m[id]...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

// decodeMembers reads a member set of either version (learners: never nil).
func decodeMembers(v []byte) (map[uint64]string, map[uint64]bool, error) {
	bad := func(what string) error { return fmt.Errorf("%w: member set: %s", state.ErrCorrupt, what) }
	if len(v) < 1+4+4 || (v[0] != membersVersionVoters && v[0] != membersVersionLearners) {
		return nil, nil, bad(fmt.Sprintf("%d bytes", len(v)))
	}
	if got, want := crc32c.Checksum(v[:len(v)-4]), binary.LittleEndian.Uint32(v[len(v)-4:]); got != want {
		return nil, nil, bad(fmt.Sprintf("crc %08x, want %08x", got, want))
	}
	flagBytes := 0
	if v[0] == membersVersionLearners {
		flagBytes = 1
	}
	n := binary.LittleEndian.Uint32(v[1:])
	p := v[5 : len(v)-4]
	m, learners := map[uint64]string{}, map[uint64]bool{}
	for range n {
		if len(p) < 10+flagBytes {
			return nil, nil, bad("truncated")
		}
		id := binary.LittleEndian.Uint64(p)
		if flagBytes == 1 && p[8]&memberLearner != 0 {
			learners[id] = true
		}
		p = p[8+flagBytes:]
		l := int(binary.LittleEndian.Uint16(p))
		if len(p) < 2+l {
			return nil, nil, bad("truncated address")
		}
		m[id] = string(p[2 : 2+l])
		p = p[2+l:]
	}
	if len(p) != 0 {
		return nil, nil, bad("trailing bytes")
	}
	return m, learners, nil
}

// ReadState reads a store's applied state (Index 0: none) and member
// set (nil: none recorded) with its learners.
func ReadState(db *pebble.DB) (st AppliedState, _ map[uint64]string, _ map[uint64]bool, err error) {
	v, closer, err := db.Get(AppliedKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return st, nil, nil, fmt.Errorf("meta: read applied state: %w", err)
	default:
		st, err = DecodeAppliedState(v)
		state.CloseInto(closer, &err, "read applied state")
		if err != nil {
			return st, nil, nil, err
		}
	}
	v, closer, err = db.Get(membersKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return st, nil, nil, nil
	case err != nil:
		return st, nil, nil, fmt.Errorf("meta: read member set: %w", err)
	}
	defer state.CloseInto(closer, &err, "read member set")
	m, learners, err := decodeMembers(v)
	return st, m, learners, err
}

// setMembers makes m the member set (learners among them), and the
// addresses the transport sends to (plus this member's own).
func (r *Member) setMembers(m map[uint64]string, learners map[uint64]bool) {
	r.pmu.Lock()
	r.members = maps.Clone(m)
	r.learners = maps.Clone(learners)
	addrs := maps.Clone(m)
	if _, ok := addrs[r.id]; !ok {
		addrs[r.id] = r.s.Cfg.Peers[r.id]
	}
	r.addrs = addrs
	r.pmu.Unlock()
	if r.net != nil {
		r.net.SetPeers(addrs)
	}
}

// peerAddr is member id's address ("" when unknown).
func (m *membership) peerAddr(id uint64) string {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	return m.addrs[id]
}

// peerIDs lists the members with a known address, in ID order.
func (m *membership) peerIDs() []uint64 {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	return slices.Sorted(maps.Keys(m.addrs))
}

// memberSet is a copy of the member set.
func (m *membership) memberSet() map[uint64]string {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	return maps.Clone(m.members)
}

// learnerSet is a copy of the learners among the members.
func (m *membership) learnerSet() map[uint64]bool {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	return maps.Clone(m.learners)
}

// confState is the member set as raft's ConfState.
func (m *membership) confState() *pb.ConfState {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	cs := &pb.ConfState{}
	for _, id := range slices.Sorted(maps.Keys(m.members)) {
		if m.learners[id] {
			cs.Learners = append(cs.Learners, id)
		} else {
			cs.Voters = append(cs.Voters, id)
		}
	}
	return cs
}

// raftStorage is the log's raft.Storage, with the store's member set as
// the ConfState raft restarts from once one is recorded (membership
// changes are applied to the store, not to the log's snapshot metadata).
type raftStorage struct {
	*wal.RaftStorage
	r *Member
}

func (s raftStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	hs, cs, err := s.RaftStorage.InitialState()
	if err != nil {
		return nil, nil, err
	}
	if s.r.hasMembers {
		cs = s.r.confState()
	}
	return hs, cs, nil
}

// applyConfChange applies a committed membership change to m and
// learners (copies of the member set the apply round works on). AddNode
// adds a voter or promotes a learner; AddLearnerNode adds a learner or
// demotes a voter (replace); the context, when not empty, is the
// member's address.
func applyConfChange(m map[uint64]string, learners map[uint64]bool, cc *pb.ConfChange) error {
	id := cc.GetNodeId()
	switch cc.GetType() {
	case pb.ConfChangeType_ConfChangeAddNode, pb.ConfChangeType_ConfChangeAddLearnerNode:
		if addr := string(cc.GetContext()); addr != "" {
			m[id] = addr
		} else if _, ok := m[id]; !ok {
			m[id] = ""
		}
		if cc.GetType() == pb.ConfChangeType_ConfChangeAddLearnerNode {
			learners[id] = true
		} else {
			delete(learners, id)
		}
	case pb.ConfChangeType_ConfChangeRemoveNode:
		delete(m, id)
		delete(learners, id)
	default:
		return fmt.Errorf("membership change %v is not supported", cc.GetType())
	}
	return nil
}

// ChangeMembers makes one membership change (ch.Op) and returns once
// the leader applied it; a change already in effect succeeds at once.
// Only the serving leader takes it.
//
//   - add: member ch.ID at ch.Addr joins as a learner (it gets the log
//     and snapshots but no vote); the leader promotes it once it has
//     caught up (promotions). ch.Voter adds it as a voter at once.
//   - promote: learner ch.ID becomes a voter (it must have caught up,
//     unless forced).
//   - remove: member ch.ID leaves the group.
//   - replace: voter ch.ID becomes a learner again (at ch.Addr when
//     given), for a member whose directory is gone: it catches up from a
//     snapshot and is promoted, without voting in between.
//
// Unless forced, a change that would leave fewer voters up than a quorum
// of the new voter set is refused (quorumAfter).
func (r *Member) ChangeMembers(ch metaapi.MemberChange) (metaapi.MetaStatus, error) {
	s := r.s
	id, addr := ch.ID, ch.Addr
	if id == 0 || len(addr) > maxMemberAddrBytes || (ch.Op == "add" && addr == "") {
		return metaapi.MetaStatus{}, fmt.Errorf("%w: member %d at %q", metaapi.ErrInvalid, id, addr)
	}
	var t pb.ConfChangeType
	switch ch.Op {
	case "add":
		t = pb.ConfChangeType_ConfChangeAddLearnerNode
		if ch.Voter {
			t = pb.ConfChangeType_ConfChangeAddNode
		}
	case "promote":
		t = pb.ConfChangeType_ConfChangeAddNode
	case "remove":
		t = pb.ConfChangeType_ConfChangeRemoveNode
	case "replace":
		t = pb.ConfChangeType_ConfChangeAddLearnerNode
	default:
		return metaapi.MetaStatus{}, fmt.Errorf("%w: members: op %q: want add, promote, remove or replace", metaapi.ErrInvalid, ch.Op)
	}
	s.Mu.RLock()
	err := s.Usable()
	s.Mu.RUnlock()
	if err != nil {
		return metaapi.MetaStatus{}, err
	}
	done := func() (bool, error) { return changeDone(ch, r.memberSet(), r.learnerSet()) }
	if ok, err := done(); ok || err != nil {
		return r.Status(), err
	}
	if ch.Op == "replace" && id == r.id {
		// The leader does not demote itself: it hands the leadership
		// over, and the caller's retry reaches the next leader.
		r.in.mu.Lock()
		r.in.transfer = r.transferTarget(r.id)
		r.in.mu.Unlock()
		r.wake()
		return metaapi.MetaStatus{}, fmt.Errorf("%w: member %d leads the group: leadership moves to another member first; ask again", metaapi.ErrUnavailable, id)
	}
	if !ch.Force {
		if err := r.quorumAfter(t, id); err != nil {
			return metaapi.MetaStatus{}, err
		}
		if ch.Op == "promote" {
			if err := r.learnerCaughtUp(id, r.matchMap(), r.Last.Load()); err != nil {
				return metaapi.MetaStatus{}, err
			}
		}
	}
	if addr == "" && ch.Op != "remove" {
		addr = r.peerAddr(id)
	}
	cc := &pb.ConfChange{Type: &t, NodeId: proto.Uint64(id), Context: []byte(addr)}
	propose := func() {
		r.in.mu.Lock()
		r.in.confProps = append(r.in.confProps, cc)
		r.in.mu.Unlock()
		r.wake()
	}
	propose()
	deadline := time.Now().Add(confChangeTimeout)
	next := time.Now().Add(confChangeRetryPause)
	r.wmu.Lock()
	defer r.wmu.Unlock()
	for {
		if ok, err := done(); ok || err != nil {
			r.wmu.Unlock()
			st := r.Status()
			r.wmu.Lock()
			return st, err
		}
		if r.failed != nil {
			return metaapi.MetaStatus{}, r.failed
		}
		if time.Now().After(deadline) {
			return metaapi.MetaStatus{}, fmt.Errorf("%w: membership change not applied within %s (another change pending, or the leader changed): see spindle admin meta, and retry", metaapi.ErrUnavailable, confChangeTimeout)
		}
		if time.Now().After(next) {
			// Raft drops a change proposed while another is not yet
			// applied (by its own count): propose again. Applying a
			// change twice is harmless (set membership).
			r.wmu.Unlock()
			propose()
			r.wmu.Lock()
			next = time.Now().Add(confChangeRetryPause)
		}
		r.wcondWaitTimeout(100 * time.Millisecond)
	}
}

// wcondWaitTimeout waits on wcond (wmu held) for at most d.
func (r *Member) wcondWaitTimeout(d time.Duration) {
	t := time.AfterFunc(d, func() {
		r.wmu.Lock()
		r.wcond.Broadcast()
		r.wmu.Unlock()
	})
	r.wcond.Wait()
	t.Stop()
}

// sortedMembers lists a member set for MetaStatus.
func sortedMembers(m map[uint64]string, learners map[uint64]bool) []metaapi.MetaMember {
	var out []metaapi.MetaMember
	for id, addr := range m {
		out = append(out, metaapi.MetaMember{ID: id, Addr: addr, Learner: learners[id]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// rejoinProbeTimeout bounds each status request to a peer at a bootstrap
// (rejoinProbeFirst the first round's): a peer that took the whole timeout
// (running but slow, or listening but not serving yet) is asked again, for
// up to rejoinProbeRounds rounds, but only once another peer has answered:
// the group is running, so the slow one is loaded rather than starting
// too. One round of one second was not enough on a loaded machine (the
// leader's answer timed out, and a member that had lost its directory
// bootstrapped as a new one, with a vote); retrying peers that were all
// starting (a new group whose listeners exist before they serve) cost
// every new group 9 s.
const (
	rejoinProbeFirst   = 2 * time.Second
	rejoinProbeTimeout = 3 * time.Second
	rejoinProbeRounds  = 3
)

// rejoinTerm asks the other members (in parallel, in rounds, see
// rejoinProbeTimeout) for their status, at the bootstrap of an empty
// directory. When
// the leader says this member held entries past the bootstrap (its match
// index is above 1), the member lost its directory: it returns the
// highest term seen + 1, else 0 (a new group, or a member that never held
// anything, which bootstraps as usual). Starting in a term none of its
// earlier votes can be in (a term reaches the members before their votes
// in it, so the running members' highest term is at least its lost one's),
// the member never votes twice in a term; and the leader, seeing the
// higher term, steps down: the next one starts with no memory of what the
// member held, probes it and sends it a snapshot (raft's leader would
// otherwise fail on it: tocommit out of range).
func rejoinTerm(peers map[uint64]string, sec *tlsconf.Settings, self uint64, log *slog.Logger) (term uint64, history bool) {
	var mu sync.Mutex
	var highest, held, indexSeen uint64
	answered := map[uint64]bool{}
	slow := map[uint64]bool{} // peers whose last probe took the whole timeout
	probe := func(id uint64, addr string, timeout time.Duration) {
		start := time.Now()
		defer func() {
			mu.Lock()
			slow[id] = !answered[id] && time.Since(start) >= timeout*9/10
			mu.Unlock()
		}()
		mc, err := metaapi.NewClient(addr, metaapi.ClientOptions{Attempts: 1, Timeout: timeout, TLS: sec})
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		st, err := mc.MetaStatus(ctx)
		if err != nil {
			return
		}
		mu.Lock()
		answered[id] = true
		highest = max(highest, st.Term)
		held = max(held, st.Match[self])
		indexSeen = max(indexSeen, st.LastIndex, st.AppliedIndex)
		mu.Unlock()
	}
	ask := make([]uint64, 0, len(peers))
	for id := range peers {
		if id != self {
			ask = append(ask, id)
		}
	}
	timeout := rejoinProbeFirst
	for round := 0; round < rejoinProbeRounds && len(ask) > 0 && (round == 0 || len(answered) > 0); round++ {
		var wg sync.WaitGroup
		for _, id := range ask {
			wg.Go(func() { probe(id, peers[id], timeout) })
		}
		wg.Wait()
		timeout, ask = rejoinProbeTimeout, ask[:0]
		for id, s := range slow {
			if s {
				ask = append(ask, id)
			}
		}
	}
	// A peer whose log is past the bootstrap: the group has a history
	// this member's empty directory does not hold (lost, or it starts
	// late): it must not vote before it has caught up (Member.recovering).
	history = indexSeen > 1
	if held <= 1 {
		return 0, history
	}
	log.Warn("meta member starts from an empty directory but its group's leader says it held the log to "+fmt.Sprint(held)+": it rejoins in a later term and catches up from a snapshot", "group_term", highest, "term", highest+1)
	return highest + 1, history
}
