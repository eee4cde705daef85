package s3gw

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/valyala/fasthttp"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3acl"
	"github.com/spindle-store/spindle/internal/s3gw/s3extra"
	"github.com/spindle-store/spindle/internal/s3perm"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// Bounds of the gateway's cache of bucket permissions.
const (
	// ACLCacheTTL is how long a gateway uses a bucket's permissions (its
	// owner, ACL, policy and object ownership) without asking the meta
	// service again: a change made through another gateway applies here
	// within it (this gateway's own changes at once). A bucket deleted
	// meanwhile is refused by the meta service at the object operation.
	ACLCacheTTL = time.Second
	// ACLCacheMaxEntries bounds the buckets cached (the cache is emptied
	// when full).
	ACLCacheMaxEntries = 4096
)

// PermCache holds buckets' permissions (s3permapi.Bucket) for
// ACLCacheTTL; this gateway's own changes drop the entry. Safe for
// concurrent use.
type PermCache struct {
	meta *metaapi.Client
	c    *s3extra.Cache[*s3permapi.Bucket]
}

// NewPermCache returns an empty cache over the meta service behind mc.
func NewPermCache(mc *metaapi.Client) *PermCache {
	return &PermCache{meta: mc, c: s3extra.NewCache[*s3permapi.Bucket](ACLCacheTTL, ACLCacheMaxEntries)}
}

func (c *PermCache) drop(bucket string) { c.c.Drop(bucket) }

// bucket returns a bucket's permissions, cached (the answer is shared:
// read only).
func (c *PermCache) bucket(ctx context.Context, name string) (*s3permapi.Bucket, error) {
	b, err := c.c.Fetch(name, func() (*s3permapi.Bucket, error) { return s3permapi.Get(ctx, c.meta, name) })
	if err != nil {
		return nil, bucketErr(err)
	}
	return b, nil
}

// errPolicyTooLarge is a policy over s3perm.MaxPolicyBytes.
var errPolicyTooLarge = s3err.APIError{Code: "PolicyTooLarge", Description: "Policy exceeds the maximum allowed document size.", HTTPStatusCode: 400}

// requestHeader and requestBody read the S3 request a backend call
// serves: versitygw passes its fasthttp request context as the call's
// context, but not every header (x-amz-acl of PutObject) nor the body of
// PutObjectAcl. Outside a request: "", nil.
func requestHeader(ctx context.Context, name string) string {
	if rc, ok := ctx.(*fasthttp.RequestCtx); ok {
		return string(rc.Request.Header.Peek(name))
	}
	return ""
}

func requestBody(ctx context.Context) []byte {
	if rc, ok := ctx.(*fasthttp.RequestCtx); ok {
		return rc.Request.Body()
	}
	return nil
}

// perms is the part of the Backend that stores S3 permissions in the
// meta service: bucket ACLs (versitygw's documents), bucket policies
// (normalized by s3perm.NormalizePolicy), object ownership, object ACLs
// (s3perm grants). versitygw evaluates the bucket policy and ACL; the
// IAM adds the owner's rights and object ACLs (IAM.EvaluatePolicy).
type perms struct {
	backend.BackendUnsupported
	meta  *metaapi.Client
	cache *PermCache
}

// GetBucketAcl returns the ACL document stored with the bucket (one with
// just its owner when none was stored). versitygw asks for it on every
// request that names a bucket: answers are cached (PermCache).
func (p *perms) GetBucketAcl(ctx context.Context, in *s3.GetBucketAclInput) ([]byte, error) {
	bk, err := p.cache.bucket(ctx, deref(in.Bucket))
	if err != nil {
		return nil, err
	}
	s3acl.KeepBucket(ctx, bk) // for a GetBucketAcl's answer (s3acl.Answer)
	if len(bk.ACL) > 0 {
		return bk.ACL, nil
	}
	return json.Marshal(auth.ACL{Owner: bk.Owner})
}

// PutBucketAcl replaces the bucket's ACL document (versitygw checked the
// ownership: BucketOwnerEnforced refuses grants), the grantees of
// x-amz-grant-* headers as users and groups (s3acl.NormalizeBucketACL).
func (p *perms) PutBucketAcl(ctx context.Context, bucket string, data []byte) error {
	data, err := s3acl.NormalizeBucketACL(data)
	if err != nil {
		return err
	}
	defer p.cache.drop(bucket)
	return bucketErr(p.meta.PutBucketACL(ctx, bucket, data))
}

// PutBucketPolicy stores the policy (versitygw validated it) with each
// user principal as its access key.
func (p *perms) PutBucketPolicy(ctx context.Context, bucket string, policy []byte) error {
	if len(policy) > s3perm.MaxPolicyBytes {
		return errPolicyTooLarge
	}
	doc, err := s3perm.NormalizePolicy(policy, func(name string) (string, bool) { return resolveUser(ctx, p.meta, name) })
	if err != nil {
		return s3err.APIError{Code: "MalformedPolicy", Description: err.Error(), HTTPStatusCode: 400}
	}
	if len(doc) > s3perm.MaxPolicyBytes {
		return errPolicyTooLarge
	}
	defer p.cache.drop(bucket)
	return bucketErr(s3permapi.Put(ctx, p.meta, bucket, s3permapi.PutBucket{Policy: &doc}))
}

// GetBucketPolicy answers the stored policy (NoSuchBucketPolicy: none).
// versitygw asks for it on every request it authorizes: cached.
func (p *perms) GetBucketPolicy(ctx context.Context, bucket string) ([]byte, error) {
	bk, err := p.cache.bucket(ctx, bucket)
	if err != nil {
		return nil, err
	}
	if len(bk.Policy) == 0 {
		return nil, s3err.GetAPIError(s3err.ErrNoSuchBucketPolicy)
	}
	return bk.Policy, nil
}

// DeleteBucketPolicy removes the policy (none is not an error).
func (p *perms) DeleteBucketPolicy(ctx context.Context, bucket string) error {
	defer p.cache.drop(bucket)
	none := []byte{}
	return bucketErr(s3permapi.Put(ctx, p.meta, bucket, s3permapi.PutBucket{Policy: &none}))
}

// PutBucketOwnershipControls sets the object ownership.
func (p *perms) PutBucketOwnershipControls(ctx context.Context, bucket string, ownership types.ObjectOwnership) error {
	o := string(ownership)
	if !s3perm.ValidOwnership(o) {
		return s3err.GetInvalidArgObjectOwnership(o)
	}
	defer p.cache.drop(bucket)
	return bucketErr(s3permapi.Put(ctx, p.meta, bucket, s3permapi.PutBucket{Ownership: &o}))
}

// GetBucketOwnershipControls answers the object ownership
// (OwnershipControlsNotFoundError when deleted: ACLs are then enabled, as
// S3 has it).
func (p *perms) GetBucketOwnershipControls(ctx context.Context, bucket string) (types.ObjectOwnership, error) {
	bk, err := p.cache.bucket(ctx, bucket)
	if err != nil {
		return "", err
	}
	if bk.Ownership == "" {
		return "", s3err.GetAPIError(s3err.ErrOwnershipControlsNotFound)
	}
	return types.ObjectOwnership(bk.Ownership), nil
}

// DeleteBucketOwnershipControls removes the setting.
func (p *perms) DeleteBucketOwnershipControls(ctx context.Context, bucket string) error {
	defer p.cache.drop(bucket)
	none := ""
	return bucketErr(s3permapi.Put(ctx, p.meta, bucket, s3permapi.PutBucket{Ownership: &none}))
}

// GetObjectAcl answers the object's ACL: the bucket owner's FULL_CONTROL
// and the object's grants, as S3's document (s3acl.KeepObjectAnswer).
func (p *perms) GetObjectAcl(ctx context.Context, in *s3.GetObjectAclInput) (*s3.GetObjectAclOutput, error) {
	bk, err := p.cache.bucket(ctx, deref(in.Bucket))
	if err != nil {
		return nil, err
	}
	ki, err := p.meta.GetKey(ctx, deref(in.Bucket), deref(in.Key))
	if err != nil {
		return nil, toS3(err, s3err.ErrNoSuchKey)
	}
	grants, err := s3perm.DecodeGrants(objectACL(&ki))
	if err != nil {
		return nil, err
	}
	s3acl.KeepObjectAnswer(ctx, bk.Owner, grants)
	return s3acl.ObjectACLOutput(bk.Owner, grants), nil
}

// PutObjectAcl sets the object's ACL: a canned ACL, x-amz-grant-* headers
// or an AccessControlPolicy document (the request body, which versitygw
// does not pass on: read from the request, requestBody), as
// s3acl.ForPutObjectAcl reads them.
func (p *perms) PutObjectAcl(ctx context.Context, in *s3.PutObjectAclInput) error {
	bucket, key := deref(in.Bucket), deref(in.Key)
	bk, err := p.cache.bucket(ctx, bucket)
	if err != nil {
		return err
	}
	grants, err := s3acl.ForPutObjectAcl(in, requestBody(ctx), bk, p.knownUser(ctx))
	if err != nil {
		return err
	}
	if _, err := p.meta.GetKey(ctx, bucket, key); err != nil {
		return toS3(err, s3err.ErrNoSuchKey)
	}
	return toS3(s3permapi.PutObjectACL(ctx, p.meta, s3permapi.ObjectACL{Bucket: bucket, Key: key, ACL: s3perm.EncodeGrants(grants)}), s3err.ErrNoSuchKey)
}

// knownUser says whether an access key is a user's.
func (p *perms) knownUser(ctx context.Context) s3acl.Known {
	return func(access string) (bool, error) {
		_, err := p.meta.UserByAccessKey(ctx, access)
		if errors.Is(err, metaapi.ErrNotFound) || errors.Is(err, metaapi.ErrInvalid) {
			return false, nil
		}
		return err == nil, err
	}
}

// objectACLFor is the stored ACL of a new object put with x-amz-acl or
// x-amz-grant-* headers (PutObject, CreateMultipartUpload, CopyObject:
// requestHeader), checked against the bucket's ownership.
func (p *perms) objectACLFor(ctx context.Context, bucket string) (string, error) {
	header := func(h string) string { return requestHeader(ctx, h) }
	if !s3acl.Asked(header) {
		return "", nil
	}
	bk, err := p.cache.bucket(ctx, bucket)
	if err != nil {
		return "", err
	}
	return s3acl.ForNewObject(header, bk.Ownership, p.knownUser(ctx))
}

// withObjectACL returns headers with the object ACL set (or removed).
func withObjectACL(headers map[string]string, acl string) map[string]string {
	if acl == "" {
		delete(headers, s3permapi.ObjectACLHeader)
		return headers
	}
	if headers == nil {
		headers = map[string]string{}
	}
	headers[s3permapi.ObjectACLHeader] = acl
	return headers
}

// objectACL is a key's stored ACL ("" private).
func objectACL(ki *metaapi.KeyInfo) string {
	if ki.Object == nil {
		return ""
	}
	return ki.Object.Headers[s3permapi.ObjectACLHeader]
}

// granted says the user of access holds a grant (any) on bucket.
func (p *perms) granted(ctx context.Context, bucket, access string) bool {
	bk, err := p.cache.bucket(ctx, bucket)
	return err == nil && len(s3acl.UserGrants(bk, access)) > 0
}

// resolveUser is the access key of a user named by name or access key.
func resolveUser(ctx context.Context, mc *metaapi.Client, name string) (string, bool) {
	if u, err := mc.UserByAccessKey(ctx, name); err == nil {
		return u.AccessKey, true
	}
	users, err := mc.Users(ctx)
	if err != nil {
		return "", false
	}
	for _, u := range users {
		if u.Name == name {
			return u.AccessKey, true
		}
	}
	return "", false
}

// splitARN is the bucket and key of an S3 resource ARN (key "" for the
// bucket itself).
func splitARN(resource string) (bucket, key string, ok bool) {
	rest, ok := strings.CutPrefix(resource, auth.ResourceArnPrefix)
	if !ok {
		return "", "", false
	}
	bucket, key, _ = strings.Cut(rest, "/")
	return bucket, key, bucket != "" && bucket != "*"
}
