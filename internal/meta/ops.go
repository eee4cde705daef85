package meta

import (
	"net/http"
	"slices"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// routeOps adds the routes of damage, decommission and maintenance.
func (s *Service) routeOps(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("GET /v1/damaged", "damaged", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := s.Damaged()
		return st, http.StatusOK, err
	})
}

// opsNodeInfo adds the node's failed volumes to its admin view.
func (s *Service) opsNodeInfo(ni *metaapi.NodeInfo, now time.Time) {
	ni.FailedVolumes = slices.Clone(s.repl.damage.volumes[ni.NodeID])
}
