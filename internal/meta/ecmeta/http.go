package ecmeta

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Route names (package meta gives each its access class).
const (
	RouteGetDefault = "ec_get_default"
	RouteSetDefault = "ec_set_default"
	RouteGetBucket  = "ec_get_bucket"
	RouteSetBucket  = "ec_set_bucket"
	RouteWork       = "ec_work"
	RouteConverted  = "ec_converted"
	RouteLayout     = "ec_layout"
	RouteRebuilt    = "ec_rebuilt"
	RouteCompacted  = "ec_compacted"
	RouteStatus     = "ec_status"
)

// Routes adds the routes of package ecapi. authorize checks that the
// caller may change a bucket's configuration (its admin right), and
// records the change.
func (m *Manager) Routes(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error)),
	authorize func(r *http.Request, name, bucket string, do func() error) error) {
	route("GET "+ecapi.DefaultRoute, RouteGetDefault, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		p, err := m.GetDefault()
		return p, http.StatusOK, err
	})
	route("PUT "+ecapi.DefaultRoute, RouteSetDefault, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var p ecapi.Policy
		if err := decode(w, r, &p); err != nil {
			return nil, 0, err
		}
		return nil, http.StatusNoContent, m.SetDefault(p.Policy)
	})
	route("GET "+ecapi.BucketsRoute+"{bucket}", RouteGetBucket, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		p, err := m.GetBucket(r.PathValue("bucket"))
		return p, http.StatusOK, err
	})
	route("PUT "+ecapi.BucketsRoute+"{bucket}", RouteSetBucket, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var p ecapi.Policy
		if err := decode(w, r, &p); err != nil {
			return nil, 0, err
		}
		bucket := r.PathValue("bucket")
		return nil, http.StatusNoContent, authorize(r, RouteSetBucket, bucket, func() error { return m.SetBucket(bucket, p.Policy) })
	})
	route("POST "+ecapi.WorkRoute, RouteWork, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req ecapi.WorkRequest
		if err := decode(w, r, &req); err != nil {
			return nil, 0, err
		}
		caller, err := tlsconf.PeerOfState(r.TLS)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", metaapi.ErrForbidden, err)
		}
		work, err := m.Work(req, caller)
		return work, http.StatusOK, err
	})
	route("POST "+ecapi.ConvertedRoute, RouteConverted, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req ecapi.Converted
		if err := decode(w, r, &req); err != nil {
			return nil, 0, err
		}
		caller, err := tlsconf.PeerOfState(r.TLS)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", metaapi.ErrForbidden, err)
		}
		return nil, http.StatusNoContent, m.Converted(req, caller)
	})
	route("POST "+ecapi.RebuiltRoute, RouteRebuilt, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req ecapi.Rebuilt
		if err := decode(w, r, &req); err != nil {
			return nil, 0, err
		}
		caller, err := tlsconf.PeerOfState(r.TLS)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", metaapi.ErrForbidden, err)
		}
		return nil, http.StatusNoContent, m.Rebuilt(req, caller)
	})
	route("POST "+ecapi.CompactedRoute, RouteCompacted, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req ecapi.Compacted
		if err := decode(w, r, &req); err != nil {
			return nil, 0, err
		}
		caller, err := tlsconf.PeerOfState(r.TLS)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", metaapi.ErrForbidden, err)
		}
		return nil, http.StatusNoContent, m.Compacted(req, caller)
	})
	route("GET "+ecapi.StatusRoute, RouteStatus, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := m.Status()
		return st, http.StatusOK, err
	})
	route("GET "+ecapi.ContainerRoute+"{id}", RouteLayout, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil || id == 0 {
			return nil, 0, fmt.Errorf("%w: container %q", metaapi.ErrInvalid, r.PathValue("id"))
		}
		l, err := m.Layout(id)
		return l, http.StatusOK, err
	})
}

// decode reads a JSON body of at most state.MaxRequestBytes.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, state.MaxRequestBytes))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: bad JSON body: %v", metaapi.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: bad JSON body: data after the value", metaapi.ErrInvalid)
	}
	return nil
}
