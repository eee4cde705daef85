// Package access is the meta service's authorization of buckets and keys,
// and its audit log (issue 32 items 1 and 4), over packages authz (the
// decision and the grants) and audit (the log): Gate is what the HTTP
// handlers of package meta call.
//
// auth.go (package meta) lets a route's certificate roles through; the
// data routes then ask Gate whether the caller may do the action on the
// bucket and key (authz.Check, the one decision), and every change and
// every refusal goes to the audit log as a JSON line. A commit, and a
// multipart completion, is checked inside its mutation (namespace.Check,
// CommitCheck), where it knows whether it replaces a key: an overwrite
// needs write and delete. A listing of buckets keeps those the caller may
// see (VisibleBuckets).
//
// Invariants: a refusal is audited where it is decided; a change is
// audited once its outcome is known (the check's decisions on overwrites
// after the commit's mutation, outside State.Mu: no log write is made
// under it). Concurrency: Gate is safe for concurrent use (its State's
// lock, the audit log's own).
package access

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/meta/audit"
	"github.com/spindle-store/spindle/internal/meta/authz"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/s3permapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Gate is a meta service's grants and audit log.
type Gate struct {
	st     *state.State
	ns     *namespace.Namespace
	users  *namespace.S3Users
	grants *authz.Grants
	audit  *audit.Log // nil: none
}

// AuditPath is the audit log's path for cfg ("" none).
func AuditPath(cfg *state.Config) string {
	switch {
	case cfg.AuditLog == "off":
		return ""
	case cfg.AuditLog != "":
		return cfg.AuditLog
	case cfg.FS != vfs.Default:
		return ""
	}
	return filepath.Clean(cfg.Dir) + ".audit.jsonl"
}

// Open opens the audit log of st's service (AuditPath) and registers its
// metric.
func Open(st *state.State, ns *namespace.Namespace, users *namespace.S3Users) (*Gate, error) {
	s := &Gate{st: st, ns: ns, users: users, grants: authz.NewGrants(st)}
	if p := AuditPath(&st.Cfg); p != "" {
		l, err := audit.Open(audit.Options{Path: p, MaxBytes: st.Cfg.AuditMaxBytes, Keep: st.Cfg.AuditKeep, Logger: st.Log,
			Quiet: func(e audit.Event) bool {
				return e.Outcome == "done" && (e.Action == "commit_key" || e.Action == "allocate")
			}})
		if err != nil {
			return nil, fmt.Errorf("meta: %w", err)
		}
		s.audit = l
	}
	st.Metrics.Reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_meta_audit_dropped_total",
		Help: "Audit events not written to the audit log (its queue full: the disk slow, full or failing; or write errors)."},
		func() float64 { return float64(s.audit.Dropped()) }))
	return s, nil
}

// Close closes the audit log.
func (s *Gate) Close() error {
	if s == nil {
		return nil
	}
	return s.audit.Close()
}

// Audit records e (nil Gate: nothing).
func (s *Gate) Audit(e audit.Event) {
	if s != nil {
		s.audit.Record(e)
	}
}

// Who is r's caller.
func (s *Gate) Who(r *http.Request) authz.Identity {
	return authz.FromRequest(r, s.st.Cfg.TLS.Enabled())
}

// Record audits what id did (err nil: done; ErrForbidden: refused; else
// failed), with detail (what else the line should say) if any.
func (s *Gate) Record(id authz.Identity, action, bucket, key string, err error, detail ...string) {
	e := audit.Event{Who: id.Who(), Role: string(id.Peer.Role), Remote: id.Remote, Action: action, Bucket: bucket, Key: key, Outcome: "done"}
	if len(detail) > 0 {
		e.Detail = detail[0]
	}
	switch {
	case errors.Is(err, metaapi.ErrForbidden):
		e.Outcome, e.Reason = "refused", err.Error()
	case err != nil:
		e.Outcome, e.Reason = "failed", err.Error()
	}
	s.audit.Record(e)
}

// Authorize is authz.Authorize for r's caller; a refusal is audited.
func (s *Gate) Authorize(r *http.Request, route, act, bucket, key string) error {
	id := s.Who(r)
	err := authz.Authorize(s.st, id, act, bucket, key)
	if err != nil {
		s.Record(id, route, bucket, key, err)
	}
	return err
}

// AsBucketAdmin runs do when r's caller has the admin right on bucket
// (as a change of its configuration needs), and audits the change.
func (s *Gate) AsBucketAdmin(r *http.Request, route, bucket string, do func() error) error {
	if err := s.Authorize(r, route, api.Admin, bucket, ""); err != nil {
		return err
	}
	err := do()
	s.Record(s.Who(r), route, bucket, "", err)
	return err
}

// CommitCheck is the check of id's commits: write, and delete too when
// the commit replaces a key. Its decisions on overwrites and its
// refusals are kept for the audit (audited once s.mu is released).
func (s *Gate) CommitCheck(id authz.Identity) (namespace.Check, *Decisions) {
	d := &Decisions{}
	return func(bucket, key string, exists bool) error {
		err := authz.Check(s.st, id, api.Write, bucket, key)
		if err == nil && exists {
			err = authz.Check(s.st, id, api.Delete, bucket, key)
		}
		if exists || err != nil {
			d.add(audit.Event{Who: id.Who(), Role: string(id.Peer.Role), Remote: id.Remote, Action: "overwrite", Bucket: bucket, Key: key, Outcome: "allowed"}, err, exists)
		}
		return err
	}, d
}

// Decisions are a request's commit checks, audited after the commit.
type Decisions struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (d *Decisions) add(e audit.Event, err error, exists bool) {
	if !exists {
		e.Action = "commit_key"
	}
	if err != nil {
		e.Outcome, e.Reason = "refused", err.Error()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.evs = append(d.evs, e)
}

func (s *Gate) Flush(d *Decisions) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.evs {
		s.audit.Record(e)
	}
}

// CreateBucket creates bucket owned by r's caller (authz.Owner).
func (s *Gate) CreateBucket(r *http.Request, bucket string) (*metaapi.Bucket, error) {
	id := s.Who(r)
	var b *metaapi.Bucket
	var err error
	if owner := authz.Owner(s.st, id); owner != "" {
		b, err = s.users.CreateS3Bucket(bucket, &s3permapi.CreateBucket{CreateS3Bucket: metaapi.CreateS3Bucket{Owner: owner}})
	} else {
		b, err = s.ns.CreateBucket(bucket)
	}
	s.Record(id, "create_bucket", bucket, "", err)
	return b, err
}

// RouteGrants adds the grants' routes (metaapi/authz).
//
// decode reads a request's JSON body (package meta's decodeBody).
func (s *Gate) RouteGrants(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error)),
	decode func(w http.ResponseWriter, r *http.Request, v any) error) {
	change := func(name string, do func(authz.Identity, api.GrantChange) error) {
		path := api.GrantsRoute
		if name == "revoke_grant" {
			path = api.RevokeRoute
		}
		route("POST "+path, name, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
			var g api.GrantChange
			if err := decode(w, r, &g); err != nil {
				return nil, 0, err
			}
			id := s.Who(r)
			err := do(id, g)
			s.Record(id, name, g.Bucket, g.Prefix, err, g.Principal+" "+g.Action)
			return nil, http.StatusNoContent, err
		})
	}
	change("grant", s.grants.Add)
	change("revoke_grant", s.grants.Revoke)
	route("GET "+api.GrantsRoute, "grants", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		id := s.Who(r)
		l, err := s.grants.List(id, r.URL.Query().Get("bucket"))
		if errors.Is(err, metaapi.ErrForbidden) {
			s.Record(id, "grants", r.URL.Query().Get("bucket"), "", err)
		}
		return &api.GrantList{Grants: l}, http.StatusOK, err
	})
}

// VisibleBuckets keeps of l the buckets r's caller may see
// (authz.Visible: its own, those it holds a grant on; every bucket for an
// admin). Without TLS everyone may do everything, but a listing the S3
// gateway makes for a user (S3UserHeader) is still that user's view: the
// gateway shows each user its buckets.
func (s *Gate) VisibleBuckets(r *http.Request, l *metaapi.BucketList) (*metaapi.BucketList, error) {
	id := s.Who(r)
	if u := r.Header.Get(api.S3UserHeader); id.Open && u != "" {
		id = authz.Identity{Peer: tlsconf.Peer{Role: tlsconf.RoleS3}, S3User: u}
	}
	return state.Read(s.st, func() (*metaapi.BucketList, error) {
		out := &metaapi.BucketList{Buckets: []metaapi.Bucket{}}
		for _, b := range l.Buckets {
			ok, err := authz.Visible(s.st, id, b.Name)
			if err != nil {
				return nil, err
			}
			if ok {
				out.Buckets = append(out.Buckets, b)
			}
		}
		return out, nil
	})
}
