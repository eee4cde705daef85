package s3gw

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/metaapi"
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
	mu   sync.Mutex
	m    map[string]permEntry
	now  func() time.Time
}

type permEntry struct {
	b       *s3permapi.Bucket
	fetched time.Time
}

// NewPermCache returns an empty cache over the meta service behind mc.
func NewPermCache(mc *metaapi.Client) *PermCache {
	return &PermCache{meta: mc, m: map[string]permEntry{}, now: time.Now}
}

func (c *PermCache) get(bucket string) (*s3permapi.Bucket, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[bucket]
	if !ok || c.now().Sub(e.fetched) >= ACLCacheTTL {
		return nil, false
	}
	return e.b, true
}

func (c *PermCache) put(bucket string, b *s3permapi.Bucket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= ACLCacheMaxEntries {
		clear(c.m)
	}
	c.m[bucket] = permEntry{b: b, fetched: c.now()}
}

func (c *PermCache) drop(bucket string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, bucket)
}

// bucket returns a bucket's permissions, cached (the answer is shared:
// read only).
func (c *PermCache) bucket(ctx context.Context, name string) (*s3permapi.Bucket, error) {
	if b, ok := c.get(name); ok {
		return b, nil
	}
	b, err := s3permapi.Get(ctx, c.meta, name)
	if err != nil {
		return nil, bucketErr(err)
	}
	c.put(name, b)
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
	if rc, ok := ctx.(*fasthttp.RequestCtx); ok {
		rc.SetUserValue(bucketACLAnswer{}, bk) // for a GetBucketAcl's answer (answerACL)
	}
	if len(bk.ACL) > 0 {
		return bk.ACL, nil
	}
	return json.Marshal(auth.ACL{Owner: bk.Owner})
}

// PutBucketAcl replaces the bucket's ACL document (versitygw checked the
// ownership: BucketOwnerEnforced refuses grants). versitygw keeps the
// grantees of x-amz-grant-* headers as they were written (id="KEY",
// uri="GROUP"): each is stored as the user's access key or the group
// (all-users, authenticated-users) instead.
func (p *perms) PutBucketAcl(ctx context.Context, bucket string, data []byte) error {
	acl, err := auth.ParseACL(data)
	if err != nil {
		return err
	}
	for i, g := range acl.Grantees {
		if !strings.Contains(g.Access, "=") {
			continue
		}
		gr, err := s3perm.ParseGrantee(g.Access, string(g.Permission))
		if err != nil {
			return s3err.APIError{Code: "InvalidArgument", Description: err.Error(), HTTPStatusCode: 400}
		}
		acl.Grantees[i].Access, acl.Grantees[i].Type = gr.ID, types.TypeCanonicalUser
		if gr.Type != s3perm.GranteeUser {
			acl.Grantees[i].Access, acl.Grantees[i].Type = gr.Type, types.TypeGroup
		}
	}
	if data, err = json.Marshal(acl); err != nil {
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
// and the object's grants. versitygw would write the SDK's output struct
// as XML as it is, which S3 clients do not read: the AccessControlPolicy
// document S3 answers (s3perm.AccessControlPolicyXML) is kept with the
// request and answered instead (answerACL).
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
	owner := bk.Owner
	if rc, ok := ctx.(*fasthttp.RequestCtx); ok {
		rc.SetUserValue(objectACLAnswer{}, s3perm.AccessControlPolicyXML(owner, grants))
	}
	out := &s3.GetObjectAclOutput{Owner: &types.Owner{ID: &owner},
		Grants: []types.Grant{{Grantee: &types.Grantee{Type: types.TypeCanonicalUser, ID: &owner}, Permission: types.PermissionFullControl}}}
	for _, g := range grants {
		gr := types.Grant{Grantee: &types.Grantee{}, Permission: types.Permission(g.Permission)}
		switch g.Type {
		case s3perm.GranteeUser:
			gr.Grantee.Type, gr.Grantee.ID = types.TypeCanonicalUser, ptr(g.ID)
		case s3perm.GranteeAllUsers:
			gr.Grantee.Type, gr.Grantee.URI = types.TypeGroup, ptr(s3perm.AllUsersURI)
		case s3perm.GranteeAuthenticated:
			gr.Grantee.Type, gr.Grantee.URI = types.TypeGroup, ptr(s3perm.AuthenticatedUsersURI)
		}
		out.Grants = append(out.Grants, gr)
	}
	return out, nil
}

// objectACLAnswer keys, in a request's context, the GetObjectAcl answer;
// bucketACLAnswer the permissions of the request's bucket.
type (
	objectACLAnswer struct{}
	bucketACLAnswer struct{}
)

// answerACL, run once versitygw answered a request, replaces the body of
// a successful GetObjectAcl by the document GetObjectAcl kept, and that
// of a GetBucketAcl (a GET with the acl parameter that is not one) by the
// bucket's ACL as S3 writes it (versitygw names groups by ID, not URI).
func answerACL(c fiber.Ctx) {
	if c.Response().StatusCode() != fiber.StatusOK {
		return
	}
	doc, ok := c.RequestCtx().UserValue(objectACLAnswer{}).([]byte)
	if !ok {
		bk, isBucket := c.RequestCtx().UserValue(bucketACLAnswer{}).(*s3permapi.Bucket)
		if !isBucket || c.Method() != fiber.MethodGet || !c.Request().URI().QueryArgs().Has("acl") {
			return
		}
		acl, err := auth.ParseACL(bk.ACL)
		if err != nil {
			return // versitygw's answer stands
		}
		doc = s3perm.AccessControlPolicyXML(bk.Owner, bucketGrants(acl, bk.Owner))
	}
	c.Response().Header.SetContentType(fiber.MIMEApplicationXML)
	c.Response().SetBody(doc)
}

// bucketGrants are a bucket ACL's grants but the owner's FULL_CONTROL.
func bucketGrants(acl auth.ACL, owner string) []s3perm.Grant {
	var out []s3perm.Grant
	for _, g := range acl.Grantees {
		switch {
		case g.Type == types.TypeGroup && (g.Access == s3perm.GranteeAllUsers || g.Access == s3perm.GranteeAuthenticated):
			out = append(out, s3perm.Grant{Type: g.Access, Permission: string(g.Permission)})
		case g.Type == types.TypeCanonicalUser && (g.Access != owner || g.Permission != auth.PermissionFullControl):
			out = append(out, s3perm.Grant{Type: s3perm.GranteeUser, ID: g.Access, Permission: string(g.Permission)})
		}
	}
	return out
}

// PutObjectAcl sets the object's ACL: a canned ACL (x-amz-acl), grants
// of x-amz-grant-* headers (grantees id= of a user's access key, uri= of
// the AllUsers or AuthenticatedUsers group) or an AccessControlPolicy
// document (the request body, which versitygw does not pass on: read
// from the request, requestBody), one of them. Under BucketOwnerEnforced
// only the owner's own ACL is accepted (AccessControlListNotSupported).
func (p *perms) PutObjectAcl(ctx context.Context, in *s3.PutObjectAclInput) error {
	bucket, key := deref(in.Bucket), deref(in.Key)
	bk, err := p.cache.bucket(ctx, bucket)
	if err != nil {
		return err
	}
	headers := map[string]string{"X-Amz-Grant-Read": deref(in.GrantRead), "X-Amz-Grant-Write": deref(in.GrantWrite),
		"X-Amz-Grant-Read-Acp": deref(in.GrantReadACP), "X-Amz-Grant-Write-Acp": deref(in.GrantWriteACP), "X-Amz-Grant-Full-Control": deref(in.GrantFullControl)}
	headerGrants, err := p.grantHeaders(ctx, func(h string) string { return headers[h] }, string(in.ACL), bk.Ownership)
	if err != nil {
		return err
	}
	var grants []s3perm.Grant
	switch body := requestBody(ctx); {
	case len(body) > 0:
		if in.ACL != "" || headerGrants != nil {
			return s3err.GetAPIError(s3err.ErrUnexpectedContent)
		}
		owner, g, err := s3perm.ParseAccessControlPolicy(body)
		if err != nil {
			return s3err.GetAPIError(s3err.ErrMalformedACL)
		}
		if owner != bk.Owner {
			return s3err.APIError{Code: "InvalidArgument", Description: "Invalid id", HTTPStatusCode: 400}
		}
		if len(g) > 0 && !s3perm.ACLsEnabled(bk.Ownership) {
			return s3err.GetAPIError(s3err.ErrAclNotSupported)
		}
		grants = g
	case headerGrants != nil:
		grants = headerGrants
	default:
		if grants, err = cannedObjectGrants(string(in.ACL), bk.Ownership); err != nil {
			return err
		}
	}
	if _, err := p.meta.GetKey(ctx, bucket, key); err != nil {
		return toS3(err, s3err.ErrNoSuchKey)
	}
	return toS3(s3permapi.PutObjectACL(ctx, p.meta, s3permapi.ObjectACL{Bucket: bucket, Key: key, ACL: s3perm.EncodeGrants(grants)}), s3err.ErrNoSuchKey)
}

// grantHeaders reads the x-amz-grant-* headers header gives: their
// grants (nil: none sent), checked — not with a canned ACL, grantees
// Spindle knows (every id= a user's access key), ACLs enabled by the
// bucket's ownership.
func (p *perms) grantHeaders(ctx context.Context, header func(string) string, canned, ownership string) ([]s3perm.Grant, error) {
	grants, err := s3perm.ParseGrantHeaders(header)
	if err != nil {
		return nil, s3err.APIError{Code: "InvalidArgument", Description: err.Error(), HTTPStatusCode: 400}
	}
	if grants == nil {
		return nil, nil
	}
	if canned != "" {
		return nil, s3err.GetAPIError(s3err.ErrBothCannedAndHeaderGrants)
	}
	if !s3perm.ACLsEnabled(ownership) {
		return nil, s3err.GetAPIError(s3err.ErrAclNotSupported)
	}
	for _, g := range grants {
		if g.Type != s3perm.GranteeUser {
			continue
		}
		if _, err := p.meta.UserByAccessKey(ctx, g.ID); err != nil {
			if errors.Is(err, metaapi.ErrNotFound) || errors.Is(err, metaapi.ErrInvalid) {
				return nil, s3err.APIError{Code: "InvalidArgument", Description: "Invalid id: " + g.ID, HTTPStatusCode: 400}
			}
			return nil, err
		}
	}
	return grants, nil
}

// cannedObjectGrants is s3perm.CannedGrants with S3's errors.
func cannedObjectGrants(canned, ownership string) ([]s3perm.Grant, error) {
	g, err := s3perm.CannedGrants(canned, ownership)
	switch {
	case errors.Is(err, s3perm.ErrACLsDisabled):
		return nil, s3err.GetAPIError(s3err.ErrAclNotSupported)
	case err != nil:
		return nil, s3err.GetInvalidArgumentErr(s3err.InvalidArgCannedAcl, canned)
	}
	return g, nil
}

// objectACLFor is the stored ACL of a new object put with x-amz-acl or
// x-amz-grant-* headers (PutObject, CreateMultipartUpload, CopyObject:
// requestHeader), checked against the bucket's ownership.
func (p *perms) objectACLFor(ctx context.Context, bucket string) (string, error) {
	canned := requestHeader(ctx, "X-Amz-Acl")
	granted := false
	for _, h := range s3perm.GrantHeaders {
		granted = granted || requestHeader(ctx, h.Header) != ""
	}
	if canned == "" && !granted {
		return "", nil
	}
	bk, err := p.cache.bucket(ctx, bucket)
	if err != nil {
		return "", err
	}
	g, err := p.grantHeaders(ctx, func(h string) string { return requestHeader(ctx, h) }, canned, bk.Ownership)
	if err == nil && g == nil {
		g, err = cannedObjectGrants(canned, bk.Ownership)
	}
	if err != nil {
		return "", err
	}
	return s3perm.EncodeGrants(g), nil
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
	if err != nil {
		return false
	}
	for _, g := range bk.Grants {
		if g.Access == access {
			return true
		}
	}
	return false
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
