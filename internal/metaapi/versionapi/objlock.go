package versionapi

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// S3 object lock (issue 35 item 2; rules: internal/meta/lockmeta). Routes:
//
//	PUT  /v1/versions/{bucket}/lock        LockConfig (204); admin right on the bucket
//	GET  /v1/versions/{bucket}/lock        → LockConfig (Enabled false: none)
//	POST /v1/versions/lock/get             Ref → Lock; read right on the key
//	POST /v1/versions/lock/retention       Retention (204); admin right on the bucket
//	POST /v1/versions/lock/legal-hold      LegalHold (204); admin right on the bucket
//
// A version that is locked (legal hold on, or a retention date in the
// future) is not removed by POST /v1/versions/delete, whoever asks: a
// COMPLIANCE retention never, a GOVERNANCE one only with Ref.Bypass from
// a caller with the admin right on the bucket. A refusal is
// metaapi.ErrForbidden. Object lock needs versioning Enabled (or, with
// LockConfig.Create, a bucket never versioned, just created, whose
// versioning it enables) and is never turned off; versioning then may not
// be suspended (metaapi.ErrPrecondition).

// The stored headers (metaapi.ObjectMeta.Headers) that carry a version's
// lock, under S3's header names: a commit's lock request, and the lock a
// version read has.
const (
	ModeHeader  = "X-Amz-Object-Lock-Mode"
	UntilHeader = "X-Amz-Object-Lock-Retain-Until-Date" // RFC 3339, UTC
	HoldHeader  = "X-Amz-Object-Lock-Legal-Hold"        // ON or OFF
)

// Messages of refusals the S3 gateway tells apart (in the message of a
// metaapi.ErrInvalid): lock headers on a write in a bucket without object
// lock; a lock call on a delete marker.
const (
	NoLockConfigText = "the bucket has no object lock configuration"
	DeleteMarkerText = "is a delete marker"
)

// Retention modes.
const (
	Governance = "GOVERNANCE"
	Compliance = "COMPLIANCE"
)

// LockConfig is a bucket's object lock configuration: Enabled, and a
// default retention (Mode with Days or Years) new versions get.
type LockConfig struct {
	Enabled bool   `json:"enabled"`
	Mode    string `json:"mode,omitempty"`
	Days    int    `json:"days,omitempty"`
	Years   int    `json:"years,omitempty"`
	// Create: the bucket was just created with object lock (turn its
	// versioning on).
	Create bool `json:"create,omitempty"`
}

// Lock is a version's lock: its retention (Mode "" none) and legal hold.
type Lock struct {
	Mode      string    `json:"mode,omitempty"`
	Until     time.Time `json:"until,omitzero"`
	LegalHold bool      `json:"legal_hold,omitempty"`
	// LegalHoldSet: a legal hold was ever set (on or off) on the version.
	LegalHoldSet bool `json:"legal_hold_set,omitempty"`
}

// Retention sets a version's retention (Mode "" removes it); Bypass as
// in Ref.
type Retention struct {
	Ref
	Mode  string    `json:"mode,omitempty"`
	Until time.Time `json:"until,omitzero"`
}

// LegalHold sets a version's legal hold.
type LegalHold struct {
	Ref
	On bool `json:"on"`
}

func lockPath(bucket string) string { return "/v1/versions/" + url.PathEscape(bucket) + "/lock" }

// PutLockConfig sets a bucket's object lock configuration.
func PutLockConfig(ctx context.Context, c Doer, bucket string, lc LockConfig) error {
	return c.Do(ctx, http.MethodPut, lockPath(bucket), lc, nil, true)
}

// GetLockConfig reads a bucket's object lock configuration.
func GetLockConfig(ctx context.Context, c Doer, bucket string) (LockConfig, error) {
	var lc LockConfig
	err := c.Do(ctx, http.MethodGet, lockPath(bucket), nil, &lc, true)
	return lc, err
}

// GetLock reads a version's lock.
func GetLock(ctx context.Context, c Doer, ref Ref) (Lock, error) {
	var l Lock
	err := c.Do(ctx, http.MethodPost, "/v1/versions/lock/get", ref, &l, true)
	return l, err
}

// PutRetention sets a version's retention.
func PutRetention(ctx context.Context, c Doer, r Retention) error {
	return c.Do(ctx, http.MethodPost, "/v1/versions/lock/retention", r, nil, true)
}

// PutLegalHold sets a version's legal hold.
func PutLegalHold(ctx context.Context, c Doer, h LegalHold) error {
	return c.Do(ctx, http.MethodPost, "/v1/versions/lock/legal-hold", h, nil, true)
}
