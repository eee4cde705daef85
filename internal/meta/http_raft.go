package meta

import (
	"fmt"
	"net/http"

	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/meta/raftgroup"
	"github.com/spindle-store/spindle/internal/meta/raftnet"
	"github.com/spindle-store/spindle/internal/metaapi"
)

func (s *Service) membersHandler(w http.ResponseWriter, req *http.Request) (any, int, error) {
	var body metaapi.MemberChange
	if err := httpio.DecodeBody(w, req, &body); err != nil {
		return nil, 0, err
	}
	st, err := s.ChangeMembers(body)
	return st, http.StatusOK, err
}

// demoteHandler makes a member that restarted on an empty directory a
// learner, at its own request (meta peers: raftgroup/learners.go). Only
// the demotion is open to them: it takes no vote from a member that has
// one to lose, and the member is promoted once it has caught up.
func (s *Service) demoteHandler(w http.ResponseWriter, req *http.Request) (any, int, error) {
	var body raftgroup.DemoteRequest
	if err := httpio.DecodeBody(w, req, &body); err != nil {
		return nil, 0, err
	}
	if id, bound, err := raftnet.BoundSender(req); err != nil || bound && id != body.ID {
		return nil, 0, fmt.Errorf("%w: a member asks its own demotion only (certificate binds member %d, asked for %d: %v)", metaapi.ErrForbidden, id, body.ID, err)
	}
	st, err := s.ChangeMembers(metaapi.MemberChange{Op: "replace", ID: body.ID})
	return st, http.StatusOK, err
}

// raftRoutes adds the routes of a replicated member: raft messages in,
// and the member's status (served by every member, leader or not).
func (s *Service) raftRoutes(mux *http.ServeMux) {
	mux.Handle("GET "+metaapi.MetaStatusRoute, s.guard("meta_status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpio.WriteJSON(w, http.StatusOK, s.MetaStatus())
	})))
	if s.rep == nil {
		return
	}
	mux.Handle("POST "+raftnet.StreamRoute, s.guard("meta_raft", http.HandlerFunc(s.rep.StreamHandler)))
	mux.Handle("GET "+raftgroup.SnapshotRoute, s.guard("meta_snapshot", http.HandlerFunc(s.rep.Snap.SnapshotHandler))) // snapshot.go
	mux.Handle("POST "+metaapi.MetaMembersRoute, s.guardInstrumented("meta_members", s.membersHandler))
	mux.Handle("POST "+raftgroup.DemoteRoute, s.guardInstrumented("meta_demote", s.demoteHandler))
}

// MetaStatus is this member's view of the meta group (a group of one:
// member 1, always the leader).
func (s *Service) MetaStatus() metaapi.MetaStatus {
	var st metaapi.MetaStatus
	if s.rep != nil {
		st = s.rep.Status()
	} else {
		st = metaapi.MetaStatus{ID: 1, LeaderID: 1, Role: "leader", Serving: s.Serving(), Members: []metaapi.MetaMember{{ID: 1}}}
	}
	st.TLS = s.Cfg.TLS.Mode()
	return st
}
