package namespace

import (
	"fmt"
	"maps"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/authz"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// S3 permissions (s3permapi): a bucket's policy and object ownership in its
// record, an object's ACL in its key record's S3 metadata. The documents
// are the gateway's; only their bounds are checked here.

// BucketPerms returns what the gateway authorizes a bucket's requests
// with, the grants of S3 users included.
func (s *S3Users) BucketPerms(name string) (*s3permapi.Bucket, error) {
	if err := metaapi.ValidBucket(name); err != nil {
		return nil, err
	}
	return state.Read(s.State, func() (*s3permapi.Bucket, error) {
		rec, ok := s.Buckets[name]
		if !ok {
			return nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, name)
		}
		b := &s3permapi.Bucket{Owner: rec.Owner, Ownership: rec.Ownership}
		if rec.ACL != "" {
			b.ACL = []byte(rec.ACL)
		}
		if rec.Policy != "" {
			b.Policy = []byte(rec.Policy)
		}
		var err error
		b.Grants, err = authz.S3UserGrants(s.State, name)
		return b, err
	})
}

// PutBucketPerms sets what req sets of a bucket's policy and ownership.
// A bucket created outside S3 (no owner) has none (ErrInvalid).
func (s *S3Users) PutBucketPerms(name string, req *s3permapi.PutBucket) error {
	if err := metaapi.ValidBucket(name); err != nil {
		return err
	}
	if req.Policy != nil && len(*req.Policy) > s3permapi.MaxPolicyBytes {
		return fmt.Errorf("%w: bucket policy of %d bytes, at most %d", metaapi.ErrInvalid, len(*req.Policy), s3permapi.MaxPolicyBytes)
	}
	if req.Ownership != nil && len(*req.Ownership) > s3permapi.MaxOwnershipBytes {
		return fmt.Errorf("%w: object ownership of %d bytes, at most %d", metaapi.ErrInvalid, len(*req.Ownership), s3permapi.MaxOwnershipBytes)
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		rec, ok := s.Buckets[name]
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, name)
		}
		if rec.Owner == "" {
			return struct{}{}, nil, fmt.Errorf("%w: bucket %s was not created through S3: it has no policy or ownership", metaapi.ErrInvalid, name)
		}
		if req.Policy != nil {
			rec.Policy = string(*req.Policy)
		}
		if req.Ownership != nil {
			rec.Ownership = *req.Ownership
		}
		b := s.Store.NewBatch()
		state.Set(b, state.BucketKey(name), rec.Encode())
		s.Buckets[name] = rec
		return struct{}{}, b, nil
	})
	return err
}

// PutObjectACL replaces an S3 object's ACL (s3permapi.ObjectACLHeader of
// its metadata; empty: removed). The key's value and blocks are kept.
func (s *Namespace) PutObjectACL(req *s3permapi.ObjectACL) error {
	if err := metaapi.ValidBucket(req.Bucket); err != nil {
		return err
	}
	if err := metaapi.ValidKey(req.Key); err != nil {
		return err
	}
	_, err := state.Mutate(s.State, func() (struct{}, *pebble.Batch, error) {
		if _, err := s.BucketOf(req.Bucket, req.Key); err != nil {
			return struct{}{}, nil, err
		}
		rec, ok, err := s.getKey(req.Bucket, req.Key)
		if err != nil {
			return struct{}{}, nil, err
		}
		if !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s/%s", metaapi.ErrNoSuchKey, req.Bucket, req.Key)
		}
		om := metaapi.ObjectMeta{}
		if rec.Object != nil {
			om = *rec.Object
		}
		om.Headers = maps.Clone(om.Headers)
		if req.ACL == "" {
			delete(om.Headers, s3permapi.ObjectACLHeader)
		} else {
			if om.Headers == nil {
				om.Headers = map[string]string{}
			}
			om.Headers[s3permapi.ObjectACLHeader] = req.ACL
		}
		if err := om.Validate(); err != nil {
			return struct{}{}, nil, err
		}
		rec.Object = &om
		b := s.Store.NewBatch()
		state.Set(b, state.ObjectKey(req.Bucket, req.Key), rec.Encode())
		return struct{}{}, b, nil
	})
	return err
}
