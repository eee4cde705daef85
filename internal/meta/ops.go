package meta

import (
	"net/http"
)

// routeOps adds the routes of damage, decommission and maintenance.
func (s *Service) routeOps(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("GET /v1/damaged", "damaged", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := s.Damaged()
		return st, http.StatusOK, err
	})
}
