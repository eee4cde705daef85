package metaapi

import (
	"context"
	"net/http"
	"net/url"
)

// CreateUser creates an S3 user (ErrExists when the name or access key is
// taken); the answer carries the secret. Tried once.
func (c *Client) CreateUser(ctx context.Context, req CreateUser) (User, error) {
	var u User
	return u, c.Do(ctx, http.MethodPost, "/v1/users", req, &u, false)
}

// Users lists the S3 users, without secrets.
func (c *Client) Users(ctx context.Context) ([]User, error) {
	var l UserList
	err := c.Do(ctx, http.MethodGet, "/v1/users", nil, &l, true)
	return l.Users, err
}

// DeleteUser deletes an S3 user by name. Tried once.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(name), nil, nil, false)
}

// UserByAccessKey returns the user of an access key, with its secret
// (ErrNotFound when none).
func (c *Client) UserByAccessKey(ctx context.Context, access string) (User, error) {
	var u User
	return u, c.Do(ctx, http.MethodGet, "/v1/users/by-access/"+url.PathEscape(access), nil, &u, true)
}

// CreateS3Bucket creates a bucket with an owner and an ACL document
// (ErrExists if it exists). Tried once.
func (c *Client) CreateS3Bucket(ctx context.Context, name string, req CreateS3Bucket) (Bucket, error) {
	var b Bucket
	if err := ValidBucket(name); err != nil {
		return b, err
	}
	return b, c.Do(ctx, http.MethodPost, "/v1/s3/buckets/"+url.PathEscape(name), req, &b, false)
}

// GetBucket returns a bucket with its owner and ACL.
func (c *Client) GetBucket(ctx context.Context, name string) (Bucket, error) {
	var b Bucket
	if err := ValidBucket(name); err != nil {
		return b, err
	}
	return b, c.Do(ctx, http.MethodGet, "/v1/s3/buckets/"+url.PathEscape(name), nil, &b, true)
}

// PutBucketACL replaces a bucket's ACL document.
func (c *Client) PutBucketACL(ctx context.Context, name string, acl []byte) error {
	if err := ValidBucket(name); err != nil {
		return err
	}
	return c.Do(ctx, http.MethodPut, "/v1/s3/buckets/"+url.PathEscape(name)+"/acl", BucketACL{ACL: acl}, nil, true)
}

// CreateUpload starts a multipart upload. Tried once (a retry would start
// a second upload).
func (c *Client) CreateUpload(ctx context.Context, req CreateUpload) (Upload, error) {
	var u Upload
	return u, c.Do(ctx, http.MethodPost, "/v1/uploads/create", req, &u, false)
}

// CommitPart commits a part (idempotent: the same part again succeeds).
func (c *Client) CommitPart(ctx context.Context, req CommitPart) (Part, error) {
	var p Part
	return p, c.Do(ctx, http.MethodPost, "/v1/uploads/part", req, &p, true)
}

// CompleteUpload completes an upload into its key. Tried once: a retry
// after a lost answer finds the upload gone (ErrNotFound).
func (c *Client) CompleteUpload(ctx context.Context, req CompleteUpload) (KeyInfo, error) {
	var ki KeyInfo
	return ki, c.Do(ctx, http.MethodPost, "/v1/uploads/complete", req, &ki, false)
}

// AbortUpload drops an upload and schedules its parts' blocks for deletion.
func (c *Client) AbortUpload(ctx context.Context, ref UploadRef) error {
	return c.Do(ctx, http.MethodPost, "/v1/uploads/abort", ref, nil, false)
}

// GetUpload returns an upload in progress (ErrNotFound when none).
func (c *Client) GetUpload(ctx context.Context, ref UploadRef) (Upload, error) {
	var u Upload
	return u, c.Do(ctx, http.MethodPost, "/v1/uploads/get", ref, &u, true)
}

// ListParts returns a page of an upload's parts.
func (c *Client) ListParts(ctx context.Context, req ListParts) (PartList, error) {
	var l PartList
	return l, c.Do(ctx, http.MethodPost, "/v1/uploads/parts", req, &l, true)
}

// ListUploads returns a page of a bucket's uploads in progress.
func (c *Client) ListUploads(ctx context.Context, req ListUploads) (UploadList, error) {
	var l UploadList
	return l, c.Do(ctx, http.MethodPost, "/v1/uploads/list", req, &l, true)
}
