// Package s3ver is the S3 gateway's (internal/s3gw) side of object
// versions (issue 35): the bucket versioning calls (Bucket, embedded in
// s3gw.Backend), and the helpers the gateway's object calls use to read,
// delete and list versions through the meta service (package
// metaapi/versionapi), with S3's errors and response shapes.
//
// Invariants: the meta service decides everything (which version a
// write makes, what a delete removes); the gateway only passes version
// IDs through and shapes the answers. A version ID is shown only for a
// bucket that has been versioned (KeyInfo.VersionID empty otherwise), as
// S3 does.
//
// Caching: a Bucket with a Cache answers GetBucketVersioning from it for
// the cache's TTL (versitygw asks on every PUT and DELETE, for its
// object-lock check: auth.CheckObjectAccess); its own
// PutBucketVersioning drops the entry, and the gateway drops it when it
// creates or deletes the bucket. Another gateway's change applies within
// the TTL; the meta service, which decides every write, is not misled.
//
// Concurrency: no state but the Doer and the Cache; safe for concurrent
// use when the Doer is (metaapi.Client is).
package s3ver

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3extra"
)

// Bucket is the bucket versioning half of versitygw's backend.Backend.
type Bucket struct {
	Meta versionapi.Doer
	// ToS3 turns a meta service error into an S3 one (s3gw's toS3), with
	// the code of a NOT_FOUND without a reason.
	ToS3 func(err error, notFound s3err.ErrorCode) error
	// Cache, when set, holds buckets' versioning status (nil: never
	// versioned).
	Cache *s3extra.DocCache
}

// PutBucketVersioning sets a bucket's versioning (Enabled, Suspended).
func (v Bucket) PutBucketVersioning(ctx context.Context, bucket string, status types.BucketVersioningStatus) error {
	defer v.Cache.Drop(bucket)
	err := versionapi.SetState(ctx, v.Meta, bucket, string(status))
	if errors.Is(err, metaapi.ErrPrecondition) { // object lock: no suspending
		return s3err.GetAPIError(s3err.ErrSuspendedVersioningNotAllowed)
	}
	return v.ToS3(err, s3err.ErrNoSuchBucket)
}

// GetBucketVersioning answers a bucket's versioning (no Status: never
// versioned).
func (v Bucket) GetBucketVersioning(ctx context.Context, bucket string) (s3response.GetBucketVersioningOutput, error) {
	doc, err := v.Cache.Fetch(bucket, func() ([]byte, error) {
		st, err := versionapi.GetState(ctx, v.Meta, bucket)
		if err != nil || st == "" {
			return nil, err
		}
		return []byte(st), nil
	})
	if err != nil {
		return s3response.GetBucketVersioningOutput{}, v.ToS3(err, s3err.ErrNoSuchBucket)
	}
	st := string(doc)
	var out s3response.GetBucketVersioningOutput
	if st != "" {
		s := types.BucketVersioningStatus(st)
		out.Status = &s
	}
	return out, nil
}

// NotEmpty is DeleteBucket's refusal of a bucket that holds keys or
// versions: S3's message for a bucket ever versioned names its versions.
func (v Bucket) NotEmpty(ctx context.Context, bucket string) error {
	if st, err := versionapi.GetState(ctx, v.Meta, bucket); err == nil && st != "" {
		return s3err.GetAPIError(s3err.ErrVersionedBucketNotEmpty)
	}
	return s3err.GetAPIError(s3err.ErrBucketNotEmpty)
}

// Get reads one version of a key for a GET, HEAD or copy: NoSuchVersion
// when there is none, MethodNotAllowed for a delete marker (with the
// marker's details, as S3 answers), InvalidArgument for a malformed ID.
func (v Bucket) Get(ctx context.Context, bucket, key, versionID string) (metaapi.KeyInfo, error) {
	ver, err := versionapi.Get(ctx, v.Meta, versionapi.Ref{Bucket: bucket, Key: key, VersionID: versionID})
	switch {
	case errors.Is(err, metaapi.ErrNoSuchBucket):
		return metaapi.KeyInfo{}, s3err.GetAPIError(s3err.ErrNoSuchBucket)
	case errors.Is(err, metaapi.ErrInvalid):
		return metaapi.KeyInfo{}, s3err.GetInvalidArgumentErr(s3err.InvalidArgVersionId, versionID)
	case errors.Is(err, metaapi.ErrNotFound):
		return metaapi.KeyInfo{}, s3err.GetNoSuchVersionErr(key, versionID)
	case err != nil:
		return metaapi.KeyInfo{}, v.ToS3(err, s3err.ErrNoSuchVersion)
	case ver.DeleteMarker:
		return metaapi.KeyInfo{}, s3err.GetAPIError(s3err.ErrMethodNotAllowed)
	}
	return ver.KeyInfo, nil
}

// NoMarker is what GetObjectAttributes answers for err: NoSuchKey where
// Get found a delete marker (MethodNotAllowed for a GET or HEAD).
func NoMarker(err error) error {
	var ae s3err.APIError
	if errors.As(err, &ae) && ae.Code == s3err.GetAPIError(s3err.ErrMethodNotAllowed).Code {
		return s3err.GetAPIError(s3err.ErrNoSuchKey)
	}
	return err
}

// SetTags replaces the tag set (tagging in s3meta.EncodeTags's form, ""
// removes it) of the version versionID names, current or noncurrent, as
// S3's Put/DeleteObjectTagging with a versionId: NoSuchVersion when there
// is none, MethodNotAllowed for a delete marker (versionID "": the
// current version's tags).
func (v Bucket) SetTags(ctx context.Context, bucket, key, versionID, tagging string) error {
	if versionID != "" {
		if _, err := v.Get(ctx, bucket, key, versionID); err != nil {
			return err
		}
	}
	err := s3meta.PutVersionTagging(ctx, v.Meta, bucket, key, versionID, tagging)
	switch {
	case versionID == "":
	case errors.Is(err, metaapi.ErrNoSuchBucket):
	case errors.Is(err, metaapi.ErrNotFound): // removed since Get
		return s3err.GetNoSuchVersionErr(key, versionID)
	case errors.Is(err, metaapi.ErrInvalid): // a delete marker now (Get saw a version)
		return s3err.GetAPIError(s3err.ErrMethodNotAllowed)
	}
	return v.ToS3(err, s3err.ErrNoSuchKey)
}

// Delete deletes as S3's DeleteObject: a missing key or version is no
// error; the answer names the version made (a delete marker) or removed.
// bypass asks to bypass a GOVERNANCE retention (x-amz-bypass-governance-
// retention): a locked version is refused (AccessDenied) otherwise.
func (v Bucket) Delete(ctx context.Context, bucket, key, versionID string, bypass bool) (*s3.DeleteObjectOutput, error) {
	d, err := versionapi.Delete(ctx, v.Meta, versionapi.Ref{Bucket: bucket, Key: key, VersionID: versionID, Bypass: bypass})
	switch {
	case errors.Is(err, metaapi.ErrNoSuchKey): // a bucket never versioned
		return &s3.DeleteObjectOutput{}, nil
	case errors.Is(err, metaapi.ErrInvalid) && versionID != "":
		return nil, s3err.GetInvalidArgumentErr(s3err.InvalidArgVersionId, versionID)
	case errors.Is(err, metaapi.ErrNotEmpty), errors.Is(err, metaapi.ErrNoSuchBucket):
		return nil, v.ToS3(err, s3err.ErrNoSuchBucket)
	case err != nil:
		return nil, v.ToS3(err, s3err.ErrNoSuchKey)
	}
	out := &s3.DeleteObjectOutput{VersionId: nilIfEmpty(d.VersionID)}
	if d.DeleteMarker {
		out.DeleteMarker = &d.DeleteMarker
	}
	return out, nil
}

// List is ListObjectVersions: a page of the bucket's versions with S3's
// markers; enc writes key names (encoding-type url or as they are).
func (v Bucket) List(ctx context.Context, in *s3.ListObjectVersionsInput, maxKeys int32, owner *types.Owner, enc func(*string) *string) (s3response.ListVersionsResult, error) {
	res := s3response.ListVersionsResult{
		Name: in.Bucket, Prefix: enc(nilIfEmpty(deref(in.Prefix))), KeyMarker: enc(nilIfEmpty(deref(in.KeyMarker))),
		VersionIdMarker: nilIfEmpty(deref(in.VersionIdMarker)), MaxKeys: &maxKeys, Delimiter: enc(nilIfEmpty(deref(in.Delimiter))),
		EncodingType: in.EncodingType, IsTruncated: new(bool),
	}
	if maxKeys <= 0 {
		_, err := versionapi.GetState(ctx, v.Meta, deref(in.Bucket))
		return res, v.ToS3(err, s3err.ErrNoSuchBucket)
	}
	l, err := versionapi.ListVersions(ctx, v.Meta, deref(in.Bucket), versionapi.ListOptions{Prefix: deref(in.Prefix), Delimiter: deref(in.Delimiter),
		KeyMarker: deref(in.KeyMarker), VersionIDMarker: deref(in.VersionIdMarker), Limit: int(min(maxKeys, metaapi.MaxListLimit))})
	if errors.Is(err, metaapi.ErrInvalid) && deref(in.VersionIdMarker) != "" {
		return res, s3err.GetInvalidArgumentErr(s3err.InvalidArgVersionId, deref(in.VersionIdMarker))
	}
	if err != nil {
		return res, v.ToS3(err, s3err.ErrNoSuchBucket)
	}
	for _, ver := range l.Versions {
		key, id, mod, latest := enc(&ver.Key), &ver.VersionID, ver.Created, ver.IsLatest
		if ver.DeleteMarker {
			res.DeleteMarkers = append(res.DeleteMarkers, types.DeleteMarkerEntry{Key: key, VersionId: id, LastModified: &mod, IsLatest: &latest, Owner: owner})
			continue
		}
		size := int64(ver.Size)
		res.Versions = append(res.Versions, s3response.ObjectVersion{Key: key, VersionId: id, LastModified: &mod, IsLatest: &latest, Owner: owner,
			ETag: ptr(ETag(&ver.KeyInfo)), Size: &size, StorageClass: types.ObjectVersionStorageClassStandard, ChecksumType: types.ChecksumTypeFullObject,
			ChecksumAlgorithm: []types.ChecksumAlgorithm{algorithm(&ver.KeyInfo)}})
	}
	for _, cp := range l.CommonPrefixes {
		res.CommonPrefixes = append(res.CommonPrefixes, types.CommonPrefix{Prefix: enc(&cp)})
	}
	if l.Truncated {
		*res.IsTruncated = true
		res.NextKeyMarker = enc(nilIfEmpty(l.NextKeyMarker))
		res.NextVersionIdMarker = nilIfEmpty(l.NextVersionIDMarker)
	}
	return res, nil
}

// algorithm is the checksum a listing names for a version: the client's,
// when it sent one, else the CRC32C every key has.
func algorithm(ki *metaapi.KeyInfo) types.ChecksumAlgorithm {
	if ki.Object != nil {
		for _, a := range slices.Sorted(maps.Keys(ki.Object.Checksums)) {
			return types.ChecksumAlgorithm(a)
		}
	}
	return types.ChecksumAlgorithmCrc32c
}

// ETag is a version's ETag as S3 writes it (quoted): its stored MD5 (or
// multipart ETag), else its CRC32C (a key written outside S3).
func ETag(ki *metaapi.KeyInfo) string {
	if ki.Object != nil && ki.Object.ETag != "" {
		return `"` + ki.Object.ETag + `"`
	}
	return `"crc32c-` + hex8(ki.CRC32C) + `"`
}

func hex8(v uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func ptr[T any](v T) *T { return &v }
