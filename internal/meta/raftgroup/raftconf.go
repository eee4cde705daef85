package raftgroup

// Membership of a replicated meta service (docs/ARCHITECTURE.md §16):
// the members and their addresses are replicated state, changed one at a
// time by raft ConfChange entries (AddNode with the address as context,
// RemoveNode) that the leader proposes for `spindle admin meta add|remove`.
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
	"github.com/spindle-store/spindle/internal/meta/state"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/wal"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
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

// encodeMembers: version u8 | n u32 | n × (id u64 | addr length u16 | addr) | crc u32.
func encodeMembers(m map[uint64]string) []byte {
	ids := slices.Sorted(maps.Keys(m))
	b := []byte{state.RecordVersion}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m[id])))
		b = append(b, m[id]...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

func decodeMembers(v []byte) (map[uint64]string, error) {
	bad := func(what string) error { return fmt.Errorf("%w: member set: %s", state.ErrCorrupt, what) }
	if len(v) < 1+4+4 || v[0] != state.RecordVersion {
		return nil, bad(fmt.Sprintf("%d bytes", len(v)))
	}
	if got, want := crc32c.Checksum(v[:len(v)-4]), binary.LittleEndian.Uint32(v[len(v)-4:]); got != want {
		return nil, bad(fmt.Sprintf("crc %08x, want %08x", got, want))
	}
	n := binary.LittleEndian.Uint32(v[1:])
	p := v[5 : len(v)-4]
	m := map[uint64]string{}
	for range n {
		if len(p) < 10 {
			return nil, bad("truncated")
		}
		id, l := binary.LittleEndian.Uint64(p), int(binary.LittleEndian.Uint16(p[8:]))
		if len(p) < 10+l {
			return nil, bad("truncated address")
		}
		m[id] = string(p[10 : 10+l])
		p = p[10+l:]
	}
	if len(p) != 0 {
		return nil, bad("trailing bytes")
	}
	return m, nil
}

// readRaftState reads a store's applied state (Index 0: none) and member
// set (nil: none recorded).
func ReadState(db *pebble.DB) (st AppliedState, _ map[uint64]string, err error) {
	v, closer, err := db.Get(AppliedKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return st, nil, fmt.Errorf("meta: read applied state: %w", err)
	default:
		st, err = DecodeAppliedState(v)
		state.CloseInto(closer, &err, "read applied state")
		if err != nil {
			return st, nil, err
		}
	}
	v, closer, err = db.Get(membersKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return st, nil, nil
	case err != nil:
		return st, nil, fmt.Errorf("meta: read member set: %w", err)
	}
	defer state.CloseInto(closer, &err, "read member set")
	m, err := decodeMembers(v)
	return st, m, err
}

// setMembers makes m the member set: the voters, and the addresses the
// transport sends to (plus this member's own).
func (r *Member) setMembers(m map[uint64]string) {
	r.pmu.Lock()
	r.members = maps.Clone(m)
	addrs := maps.Clone(m)
	if _, ok := addrs[r.id]; !ok {
		addrs[r.id] = r.s.Cfg.Peers[r.id]
	}
	r.addrs = addrs
	r.pmu.Unlock()
	if r.net != nil {
		r.net.setPeers(addrs)
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

// confState is the member set as raft's ConfState.
func (m *membership) confState() *pb.ConfState {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	return &pb.ConfState{Voters: slices.Sorted(maps.Keys(m.members))}
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

// applyConfChange applies a committed membership change to m (a copy of
// the member set the apply round works on).
func applyConfChange(m map[uint64]string, cc *pb.ConfChange) error {
	switch cc.GetType() {
	case pb.ConfChangeType_ConfChangeAddNode:
		m[cc.GetNodeId()] = string(cc.GetContext())
	case pb.ConfChangeType_ConfChangeRemoveNode:
		delete(m, cc.GetNodeId())
	default:
		return fmt.Errorf("membership change %v is not supported", cc.GetType())
	}
	return nil
}

// ChangeMembers adds member id at addr (add) or removes member id (not
// add), one change at a time, and returns once the leader applied it. A
// change already in effect succeeds at once. Only the serving leader
// takes it. Unless forced, a change that would leave fewer members up
// than a quorum of the new member set is refused (quorumAfter).
func (r *Member) ChangeMembers(add bool, id uint64, addr string, force bool) (metaapi.MetaStatus, error) {
	s := r.s
	if id == 0 || (add && (addr == "" || len(addr) > maxMemberAddrBytes)) {
		return metaapi.MetaStatus{}, fmt.Errorf("%w: member %d at %q", metaapi.ErrInvalid, id, addr)
	}
	s.Mu.RLock()
	err := s.Usable()
	s.Mu.RUnlock()
	if err != nil {
		return metaapi.MetaStatus{}, err
	}
	done := func() (bool, error) {
		m := r.memberSet()
		cur, ok := m[id]
		switch {
		case add && ok && cur == addr:
			return true, nil
		case add && ok:
			return false, fmt.Errorf("%w: member %d is already a member, at %s", metaapi.ErrExists, id, cur)
		case !add && !ok:
			return true, nil
		case !add && len(m) == 1:
			return false, fmt.Errorf("%w: member %d is the last member", metaapi.ErrInvalid, id)
		}
		return false, nil
	}
	if ok, err := done(); ok || err != nil {
		return r.Status(), err
	}
	if !force {
		if err := r.quorumAfter(add, id); err != nil {
			return metaapi.MetaStatus{}, err
		}
	}
	t := pb.ConfChangeType_ConfChangeAddNode
	if !add {
		t = pb.ConfChangeType_ConfChangeRemoveNode
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
func sortedMembers(m map[uint64]string) []metaapi.MetaMember {
	var out []metaapi.MetaMember
	for id, addr := range m {
		out = append(out, metaapi.MetaMember{ID: id, Addr: addr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// rejoinProbeTimeout bounds the status request to each peer at a
// bootstrap.
const rejoinProbeTimeout = time.Second

// rejoinTerm asks the other members (in parallel, rejoinProbeTimeout
// each) for their status, at the bootstrap of an empty directory. When
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
	var wg sync.WaitGroup
	var highest, held, indexSeen uint64
	for id, addr := range peers {
		if id == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mc, err := metaapi.NewClient(addr, metaapi.ClientOptions{Attempts: 1, Timeout: rejoinProbeTimeout, TLS: sec})
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), rejoinProbeTimeout)
			defer cancel()
			st, err := mc.MetaStatus(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			highest = max(highest, st.Term)
			held = max(held, st.Match[self])
			indexSeen = max(indexSeen, st.LastIndex, st.AppliedIndex)
			mu.Unlock()
		}()
	}
	wg.Wait()
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

// quorumAfter refuses a membership change that would leave fewer members
// up than a quorum of the new member set (etcd's strict reconfiguration
// check): a member added counts as down until it has caught up, so adding
// one while another is down takes the group to the edge of losing its
// quorum (with 1 of 3 down, 2 of 4 up: one more failure stops it). "Up"
// is the leader's view: the members raft heard from within the last
// election timeout. A group of one may always grow: it tolerates no
// failure either way.
func (ms *membership) quorumAfter(add bool, id uint64) error {
	members := ms.memberSet()
	active, _ := ms.active.Load().(map[uint64]bool)
	up := 0
	for m := range members {
		if active[m] {
			up++
		}
	}
	n := len(members)
	switch {
	case add && n <= 1:
		return nil
	case add:
		n++
	default:
		if active[id] {
			up--
		}
		n--
	}
	if quorum := n/2 + 1; up < quorum {
		what := fmt.Sprintf("removing member %d", id)
		if add {
			what = fmt.Sprintf("adding member %d (down until it has caught up)", id)
		}
		return fmt.Errorf("%w: %s would leave %d of %d members up, fewer than the %d of a quorum: "+
			"bring the down members back or remove them first, or force the change (spindle admin meta … --force)",
			metaapi.ErrPrecondition, what, up, n, quorum)
	}
	return nil
}
