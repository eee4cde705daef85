package s3extra

import (
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

// ParseTagging reads an x-amz-tagging header (a URL-encoded query: PUT,
// CreateMultipartUpload, CopyObject with REPLACE, a POST form's tagging):
// S3's errors for a bad encoding or a duplicate key (InvalidArgument), a
// bad key or value (InvalidTag), more than MaxObjectTags; lengths counted
// in Unicode characters. "" is no tags.
func ParseTagging(s string) (map[string]string, error) {
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

// WithTags returns headers with the tag set of an x-amz-tagging header
// (nil: none given) in place of the stored one.
func WithTags(headers map[string]string, tagging *string) (map[string]string, error) {
	if tagging == nil {
		return headers, nil
	}
	tags, err := ParseTagging(*tagging)
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

// TagCount is GetObject's and HeadObject's x-amz-tagging-count (nil: no tags).
func TagCount(ki *metaapi.KeyInfo) *int32 {
	if ki.Object == nil {
		return nil
	}
	if n := s3meta.TagCount(ki.Object.Headers); n > 0 {
		return ptr(int32(n))
	}
	return nil
}

// CopyTags applies a CopyObject's tagging directive to the copy's headers
// (the source's stored ones, or the request's with REPLACE metadata):
// COPY (the default) keeps the source's tags, REPLACE takes the request's.
func CopyTags(headers map[string]string, src *metaapi.KeyInfo, directive types.TaggingDirective, tagging *string) (map[string]string, error) {
	if directive == types.TaggingDirectiveReplace {
		if tagging == nil {
			tagging = ptr("")
		}
		return WithTags(headers, tagging)
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

// PutConditions are a PutObject's or CompleteMultipartUpload's
// If-Match / If-None-Match, checked by the meta service in the commit
// (atomically: two writers racing with If-None-Match * — exactly one
// commits). As S3: If-None-Match takes only "*", and not with If-Match
// (NotImplemented).
func PutConditions(ifMatch, ifNoneMatch *string) (metaapi.Conditions, error) {
	if ifNoneMatch != nil && *ifNoneMatch != "*" {
		return metaapi.Conditions{}, s3err.GetNotImplementedErr("If-None-Match", s3err.NmpAdditionalMessageIfNoneMatch)
	}
	if ifNoneMatch != nil && ifMatch != nil {
		return metaapi.Conditions{}, s3err.GetNotImplementedErr("If-Match,If-None-Match", s3err.NmpAdditionalMessageMultipleCondHeaders)
	}
	return metaapi.Conditions{IfMatch: deref(ifMatch), IfNoneMatch: deref(ifNoneMatch)}, nil
}

// ErrConditionalConflict is S3's 409 for a conditional write that a
// concurrent operation made moot: a conditional CompleteMultipartUpload
// whose upload another request completed or aborted meanwhile (S3: start
// the upload again).
var ErrConditionalConflict = s3err.APIError{Code: "ConditionalRequestConflict", HTTPStatusCode: 409,
	Description: "A conflicting operation occurred. If using PutObject you can retry the request. If using multipart upload you should initiate another CreateMultipartUpload request and re-upload each part."}

// CreateTags are a CreateBucket's tags (S3's errors for bad ones).
func CreateTags(in *s3.CreateBucketInput) (map[string]string, error) {
	if in.CreateBucketConfiguration == nil {
		return nil, nil
	}
	return backend.ParseCreateBucketTags(in.CreateBucketConfiguration.Tags)
}

// Cache holds a value per bucket (a document, nil: none set; the
// bucket's permissions) for its TTL; this gateway's own changes drop the
// entry. At most its maxEntries: a full cache is emptied. Safe for
// concurrent use; values are shared, read only.
//
// A value is put with the Ticket of the miss that fetched it, and not
// kept when the bucket was dropped since: a lookup that raced this
// gateway's own change cannot put the old answer back after the change.
type Cache[V any] struct {
	mu  sync.Mutex
	m   map[string]cacheEntry[V]
	seq Ticket // drops so far
	now func() time.Time
	ttl time.Duration
	max int
}

// Ticket orders a lookup's miss against the drops (Cache.Put).
type Ticket uint64

type cacheEntry[V any] struct {
	v       V
	has     bool   // false: a drop's mark
	dropped Ticket // the drop that made the mark
	fetched time.Time
}

// DocCache is a Cache of documents (their CORS rules, versioning status,
// object-lock configuration).
type DocCache = Cache[[]byte]

// NewCache returns an empty cache.
func NewCache[V any](ttl time.Duration, maxEntries int) *Cache[V] {
	return &Cache[V]{m: map[string]cacheEntry[V]{}, now: time.Now, ttl: ttl, max: maxEntries}
}

// NewDocCache returns an empty cache of documents.
func NewDocCache(ttl time.Duration, maxEntries int) *DocCache {
	return NewCache[[]byte](ttl, maxEntries)
}

// Get returns a bucket's value when cached and fresh; on a miss, the
// Ticket to put what is fetched now with (a nil cache holds nothing).
func (c *Cache[V]) Get(bucket string) (V, bool, Ticket) {
	var zero V
	if c == nil {
		return zero, false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[bucket]
	if !ok || !e.has || c.now().Sub(e.fetched) >= c.ttl {
		return zero, false, c.seq
	}
	return e.v, true, 0
}

// Put caches a bucket's value fetched after the miss that gave t, unless
// the bucket was dropped since (a nil cache: nothing).
func (c *Cache[V]) Put(bucket string, v V, t Ticket) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[bucket]; ok && !e.has && e.dropped > t {
		return
	}
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[bucket] = cacheEntry[V]{v: v, has: true, fetched: c.now()}
}

// Fetch returns a bucket's value: cached and fresh, or fetched now and
// cached (Put with the ticket of this miss); fetch's error is returned,
// nothing cached. A nil cache fetches every time.
func (c *Cache[V]) Fetch(bucket string, fetch func() (V, error)) (V, error) {
	v, ok, t := c.Get(bucket)
	if ok {
		return v, nil
	}
	v, err := fetch()
	if err != nil {
		return v, err
	}
	c.Put(bucket, v, t)
	return v, nil
}

// Drop forgets a bucket's value, and refuses the values of lookups that
// missed before it (a nil cache: nothing).
func (c *Cache[V]) Drop(bucket string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[bucket] = cacheEntry[V]{dropped: c.seq}
}

func ptr[T any](v T) *T { return &v }

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
