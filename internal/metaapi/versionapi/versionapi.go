// Package versionapi is the meta service's protocol for S3 object
// versions (issue 35), beside metaapi, and its client calls as free
// functions over metaapi.Client's Do. Routes (JSON bodies, errors as in
// metaapi):
//
//	PUT  /v1/versions/{bucket}/state   State (204): Enabled or Suspended; admin right on the bucket
//	GET  /v1/versions/{bucket}/state   → State ("" never versioned)
//	POST /v1/versions/get              Ref → Version (with block tokens); read right on the key
//	POST /v1/versions/delete           Ref → Deleted; delete right on the key
//	GET  /v1/versions/{bucket}/list    ?prefix=&delimiter=&key_marker=&version_id_marker=&limit= → List; read right on the prefix
//
// and object lock's (objlock.go).
//
// Writes need no route of their own: a commit (CommitKey, CompleteUpload)
// in a versioned bucket makes a new version and answers its ID in
// metaapi.KeyInfo.VersionID.
//
// Semantics are S3's: in an Enabled bucket every write and every delete
// without a version ID makes a new version (a delete a delete marker); in
// a Suspended bucket they make the null version, replacing the one there
// was; a bucket never versioned keeps one version a key, the null one
// (VersionID "" in KeyInfo). A delete with a version ID removes that
// version for good (its blocks are deleted then, not before); when it was
// the newest, the next newest becomes current.
//
// Concurrency: the functions are safe for concurrent use when their Doer
// is (metaapi.Client is).
package versionapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Bucket versioning states as S3 names them.
const (
	Enabled   = "Enabled"
	Suspended = "Suspended"
)

// NullID is the version ID of the null version.
const NullID = "null"

// State is a bucket's versioning state ("" never versioned).
type State struct {
	Status string `json:"status,omitempty"`
}

// Ref names a version of a key; VersionID "" is the current version
// (for a delete: S3's delete without a version ID).
type Ref struct {
	Bucket    string `json:"bucket"`
	Key       string `json:"key"`
	VersionID string `json:"version_id,omitempty"`
	// Bypass asks, on a delete, to bypass a GOVERNANCE retention of the
	// version (x-amz-bypass-governance-retention; objlock.go).
	Bypass bool `json:"bypass_governance,omitempty"`
}

// Version is one version of a key: a KeyInfo (blocks only from get;
// VersionID always set, "null" for the null version) or a delete marker.
type Version struct {
	metaapi.KeyInfo
	DeleteMarker bool `json:"delete_marker,omitempty"`
	IsLatest     bool `json:"is_latest,omitempty"`
}

// Deleted is a delete's answer: the version it made (a delete marker) or
// removed.
type Deleted struct {
	VersionID    string `json:"version_id,omitempty"`
	DeleteMarker bool   `json:"delete_marker,omitempty"`
}

// ListOptions select a page of a version listing. KeyMarker and
// VersionIDMarker are S3's: the page starts after that version of that
// key (after every version of it when VersionIDMarker is "").
type ListOptions struct {
	Prefix, Delimiter          string
	KeyMarker, VersionIDMarker string
	Limit                      int // 0: metaapi.MaxListLimit
}

// List is one page of versions, by key, newest first within a key.
type List struct {
	Versions       []Version `json:"versions"`
	CommonPrefixes []string  `json:"common_prefixes,omitempty"`
	// NextKeyMarker, NextVersionIDMarker: where the next page starts;
	// empty when done.
	NextKeyMarker       string `json:"next_key_marker,omitempty"`
	NextVersionIDMarker string `json:"next_version_id_marker,omitempty"`
	Truncated           bool   `json:"truncated,omitempty"`
}

// Doer runs one meta service call (metaapi.Client.Do).
type Doer interface {
	Do(ctx context.Context, method, path string, in, out any, idempotent bool) error
}

func statePath(bucket string) string { return "/v1/versions/" + url.PathEscape(bucket) + "/state" }

// SetState sets a bucket's versioning (Enabled or Suspended: a versioned
// bucket cannot go back to never versioned, as in S3).
func SetState(ctx context.Context, c Doer, bucket, status string) error {
	return c.Do(ctx, http.MethodPut, statePath(bucket), State{Status: status}, nil, true)
}

// GetState reads a bucket's versioning state.
func GetState(ctx context.Context, c Doer, bucket string) (string, error) {
	var st State
	err := c.Do(ctx, http.MethodGet, statePath(bucket), nil, &st, true)
	return st.Status, err
}

// Get reads one version of a key (metaapi.ErrNotFound: none such).
func Get(ctx context.Context, c Doer, ref Ref) (*Version, error) {
	var v Version
	if err := c.Do(ctx, http.MethodPost, "/v1/versions/get", ref, &v, true); err != nil {
		return nil, err
	}
	return &v, nil
}

// Delete deletes as S3's DeleteObject does (see the package comment). A
// retry after a lost answer may make a second delete marker (as an S3
// client's retry does).
func Delete(ctx context.Context, c Doer, ref Ref) (*Deleted, error) {
	var d Deleted
	if err := c.Do(ctx, http.MethodPost, "/v1/versions/delete", ref, &d, ref.VersionID != ""); err != nil {
		return nil, err
	}
	return &d, nil
}

// ListVersions returns a page of a bucket's versions.
func ListVersions(ctx context.Context, c Doer, bucket string, o ListOptions) (*List, error) {
	q := url.Values{}
	for k, v := range map[string]string{"prefix": o.Prefix, "delimiter": o.Delimiter, "key_marker": o.KeyMarker, "version_id_marker": o.VersionIDMarker} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var l List
	err := c.Do(ctx, http.MethodGet, "/v1/versions/"+url.PathEscape(bucket)+"/list?"+q.Encode(), nil, &l, true)
	return &l, err
}
