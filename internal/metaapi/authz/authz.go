// Package authz is the meta service's authorization protocol: the grant
// types of its /v1/grants routes, the client calls (free functions over a
// *metaapi.Client, whose method set is bounded), and the header by which
// the S3 gateway names the user it acts for.
//
// The model (checked by internal/meta/authz, the only place that decides):
// a principal is a certificate identity, "cert:NAME" (the certificate's
// name), or an S3 user, "user:NAME". A bucket has an owner (the principal
// that created it: a certificate's "cert:NAME", an S3 user's access key),
// who may do everything on it; admin certificates may do everything on
// every bucket. A grant gives a principal one action — read, write,
// delete or admin (all of them, and managing the bucket's grants) — on a
// bucket, or on a key prefix of it matched on '/' boundaries (prefix
// "logs" covers "logs" and "logs/…", not "logs2"). Reading a key's
// metadata or listing needs read; a new key needs write; replacing a key
// needs write and delete; deleting one needs delete.
//
// Invariants: names are validated on both sides (ValidPrincipal,
// ParseAction); nothing here keeps state. Concurrency: the functions are
// safe for concurrent use (as metaapi.Client is).
package authz

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// S3UserHeader carries, on the S3 gateway's calls to the meta service,
// the access key of the S3 user the call is made for, or S3Root for the
// gateway's root user. The meta service believes it only from a
// certificate of role s3 (the gateway's own rights are those of its
// certificate's principal: none without a grant).
const (
	S3UserHeader = "Spindle-S3-User"
	S3Root       = "root"
	// S3AuthorizedHeader ("1") marks the gateway's calls made for an S3
	// request the gateway authorized (versitygw: the bucket policy, the
	// ACLs, the owner, the grants; or a public object's anonymous read):
	// where the bucket's S3 permissions may give the user (or everyone)
	// rights, the meta service lets such a call through without an owner
	// or a grant (S3's decision is the gateway's). Believed only from a
	// certificate of role s3.
	S3AuthorizedHeader = "Spindle-S3-Authorized"
)

// Actions a grant gives.
const (
	Read   = "read"
	Write  = "write"
	Delete = "delete"
	Admin  = "admin"
)

// Actions lists them, in the order they print.
var Actions = []string{Read, Write, Delete, Admin}

// Principal kinds.
const (
	CertPrefix = "cert:"
	UserPrefix = "user:"
)

// MaxPrincipalBytes bounds a principal ("cert:" or "user:" and a name).
const MaxPrincipalBytes = 5 + 255

// ParseAction checks an action's name.
func ParseAction(s string) error {
	for _, a := range Actions {
		if s == a {
			return nil
		}
	}
	return fmt.Errorf("%w: action %q: want read, write, delete or admin", metaapi.ErrInvalid, s)
}

// ValidPrincipal checks "cert:NAME" or "user:NAME": a name of printable
// ASCII without spaces, at most MaxPrincipalBytes in all.
func ValidPrincipal(p string) error {
	name, ok := strings.CutPrefix(p, CertPrefix)
	if !ok {
		name, ok = strings.CutPrefix(p, UserPrefix)
	}
	if !ok || name == "" || len(p) > MaxPrincipalBytes {
		return fmt.Errorf("%w: principal %q: want cert:NAME (a certificate's name) or user:NAME (an S3 user), at most %d bytes", metaapi.ErrInvalid, p, MaxPrincipalBytes)
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%w: principal %q: only printable ASCII without spaces", metaapi.ErrInvalid, p)
		}
	}
	return nil
}

// Grant is one principal's actions on a bucket or a key prefix of it.
type Grant struct {
	Principal string `json:"principal"`
	Bucket    string `json:"bucket"`
	// Prefix: "" the whole bucket; else the keys equal to it or below it
	// on a '/' boundary.
	Prefix  string    `json:"prefix,omitempty"`
	Actions []string  `json:"actions"`
	Created time.Time `json:"created"`
}

// GrantChange adds (POST GrantsRoute) or removes (POST RevokeRoute) one
// action of a principal on a bucket or prefix.
type GrantChange struct {
	Principal string `json:"principal"`
	Bucket    string `json:"bucket"`
	Prefix    string `json:"prefix,omitempty"`
	Action    string `json:"action"`
}

// Validate checks a change's names.
func (g GrantChange) Validate() error {
	if err := ValidPrincipal(g.Principal); err != nil {
		return err
	}
	if err := metaapi.ValidBucket(g.Bucket); err != nil {
		return err
	}
	if g.Prefix != "" {
		if err := metaapi.ValidKey(g.Prefix); err != nil {
			return fmt.Errorf("prefix: %w", err)
		}
	}
	return ParseAction(g.Action)
}

// GrantList is the answer of GET GrantsRoute.
type GrantList struct {
	Grants []Grant `json:"grants"`
}

// Routes.
const (
	GrantsRoute = "/v1/grants"
	RevokeRoute = "/v1/grants/revoke"
)

// Add gives g's principal g's action (a no-op when it has it).
func Add(ctx context.Context, mc *metaapi.Client, g GrantChange) error {
	if err := g.Validate(); err != nil {
		return err
	}
	return mc.Do(ctx, http.MethodPost, GrantsRoute, g, nil, true)
}

// Revoke takes g's action from g's principal (NOT_FOUND when it has no
// such grant).
func Revoke(ctx context.Context, mc *metaapi.Client, g GrantChange) error {
	if err := g.Validate(); err != nil {
		return err
	}
	return mc.Do(ctx, http.MethodPost, RevokeRoute, g, nil, false)
}

// List lists the grants of bucket ("": of every bucket; an admin
// certificate's call).
func List(ctx context.Context, mc *metaapi.Client, bucket string) ([]Grant, error) {
	path := GrantsRoute
	if bucket != "" {
		if err := metaapi.ValidBucket(bucket); err != nil {
			return nil, err
		}
		path += "?bucket=" + url.QueryEscape(bucket)
	}
	var l GrantList
	if err := mc.Do(ctx, http.MethodGet, path, nil, &l, true); err != nil {
		return nil, err
	}
	return l.Grants, nil
}

// ParseTarget splits BUCKET[/PREFIX] of the command line.
func ParseTarget(s string) (bucket, prefix string) {
	bucket, prefix, _ = strings.Cut(s, "/")
	return bucket, prefix
}

// UserContext returns ctx carrying the S3 user (access key, or S3Root)
// that the meta calls made with it act for; Transport sends it.
func UserContext(ctx context.Context, access string) context.Context {
	return context.WithValue(ctx, userKey{}, access)
}

type userKey struct{}

// UserOf is the S3 user ctx carries ("" none).
func UserOf(ctx context.Context) string {
	s, _ := ctx.Value(userKey{}).(string)
	return s
}

// Transport sends S3UserHeader with every request whose context names
// a user (UserContext, or who when set: it reads the user from a context
// that carries it under a key of its own, the S3 front end's), and
// S3AuthorizedHeader with those Authorized says were authorized.
type Transport struct {
	Base       http.RoundTripper
	Who        func(context.Context) string
	Authorized func(context.Context) bool
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	u := UserOf(r.Context())
	if u == "" && t.Who != nil {
		u = t.Who(r.Context())
	}
	vouched := t.Authorized != nil && t.Authorized(r.Context())
	if u != "" || vouched {
		r = r.Clone(r.Context())
	}
	if u != "" {
		r.Header.Set(S3UserHeader, u)
	}
	if vouched {
		r.Header.Set(S3AuthorizedHeader, "1")
	}
	return t.Base.RoundTrip(r)
}
