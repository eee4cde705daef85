package meta

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/spindle-store/spindle/internal/meta/audit"
	"github.com/spindle-store/spindle/internal/meta/authz"
	"github.com/spindle-store/spindle/internal/meta/ecmeta"
	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Authorisation of the HTTP API (issue 17 items 2 and 3).
//
// Every route has an access class (routeAccess, by the route's name): the
// roles whose certificates may call it. guard checks the caller's role,
// taken from its verified TLS certificate (never from anything it sent),
// before the handler runs: a caller outside the class gets 403 and a log
// line. Calls of the admin class (destructive and administrative), and
// the gateway's deletions, are audited: one log line each, allowed or
// refused, with who (certificate role and name), what (method and path)
// and from where (remote address).
//
// With --insecure (no TLS) nobody is authenticated: every call is allowed,
// the audit lines say "unauthenticated", and Start logs at WARN that
// nothing is authenticated — unless Config.AdminToken is set: then the
// calls of the admin classes need it as a bearer token (a shared secret
// sent in plaintext: it keeps mistakes out, not an eavesdropper).

// accessClass is who may call a route.
type accessClass struct {
	roles []tlsconf.Role
	audit bool // every call logged (allowed or refused)
	// anyone: unauthenticated callers too (a joining datanode, which
	// proves itself with its token instead).
	anyone bool
	// admin: without TLS, the bearer token of Config.AdminToken (when
	// set) stands for the admin certificate.
	admin bool
}

var (
	// accessViews: read-only cluster views, status and metrics; every
	// authenticated role.
	accessViews = accessClass{roles: tlsconf.Roles}
	// accessData: reading and writing keys and buckets (no deletion).
	accessData = accessClass{roles: []tlsconf.Role{tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin}}
	// accessDataChange: deleting keys and buckets, granting: the data
	// roles, each call then checked against the bucket's owner and grants
	// (access.go, package meta/authz); audited.
	accessDataChange = accessClass{roles: []tlsconf.Role{tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin}, audit: true, admin: true}
	// accessGateway: the S3 gateway's own calls (users by access key,
	// S3 buckets and their ACLs, multipart uploads).
	accessGateway = accessClass{roles: []tlsconf.Role{tlsconf.RoleS3, tlsconf.RoleAdmin}}
	// accessAdminOrGateway: managing users:
	// an administrator, or the gateway on behalf of the S3 request whose
	// signature it checked (versitygw lets only its root user manage
	// users); audited.
	accessAdminOrGateway = accessClass{roles: []tlsconf.Role{tlsconf.RoleS3, tlsconf.RoleAdmin}, audit: true, admin: true}
	// accessAdmin: administration (safe mode, node operations, meta
	// members, backups); audited.
	accessAdmin = accessClass{roles: []tlsconf.Role{tlsconf.RoleAdmin}, audit: true, admin: true}
	// accessDatanode: heartbeats (registration): datanodes only; which
	// datanode a certificate may speak for is checked by Heartbeat
	// (nodeRecord.CertName).
	accessDatanode = accessClass{roles: []tlsconf.Role{tlsconf.RoleDatanode}}
	// accessMetaPeer: raft messages and snapshots between meta members.
	accessMetaPeer = accessClass{roles: []tlsconf.Role{tlsconf.RoleMeta}}
	// accessJoin: a datanode joining with a one-time token (join.go), no
	// certificate yet; audited.
	accessJoin = accessClass{roles: tlsconf.Roles, anyone: true, audit: true}
)

// routeAccess is every route's class, by the name it is instrumented and
// guarded under. A route without an entry makes Handler panic: no route
// is served unclassified.
var routeAccess = map[string]accessClass{
	"heartbeat":      accessDatanode,
	"create_bucket":  accessData,
	"list_buckets":   accessData,
	"delete_bucket":  accessDataChange,
	"allocate":       accessData,
	"commit_batch":   accessData,
	"allocate_batch": accessData,
	"get_batch":      accessData,
	"list_keys":      accessData,
	"commit_key":     accessData,
	"get_key":        accessData,
	"delete_key":     accessDataChange,
	// metaapi/versionapi: S3 object versions and object lock (native clients read them too)
	"get_version": accessData, "list_versions": accessData, "get_bucket_versioning": accessData, "get_object_lock_config": accessData, "get_object_lock": accessData,
	"delete_version": accessDataChange, "put_bucket_versioning": accessDataChange, "put_object_lock_config": accessDataChange, "put_object_retention": accessDataChange, "put_object_legal_hold": accessDataChange,
	"lifecycle_status": accessViews, // package lcmeta

	"nodes":       accessViews,
	"pipelines":   accessViews,
	"containers":  accessViews,
	"replication": accessViews,
	"damaged":     accessViews,
	"metrics":     accessViews,
	"meta_status": accessViews,

	"safemode_exit": accessAdmin,
	"node_op":       accessAdmin,
	"node_remove":   accessAdmin,
	"create_user":   accessAdminOrGateway,
	"list_users":    accessAdminOrGateway,
	"delete_user":   accessAdminOrGateway,
	"set_user_keys": accessAdmin,
	"kek_status":    accessViews,
	"kek_rotate":    accessAdmin,
	"backup":        accessAdmin,
	"meta_members":  accessAdmin,

	"user_by_access":   accessGateway,
	"create_s3_bucket": accessGateway,
	"get_bucket":       accessGateway,
	"put_bucket_acl":   accessGateway,
	"get_bucket_perms": accessGateway,
	"put_bucket_perms": accessGateway,
	"put_object_acl":   accessGateway,
	"create_upload":    accessGateway,
	"commit_part":      accessGateway,
	"complete_upload":  accessGateway,
	"abort_upload":     accessGateway,
	"get_upload":       accessGateway,
	"list_parts":       accessGateway,
	"list_uploads":     accessGateway,
	// metaapi/s3meta: object tags, bucket configuration documents
	"put_bucket_conf":      accessGateway,
	"get_bucket_conf":      accessGateway,
	"delete_bucket_conf":   accessGateway,
	"put_object_tagging":   accessGateway,
	ecmeta.RouteGetDefault: accessViews, ecmeta.RouteSetDefault: accessAdmin, ecmeta.RouteGetBucket: accessData, ecmeta.RouteLayout: accessData, ecmeta.RouteSetBucket: accessDataChange, ecmeta.RouteWork: accessDatanode, ecmeta.RouteConverted: accessDatanode, ecmeta.RouteRebuilt: accessDatanode, ecmeta.RouteCompacted: accessDatanode, ecmeta.RouteStatus: accessViews, // package ecmeta

	"meta_raft":     accessMetaPeer,
	"meta_demote":   accessMetaPeer,
	"meta_snapshot": accessMetaPeer,

	"grant":        accessDataChange,
	"revoke_grant": accessDataChange,
	"grants":       accessData,

	"create_join_token": accessAdmin,
	"join":              accessJoin,

	"certs":       accessAdmin,
	"revoke_cert": accessAdmin,
	"cert_denied": accessViews,
	"renew_cert":  accessViews,
}

// callerOf is the verified identity of r's caller (the zero Peer over
// plaintext).
func callerOf(r *http.Request) (tlsconf.Peer, error) { return tlsconf.PeerOfState(r.TLS) }

// bearerMatches says r carries "Authorization: Bearer token" (compared in
// constant time).
func bearerMatches(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// guard serves h only to callers of route's class: 403 (metaapi
// CodeForbidden) and a log line otherwise; audited classes log every call.
// Over plaintext (no TLS configured) every caller is let through.
func (s *Service) guard(route string, h http.Handler) http.Handler {
	class, ok := routeAccess[route]
	if !ok {
		panic(fmt.Sprintf("meta: route %q has no access class (auth.go routeAccess)", route))
	}
	tlsOn := s.Cfg.TLS.Enabled()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := callerOf(r)
		allowed := err == nil && (!tlsOn || class.anyone || p.Is(class.roles...))
		if tlsOn && r.TLS == nil {
			allowed, err = false, fmt.Errorf("not a TLS connection")
		}
		if !tlsOn && class.admin && s.Cfg.AdminToken != "" {
			// Plaintext with an admin token: the token is the credential.
			if bearerMatches(r, s.Cfg.AdminToken) {
				p = tlsconf.Peer{Name: "bearer-token", Role: tlsconf.RoleAdmin}
			} else {
				allowed, err = false, fmt.Errorf("no valid admin token (Authorization: Bearer)")
			}
		}
		if !allowed {
			why := fmt.Sprintf("role %q may not call %s (allowed: %v)", p.Role, route, class.roles)
			if err != nil {
				why = err.Error()
			}
			s.Log.Warn("request refused", "audit", class.audit, "route", route, "method", r.Method, "path", r.URL.EscapedPath(),
				"caller", p.String(), "remote", r.RemoteAddr, "reason", why)
			s.Metrics.Refused.WithLabelValues(route).Inc()
			s.gate.Record(authz.Identity{Peer: p, Remote: r.RemoteAddr, Open: !tlsOn}, route, "", "", fmt.Errorf("%w: %s", metaapi.ErrForbidden, why), r.URL.EscapedPath())
			if r.ContentLength != 0 {
				httpio.CloseAfterAnswer(w) // the body is not read
			}
			metaapi.WriteError(w, http.StatusForbidden, metaapi.CodeForbidden, "forbidden: "+why)
			return
		}
		if class.audit {
			s.Log.Info("audit: allowed", "route", route, "method", r.Method, "path", r.URL.EscapedPath(),
				"caller", p.String(), "remote", r.RemoteAddr)
			s.gate.Audit(audit.Event{Who: authz.Identity{Peer: p, Open: !tlsOn}.Who(), Role: string(p.Role), Remote: r.RemoteAddr,
				Action: route, Outcome: "allowed", Detail: r.Method + " " + r.URL.EscapedPath()})
		}
		h.ServeHTTP(w, r)
	})
}
