// Package s3permapi is the meta service's API of S3 permissions beyond
// what metaapi carries (metaapi is at its size bound): a bucket's policy
// and object ownership, stored in the bucket record next to its owner and
// ACL, and an object's ACL, stored in the key record's S3 metadata. The
// wire types are shared by the meta service (internal/meta) and the S3
// gateway (internal/s3gw), which calls the routes through the free
// functions below (metaapi.Client.Do). Routes (JSON bodies, errors as
// elsewhere):
//
//	POST /v1/s3/buckets/{bucket}            CreateBucket → metaapi.Bucket (create_s3_bucket, with Ownership)
//	GET  /v1/s3/buckets/{bucket}/perms      → Bucket                  (get_bucket_perms)
//	PUT  /v1/s3/buckets/{bucket}/perms      PutBucket                 (put_bucket_perms)
//	PUT  /v1/s3/object-acl                  ObjectACL                 (put_object_acl)
//
// The meta service stores the documents as given (the gateway validates
// them); it checks only their bounds. Every change is one replicated
// mutation of one record: a change through one gateway is seen by every
// gateway at its next read.
//
// Concurrency: the functions are safe for concurrent use (they only call
// the client, which is).
package s3permapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Limits.
const (
	// MaxPolicyBytes bounds a bucket policy document (S3's 20 KiB).
	MaxPolicyBytes = 20 << 10
	// MaxOwnershipBytes bounds the object ownership setting's name.
	MaxOwnershipBytes = 32
	// ObjectACLHeader is the entry of metaapi.ObjectMeta.Headers that
	// holds an object's ACL (absent: private to the bucket owner).
	ObjectACLHeader = "X-Amz-Acl"
)

// CreateBucket is metaapi.CreateS3Bucket with the bucket's object
// ownership (empty: BucketOwnerEnforced).
type CreateBucket struct {
	metaapi.CreateS3Bucket
	Ownership string `json:"ownership,omitempty"`
}

// Bucket is what the gateway authorizes a request with: the owner, the
// ACL document, the policy (empty: none), the object ownership (empty:
// BucketOwnerEnforced, the default of S3 since 2023) and the grants of
// S3 users.
type Bucket struct {
	Owner     string `json:"owner"`
	ACL       []byte `json:"acl,omitempty"`
	Policy    []byte `json:"policy,omitempty"`
	Ownership string `json:"ownership,omitempty"`
	// Grants are the grants (package metaapi/authz) S3 users hold on
	// the bucket: the gateway allows what they give (s3perm.ByGrant).
	Grants []UserGrant `json:"grants,omitempty"`
}

// UserGrant is an S3 user's grant on a bucket or a key prefix of it
// (matched on '/' boundaries): the actions of metaapi/authz (read,
// write, delete, admin).
type UserGrant struct {
	Access  string   `json:"access"`
	Prefix  string   `json:"prefix,omitempty"`
	Actions []string `json:"actions"`
}

// PutBucket changes what is set: a nil Policy or Ownership is left as it
// is; an empty one is removed (back to the default).
type PutBucket struct {
	Policy    *[]byte `json:"policy,omitempty"`
	Ownership *string `json:"ownership,omitempty"`
}

// ObjectACL sets an object's ACL document (empty: removed, private).
type ObjectACL struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	ACL    string `json:"acl"`
}

func bucketPath(bucket string) string { return "/v1/s3/buckets/" + url.PathEscape(bucket) }

// Create creates an S3 bucket with its ownership setting.
func Create(ctx context.Context, c *metaapi.Client, name string, req CreateBucket) (*metaapi.Bucket, error) {
	var b metaapi.Bucket
	if err := c.Do(ctx, http.MethodPost, bucketPath(name), req, &b, false); err != nil {
		return nil, err
	}
	return &b, nil
}

// Get returns a bucket's permissions.
func Get(ctx context.Context, c *metaapi.Client, bucket string) (*Bucket, error) {
	var b Bucket
	if err := c.Do(ctx, http.MethodGet, bucketPath(bucket)+"/perms", nil, &b, true); err != nil {
		return nil, err
	}
	return &b, nil
}

// Put changes a bucket's policy or ownership.
func Put(ctx context.Context, c *metaapi.Client, bucket string, req PutBucket) error {
	return c.Do(ctx, http.MethodPut, bucketPath(bucket)+"/perms", req, nil, true)
}

// PutObjectACL replaces an object's ACL.
func PutObjectACL(ctx context.Context, c *metaapi.Client, req ObjectACL) error {
	return c.Do(ctx, http.MethodPut, "/v1/s3/object-acl", req, nil, true)
}
