// Package versions serves the meta service's S3 object versions routes
// (package metaapi/versionapi; the store's side is namespace/versions.go,
// its layout package state/verrec) and object lock's (objlock.go; the
// rules: package lockmeta, the state: namespace/objlock.go). Package meta
// registers them (http.go).
//
// Invariants: every route is authorized as its plain-key counterpart is
// (a version read as a key read, a version deletion as a key deletion,
// the bucket's versioning state as its other configuration, admin) and
// audited when it changes something; a version read carries block tokens
// for its blocks as a key read does. A lock change, and a bypass of a
// GOVERNANCE retention, need the admin right on the bucket.
//
// Concurrency: no state of its own; the namespace serializes.
package versions

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/spindle-store/spindle/internal/meta/access"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/tokenkeys"
	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// Handler is a route's body: (answer, status, error).
type Handler = func(w http.ResponseWriter, r *http.Request) (any, int, error)

// Routes adds the routes to route; decode reads a JSON body.
func Routes(route func(pattern, name string, h Handler), ns namespace.Versions, gate *access.Gate, tokens *tokenkeys.Minter,
	decode func(w http.ResponseWriter, r *http.Request, v any) error) {
	route("PUT /v1/versions/{bucket}/state", "put_bucket_versioning", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var st versionapi.State
		if err := decode(w, r, &st); err != nil {
			return nil, 0, err
		}
		bucket := r.PathValue("bucket")
		if err := gate.Authorize(r, "put_bucket_versioning", api.Admin, bucket, ""); err != nil {
			return nil, 0, err
		}
		err := ns.SetVersioning(bucket, st.Status)
		gate.Record(gate.Who(r), "put_bucket_versioning", bucket, "", err, st.Status)
		return nil, http.StatusNoContent, err
	})
	route("GET /v1/versions/{bucket}/state", "get_bucket_versioning", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		st, err := ns.Versioning(r.PathValue("bucket"))
		return versionapi.State{Status: st}, http.StatusOK, err
	})
	route("POST /v1/versions/get", "get_version", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var ref versionapi.Ref
		if err := decode(w, r, &ref); err != nil {
			return nil, 0, err
		}
		if err := gate.Authorize(r, "get_version", api.Read, ref.Bucket, ref.Key); err != nil {
			return nil, 0, err
		}
		v, err := ns.GetVersion(ref)
		if err == nil {
			err = tokens.Key(r, &v.KeyInfo)
		}
		return v, http.StatusOK, err
	})
	route("POST /v1/versions/delete", "delete_version", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var ref versionapi.Ref
		if err := decode(w, r, &ref); err != nil {
			return nil, 0, err
		}
		if err := gate.Authorize(r, "delete_version", api.Delete, ref.Bucket, ref.Key); err != nil {
			return nil, 0, err
		}
		d, err := ns.DeleteVersionAs(ref, override(r, gate, ref))
		gate.Record(gate.Who(r), "delete_version", ref.Bucket, ref.Key, err, ref.VersionID)
		return d, http.StatusOK, err
	})
	route("GET /v1/versions/{bucket}/list", "list_versions", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		q := r.URL.Query()
		o := versionapi.ListOptions{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"), KeyMarker: q.Get("key_marker"), VersionIDMarker: q.Get("version_id_marker")}
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: limit %q is not a number", metaapi.ErrInvalid, v)
			}
			o.Limit = n
		}
		if err := gate.Authorize(r, "list_versions", api.Read, r.PathValue("bucket"), o.Prefix); err != nil {
			return nil, 0, err
		}
		l, err := ns.ListVersions(r.PathValue("bucket"), o)
		return l, http.StatusOK, err
	})
	lockRoutes(route, ns, gate, decode) // objlock.go
}
