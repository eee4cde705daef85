package s3gw

import (
	"context"
	"maps"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// features are the Backend's object and bucket tagging and bucket CORS
// (versitygw's backend methods for them), apart from Backend's own
// method set. Tag sets and CORS rules are meta service state
// (metaapi/s3meta): an object's tags in its key record, a bucket's
// documents in records of their own. versitygw parses and validates the
// XML of the Put calls (tag counts, key and value lengths, characters,
// duplicate keys; CORS rules) and evaluates CORS for a request with an
// Origin header (preflight OPTIONS and actual requests) from
// GetBucketCors's document.
type features struct {
	meta *metaapi.Client
	// cors caches the buckets' CORS documents (nil: none) for ACLCacheTTL:
	// versitygw asks for them on every request that has an Origin.
	cors *docCache
}

// S3's tag limits.
const (
	MaxObjectTags    = 10
	MaxBucketTags    = 50
	MaxTagKeyChars   = 128
	MaxTagValueChars = 256
)

// tagChars are the characters S3 allows in tag keys and values: letters,
// spaces, numbers and _ . : / = + - @ (versitygw's rule).
var tagChars = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)

// parseTagging reads an x-amz-tagging header (a URL-encoded query: PUT,
// CreateMultipartUpload, CopyObject with REPLACE, a POST form's tagging):
// S3's errors for a bad encoding or a duplicate key (InvalidArgument), a
// bad key or value (InvalidTag), more than MaxObjectTags; lengths counted
// in Unicode characters. "" is no tags.
func parseTagging(s string) (map[string]string, error) {
	tags := map[string]string{}
	for rest := s; rest != ""; {
		var kv string
		kv, rest, _ = strings.Cut(rest, "&")
		if kv == "" {
			continue
		}
		k, v, found := strings.Cut(kv, "=")
		if found && k == "" {
			return nil, s3err.GetInvalidArgumentErr(s3err.InvalidArgURLEncodedTagging, s)
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, s3err.GetInvalidArgumentErr(s3err.InvalidArgURLEncodedTagging, s)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, s3err.GetInvalidArgumentErr(s3err.InvalidArgURLEncodedTagging, s)
		}
		if utf8.RuneCountInString(key) > MaxTagKeyChars || !tagChars.MatchString(key) {
			return nil, s3err.GetInvalidTagErr(s3err.ErrInvalidTagKey, key, "")
		}
		if utf8.RuneCountInString(val) > MaxTagValueChars || !tagChars.MatchString(val) {
			return nil, s3err.GetInvalidTagErr(s3err.ErrInvalidTagValue, key, val)
		}
		if _, dup := tags[key]; dup {
			return nil, s3err.GetInvalidArgumentErr(s3err.InvalidArgURLEncodedTagging, s)
		}
		tags[key] = val
	}
	if len(tags) > MaxObjectTags {
		return nil, s3err.GetAPIError(s3err.ErrObjectTaggingLimited)
	}
	return tags, nil
}

// withTags returns headers with the tag set of an x-amz-tagging header
// (nil: none given) in place of the stored one.
func withTags(headers map[string]string, tagging *string) (map[string]string, error) {
	if tagging == nil {
		return headers, nil
	}
	tags, err := parseTagging(*tagging)
	if err != nil {
		return nil, err
	}
	headers = maps.Clone(headers)
	if len(tags) == 0 {
		delete(headers, s3meta.TaggingHeader)
		return headers, nil
	}
	if headers == nil {
		headers = map[string]string{}
	}
	headers[s3meta.TaggingHeader] = s3meta.EncodeTags(tags)
	return headers, nil
}

// tagCount is GetObject's and HeadObject's x-amz-tagging-count (nil: no tags).
func tagCount(ki *metaapi.KeyInfo) *int32 {
	if ki.Object == nil {
		return nil
	}
	if n := s3meta.TagCount(ki.Object.Headers); n > 0 {
		return ptr(int32(n))
	}
	return nil
}

// copyTags applies a CopyObject's tagging directive to the copy's headers
// (the source's stored ones, or the request's with REPLACE metadata):
// COPY (the default) keeps the source's tags, REPLACE takes the request's.
func copyTags(headers map[string]string, src *metaapi.KeyInfo, directive types.TaggingDirective, tagging *string) (map[string]string, error) {
	if directive == types.TaggingDirectiveReplace {
		if tagging == nil {
			tagging = ptr("")
		}
		return withTags(headers, tagging)
	}
	headers = maps.Clone(headers)
	delete(headers, s3meta.TaggingHeader)
	if src.Object != nil && src.Object.Headers[s3meta.TaggingHeader] != "" {
		if headers == nil {
			headers = map[string]string{}
		}
		headers[s3meta.TaggingHeader] = src.Object.Headers[s3meta.TaggingHeader]
	}
	return headers, nil
}

// putConditions are a PutObject's or CompleteMultipartUpload's
// If-Match / If-None-Match, checked by the meta service in the commit
// (atomically: two writers racing with If-None-Match * — exactly one
// commits). As S3: If-None-Match takes only "*", and not with If-Match
// (NotImplemented).
func putConditions(ifMatch, ifNoneMatch *string) (metaapi.Conditions, error) {
	if ifNoneMatch != nil && *ifNoneMatch != "*" {
		return metaapi.Conditions{}, s3err.GetNotImplementedErr("If-None-Match", s3err.NmpAdditionalMessageIfNoneMatch)
	}
	if ifNoneMatch != nil && ifMatch != nil {
		return metaapi.Conditions{}, s3err.GetNotImplementedErr("If-Match,If-None-Match", s3err.NmpAdditionalMessageMultipleCondHeaders)
	}
	return metaapi.Conditions{IfMatch: deref(ifMatch), IfNoneMatch: deref(ifNoneMatch)}, nil
}

// errConditionalConflict is S3's 409 for a conditional write that a
// concurrent operation made moot: a conditional CompleteMultipartUpload
// whose upload another request completed or aborted meanwhile (S3: start
// the upload again).
var errConditionalConflict = s3err.APIError{Code: "ConditionalRequestConflict", HTTPStatusCode: 409,
	Description: "A conflicting operation occurred. If using PutObject you can retry the request. If using multipart upload you should initiate another CreateMultipartUpload request and re-upload each part."}

// GetObjectTagging answers the object's tag set.
func (f *features) GetObjectTagging(ctx context.Context, bucket, object, _ string) (map[string]string, error) {
	if err := keyErr(object); err != nil {
		return nil, err
	}
	ki, err := f.meta.GetKey(ctx, bucket, object)
	if err != nil {
		return nil, toS3(err, s3err.ErrNoSuchKey)
	}
	if ki.Object == nil {
		return map[string]string{}, nil
	}
	return s3meta.DecodeTags(ki.Object.Headers[s3meta.TaggingHeader])
}

// PutObjectTagging replaces the object's tag set (versitygw validated it).
func (f *features) PutObjectTagging(ctx context.Context, bucket, object, _ string, tags map[string]string) error {
	if err := keyErr(object); err != nil {
		return err
	}
	return toS3(s3meta.PutObjectTagging(ctx, f.meta, bucket, object, s3meta.EncodeTags(tags)), s3err.ErrNoSuchKey)
}

// DeleteObjectTagging removes the object's tag set.
func (f *features) DeleteObjectTagging(ctx context.Context, bucket, object, _ string) error {
	if err := keyErr(object); err != nil {
		return err
	}
	return toS3(s3meta.PutObjectTagging(ctx, f.meta, bucket, object, ""), s3err.ErrNoSuchKey)
}

// GetBucketTagging answers the bucket's tag set (NoSuchTagSet: none).
func (f *features) GetBucketTagging(ctx context.Context, bucket string) (map[string]string, error) {
	doc, err := s3meta.GetBucketConf(ctx, f.meta, bucket, s3meta.ConfTagging)
	if err != nil {
		return nil, bucketErr(err)
	}
	if len(doc) == 0 {
		return nil, s3err.GetAPIError(s3err.ErrBucketTaggingNotFound)
	}
	return s3meta.DecodeTags(string(doc))
}

// PutBucketTagging replaces the bucket's tag set (versitygw validated it).
func (f *features) PutBucketTagging(ctx context.Context, bucket string, tags map[string]string) error {
	return bucketErr(s3meta.PutBucketConf(ctx, f.meta, bucket, s3meta.ConfTagging, []byte(s3meta.EncodeTags(tags))))
}

// DeleteBucketTagging removes the bucket's tag set.
func (f *features) DeleteBucketTagging(ctx context.Context, bucket string) error {
	return bucketErr(s3meta.DeleteBucketConf(ctx, f.meta, bucket, s3meta.ConfTagging))
}

// createTags are a CreateBucket's tags (S3's errors for bad ones).
func createTags(in *s3.CreateBucketInput) (map[string]string, error) {
	if in.CreateBucketConfiguration == nil {
		return nil, nil
	}
	return backend.ParseCreateBucketTags(in.CreateBucketConfiguration.Tags)
}

// GetBucketCors answers the bucket's CORS document
// (NoSuchCORSConfiguration: none), cached for ACLCacheTTL.
func (f *features) GetBucketCors(ctx context.Context, bucket string) ([]byte, error) {
	doc, ok := f.cors.get(bucket)
	if !ok {
		var err error
		if doc, err = s3meta.GetBucketConf(ctx, f.meta, bucket, s3meta.ConfCORS); err != nil {
			return nil, bucketErr(err)
		}
		f.cors.put(bucket, doc)
	}
	if len(doc) == 0 {
		return nil, s3err.GetAPIError(s3err.ErrNoSuchCORSConfiguration)
	}
	return doc, nil
}

// PutBucketCors replaces the bucket's CORS rules (versitygw validated
// the document).
func (f *features) PutBucketCors(ctx context.Context, bucket string, doc []byte) error {
	defer f.cors.drop(bucket)
	if len(doc) > s3meta.MaxBucketConfBytes {
		return s3err.GetAPIError(s3err.ErrEntityTooLarge)
	}
	return bucketErr(s3meta.PutBucketConf(ctx, f.meta, bucket, s3meta.ConfCORS, doc))
}

// DeleteBucketCors removes the bucket's CORS rules.
func (f *features) DeleteBucketCors(ctx context.Context, bucket string) error {
	defer f.cors.drop(bucket)
	return bucketErr(s3meta.DeleteBucketConf(ctx, f.meta, bucket, s3meta.ConfCORS))
}

// docCache holds buckets' documents (nil: none set) for ACLCacheTTL;
// this gateway's own changes drop the entry. Safe for concurrent use.
type docCache struct {
	mu  sync.Mutex
	m   map[string]docEntry
	now func() time.Time
}

type docEntry struct {
	doc     []byte
	fetched time.Time
}

func newDocCache() *docCache { return &docCache{m: map[string]docEntry{}, now: time.Now} }

func (c *docCache) get(bucket string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[bucket]
	if !ok || c.now().Sub(e.fetched) >= ACLCacheTTL {
		return nil, false
	}
	return e.doc, true
}

func (c *docCache) put(bucket string, doc []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= ACLCacheMaxEntries {
		clear(c.m)
	}
	c.m[bucket] = docEntry{doc: doc, fetched: c.now()}
}

func (c *docCache) drop(bucket string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, bucket)
}
