package namespace

import (
	"errors"
	"fmt"
	"maps"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// The S3 gateway's object tags and bucket configuration documents
// (metaapi/s3meta).

// PutBucketConf sets (doc non-empty) or deletes (empty) a bucket's
// configuration document of that name, one batch.
func (s *S3Users) PutBucketConf(bucket, name string, doc []byte) error {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return err
	}
	if err := s3meta.ValidConfName(name); err != nil {
		return fmt.Errorf("%w: %v", metaapi.ErrInvalid, err)
	}
	if len(doc) > s3meta.MaxBucketConfBytes {
		return fmt.Errorf("%w: %s document of %d bytes, at most %d", metaapi.ErrInvalid, name, len(doc), s3meta.MaxBucketConfBytes)
	}
	if name == s3meta.ConfLifecycle && len(doc) > 0 {
		if _, err := lifecycle.Parse(doc); err != nil {
			return fmt.Errorf("%w: %v", metaapi.ErrInvalid, err) // the runner reads only what parses
		}
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		if _, ok := s.Buckets[bucket]; !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		b := s.Store.NewBatch()
		if len(doc) == 0 {
			state.Del(b, state.BucketConfKey(bucket, name))
		} else {
			state.Set(b, state.BucketConfKey(bucket, name), state.BucketConfRecord{Updated: s.Cfg.Now(), Doc: string(doc)}.Encode())
		}
		return struct{}{}, b, nil
	})
	return err
}

// GetBucketConf returns a bucket's configuration document of that name
// (nil: none set).
func (s *S3Users) GetBucketConf(bucket, name string) ([]byte, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return nil, err
	}
	if err := s3meta.ValidConfName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", metaapi.ErrInvalid, err)
	}
	return state.Read(s.State, func() (_ []byte, err error) {
		if _, ok := s.Buckets[bucket]; !ok {
			return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		v, closer, err := s.Store.Get(state.BucketConfKey(bucket, name))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("meta: read %s of bucket %s: %w", name, bucket, err)
		}
		defer state.CloseInto(closer, &err, "bucket configuration")
		rec, err := state.DecodeBucketConf(v)
		if err != nil {
			return nil, fmt.Errorf("meta: %s of bucket %s: %w", name, bucket, err)
		}
		return []byte(rec.Doc), nil
	})
}

// dropBucketConf deletes, in b, every configuration document of a bucket
// (the bucket's deletion).
func dropBucketConf(b *pebble.Batch, bucket string) {
	for _, name := range s3meta.BucketConfNames {
		state.Del(b, state.BucketConfKey(bucket, name))
	}
	state.Del(b, state.BucketConfKey(bucket, lockmeta.ConfName)) // object lock (objlock.go): not a generic document
}

// PutObjectTagging replaces the tag set of bucket/key (tagging in
// s3meta.EncodeTags's form, "" removes it), in its record's stored
// headers (req.VersionID set: in that version's record, current or
// noncurrent; NOT_FOUND when the key has no such version); its bytes,
// ETag and time are unchanged.
func (s *Namespace) PutObjectTagging(req *s3meta.ObjectTagging) error {
	if _, err := s3meta.DecodeTags(req.Tagging); err != nil {
		return fmt.Errorf("%w: %v", metaapi.ErrInvalid, err)
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		if _, err := s.BucketOf(req.Bucket, req.Key); err != nil {
			return struct{}{}, nil, err
		}
		rec, ok, err := s.getKey(req.Bucket, req.Key)
		if err != nil {
			return struct{}{}, nil, err
		}
		skey := state.ObjectKey(req.Bucket, req.Key)
		if req.VersionID != "" { // one version's tags, current or not (S3's versionId)
			v, found, err := Versions{s}.findVersion(req.Bucket, req.Key, rec, ok, req.VersionID)
			switch {
			case err != nil:
				return struct{}{}, nil, err
			case !found:
				return struct{}{}, nil, fmt.Errorf("%w: no version %s of %s/%s", metaapi.ErrNotFound, req.VersionID, req.Bucket, req.Key)
			case v.rec.Version.Marker:
				return struct{}{}, nil, fmt.Errorf("%w: version %s of %s/%s is a delete marker", metaapi.ErrInvalid, req.VersionID, req.Bucket, req.Key)
			}
			rec = v.rec
			if v.skey != nil {
				skey = v.skey
			}
		}
		if !ok && req.VersionID == "" {
			return struct{}{}, nil, fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, req.Bucket, req.Key)
		}
		if rec.Object == nil && req.Tagging == "" {
			return struct{}{}, nil, nil // no tags to remove
		}
		om := metaapi.ObjectMeta{}
		if rec.Object != nil {
			om = *rec.Object
		}
		om.Headers = maps.Clone(om.Headers)
		if om.Headers == nil {
			om.Headers = map[string]string{}
		}
		if req.Tagging == "" {
			delete(om.Headers, s3meta.TaggingHeader)
		} else {
			om.Headers[s3meta.TaggingHeader] = req.Tagging
		}
		if err := om.Validate(); err != nil {
			return struct{}{}, nil, err
		}
		rec.Object = &om
		b := s.Store.NewBatch()
		state.Set(b, skey, rec.Encode())
		return struct{}{}, b, nil
	})
	return err
}
