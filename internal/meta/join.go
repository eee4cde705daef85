package meta

import (
	"fmt"
	"net/http"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/meta/certreg"
	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Join tokens and joins: package certreg (issue.go). A joiner has no
// certificate (tlsconf.JoinALPN); guard lets it call the join route only.
func (s *Service) routeJoin(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("POST "+metaapi.JoinTokensRoute, "create_join_token", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req certapi.JoinTokenRequest
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		t, err := s.certs.CreateJoinToken(req)
		return t, http.StatusOK, err
	})
	route("POST "+metaapi.JoinRoute, "join", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		if !s.certs.AllowJoin() {
			s.Log.Warn("join refused: rate limit", "remote", r.RemoteAddr, "per_second", certreg.JoinsPerSecond)
			return nil, 0, fmt.Errorf("%w: joins are limited to %d a second: try again", metaapi.ErrBusy, certreg.JoinsPerSecond)
		}
		var req metaapi.JoinRequest
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		resp, err := s.certs.Join(&req, r.RemoteAddr)
		return resp, http.StatusOK, err
	})
}
