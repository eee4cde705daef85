package metaapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// MetaStatusRoute is served by every member of the meta service, leader
// or not: GET → MetaStatus.
const MetaStatusRoute = "/v1/meta/status"

// MetaMember is a member of the meta service's raft group.
type MetaMember struct {
	ID      uint64 `json:"id"`
	Addr    string `json:"addr,omitempty"`
	Learner bool   `json:"learner,omitempty"` // no vote until promoted
}

// MetaStatus is one member's view of the meta service's raft group (a
// single meta service: member 1, leader of a group of one).
type MetaStatus struct {
	ID         uint64 `json:"id"`
	LeaderID   uint64 `json:"leader_id"` // 0: no leader known
	LeaderAddr string `json:"leader_addr,omitempty"`
	// Role: leader, follower, candidate, pre-candidate, learner, recovering, or removed (it applied its own removal).
	Role string `json:"role"`
	// Serving: this member answers requests (the leader, once it has
	// applied the log up to its term's first entry).
	Serving      bool         `json:"serving"`
	Term         uint64       `json:"term"`
	AppliedIndex uint64       `json:"applied_index"`
	CommitIndex  uint64       `json:"commit_index"`
	LastIndex    uint64       `json:"last_index"`
	Members      []MetaMember `json:"members"`
	// SnapshotIndex is the applied index of this member's latest
	// checkpoint (0: none yet); SnapshotsInstalled counts the snapshots
	// it received from other members since it started.
	SnapshotIndex      uint64 `json:"snapshot_index"`
	SnapshotsInstalled uint64 `json:"snapshots_installed,omitempty"`
	// VotesRefused counts the vote requests a recovering member (Role
	// "recovering": it lost its directory and has not caught up) dropped.
	VotesRefused uint64 `json:"votes_refused,omitempty"`
	// Match is, on the leader, the last log index each member is known
	// to hold (raft's progress, as of the last tick).
	Match map[uint64]uint64 `json:"match,omitempty"`
	// Down lists, on the leader, the members it has not heard from within
	// two election timeouts.
	Down []uint64 `json:"down,omitempty"`
	// TLS is how the member's connections are secured: "mtls", or
	// "insecure" (plaintext, --insecure).
	TLS string `json:"tls"`
}

// MetaMembersRoute changes the members of a replicated meta service, one
// at a time: POST MemberChange → MetaStatus (the leader's, once applied).
const MetaMembersRoute = "/v1/meta/members"

// MemberChange is one change (raftgroup.ChangeMembers): add (ID at Addr, a learner unless Voter), promote, remove, replace.
type MemberChange struct {
	Op    string `json:"op"`
	ID    uint64 `json:"id"`
	Addr  string `json:"addr,omitempty"`
	Voter bool   `json:"voter,omitempty"`
	// Force: make the change even if it leaves fewer members up than a
	// quorum of the new member set.
	Force bool `json:"force,omitempty"`
}

// NotLeaderError is what a member of a replicated meta service that does
// not serve answers (an Error with code UNAVAILABLE, NotLeader set and
// the leader's address when known); the request changed nothing.
type NotLeaderError struct {
	Member     uint64 // the member that refused
	Leader     uint64 // 0: unknown
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("meta member %d is not the leader, and knows of none (election under way)", e.Member)
	}
	if e.Leader == e.Member {
		return fmt.Sprintf("meta member %d is the new leader and does not serve yet", e.Member)
	}
	return fmt.Sprintf("meta member %d is not the leader: member %d at %s is", e.Member, e.Leader, e.LeaderAddr)
}

// Unwrap makes it an ErrUnavailable.
func (e *NotLeaderError) Unwrap() error { return ErrUnavailable }

// SplitAddrs splits a --meta value: a comma-separated list of addresses.
func SplitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// MetaStatus asks the member at the client's current address (one attempt, no failover: it describes that member).
func (c *Client) MetaStatus(ctx context.Context) (MetaStatus, error) {
	var st MetaStatus
	return st, c.once(ctx, int(c.cur.Load()), http.MethodGet, MetaStatusRoute, nil, "", &st)
}

// ChangeMembers adds or removes a member of a replicated meta service
// (on the leader, following it); it returns once the leader applied the
// change. A retry of a change that took effect succeeds.
func (c *Client) ChangeMembers(ctx context.Context, ch MemberChange) (MetaStatus, error) {
	var st MetaStatus
	return st, c.Do(ctx, http.MethodPost, MetaMembersRoute, ch, &st, true)
}
