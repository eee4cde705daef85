// Package credapi is the meta service's API for credentials kept apart
// from package metaapi (bounded in size): setting a user's S3 keys (the
// root user's key changed in place), and the key encryption key's status
// and rotation (package kek). Its calls are free functions over a
// *metaapi.Client (its Do); the meta service serves them (package meta,
// http_creds.go).
//
// Concurrency: the functions are safe for concurrent use (the client is).
package credapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Routes.
const (
	// UsersRoute + NAME + "/keys": PUT sets a user's keys.
	UsersRoute = "/v1/users/"
	// KEKRoute: GET this member's keyring (every member answers, leader
	// or not); POST KEKRoute + "/rotate" re-seals under the current key.
	KEKRoute = "/v1/kek"
)

// SetKeys sets a user's keys, creating the user when it does not exist.
// An empty AccessKey keeps the user's (generated for a new user), an
// empty SecretKey is generated.
type SetKeys struct {
	AccessKey string `json:"access_key,omitempty"`
	SecretKey string `json:"secret_key,omitempty"`
}

// SetUserKeys sets user name's keys (SetKeys) and returns the user with
// its secret. The old access key stops working at once (at a gateway:
// within its identity cache's refresh). Idempotent: the same keys set
// twice change nothing the second time.
func SetUserKeys(ctx context.Context, c *metaapi.Client, name string, req SetKeys) (metaapi.User, error) {
	var u metaapi.User
	return u, c.Do(ctx, http.MethodPut, UsersRoute+url.PathEscape(name)+"/keys", req, &u, req.AccessKey != "" && req.SecretKey != "")
}

// KEKStatus is a member's keyring: the IDs of its keys (never the keys).
type KEKStatus struct {
	// Member is the member's ID (1 for a single meta service).
	Member uint64 `json:"member"`
	// Current is the ID of the key new secrets are sealed under.
	Current string `json:"current"`
	// Keys lists every key's ID, the current one last.
	Keys []string `json:"keys"`
	// Source is the keyring's file, or "SPINDLE_KEK".
	Source string `json:"source"`
}

// KEKRotation is the outcome of a rotation.
type KEKRotation struct {
	// KeyID is the key every secret is now sealed under.
	KeyID string `json:"key_id"`
	// Resealed counts the secrets sealed anew (0: all were under KeyID).
	Resealed int `json:"resealed"`
	// Members are the keyrings of the group's members, checked to hold
	// KeyID before anything was re-sealed.
	Members []KEKStatus `json:"members"`
}

// GetKEKStatus returns the keyring of the member c reaches (the first of
// its addresses that answers).
func GetKEKStatus(ctx context.Context, c *metaapi.Client) (KEKStatus, error) {
	var st KEKStatus
	return st, c.Do(ctx, http.MethodGet, KEKRoute, nil, &st, true)
}

// RotateKEK re-seals every secret of the store under the leader's current
// key, once every member of the group holds it (metaapi.ErrInvalid naming
// the members that do not). Idempotent.
func RotateKEK(ctx context.Context, c *metaapi.Client) (KEKRotation, error) {
	var r KEKRotation
	return r, c.Do(ctx, http.MethodPost, KEKRoute+"/rotate", nil, &r, true)
}
