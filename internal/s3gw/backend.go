package s3gw

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/md5batch"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3extra"
	"github.com/spindle-store/spindle/internal/s3gw/s3lock"
	"github.com/spindle-store/spindle/internal/s3gw/s3ver"
	"github.com/spindle-store/spindle/internal/s3perm"
	"github.com/spindle-store/spindle/internal/s3permapi"
)

// Backend is versitygw's backend.Backend over Spindle (see the package
// comment). Operations it does not implement answer NotImplemented.
type Backend struct {
	perms    // bucket ACLs, policies, ownership, object ACLs (perms.go)
	features // tagging, CORS (features.go)
	s3ver.Bucket
	s3lock.Lock
	meta   *metaapi.Client
	kc     *keyclient.Client
	region string
	// md5s hashes the ETags of every PUT, part and copy, batched.
	md5s *md5batch.Batcher
}

var _ backend.Backend = (*Backend)(nil)

// NewBackend returns the backend over the meta service behind mc and the
// key client kc (which must use mc as its Meta).
// The bucket permissions it caches are pc's (shared with the IAM).
func NewBackend(mc *metaapi.Client, kc *keyclient.Client, region string, pc *PermCache) *Backend {
	return &Backend{perms: perms{meta: mc, cache: pc}, meta: mc, kc: kc, region: region, md5s: md5batch.New(),
		features: features{meta: mc, cors: s3extra.NewDocCache(ACLCacheTTL, ACLCacheMaxEntries)}, Bucket: s3ver.Bucket{Meta: mc, ToS3: toS3, Cache: s3extra.NewDocCache(ACLCacheTTL, ACLCacheMaxEntries)},
		Lock: s3lock.Lock{Meta: mc, ToS3: toS3, Cache: s3extra.NewDocCache(ACLCacheTTL, ACLCacheMaxEntries)}}
}

// dropConf forgets a bucket's cached versioning and object-lock
// configuration (it was created or deleted here).
func (b *Backend) dropConf(bucket string) {
	b.Bucket.Cache.Drop(bucket)
	b.Lock.Cache.Drop(bucket)
}

// String names the backend in versitygw's banner.
func (b *Backend) String() string { return "Spindle" }

// ListBuckets lists the buckets the caller owns or holds a grant on (all
// of them for the root user). The meta service keeps those of the user
// the call names; the gateway checks again (its certificate may be one
// that sees every bucket).
func (b *Backend) ListBuckets(ctx context.Context, in s3response.ListBucketsInput) (s3response.ListAllMyBucketsResult, error) {
	l, err := b.meta.ListBuckets(ctx)
	if err != nil {
		return s3response.ListAllMyBucketsResult{}, toS3(err, s3err.ErrNoSuchBucket)
	}
	res := s3response.ListAllMyBucketsResult{Owner: s3response.CanonicalUser{ID: in.Owner}, Prefix: in.Prefix}
	for _, bk := range l.Buckets {
		if !in.IsAdmin && bk.Owner != in.Owner && !b.granted(ctx, bk.Name, in.Owner) {
			continue
		}
		if in.Prefix != "" && !strings.HasPrefix(bk.Name, in.Prefix) || bk.Name <= in.ContinuationToken {
			continue
		}
		if in.MaxBuckets > 0 && len(res.Buckets.Bucket) == int(in.MaxBuckets) {
			// more follow: the token is the last name returned (names are sorted)
			res.ContinuationToken = res.Buckets.Bucket[len(res.Buckets.Bucket)-1].Name
			break
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

// CreateBucket creates a bucket owned by the ACL's owner (the caller).
func (b *Backend) CreateBucket(ctx context.Context, in *s3.CreateBucketInput, defaultACL []byte) error {
	name := deref(in.Bucket)
	b.cache.drop(name)
	defer b.dropConf(name)
	acl, err := auth.ParseACL(defaultACL)
	if err != nil {
		return err
	}
	tags, err := s3extra.CreateTags(in)
	if err != nil {
		return err
	}
	ownership := string(in.ObjectOwnership)
	if ownership == "" {
		ownership = s3perm.OwnerEnforced
	}
	_, err = s3permapi.Create(ctx, b.meta, name, s3permapi.CreateBucket{CreateS3Bucket: metaapi.CreateS3Bucket{Owner: acl.Owner, ACL: defaultACL}, Ownership: ownership})
	if errors.Is(err, metaapi.ErrExists) {
		if bk, gerr := b.meta.GetBucket(ctx, name); gerr == nil && bk.Owner == acl.Owner {
			return s3err.GetAPIError(s3err.ErrBucketAlreadyOwnedByYou)
		}
		return s3err.GetAPIError(s3err.ErrBucketAlreadyExists)
	}
	if errors.Is(err, metaapi.ErrInvalid) {
		return s3err.GetBucketErr(s3err.ErrInvalidBucketName, name)
	}
	if err != nil {
		return toS3(err, s3err.ErrNoSuchBucket)
	}
	if err := b.EnableAtCreate(ctx, name, in.ObjectLockEnabledForBucket); err != nil { // s3lock
		return err
	}
	if len(tags) > 0 { // S3 tags the bucket as it creates it; here just after
		return b.PutBucketTagging(ctx, name, tags)
	}
	return nil
}

// ChangeBucketOwner gives a bucket to another user (admin API).
func (b *Backend) ChangeBucketOwner(ctx context.Context, bucket, owner string) error {
	acl, err := json.Marshal(auth.ACL{Owner: owner})
	if err != nil {
		return err
	}
	defer b.cache.drop(bucket)
	return bucketErr(b.meta.PutBucketACL(ctx, bucket, acl))
}

// DeleteBucket deletes an empty bucket.
func (b *Backend) DeleteBucket(ctx context.Context, bucket string) error {
	defer b.cache.drop(bucket)
	defer b.cors.Drop(bucket)
	defer b.dropConf(bucket)
	err := b.meta.DeleteBucket(ctx, bucket)
	if errors.Is(err, metaapi.ErrNotFound) {
		return s3err.GetAPIError(s3err.ErrNoSuchBucket)
	}
	if errors.Is(err, metaapi.ErrNotEmpty) {
		return b.NotEmpty(ctx, bucket) // s3ver: S3's message for a versioned bucket
	}
	return toS3(err, s3err.ErrNoSuchBucket)
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
func etagOf(ki *metaapi.KeyInfo) string { return s3ver.ETag(ki) }

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
	crc32, crc32c, crc64nvme, sha1, sha256    *string
	sha512, md5, xxhash64, xxhash3, xxhash128 *string
	typ                                       types.ChecksumType
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
		case types.ChecksumAlgorithmSha512:
			c.sha512 = ptr(v)
		case types.ChecksumAlgorithmMd5:
			c.md5 = ptr(v)
		case types.ChecksumAlgorithmXxhash64:
			c.xxhash64 = ptr(v)
		case types.ChecksumAlgorithmXxhash3:
			c.xxhash3 = ptr(v)
		case types.ChecksumAlgorithmXxhash128:
			c.xxhash128 = ptr(v)
		}
	}
	return c
}
