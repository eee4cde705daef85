package meta

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
	"github.com/spindle-store/spindle/internal/metaapi"
	api "github.com/spindle-store/spindle/internal/metaapi/authz"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Authorization of buckets and keys, and the audit log (issue 32 items 1
// and 4). auth.go lets a route's certificate roles through; the data
// routes then ask package authz whether the caller may do the action on
// the bucket and key (authz.Check, the one decision), and every change
// and every refusal goes to the audit log (package audit) as a JSON line.
// A commit is checked inside its mutation (namespace.Check), where it
// knows whether it replaces a key: an overwrite needs write and delete.

// access is the service's grants and audit log.
type access struct {
	grants *authz.Grants
	audit  *audit.Log // nil: none
}

// AuditPath is the audit log's path for cfg ("" none).
func AuditPath(cfg *Config) string {
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

// openAccess checks the grant records and opens the audit log (Open).
func (s *Service) openAccess() error {
	s.acc.grants = authz.NewGrants(s.State)
	if p := AuditPath(&s.Cfg); p != "" {
		l, err := audit.Open(audit.Options{Path: p, MaxBytes: s.Cfg.AuditMaxBytes, Keep: s.Cfg.AuditKeep, Logger: s.Log,
			Quiet: func(e audit.Event) bool { return e.Outcome == "done" && (e.Action == "commit_key" || e.Action == "allocate") }})
		if err != nil {
			return fmt.Errorf("meta: %w", err)
		}
		s.acc.audit = l
	}
	s.Metrics.Reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_meta_audit_dropped_total",
		Help: "Audit events not written to the audit log (its queue full: the disk slow, full or failing; or write errors)."},
		func() float64 { return float64(s.acc.audit.Dropped()) }))
	return nil
}

// who is r's caller.
func (s *Service) who(r *http.Request) authz.Identity { return authz.FromRequest(r, s.Cfg.TLS.Enabled()) }

// record audits what id did (err nil: done; ErrForbidden: refused; else
// failed), with detail (what else the line should say) if any.
func (s *Service) record(id authz.Identity, action, bucket, key string, err error, detail ...string) {
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
	s.acc.audit.Record(e)
}

// authorize is authz.Authorize for r's caller; a refusal is audited.
func (s *Service) authorize(r *http.Request, route, act, bucket, key string) error {
	id := s.who(r)
	err := authz.Authorize(s.State, id, act, bucket, key)
	if err != nil {
		s.record(id, route, bucket, key, err)
	}
	return err
}

// commitCheck is the check of id's commits: write, and delete too when
// the commit replaces a key. Its decisions on overwrites and its
// refusals are kept for the audit (audited once s.mu is released).
func (s *Service) commitCheck(id authz.Identity) (namespace.Check, *decisions) {
	d := &decisions{}
	return func(bucket, key string, exists bool) error {
		err := authz.Check(s.State, id, api.Write, bucket, key)
		if err == nil && exists {
			err = authz.Check(s.State, id, api.Delete, bucket, key)
		}
		if exists || err != nil {
			d.add(audit.Event{Who: id.Who(), Role: string(id.Peer.Role), Remote: id.Remote, Action: "overwrite", Bucket: bucket, Key: key, Outcome: "allowed"}, err, exists)
		}
		return err
	}, d
}

// decisions are a request's commit checks, audited after the commit.
type decisions struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (d *decisions) add(e audit.Event, err error, exists bool) {
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

func (s *Service) flush(d *decisions) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.evs {
		s.acc.audit.Record(e)
	}
}

// createBucket creates bucket owned by r's caller (authz.Owner).
func (s *Service) createBucket(r *http.Request, bucket string) (*metaapi.Bucket, error) {
	id := s.who(r)
	var b *metaapi.Bucket
	var err error
	if owner := authz.Owner(s.State, id); owner != "" {
		b, err = s.CreateS3Bucket(bucket, &metaapi.CreateS3Bucket{Owner: owner})
	} else {
		b, err = s.CreateBucket(bucket)
	}
	s.record(id, "create_bucket", bucket, "", err)
	return b, err
}

// routeGrants adds the grants' routes (metaapi/authz).
func (s *Service) routeGrants(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	change := func(name string, do func(authz.Identity, api.GrantChange) error) {
		path := api.GrantsRoute
		if name == "revoke_grant" {
			path = api.RevokeRoute
		}
		route("POST "+path, name, func(w http.ResponseWriter, r *http.Request) (any, int, error) {
			var g api.GrantChange
			if err := decodeBody(w, r, &g); err != nil {
				return nil, 0, err
			}
			id := s.who(r)
			err := do(id, g)
			s.record(id, name, g.Bucket, g.Prefix, err, g.Principal+" "+g.Action)
			return nil, http.StatusNoContent, err
		})
	}
	change("grant", s.acc.grants.Add)
	change("revoke_grant", s.acc.grants.Revoke)
	route("GET "+api.GrantsRoute, "grants", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		id := s.who(r)
		l, err := s.acc.grants.List(id, r.URL.Query().Get("bucket"))
		if errors.Is(err, metaapi.ErrForbidden) {
			s.record(id, "grants", r.URL.Query().Get("bucket"), "", err)
		}
		return &api.GrantList{Grants: l}, http.StatusOK, err
	})
}

// authorizeComplete checks a multipart completion: write, and delete too
// when the key exists (an overwrite; looked up first, outside the
// completion's mutation: a key created in between is replaced with write
// alone, a narrow race this path accepts).
func (s *Service) authorizeComplete(r *http.Request, bucket, key string) error {
	if err := s.authorize(r, "complete_upload", api.Write, bucket, key); err != nil {
		return err
	}
	if _, err := s.GetKey(bucket, key); err != nil {
		return nil // no such key (or bucket: the completion says so)
	}
	id := s.who(r)
	err := authz.Authorize(s.State, id, api.Delete, bucket, key)
	e := audit.Event{Who: id.Who(), Role: string(id.Peer.Role), Remote: id.Remote, Action: "overwrite", Bucket: bucket, Key: key, Outcome: "allowed"}
	if err != nil {
		e.Outcome, e.Reason = "refused", err.Error()
	}
	s.acc.audit.Record(e)
	return err
}
