package s3gw

import (
	"context"
	"errors"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3extra"
	"github.com/spindle-store/spindle/internal/s3gw/s3lock"
)

// uploadErr maps a NOT_FOUND to NoSuchUpload (unless about the bucket).
func uploadErr(err error) error { return toS3(err, s3err.ErrNoSuchUpload) }

// CreateMultipartUpload starts an upload; what the object will carry
// (Content-Type, headers, user metadata) is kept with it.
func (b *Backend) CreateMultipartUpload(ctx context.Context, in s3response.CreateMultipartUploadInput) (s3response.InitiateMultipartUploadResult, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	if err := keyErr(key); err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	om := &metaapi.ObjectMeta{
		ContentType: deref(in.ContentType),
		Headers:     standardHeaders(in.ContentEncoding, in.ContentDisposition, in.ContentLanguage, in.CacheControl, in.Expires, in.WebsiteRedirectLocation),
		UserMeta:    userMetaIn(in.Metadata),
	}
	if in.ChecksumAlgorithm != "" {
		om.Checksums = map[string]string{string(in.ChecksumAlgorithm): ""}
	}
	acl, err := b.objectACLFor(ctx, bucket)
	if err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	om.Headers = withObjectACL(om.Headers, acl)
	if om.Headers, err = s3extra.WithTags(om.Headers, in.Tagging); err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	om.Headers = s3lock.Request(om.Headers, in.ObjectLockMode, in.ObjectLockRetainUntilDate, in.ObjectLockLegalHoldStatus)
	up, err := b.meta.CreateUpload(ctx, metaapi.CreateUpload{Bucket: bucket, Key: key, Object: om})
	if err != nil {
		return s3response.InitiateMultipartUploadResult{}, toS3(err, s3err.ErrNoSuchBucket)
	}
	return s3response.InitiateMultipartUploadResult{Bucket: bucket, Key: key, UploadId: up.UploadID}, nil
}

func uploadRef(bucket, key, id *string) metaapi.UploadRef {
	return metaapi.UploadRef{Bucket: deref(bucket), Key: deref(key), UploadID: deref(id)}
}

// UploadPart streams a part into blocks of the upload's key and commits
// them as the part.
func (b *Backend) UploadPart(ctx context.Context, in *s3.UploadPartInput) (*s3.UploadPartOutput, error) {
	ref := uploadRef(in.Bucket, in.Key, in.UploadId)
	n := int32(0)
	if in.PartNumber != nil {
		n = *in.PartNumber
	}
	if n < 1 || n > metaapi.MaxParts {
		return nil, s3err.GetAPIError(s3err.ErrInvalidPartNumberRange)
	}
	if in.ContentLength != nil && *in.ContentLength > MaxObjectBytes {
		return nil, s3err.GetAPIError(s3err.ErrEntityTooLarge)
	}
	if _, err := b.meta.GetUpload(ctx, ref); err != nil { // refuse before reading the body
		return nil, uploadErr(err)
	}
	chk, err := newBodyCheck(b.md5s, in.Body, checksumHeaders{
		types.ChecksumAlgorithmCrc32: in.ChecksumCRC32, types.ChecksumAlgorithmCrc32c: in.ChecksumCRC32C,
		types.ChecksumAlgorithmCrc64nvme: in.ChecksumCRC64NVME, types.ChecksumAlgorithmSha1: in.ChecksumSHA1,
		types.ChecksumAlgorithmSha256: in.ChecksumSHA256, types.ChecksumAlgorithmSha512: in.ChecksumSHA512,
		types.ChecksumAlgorithmMd5: in.ChecksumMD5, types.ChecksumAlgorithmXxhash64: in.ChecksumXXHASH64,
		types.ChecksumAlgorithmXxhash3: in.ChecksumXXHASH3, types.ChecksumAlgorithmXxhash128: in.ChecksumXXHASH128}, in.ChecksumAlgorithm)
	if err != nil {
		return nil, err
	}
	defer chk.hr.wait() // the key client's buffers are not read after the put
	var part metaapi.Part
	_, err = b.kc.Put(ctx, ref.Bucket, ref.Key, chk.r, keyclient.PutOptions{
		NoInline:      true, // a part's record holds blocks only
		SizeHintBytes: aws.ToInt64(in.ContentLength),
		Commit: func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
			if err := chk.verify(ck.CRC32C); err != nil {
				return metaapi.KeyInfo{}, err
			}
			var err error
			part, err = b.meta.CommitPart(ctx, metaapi.CommitPart{UploadRef: ref, Number: uint32(n), Size: ck.Size,
				Blocks: ck.Blocks, CRC32C: ck.CRC32C, ETag: chk.etag(), Checksums: chk.checksums()})
			return metaapi.KeyInfo{Bucket: ref.Bucket, Key: ref.Key, Size: ck.Size, CRC32C: ck.CRC32C}, err
		},
	})
	if err != nil {
		return nil, uploadErr(err)
	}
	cs := checksumsOut(part.Checksums, part.CRC32C)
	return &s3.UploadPartOutput{ETag: ptr(`"` + part.ETag + `"`), ChecksumCRC32: cs.crc32, ChecksumCRC32C: cs.crc32c,
		ChecksumCRC64NVME: cs.crc64nvme, ChecksumSHA1: cs.sha1, ChecksumSHA256: cs.sha256, ChecksumSHA512: cs.sha512,
		ChecksumMD5: cs.md5, ChecksumXXHASH64: cs.xxhash64, ChecksumXXHASH3: cs.xxhash3, ChecksumXXHASH128: cs.xxhash128}, nil
}

// UploadPartCopy streams a range of a key into a part.
func (b *Backend) UploadPartCopy(ctx context.Context, in *s3.UploadPartCopyInput) (s3response.CopyPartResult, error) {
	ref := uploadRef(in.Bucket, in.Key, in.UploadId)
	n := int32(0)
	if in.PartNumber != nil {
		n = *in.PartNumber
	}
	if n < 1 || n > metaapi.MaxParts {
		return s3response.CopyPartResult{}, s3err.GetAPIError(s3err.ErrInvalidPartNumberRange)
	}
	if _, err := b.meta.GetUpload(ctx, ref); err != nil {
		return s3response.CopyPartResult{}, uploadErr(err)
	}
	srcBucket, srcKey, srcVersion, err := backend.ParseCopySource(deref(in.CopySource))
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	src, err := b.lookup(ctx, srcBucket, srcKey, &srcVersion)
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	if err := copyPreconditions(&src, in.CopySourceIfMatch, in.CopySourceIfNoneMatch, in.CopySourceIfModifiedSince, in.CopySourceIfUnmodifiedSince); err != nil {
		return s3response.CopyPartResult{}, err
	}
	offset, length := int64(0), int64(src.Size)
	if r := deref(in.CopySourceRange); r != "" {
		if offset, length, err = backend.ParseCopySourceRange(int64(src.Size), r); err != nil {
			return s3response.CopyPartResult{}, err
		}
	}
	var part metaapi.Part
	_, err = b.copyInto(ctx, src, offset, length, ref.Bucket, ref.Key, true, func(ctx context.Context, ck metaapi.CommitKey, etag string) (metaapi.KeyInfo, error) {
		var err error
		part, err = b.meta.CommitPart(ctx, metaapi.CommitPart{UploadRef: ref, Number: uint32(n), Size: ck.Size, Blocks: ck.Blocks, CRC32C: ck.CRC32C, ETag: etag})
		return metaapi.KeyInfo{Bucket: ref.Bucket, Key: ref.Key, Size: ck.Size, CRC32C: ck.CRC32C}, err
	})
	if err != nil {
		return s3response.CopyPartResult{}, uploadErr(err)
	}
	return s3response.CopyPartResult{LastModified: part.Modified, ETag: ptr(`"` + part.ETag + `"`), ChecksumCRC32C: ptr(crcBase64(part.CRC32C)),
		CopySourceVersionId: src.VersionID}, nil
}

// CompleteMultipartUpload makes the key from the listed parts.
func (b *Backend) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput) (s3response.CompleteMultipartUploadResult, string, error) {
	ref := uploadRef(in.Bucket, in.Key, in.UploadId)
	if in.MultipartUpload == nil || len(in.MultipartUpload.Parts) == 0 {
		return s3response.CompleteMultipartUploadResult{}, "", s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	cond, err := s3extra.PutConditions(in.IfMatch, in.IfNoneMatch)
	if err != nil {
		return s3response.CompleteMultipartUploadResult{}, "", err
	}
	req := metaapi.CompleteUpload{UploadRef: ref, Conditions: cond}
	for _, p := range in.MultipartUpload.Parts {
		if p.PartNumber == nil {
			return s3response.CompleteMultipartUploadResult{}, "", s3err.GetAPIError(s3err.ErrInvalidPart)
		}
		if *p.PartNumber < 1 { // S3: InvalidArgument "PartNumber must be >= 1"
			return s3response.CompleteMultipartUploadResult{}, "", s3err.GetInvalidArgumentErr(s3err.InvalidArgCompleteMpPartNumber, strconv.Itoa(int(*p.PartNumber)))
		}
		req.Parts = append(req.Parts, metaapi.CompletePart{Number: uint32(*p.PartNumber), ETag: deref(p.ETag)})
	}
	if in.MpuObjectSize != nil {
		if err := b.checkObjectSize(ctx, ref, req.Parts, *in.MpuObjectSize); err != nil {
			return s3response.CompleteMultipartUploadResult{}, "", err
		}
	}
	ki, err := b.meta.CompleteUpload(ctx, req)
	if errors.Is(err, metaapi.ErrNotFound) {
		// A repeated Complete (its first answer lost, the client retries)
		// finds no upload: if the key is the object these parts made —
		// its ETag is the MD5 of their MD5s — answer it as S3 does.
		if done, ok := b.completedBefore(ctx, ref, req.Parts); ok {
			ki, err = done, nil
		} else if cond != (metaapi.Conditions{}) && errors.Is(err, metaapi.ErrNoSuchUpload) {
			// the upload is gone and the key is there: another request
			// completed it meanwhile
			if _, gerr := b.meta.GetKey(ctx, ref.Bucket, ref.Key); gerr == nil {
				return s3response.CompleteMultipartUploadResult{}, "", s3extra.ErrConditionalConflict
			}
		}
	}
	if err != nil {
		return s3response.CompleteMultipartUploadResult{}, "", uploadErr(err)
	}
	ct := types.ChecksumTypeFullObject
	return s3response.CompleteMultipartUploadResult{
		Bucket: &ref.Bucket, Key: &ref.Key, ETag: ptr(etagOf(&ki)),
		ChecksumCRC32C: ptr(crcBase64(ki.CRC32C)), ChecksumType: &ct,
	}, ki.VersionID, nil
}

// completedBefore is the key ref names when it is the object that
// completing parts made: its ETag is S3's multipart ETag of their ETags.
func (b *Backend) completedBefore(ctx context.Context, ref metaapi.UploadRef, parts []metaapi.CompletePart) (metaapi.KeyInfo, bool) {
	etags := make([]string, len(parts))
	for i, p := range parts {
		etags[i] = p.ETag
	}
	want, err := metaapi.MultipartETag(etags)
	if err != nil {
		return metaapi.KeyInfo{}, false
	}
	ki, err := b.meta.GetKey(ctx, ref.Bucket, ref.Key)
	if err != nil || ki.Object == nil || ki.Object.ETag != want {
		return metaapi.KeyInfo{}, false
	}
	return ki, true
}

// checkObjectSize refuses a completion whose x-amz-mp-object-size is not
// the listed parts' total, before anything is committed.
func (b *Backend) checkObjectSize(ctx context.Context, ref metaapi.UploadRef, parts []metaapi.CompletePart, want int64) error {
	if want < 0 {
		return s3err.GetNegatvieMpObjectSizeErr(want)
	}
	listed := make(map[uint32]bool, len(parts))
	for _, p := range parts {
		listed[p.Number] = true
	}
	var total int64
	var after uint32
	for range metaapi.MaxParts/metaapi.MaxUploadPage + 1 { // bounded: every page of up to MaxParts parts
		l, err := b.meta.ListParts(ctx, metaapi.ListParts{UploadRef: ref, After: after, Limit: metaapi.MaxUploadPage})
		if err != nil {
			return uploadErr(err)
		}
		for _, p := range l.Parts {
			if listed[p.Number] {
				total += int64(p.Size)
			}
		}
		if l.Next == 0 {
			break
		}
		after = l.Next
	}
	if total != want {
		// The message as S3 words it (versitygw's suite checks it).
		return s3err.GetIncorrectMpObjectSizeErr(total, want)
	}
	return nil
}

// AbortMultipartUpload drops an upload and its parts.
func (b *Backend) AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput) error {
	return uploadErr(b.meta.AbortUpload(ctx, uploadRef(in.Bucket, in.Key, in.UploadId)))
}

// ListParts answers a page of an upload's parts.
func (b *Backend) ListParts(ctx context.Context, in *s3.ListPartsInput) (s3response.ListPartsResult, error) {
	ref := uploadRef(in.Bucket, in.Key, in.UploadId)
	after := 0
	if m := deref(in.PartNumberMarker); m != "" {
		v, err := strconv.Atoi(m)
		if err != nil || v < 0 {
			return s3response.ListPartsResult{}, s3err.GetAPIError(s3err.ErrInvalidRequest)
		}
		after = v
	}
	limit := metaapi.MaxUploadPage
	if in.MaxParts != nil && *in.MaxParts >= 0 && int(*in.MaxParts) < limit {
		limit = int(*in.MaxParts)
	}
	res := s3response.ListPartsResult{Bucket: ref.Bucket, Key: ref.Key, UploadID: ref.UploadID, PartNumberMarker: after,
		MaxParts: limit, StorageClass: types.StorageClassStandard}
	if limit == 0 {
		return res, nil
	}
	l, err := b.meta.ListParts(ctx, metaapi.ListParts{UploadRef: ref, After: uint32(after), Limit: limit})
	if err != nil {
		return res, uploadErr(err)
	}
	for _, p := range l.Parts {
		cs := checksumsOut(p.Checksums, p.CRC32C)
		res.Parts = append(res.Parts, s3response.Part{PartNumber: int(p.Number), LastModified: p.Modified, ETag: `"` + p.ETag + `"`,
			Size: int64(p.Size), ChecksumCRC32: cs.crc32, ChecksumCRC32C: cs.crc32c, ChecksumCRC64NVME: cs.crc64nvme,
			ChecksumSHA1: cs.sha1, ChecksumSHA256: cs.sha256})
	}
	if l.Next != 0 {
		res.IsTruncated, res.NextPartNumberMarker = true, int(l.Next)
	} else if len(l.Parts) > 0 {
		res.NextPartNumberMarker = int(l.Parts[len(l.Parts)-1].Number)
	}
	return res, nil
}

// ListMultipartUploads answers a page of a bucket's uploads in progress.
func (b *Backend) ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput) (s3response.ListMultipartUploadsResult, error) {
	limit := metaapi.MaxUploadPage
	if in.MaxUploads != nil && *in.MaxUploads >= 0 && int(*in.MaxUploads) < limit {
		limit = int(*in.MaxUploads)
	}
	res := s3response.ListMultipartUploadsResult{Bucket: deref(in.Bucket), KeyMarker: deref(in.KeyMarker),
		UploadIDMarker: deref(in.UploadIdMarker), Prefix: deref(in.Prefix), Delimiter: deref(in.Delimiter), MaxUploads: limit}
	if limit == 0 {
		return res, nil
	}
	l, err := b.meta.ListUploads(ctx, metaapi.ListUploads{Bucket: res.Bucket, Prefix: res.Prefix, KeyMarker: res.KeyMarker,
		UploadIDMarker: res.UploadIDMarker, Limit: limit})
	if err != nil {
		if errors.Is(err, metaapi.ErrNotFound) {
			return res, s3err.GetAPIError(s3err.ErrNoSuchBucket)
		}
		return res, toS3(err, s3err.ErrNoSuchBucket)
	}
	for _, u := range l.Uploads {
		res.Uploads = append(res.Uploads, s3response.Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated,
			StorageClass: types.StorageClassStandard})
	}
	res.IsTruncated = l.Truncated
	if l.Truncated && len(l.Uploads) > 0 {
		last := l.Uploads[len(l.Uploads)-1]
		res.NextKeyMarker, res.NextUploadIDMarker = last.Key, last.UploadID
	}
	return res, nil
}
