// Package certapi is the meta service's certificate API (issue 33): the
// registry of the certificates it issued (`spindle admin cert ls`),
// revocation (`admin cert revoke`), the deny-list every server polls
// (certwatch), renewal (a holder's own certificate, same name, role and
// hosts, a new key) and join tokens that name a role and hosts. metaapi
// is at its size bound: these are free functions over metaapi.Client.Do.
//
// Invariants: serials are lower-case hexadecimal (tlsconf.SerialOf); a
// revocation is by serial or by name (every certificate recorded under
// that name); the deny-list lists the revoked serials whose certificates
// have not expired. Concurrency: no state; the functions may be called
// from any goroutine.
package certapi

import (
	"context"
	"net/http"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Routes.
const (
	CertsRoute      = "/v1/certs"        // GET: the registry
	RevokeRoute     = "/v1/certs/revoke" // POST RevokeRequest
	DeniedRoute     = "/v1/certs/denied" // GET: DenyList
	RenewRoute      = "/v1/certs/renew"  // POST RenewRequest: the caller's own certificate
	JoinTokensRoute = metaapi.JoinTokensRoute
)

// PollInterval is how often a server fetches the deny-list (≤ 2 s:
// a revocation is in force everywhere within about one poll).
const PollInterval = time.Second

// Cert is one certificate the meta service issued (or was told of).
type Cert struct {
	Serial   string    `json:"serial"`
	Name     string    `json:"name"`
	Role     string    `json:"role"`
	Hosts    []string  `json:"hosts,omitempty"`
	IssuedAt time.Time `json:"issued_at"`
	NotAfter time.Time `json:"not_after"`
	// How: "join", "renew" or "revoke" (a serial revoked that no record
	// named: only Serial and RevokedAt are known).
	How       string     `json:"how"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// RevokeRequest names a serial or a certificate name.
type RevokeRequest struct {
	Target string `json:"target"`
}

// RevokeResponse lists the serials revoked.
type RevokeResponse struct {
	Serials []string `json:"serials"`
}

// DenyList is what every server refuses: revoked serials not expired.
// Version grows with each revocation.
type DenyList struct {
	Version uint64   `json:"version"`
	Serials []string `json:"serials"`
}

// RenewRequest carries a certificate request (tlsconf.NewKeyRequest) for
// the caller's new key.
type RenewRequest struct {
	CSR string `json:"csr"`
}

// RenewResponse is the new certificate (PEM).
type RenewResponse struct {
	Cert     string    `json:"cert"`
	NotAfter time.Time `json:"not_after"`
}

// JoinTokenRequest asks for a join token valid TTLSeconds (0: the
// default) for one holder of Role (default datanode) at Hosts: the joiner
// gets a certificate of that role for exactly those hosts. It is
// metaapi.JoinTokenRequest's JSON with two more fields.
type JoinTokenRequest struct {
	TTLSeconds int64    `json:"ttl_seconds,omitempty"`
	Role       string   `json:"role,omitempty"`
	Hosts      []string `json:"hosts,omitempty"`
}

// JoinRoles are the roles a join token may name: never meta or admin.
var JoinRoles = []string{"datanode", "s3", "client"}

// Caller is what the functions need of a meta client (*metaapi.Client).
type Caller interface {
	Do(ctx context.Context, method, path string, in, out any, idempotent bool) error
}

// List is the registry, by name then issue time.
func List(ctx context.Context, mc Caller) ([]Cert, error) {
	var out []Cert
	return out, mc.Do(ctx, http.MethodGet, CertsRoute, nil, &out, true)
}

// Revoke revokes target (a serial or a name).
func Revoke(ctx context.Context, mc Caller, target string) (RevokeResponse, error) {
	var out RevokeResponse
	return out, mc.Do(ctx, http.MethodPost, RevokeRoute, RevokeRequest{Target: target}, &out, true)
}

// Denied is the deny-list.
func Denied(ctx context.Context, mc Caller) (DenyList, error) {
	var out DenyList
	return out, mc.Do(ctx, http.MethodGet, DeniedRoute, nil, &out, true)
}

// Renew asks for a certificate like the caller's for the key of csrPEM.
func Renew(ctx context.Context, mc Caller, csrPEM []byte) (RenewResponse, error) {
	var out RenewResponse
	return out, mc.Do(ctx, http.MethodPost, RenewRoute, RenewRequest{CSR: string(csrPEM)}, &out, false)
}

// CreateJoinToken asks for a join token (an admin's call).
func CreateJoinToken(ctx context.Context, mc Caller, req JoinTokenRequest) (metaapi.JoinToken, error) {
	var out metaapi.JoinToken
	return out, mc.Do(ctx, http.MethodPost, JoinTokensRoute, req, &out, false)
}
