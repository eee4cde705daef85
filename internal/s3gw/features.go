package s3gw

import (
	"context"

	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
	"github.com/spindle-store/spindle/internal/s3gw/s3extra"
	"github.com/spindle-store/spindle/internal/s3gw/s3ver"
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
	cors *s3extra.DocCache
}

func (f *features) ver() s3ver.Bucket { return s3ver.Bucket{Meta: f.meta, ToS3: toS3} }

// GetObjectTagging answers the object's tag set.
func (f *features) GetObjectTagging(ctx context.Context, bucket, object, vid string) (map[string]string, error) {
	if err := keyErr(object); err != nil {
		return nil, err
	}
	ki, err := f.meta.GetKey(ctx, bucket, object)
	if vid != "" {
		ki, err = f.ver().Get(ctx, bucket, object, vid) // a version's tags (package s3ver)
	}
	if err != nil {
		return nil, toS3(err, s3err.ErrNoSuchKey)
	}
	if ki.Object == nil {
		return map[string]string{}, nil
	}
	return s3meta.DecodeTags(ki.Object.Headers[s3meta.TaggingHeader])
}

// PutObjectTagging replaces the object's tag set (versitygw validated it).
func (f *features) PutObjectTagging(ctx context.Context, bucket, object, vid string, tags map[string]string) error {
	if err := keyErr(object); err != nil {
		return err
	}
	return f.ver().SetTags(ctx, bucket, object, vid, s3meta.EncodeTags(tags)) // of a version: package s3ver
}

// DeleteObjectTagging removes the object's tag set.
func (f *features) DeleteObjectTagging(ctx context.Context, bucket, object, vid string) error {
	if err := keyErr(object); err != nil {
		return err
	}
	return f.ver().SetTags(ctx, bucket, object, vid, "")
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

// GetBucketCors answers the bucket's CORS document
// (NoSuchCORSConfiguration: none), cached for ACLCacheTTL.
func (f *features) GetBucketCors(ctx context.Context, bucket string) ([]byte, error) {
	doc, err := f.cors.Fetch(bucket, func() ([]byte, error) { return s3meta.GetBucketConf(ctx, f.meta, bucket, s3meta.ConfCORS) })
	if err != nil {
		return nil, bucketErr(err)
	}
	if len(doc) == 0 {
		return nil, s3err.GetAPIError(s3err.ErrNoSuchCORSConfiguration)
	}
	return doc, nil
}

// PutBucketCors replaces the bucket's CORS rules (versitygw validated
// the document).
func (f *features) PutBucketCors(ctx context.Context, bucket string, doc []byte) error {
	defer f.cors.Drop(bucket)
	if len(doc) > s3meta.MaxBucketConfBytes {
		return s3err.GetAPIError(s3err.ErrEntityTooLarge)
	}
	return bucketErr(s3meta.PutBucketConf(ctx, f.meta, bucket, s3meta.ConfCORS, doc))
}

// DeleteBucketCors removes the bucket's CORS rules.
func (f *features) DeleteBucketCors(ctx context.Context, bucket string) error {
	defer f.cors.Drop(bucket)
	return bucketErr(s3meta.DeleteBucketConf(ctx, f.meta, bucket, s3meta.ConfCORS))
}
