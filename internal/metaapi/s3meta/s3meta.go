// Package s3meta is the meta service's protocol for the S3 gateway's
// object tags and bucket configuration documents (bucket tags, CORS
// rules), beside metaapi's S3 part (metaapi/s3.go), and its client calls
// as free functions over metaapi.Client's Do. Routes (JSON bodies,
// errors as in metaapi):
//
//	PUT    /v1/s3/buckets/{bucket}/conf/{name}   BucketConf (204; an empty document deletes it)
//	GET    /v1/s3/buckets/{bucket}/conf/{name}   → BucketConf (doc absent: none set)
//	DELETE /v1/s3/buckets/{bucket}/conf/{name}   (204; none set is no error)
//	PUT    /v1/s3/tagging                        ObjectTagging (204; 404 NO_SUCH_KEY, NOT_FOUND: no such version)
//
// Invariants: an object's tag set is kept in its key record, among its
// stored headers under TaggingHeader, in the canonical form EncodeTags
// writes (so it is committed, copied and deleted with the object's
// metadata, and a new version of the key has only the tags its PUT gave);
// PUT /v1/s3/tagging rewrites that entry alone (not the bytes, ETag or
// time). A bucket's documents are replicated meta state
// (internal/meta/state/s3conf.go), deleted with the bucket; BucketConfNames
// are the names the meta service takes.
//
// Concurrency: the functions are safe for concurrent use when their Doer
// is (metaapi.Client is).
package s3meta

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Names of a bucket's configuration documents.
const (
	ConfTagging = "tagging" // the bucket's tag set, as EncodeTags writes it
	ConfCORS    = "cors"    // the bucket's CORS rules: the XML document as sent
	ConfEC      = "ec"      // the bucket's erasure-coding policy (package ecapi; set through its routes)
	// ConfLifecycle: the bucket's S3 lifecycle configuration, as
	// lifecycle.Configuration.XML writes it (run by package meta/lcmeta).
	ConfLifecycle = "lifecycle"
)

// BucketConfNames are the configuration documents a bucket may hold.
var BucketConfNames = []string{ConfTagging, ConfCORS, ConfEC, ConfLifecycle}

// TaggingHeader is where an object's tag set is kept among its stored
// headers (metaapi.ObjectMeta.Headers), in EncodeTags's form.
const TaggingHeader = "X-Amz-Tagging"

// MaxBucketConfBytes bounds a bucket configuration document (S3 bounds a
// CORS configuration to 64 KiB).
const MaxBucketConfBytes = 64 << 10

// BucketConf is a bucket's configuration document (empty: none).
type BucketConf struct {
	Doc []byte `json:"doc,omitempty"`
}

// ObjectTagging replaces the tag set of a key (Tagging in EncodeTags's
// form; "" removes it): of its current version, or of the version
// VersionID names (S3's versionId; 404 NOT_FOUND: no such version).
type ObjectTagging struct {
	Bucket    string `json:"bucket"`
	Key       string `json:"key"`
	Tagging   string `json:"tagging,omitempty"`
	VersionID string `json:"version_id,omitempty"`
}

// Doer runs one meta service call (metaapi.Client.Do).
type Doer interface {
	Do(ctx context.Context, method, path string, in, out any, idempotent bool) error
}

// ValidConfName refuses a name not in BucketConfNames.
func ValidConfName(name string) error {
	if !slices.Contains(BucketConfNames, name) {
		return fmt.Errorf("s3meta: no bucket configuration named %q", name)
	}
	return nil
}

func confPath(bucket, name string) string {
	return "/v1/s3/buckets/" + url.PathEscape(bucket) + "/conf/" + url.PathEscape(name)
}

// PutBucketConf sets a bucket's document (an empty doc deletes it).
func PutBucketConf(ctx context.Context, c Doer, bucket, name string, doc []byte) error {
	return c.Do(ctx, http.MethodPut, confPath(bucket, name), BucketConf{Doc: doc}, nil, true)
}

// GetBucketConf returns a bucket's document (nil: none set).
func GetBucketConf(ctx context.Context, c Doer, bucket, name string) ([]byte, error) {
	var bc BucketConf
	err := c.Do(ctx, http.MethodGet, confPath(bucket, name), nil, &bc, true)
	return bc.Doc, err
}

// DeleteBucketConf deletes a bucket's document (none set is no error).
func DeleteBucketConf(ctx context.Context, c Doer, bucket, name string) error {
	return c.Do(ctx, http.MethodDelete, confPath(bucket, name), nil, nil, true)
}

// PutObjectTagging replaces a key's tag set ("" removes it).
func PutObjectTagging(ctx context.Context, c Doer, bucket, key, tagging string) error {
	return PutVersionTagging(ctx, c, bucket, key, "", tagging)
}

// PutVersionTagging replaces the tag set of one version of a key
// (versionID "": the current one).
func PutVersionTagging(ctx context.Context, c Doer, bucket, key, versionID, tagging string) error {
	return c.Do(ctx, http.MethodPut, "/v1/s3/tagging", ObjectTagging{Bucket: bucket, Key: key, Tagging: tagging, VersionID: versionID}, nil, true)
}

// EncodeTags is a tag set's canonical form: x-amz-tagging's URL query
// encoding, keys sorted ("" for no tags).
func EncodeTags(tags map[string]string) string {
	v := url.Values{}
	for k, val := range tags {
		v.Set(k, val)
	}
	return v.Encode()
}

// DecodeTags reads EncodeTags's form back.
func DecodeTags(s string) (map[string]string, error) {
	tags := map[string]string{}
	for s != "" {
		var kv string
		kv, s, _ = strings.Cut(s, "&")
		k, v, _ := strings.Cut(kv, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("s3meta: tag set %q: %w", kv, err)
		}
		if tags[key], err = url.QueryUnescape(v); err != nil {
			return nil, fmt.Errorf("s3meta: tag set %q: %w", kv, err)
		}
	}
	return tags, nil
}

// TagCount is the number of tags of an object's stored headers.
func TagCount(headers map[string]string) int {
	s := headers[TaggingHeader]
	if s == "" {
		return 0
	}
	return strings.Count(s, "&") + 1
}
