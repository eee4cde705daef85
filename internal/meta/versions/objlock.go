package versions

import (
	"net/http"

	"github.com/spindle-store/spindle/internal/meta/access"
	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// Object lock's routes (metaapi/versionapi's objlock.go; rules: package
// lockmeta). Reading a lock needs the read right on the key; changing a
// bucket's configuration or a version's lock, and bypassing a GOVERNANCE
// retention, the admin right on the bucket (its owner, an admin grant,
// an admin certificate, the gateway's root user), as S3's
// s3:BypassGovernanceRetention; every change is audited.

// override is a request's standing against a GOVERNANCE retention: it
// asks when ref.Bypass, and is permitted when its caller has the admin
// right on the bucket.
func override(r *http.Request, gate *access.Gate, ref versionapi.Ref) lockmeta.Override {
	if !ref.Bypass {
		return lockmeta.Override{}
	}
	return lockmeta.Override{Requested: true, Permitted: gate.Authorize(r, "bypass_governance_retention", api.Admin, ref.Bucket, ref.Key) == nil}
}

func lockRoutes(route func(pattern, name string, h Handler), ns namespace.Versions, gate *access.Gate,
	decode func(w http.ResponseWriter, r *http.Request, v any) error) {
	route("PUT /v1/versions/{bucket}/lock", "put_object_lock_config", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var lc versionapi.LockConfig
		if err := decode(w, r, &lc); err != nil {
			return nil, 0, err
		}
		bucket := r.PathValue("bucket")
		err := gate.AsBucketAdmin(r, "put_object_lock_config", bucket, func() error {
			return ns.PutLockConfig(bucket, lockmeta.Config{Enabled: lc.Enabled, Mode: lc.Mode, Days: lc.Days, Years: lc.Years}, lc.Create)
		})
		return nil, http.StatusNoContent, err
	})
	route("GET /v1/versions/{bucket}/lock", "get_object_lock_config", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		c, err := ns.LockConfig(r.PathValue("bucket"))
		return versionapi.LockConfig{Enabled: c.Enabled, Mode: c.Mode, Days: c.Days, Years: c.Years}, http.StatusOK, err
	})
	route("POST /v1/versions/lock/get", "get_object_lock", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var ref versionapi.Ref
		if err := decode(w, r, &ref); err != nil {
			return nil, 0, err
		}
		if err := gate.Authorize(r, "get_object_lock", api.Read, ref.Bucket, ref.Key); err != nil {
			return nil, 0, err
		}
		l, err := ns.GetLock(ref)
		return versionapi.Lock{Mode: l.Mode, Until: l.Until, LegalHold: l.Hold, LegalHoldSet: l.HoldSet}, http.StatusOK, err
	})
	route("POST /v1/versions/lock/retention", "put_object_retention", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req versionapi.Retention
		if err := decode(w, r, &req); err != nil {
			return nil, 0, err
		}
		err := gate.AsBucketAdmin(r, "put_object_retention", req.Bucket, func() error {
			o := override(r, gate, req.Ref)
			next := lockmeta.Lock{Mode: req.Mode, Until: req.Until.UTC()}
			return ns.SetLock(req.Ref, func(old lockmeta.Lock) (lockmeta.Lock, error) {
				now := ns.Cfg.Now()
				if err := next.ValidRetention(now); err != nil {
					return old, err
				}
				if err := lockmeta.CheckRetention(old, next, now, o); err != nil {
					return old, err
				}
				next.Hold, next.HoldSet = old.Hold, old.HoldSet
				return next, nil
			})
		})
		return nil, http.StatusNoContent, err
	})
	route("POST /v1/versions/lock/legal-hold", "put_object_legal_hold", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req versionapi.LegalHold
		if err := decode(w, r, &req); err != nil {
			return nil, 0, err
		}
		err := gate.AsBucketAdmin(r, "put_object_legal_hold", req.Bucket, func() error {
			return ns.SetLock(req.Ref, func(old lockmeta.Lock) (lockmeta.Lock, error) {
				old.Hold, old.HoldSet = req.On, true
				return old, nil
			})
		})
		return nil, http.StatusNoContent, err
	})
}
