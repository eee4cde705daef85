package s3gw

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Backend is versitygw's backend.Backend over Spindle (see the package
// comment). Operations it does not implement answer NotImplemented.
type Backend struct {
	backend.BackendUnsupported
	meta   *metaapi.Client
	kc     *keyclient.Client
	region string
}

var _ backend.Backend = (*Backend)(nil)

// NewBackend returns the backend over the meta service behind mc and the
// key client kc (which must use mc as its Meta).
func NewBackend(mc *metaapi.Client, kc *keyclient.Client, region string) *Backend {
	return &Backend{meta: mc, kc: kc, region: region}
}

// String names the backend in versitygw's banner.
func (b *Backend) String() string { return "Spindle" }

// ListBuckets lists the buckets the caller owns (all of them for an admin).
func (b *Backend) ListBuckets(ctx context.Context, in s3response.ListBucketsInput) (s3response.ListAllMyBucketsResult, error) {
	l, err := b.meta.ListBuckets(ctx)
	if err != nil {
		return s3response.ListAllMyBucketsResult{}, toS3(err, s3err.ErrNoSuchBucket)
	}
	res := s3response.ListAllMyBucketsResult{Owner: s3response.CanonicalUser{ID: in.Owner}, Prefix: in.Prefix}
	for _, bk := range l.Buckets {
		if !in.IsAdmin && bk.Owner != in.Owner {
			continue
		}
		if in.Prefix != "" && !strings.HasPrefix(bk.Name, in.Prefix) {
			continue
		}
		res.Buckets.Bucket = append(res.Buckets.Bucket, s3response.ListAllMyBucketsEntry{Name: bk.Name, BucketRegion: b.region, CreationDate: bk.Created})
	}
	return res, nil
}

// ListBucketsAndOwners lists every bucket with its owner (admin API).
func (b *Backend) ListBucketsAndOwners(ctx context.Context) ([]s3response.Bucket, error) {
	l, err := b.meta.ListBuckets(ctx)
	if err != nil {
		return nil, toS3(err, s3err.ErrNoSuchBucket)
	}
	out := make([]s3response.Bucket, 0, len(l.Buckets))
	for _, bk := range l.Buckets {
		out = append(out, s3response.Bucket{Name: bk.Name, Owner: bk.Owner})
	}
	return out, nil
}

// HeadBucket answers whether the bucket exists.
func (b *Backend) HeadBucket(ctx context.Context, in *s3.HeadBucketInput) (*s3.HeadBucketOutput, error) {
	if _, err := b.meta.GetBucket(ctx, deref(in.Bucket)); err != nil {
		return nil, bucketErr(err)
	}
	region := b.region
	return &s3.HeadBucketOutput{BucketRegion: &region}, nil
}

func bucketErr(err error) error {
	if errors.Is(err, metaapi.ErrNotFound) || errors.Is(err, metaapi.ErrInvalid) {
		return s3err.GetAPIError(s3err.ErrNoSuchBucket)
	}
	return toS3(err, s3err.ErrNoSuchBucket)
}

// GetBucketAcl returns the ACL document stored with the bucket (one with
// just its owner when none was stored).
func (b *Backend) GetBucketAcl(ctx context.Context, in *s3.GetBucketAclInput) ([]byte, error) {
	bk, err := b.meta.GetBucket(ctx, deref(in.Bucket))
	if err != nil {
		return nil, bucketErr(err)
	}
	if len(bk.ACL) > 0 {
		return bk.ACL, nil
	}
	return json.Marshal(auth.ACL{Owner: bk.Owner})
}

// CreateBucket creates a bucket owned by the ACL's owner (the caller).
func (b *Backend) CreateBucket(ctx context.Context, in *s3.CreateBucketInput, defaultACL []byte) error {
	name := deref(in.Bucket)
	acl, err := auth.ParseACL(defaultACL)
	if err != nil {
		return err
	}
	_, err = b.meta.CreateS3Bucket(ctx, name, metaapi.CreateS3Bucket{Owner: acl.Owner, ACL: defaultACL})
	if errors.Is(err, metaapi.ErrExists) {
		if bk, gerr := b.meta.GetBucket(ctx, name); gerr == nil && bk.Owner == acl.Owner {
			return s3err.GetAPIError(s3err.ErrBucketAlreadyOwnedByYou)
		}
		return s3err.GetAPIError(s3err.ErrBucketAlreadyExists)
	}
	if errors.Is(err, metaapi.ErrInvalid) {
		return s3err.GetBucketErr(s3err.ErrInvalidBucketName, name)
	}
	return toS3(err, s3err.ErrNoSuchBucket)
}

// PutBucketAcl replaces the bucket's ACL document.
func (b *Backend) PutBucketAcl(ctx context.Context, bucket string, data []byte) error {
	return bucketErr(b.meta.PutBucketACL(ctx, bucket, data))
}

// ChangeBucketOwner gives a bucket to another user (admin API).
func (b *Backend) ChangeBucketOwner(ctx context.Context, bucket, owner string) error {
	acl, err := json.Marshal(auth.ACL{Owner: owner})
	if err != nil {
		return err
	}
	return bucketErr(b.meta.PutBucketACL(ctx, bucket, acl))
}

// DeleteBucket deletes an empty bucket.
func (b *Backend) DeleteBucket(ctx context.Context, bucket string) error {
	err := b.meta.DeleteBucket(ctx, bucket)
	if errors.Is(err, metaapi.ErrNotFound) {
		return s3err.GetAPIError(s3err.ErrNoSuchBucket)
	}
	return toS3(err, s3err.ErrNoSuchBucket)
}

// The bucket features Spindle does not have answer "not configured", so
// that versitygw's access checks (which ask for them) go on.

// GetBucketVersioning: buckets are unversioned.
func (b *Backend) GetBucketVersioning(ctx context.Context, bucket string) (s3response.GetBucketVersioningOutput, error) {
	if _, err := b.meta.GetBucket(ctx, bucket); err != nil {
		return s3response.GetBucketVersioningOutput{}, bucketErr(err)
	}
	return s3response.GetBucketVersioningOutput{}, nil
}

// GetBucketPolicy: no bucket policies.
func (b *Backend) GetBucketPolicy(context.Context, string) ([]byte, error) {
	return nil, s3err.GetAPIError(s3err.ErrNoSuchBucketPolicy)
}

// DeleteBucketPolicy: there is none to delete.
func (b *Backend) DeleteBucketPolicy(context.Context, string) error { return nil }

// GetObjectLockConfiguration: no object lock.
func (b *Backend) GetObjectLockConfiguration(context.Context, string) ([]byte, error) {
	return nil, s3err.GetAPIError(s3err.ErrObjectLockConfigurationNotFound)
}

// GetBucketCors: no CORS configuration.
func (b *Backend) GetBucketCors(context.Context, string) ([]byte, error) {
	return nil, s3err.GetAPIError(s3err.ErrNoSuchCORSConfiguration)
}

// GetBucketTagging: no tags.
func (b *Backend) GetBucketTagging(context.Context, string) (map[string]string, error) {
	return nil, s3err.GetAPIError(s3err.ErrBucketTaggingNotFound)
}

// GetObjectTagging: objects carry no tags.
func (b *Backend) GetObjectTagging(ctx context.Context, bucket, object, _ string) (map[string]string, error) {
	if _, err := b.meta.GetKey(ctx, bucket, object); err != nil {
		return nil, toS3(err, s3err.ErrNoSuchKey)
	}
	return map[string]string{}, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// crcBase64 is a CRC32C as S3 writes it: base64 of its 4 big-endian bytes.
func crcBase64(c uint32) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, c))
}

// etagOf is a key's ETag, quoted: its stored MD5 (or multipart ETag); for
// a key put outside S3 (no object metadata), its CRC32C.
func etagOf(ki *metaapi.KeyInfo) string {
	if ki.Object != nil && ki.Object.ETag != "" {
		return `"` + ki.Object.ETag + `"`
	}
	return fmt.Sprintf(`"crc32c-%08x"`, ki.CRC32C)
}

// contentType is the stored Content-Type or S3's default.
func contentType(ki *metaapi.KeyInfo) string {
	if ki.Object != nil && ki.Object.ContentType != "" {
		return ki.Object.ContentType
	}
	return "binary/octet-stream"
}

// header returns a stored standard header (nil when absent).
func header(ki *metaapi.KeyInfo, name string) *string {
	if ki.Object == nil {
		return nil
	}
	if v, ok := ki.Object.Headers[http.CanonicalHeaderKey(name)]; ok && v != "" {
		return &v
	}
	return nil
}

// checksums is what a whole-object GET or HEAD with ChecksumMode answers:
// the stored client checksum and the key's CRC32C.
type checksums struct {
	crc32, crc32c, crc64nvme, sha1, sha256 *string
	typ                                    types.ChecksumType
}

func checksumsOf(ki *metaapi.KeyInfo) checksums {
	var c checksums
	c.typ = types.ChecksumTypeFullObject
	c.crc32c = ptr(crcBase64(ki.CRC32C))
	if ki.Object == nil {
		return c
	}
	for algo, v := range ki.Object.Checksums {
		if v == "" {
			continue
		}
		switch types.ChecksumAlgorithm(algo) {
		case types.ChecksumAlgorithmCrc32:
			c.crc32 = ptr(v)
		case types.ChecksumAlgorithmCrc64nvme:
			c.crc64nvme = ptr(v)
		case types.ChecksumAlgorithmSha1:
			c.sha1 = ptr(v)
		case types.ChecksumAlgorithmSha256:
			c.sha256 = ptr(v)
		}
	}
	return c
}
