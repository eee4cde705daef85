package s3gw

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3api/middlewares"
	"github.com/versity/versitygw/s3api/utils"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/md5batch"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3extra"
	"github.com/spindle-store/spindle/internal/s3gw/s3lock"
	"github.com/spindle-store/spindle/internal/s3gw/s3ver"
)

// Limits of the object API.
const (
	// MaxObjectBytes bounds a single PUT (and a part), as S3: 5 GiB.
	MaxObjectBytes = 5 << 30
	// DeleteObjectsParallel bounds the deletions of one DeleteObjects
	// request in flight at once.
	DeleteObjectsParallel = 16
	// MaxDeleteKeys is the most keys of one DeleteObjects request (S3's).
	MaxDeleteKeys = 1000
	// MaxListKeys is the most entries of one listing page.
	MaxListKeys = metaapi.MaxListLimit
)

// standardHeaders maps a put's optional standard headers to their
// canonical names, as stored.
func standardHeaders(enc, disp, lang, cache, expires, redirect *string) map[string]string {
	h := map[string]string{}
	enc = contentEncoding(enc)
	for name, v := range map[string]*string{"Content-Encoding": enc, "Content-Disposition": disp,
		"Content-Language": lang, "Cache-Control": cache, "Expires": expires, websiteRedirect: redirect} {
		if v != nil && *v != "" {
			h[name] = *v
		}
	}
	if len(h) == 0 {
		return nil
	}
	return h
}

// contentEncoding is a Content-Encoding as stored: without aws-chunked,
// which says how the request's body was framed (SigV4 streaming), not
// what the object is (S3 drops it; nil when nothing else is left).
func contentEncoding(enc *string) *string {
	if enc == nil {
		return nil
	}
	var keep []string
	for _, c := range strings.Split(*enc, ",") {
		if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "aws-chunked") {
			keep = append(keep, c)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	return ptr(strings.Join(keep, ", "))
}

// bodyCheck verifies what the client said of the body as it streams: the
// MD5 (ETag) always, and the one checksum the client sent (a CRC32C
// header: compared with Spindle's own per-chunk CRC32Cs combined, no second
// pass over the bytes; another header: versitygw's HashReader; a trailer:
// verified by versitygw's chunk reader, which this only reads back at the
// end).
type bodyCheck struct {
	md5     *md5batch.Digest
	hr      *hashingReader // reads the body into md5
	r       io.Reader
	algo    types.ChecksumAlgorithm
	header  *utils.HashReader
	trailer middlewares.ChecksumReader
	// crc32c is a CRC32C header's value: not computed a second time over
	// the stream but compared, before the commit, with the CRC32C that the
	// key client combined from the chunks' own (verify).
	crc32c string
}

// checksumHeaders are the x-amz-checksum-* values of a request, by algorithm.
type checksumHeaders map[types.ChecksumAlgorithm]*string

// checksumAlgorithms are the x-amz-checksum-* a PUT or UploadPart may carry,
// every one verified (versitygw's HashReader names them in lower case).
var checksumAlgorithms = []types.ChecksumAlgorithm{types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c,
	types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256,
	types.ChecksumAlgorithmSha512, types.ChecksumAlgorithmMd5, types.ChecksumAlgorithmXxhash64,
	types.ChecksumAlgorithmXxhash3, types.ChecksumAlgorithmXxhash128}

func newBodyCheck(md5s *md5batch.Batcher, body io.Reader, sums checksumHeaders, sdkAlgo types.ChecksumAlgorithm) (*bodyCheck, error) {
	if body == nil {
		body = strings.NewReader("")
	}
	c := &bodyCheck{md5: md5s.NewDigest()}
	if tr, ok := body.(middlewares.ChecksumReader); ok && tr.Algorithm() != "" {
		c.trailer = tr
		c.algo = types.ChecksumAlgorithm(strings.ToUpper(tr.Algorithm()))
		c.hr = &hashingReader{r: body, h: c.md5}
		c.r = c.hr
		return c, nil
	}
	c.hr = &hashingReader{r: body, h: c.md5}
	c.r = c.hr
	for _, algo := range checksumAlgorithms {
		v := sums[algo]
		if v == nil || *v == "" {
			continue
		}
		if algo == types.ChecksumAlgorithmCrc32c {
			c.algo, c.crc32c = algo, *v
			return c, nil
		}
		hr, err := utils.NewHashReader(c.r, *v, utils.HashType(strings.ToLower(string(algo))))
		if err != nil {
			return nil, fmt.Errorf("s3gw: checksum reader: %w", err)
		}
		c.algo, c.header, c.r = algo, hr, hr
		return c, nil
	}
	if sdkAlgo != "" {
		// x-amz-sdk-checksum-algorithm without a value: compute and store it.
		hr, err := utils.NewHashReader(c.r, "", utils.HashType(strings.ToLower(string(sdkAlgo))))
		if err == nil {
			c.algo, c.header, c.r = sdkAlgo, hr, hr
		}
	}
	return c, nil
}

// hashingReader reads r and hashes what it read into h, asynchronously:
// the gateway's md5batch.Batcher hashes a request's bytes together with
// other requests' (16 lanes on one core) while the key client goes on
// reading the body and writing chunks to the datanodes. Each Read fills the
// caller's buffer (to r's end) in pieces of about hashPieceBytes that end
// on a 64-byte boundary of the stream, so that the digest gets whole
// blocks. The caller's buffer is read until the next Read into the same
// bytes (which waits for it: Reuse) or h.Sum; the owner of a hashingReader
// calls wait before it lets the buffers go.
type hashingReader struct {
	r   io.Reader
	h   *md5batch.Digest
	off int64 // bytes read
}

// hashPieceBytes is the size of the pieces a hashingReader hands its
// digest (a Batcher's round per lane).
const hashPieceBytes = md5batch.RoundBytes

func (m *hashingReader) Read(p []byte) (int, error) {
	m.h.Reuse(p)
	n := 0
	for n < len(p) {
		k := min(len(p)-n, hashPieceBytes-int(m.off%md5.BlockSize))
		got, err := io.ReadFull(m.r, p[n:n+k])
		m.h.WriteAsync(p[n : n+got])
		n += got
		m.off += int64(got)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return n, io.EOF // n bytes, then the end
		case err != nil:
			return n, err
		}
	}
	return n, nil
}

// wait returns once the digest no longer reads the caller's buffers.
func (m *hashingReader) wait() { m.h.Wait() }

// etag is the MD5 of what was read, in hex.
func (c *bodyCheck) etag() string { return hex.EncodeToString(c.md5.Sum(nil)) }

// verify compares a CRC32C header with crc, the CRC32C of the bytes
// stored (Spindle's per-chunk CRC32Cs combined): BadDigest when they
// differ, and the put is not committed.
func (c *bodyCheck) verify(crc uint32) error {
	if c.crc32c != "" && c.crc32c != crcBase64(crc) {
		return s3err.GetChecksumBadDigestErr(types.ChecksumAlgorithmCrc32c)
	}
	return nil
}

// checksums is the verified client checksum, by algorithm (nil: none).
func (c *bodyCheck) checksums() map[string]string {
	switch {
	case c.crc32c != "":
		return map[string]string{string(c.algo): c.crc32c}
	case c.trailer != nil:
		return map[string]string{string(c.algo): c.trailer.Checksum()}
	case c.header != nil:
		return map[string]string{string(c.algo): c.header.Sum()}
	}
	return nil
}

// checksumsOut fills a response's checksum fields from a verified set.
func checksumsOut(m map[string]string, crc uint32) checksums {
	ki := &metaapi.KeyInfo{CRC32C: crc, Object: &metaapi.ObjectMeta{Checksums: m}}
	return checksumsOf(ki)
}

// PutObject streams the body into a new version of the key.
func (b *Backend) PutObject(ctx context.Context, po s3response.PutObjectInput) (s3response.PutObjectOutput, error) {
	bucket, key := deref(po.Bucket), deref(po.Key)
	if po.ContentLength != nil && *po.ContentLength > MaxObjectBytes {
		return s3response.PutObjectOutput{}, s3err.GetAPIError(s3err.ErrEntityTooLarge)
	}
	if err := keyErr(key); err != nil {
		return s3response.PutObjectOutput{}, err
	}
	acl, err := b.objectACLFor(ctx, bucket)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	chk, err := newBodyCheck(b.md5s, po.Body, checksumHeaders{
		types.ChecksumAlgorithmCrc32: po.ChecksumCRC32, types.ChecksumAlgorithmCrc32c: po.ChecksumCRC32C,
		types.ChecksumAlgorithmCrc64nvme: po.ChecksumCRC64NVME, types.ChecksumAlgorithmSha1: po.ChecksumSHA1,
		types.ChecksumAlgorithmSha256: po.ChecksumSHA256, types.ChecksumAlgorithmSha512: po.ChecksumSHA512,
		types.ChecksumAlgorithmMd5: po.ChecksumMD5, types.ChecksumAlgorithmXxhash64: po.ChecksumXXHASH64,
		types.ChecksumAlgorithmXxhash3: po.ChecksumXXHASH3, types.ChecksumAlgorithmXxhash128: po.ChecksumXXHASH128}, po.ChecksumAlgorithm)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	defer chk.hr.wait() // the key client's buffers are not read after the put
	om := &metaapi.ObjectMeta{
		ContentType: deref(po.ContentType),
		Headers:     standardHeaders(po.ContentEncoding, po.ContentDisposition, po.ContentLanguage, po.CacheControl, po.Expires, po.WebsiteRedirectLocation),
		UserMeta:    userMetaIn(po.Metadata),
	}
	om.Headers = withObjectACL(om.Headers, acl)
	if om.Headers, err = s3extra.WithTags(om.Headers, po.Tagging); err != nil {
		return s3response.PutObjectOutput{}, err
	}
	om.Headers = s3lock.Request(om.Headers, po.ObjectLockMode, po.ObjectLockRetainUntilDate, po.ObjectLockLegalHoldStatus)
	cond, err := s3extra.PutConditions(po.IfMatch, po.IfNoneMatch)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	res, err := b.kc.Put(ctx, bucket, key, chk.r, keyclient.PutOptions{
		SizeHintBytes: aws.ToInt64(po.ContentLength),
		Commit: func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
			if err := chk.verify(ck.CRC32C); err != nil {
				return metaapi.KeyInfo{}, err
			}
			om.ETag = chk.etag()
			om.Checksums = chk.checksums()
			om.ChecksumType = string(types.ChecksumTypeFullObject)
			ck.Object, ck.Conditions = om, cond
			return b.meta.CommitKey(ctx, bucket, key, ck)
		},
	})
	if err != nil {
		return s3response.PutObjectOutput{}, toS3(err, s3err.ErrNoSuchKey)
	}
	cs := checksumsOf(&res.Key)
	size := int64(res.Key.Size)
	return s3response.PutObjectOutput{
		ETag: etagOf(&res.Key), Size: &size, ChecksumType: cs.typ, VersionID: strings.TrimPrefix(res.Key.VersionID, "null"), // S3 omits null
		ChecksumCRC32: cs.crc32, ChecksumCRC32C: cs.crc32c, ChecksumCRC64NVME: cs.crc64nvme,
		ChecksumSHA1: cs.sha1, ChecksumSHA256: cs.sha256, ChecksumSHA512: cs.sha512, ChecksumMD5: cs.md5,
		ChecksumXXHASH64: cs.xxhash64, ChecksumXXHASH3: cs.xxhash3, ChecksumXXHASH128: cs.xxhash128,
	}, nil
}

// objectBody is a GET's body: length bytes of a key from offset, read by
// keyclient.ReadKey. The HTTP server writes it with WriteTo: ReadKey then
// writes its ranges (ReadSize bytes each) straight into the response
// writer, no copy. Read (a reader of another kind, CopyObject) runs
// ReadKey into a pipe from a goroutine. Close stops the read and waits
// for that goroutine.
type objectBody struct {
	b              *Backend
	ki             metaapi.KeyInfo
	offset, length int64
	ctx            context.Context
	cancel         context.CancelFunc

	mu   sync.Mutex
	pr   *io.PipeReader // nil until the first Read
	done chan struct{}  // closed when the pipe's goroutine returns
	once sync.Once
}

// WriteTo writes the body to w (once; the body is then consumed).
func (o *objectBody) WriteTo(w io.Writer) (int64, error) {
	o.mu.Lock()
	piped := o.pr != nil
	o.mu.Unlock()
	if piped {
		return io.Copy(w, struct{ io.Reader }{o})
	}
	cw := &keyclient.CountingWriter{W: w}
	err := o.b.kc.ReadKey(o.ctx, o.ki, o.offset, o.length, cw, keyclient.GetOptions{})
	return cw.N, err
}

func (o *objectBody) Read(p []byte) (int, error) {
	o.mu.Lock()
	if o.pr == nil {
		pr, pw := io.Pipe()
		o.pr, o.done = pr, make(chan struct{})
		go func() {
			defer close(o.done)
			pw.CloseWithError(o.b.kc.ReadKey(o.ctx, o.ki, o.offset, o.length, pw, keyclient.GetOptions{}))
		}()
	}
	pr := o.pr
	o.mu.Unlock()
	return pr.Read(p)
}

func (o *objectBody) Close() error {
	o.once.Do(func() {
		o.cancel()
		o.mu.Lock()
		pr, done := o.pr, o.done
		o.mu.Unlock()
		if pr != nil {
			_ = pr.Close() // always nil (io.PipeReader)
			<-done
		}
	})
	return nil
}

// openBody returns the body of length bytes of ki from offset. The read
// outlives the request's context (versitygw streams the body after the
// handler returns); Close ends it.
func (b *Backend) openBody(ki metaapi.KeyInfo, offset, length int64) io.ReadCloser {
	ctx, cancel := context.WithCancel(context.Background())
	return &objectBody{b: b, ki: ki, offset: offset, length: length, ctx: ctx, cancel: cancel}
}

// lookup reads a key's metadata (NoSuchKey when absent), or that of one
// of its versions (vid not empty; package s3ver).
func (b *Backend) lookup(ctx context.Context, bucket, key string, vid *string) (metaapi.KeyInfo, error) {
	if metaapi.ValidKey(key) != nil {
		if _, err := b.meta.GetBucket(ctx, bucket); err != nil {
			return metaapi.KeyInfo{}, bucketErr(err)
		}
		if len(key) > metaapi.MaxKeyBytes {
			return metaapi.KeyInfo{}, s3err.GetAPIError(s3err.ErrKeyTooLong)
		}
		return metaapi.KeyInfo{}, s3err.GetAPIError(s3err.ErrNoSuchKey)
	}
	if deref(vid) != "" {
		return b.Get(ctx, bucket, key, *vid)
	}
	ki, err := b.meta.GetKey(ctx, bucket, key)
	if err != nil {
		return ki, toS3(err, s3err.ErrNoSuchKey)
	}
	return ki, nil
}

// GetObject answers the object (or a range of it), streamed.
func (b *Backend) GetObject(ctx context.Context, in *s3.GetObjectInput) (*s3.GetObjectOutput, error) {
	ki, err := b.lookup(ctx, deref(in.Bucket), deref(in.Key), in.VersionId)
	if err != nil {
		return nil, err
	}
	etag := etagOf(&ki)
	if err := backend.EvaluatePreconditions(etag, ki.Created, backend.PreConditions{
		IfMatch: in.IfMatch, IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince,
	}); err != nil {
		return nil, err
	}
	size := int64(ki.Size)
	start, length, ranged, err := backend.ParseObjectRange(size, deref(in.Range))
	if err != nil {
		return nil, err
	}
	if in.PartNumber != nil {
		var whole bool
		if start, length, whole, err = partSpan(&ki, *in.PartNumber); err != nil {
			return nil, err
		}
		ranged = !whole
	}
	out := &s3.GetObjectOutput{
		AcceptRanges:  ptr("bytes"),
		ContentLength: &length,
		ContentType:   ptr(contentType(&ki)),
		ETag:          &etag,
		LastModified:  &ki.Created,
		StorageClass:  types.StorageClassStandard,
		Body:          b.openBody(ki, start, length),
		VersionId:     nilIfEmpty(&ki.VersionID),
	}
	if ranged || in.PartNumber != nil {
		out.ContentRange = contentRange(start, length, size)
	}
	fillHeaders(&ki, &out.ContentEncoding, &out.ContentDisposition, &out.ContentLanguage, &out.CacheControl, &out.ExpiresString)
	out.WebsiteRedirectLocation = header(&ki, websiteRedirect)
	if ki.Object != nil {
		out.Metadata = userMetaOut(ki.Object.UserMeta)
		if ki.Object.Parts > 0 {
			out.PartsCount = ptr(int32(ki.Object.Parts))
		}
	}
	out.TagCount = s3extra.TagCount(&ki)
	out.ObjectLockMode, out.ObjectLockRetainUntilDate, out.ObjectLockLegalHoldStatus = s3lock.Out(&ki)
	if in.ChecksumMode == types.ChecksumModeEnabled && !ranged {
		cs := checksumsOf(&ki)
		out.ChecksumCRC32, out.ChecksumCRC32C, out.ChecksumCRC64NVME, out.ChecksumSHA1, out.ChecksumSHA256 = cs.crc32, cs.crc32c, cs.crc64nvme, cs.sha1, cs.sha256
		out.ChecksumSHA512, out.ChecksumMD5, out.ChecksumXXHASH64, out.ChecksumXXHASH3, out.ChecksumXXHASH128 = cs.sha512, cs.md5, cs.xxhash64, cs.xxhash3, cs.xxhash128
		out.ChecksumType = cs.typ
	}
	return out, nil
}

// websiteRedirect is where an object's x-amz-website-redirect-location is
// kept among its standard headers.
const websiteRedirect = "X-Amz-Website-Redirect-Location"

func fillHeaders(ki *metaapi.KeyInfo, enc, disp, lang, cache, expires **string) {
	*enc = header(ki, "Content-Encoding")
	*disp = header(ki, "Content-Disposition")
	*lang = header(ki, "Content-Language")
	*cache = header(ki, "Cache-Control")
	*expires = header(ki, "Expires")
}

// HeadObject answers the object's metadata.
func (b *Backend) HeadObject(ctx context.Context, in *s3.HeadObjectInput) (*s3.HeadObjectOutput, error) {
	ki, err := b.lookup(ctx, deref(in.Bucket), deref(in.Key), in.VersionId)
	if err != nil {
		return nil, err
	}
	etag := etagOf(&ki)
	if err := backend.EvaluatePreconditions(etag, ki.Created, backend.PreConditions{
		IfMatch: in.IfMatch, IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince,
	}); err != nil {
		return nil, err
	}
	size := int64(ki.Size)
	length := size
	out := &s3.HeadObjectOutput{
		AcceptRanges:  ptr("bytes"),
		ContentLength: &length,
		ContentType:   ptr(contentType(&ki)),
		ETag:          &etag,
		LastModified:  &ki.Created,
		StorageClass:  types.StorageClassStandard,
		VersionId:     nilIfEmpty(&ki.VersionID),
	}
	whole := true
	if in.Range != nil && *in.Range != "" {
		start, n, ranged, err := backend.ParseObjectRange(size, *in.Range)
		if err != nil {
			return nil, err
		}
		if ranged {
			length, whole = n, false
			out.ContentRange = contentRange(start, n, size)
		}
	}
	if in.PartNumber != nil {
		start, n, all, err := partSpan(&ki, *in.PartNumber)
		if err != nil {
			return nil, err
		}
		length, whole = n, all
		out.ContentRange = contentRange(start, n, size)
	}
	fillHeaders(&ki, &out.ContentEncoding, &out.ContentDisposition, &out.ContentLanguage, &out.CacheControl, &out.ExpiresString)
	out.WebsiteRedirectLocation = header(&ki, websiteRedirect)
	if ki.Object != nil {
		out.Metadata = userMetaOut(ki.Object.UserMeta)
		if ki.Object.Parts > 0 {
			out.PartsCount = ptr(int32(ki.Object.Parts))
		}
	}
	out.TagCount = s3extra.TagCount(&ki)
	out.ObjectLockMode, out.ObjectLockRetainUntilDate, out.ObjectLockLegalHoldStatus = s3lock.Out(&ki)
	if in.ChecksumMode == types.ChecksumModeEnabled && whole {
		cs := checksumsOf(&ki)
		out.ChecksumCRC32, out.ChecksumCRC32C, out.ChecksumCRC64NVME, out.ChecksumSHA1, out.ChecksumSHA256 = cs.crc32, cs.crc32c, cs.crc64nvme, cs.sha1, cs.sha256
		out.ChecksumSHA512, out.ChecksumMD5, out.ChecksumXXHASH64, out.ChecksumXXHASH3, out.ChecksumXXHASH128 = cs.sha512, cs.md5, cs.xxhash64, cs.xxhash3, cs.xxhash128
		out.ChecksumType = cs.typ
	}
	return out, nil
}

// GetObjectAttributes answers ETag, size, storage class, checksum and
// (of a multipart object) a page of its parts.
func (b *Backend) GetObjectAttributes(ctx context.Context, in *s3.GetObjectAttributesInput) (s3response.GetObjectAttributesResponse, error) {
	ki, err := b.lookup(ctx, deref(in.Bucket), deref(in.Key), in.VersionId)
	if err != nil {
		return s3response.GetObjectAttributesResponse{}, s3ver.NoMarker(err) // a delete marker: NoSuchKey here
	}
	size := int64(ki.Size)
	cs := checksumsOf(&ki)
	parts, err := objectParts(&ki, in.PartNumberMarker, in.MaxParts)
	if err != nil {
		return s3response.GetObjectAttributesResponse{}, err
	}
	return s3response.GetObjectAttributesResponse{
		ObjectParts:  parts,
		ETag:         ptr(strings.Trim(etagOf(&ki), `"`)),
		ObjectSize:   &size,
		StorageClass: types.StorageClassStandard,
		LastModified: &ki.Created,
		VersionId:    nilIfEmpty(&ki.VersionID),
		Checksum: &types.Checksum{ChecksumCRC32C: cs.crc32c, ChecksumCRC32: cs.crc32, ChecksumCRC64NVME: cs.crc64nvme,
			ChecksumSHA1: cs.sha1, ChecksumSHA256: cs.sha256, ChecksumType: cs.typ},
	}, nil
}

// DeleteObject deletes a key (a missing key is no error, as S3).
func (b *Backend) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput) (*s3.DeleteObjectOutput, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	if len(key) > metaapi.MaxKeyBytes {
		return nil, s3err.GetAPIError(s3err.ErrKeyTooLong)
	}
	if metaapi.ValidKey(key) != nil {
		return &s3.DeleteObjectOutput{}, nil
	}
	return b.Delete(ctx, bucket, key, deref(in.VersionId), aws.ToBool(in.BypassGovernanceRetention) || s3lock.Bypass(ctx)) // s3ver

}

// DeleteObjects deletes up to 1,000 keys, DeleteObjectsParallel at once.
func (b *Backend) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput) (s3response.DeleteResult, error) {
	if in.Delete == nil {
		return s3response.DeleteResult{}, s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	objs := in.Delete.Objects
	if len(objs) > MaxDeleteKeys {
		return s3response.DeleteResult{}, s3err.GetAPIError(s3err.ErrMalformedXML) // as S3 answers more than 1,000
	}
	errs, outs := make([]error, len(objs)), make([]*s3.DeleteObjectOutput, len(objs))
	sem := make(chan struct{}, DeleteObjectsParallel)
	var wg sync.WaitGroup
	for i, o := range objs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			outs[i], errs[i] = b.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: in.Bucket, Key: o.Key, VersionId: o.VersionId})
		}()
	}
	wg.Wait()
	var res s3response.DeleteResult
	for i, o := range objs {
		if errs[i] == nil {
			d := types.DeletedObject{Key: o.Key, VersionId: o.VersionId, DeleteMarker: ptr(aws.ToBool(outs[i].DeleteMarker))}
			if *d.DeleteMarker && o.VersionId == nil {
				d.DeleteMarkerVersionId = outs[i].VersionId
			}
			res.Deleted = append(res.Deleted, d)
			continue
		}
		code, msg := "InternalError", errs[i].Error()
		var se s3Error
		if errors.As(errs[i], &se) {
			code, msg = se.BaseError().Code, se.BaseError().Description
		}
		res.Error = append(res.Error, types.Error{Key: o.Key, VersionId: o.VersionId, Code: &code, Message: &msg})
	}
	return res, nil
}

// CopyObject copies a key's bytes into a new version of the destination
// (metadata COPY or REPLACE), streamed.
func (b *Backend) CopyObject(ctx context.Context, in s3response.CopyObjectInput) (s3response.CopyObjectOutput, error) {
	srcBucket, srcKey, srcVersion, err := backend.ParseCopySource(deref(in.CopySource))
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	src, err := b.lookup(ctx, srcBucket, srcKey, &srcVersion)
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	if err := copyPreconditions(&src, in.CopySourceIfMatch, in.CopySourceIfNoneMatch, in.CopySourceIfModifiedSince, in.CopySourceIfUnmodifiedSince); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	dstBucket, dstKey := deref(in.Bucket), deref(in.Key)
	acl, err := b.objectACLFor(ctx, dstBucket)
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	om := &metaapi.ObjectMeta{}
	if in.MetadataDirective == types.MetadataDirectiveReplace {
		om.ContentType = deref(in.ContentType)
		om.Headers = standardHeaders(in.ContentEncoding, in.ContentDisposition, in.ContentLanguage, in.CacheControl, in.Expires, in.WebsiteRedirectLocation)
		om.UserMeta = userMetaIn(in.Metadata)
	} else {
		if srcBucket == dstBucket && srcKey == dstKey && srcVersion == "" {
			return s3response.CopyObjectOutput{}, s3err.GetAPIError(s3err.ErrInvalidCopyDest)
		}
		if src.Object != nil {
			om.ContentType, om.UserMeta = src.Object.ContentType, src.Object.UserMeta
			om.Headers = maps.Clone(src.Object.Headers)
			// S3 does not copy a website redirect with the metadata; the
			// request's own, when it sets one, applies.
			delete(om.Headers, websiteRedirect)
			if v := deref(in.WebsiteRedirectLocation); v != "" {
				if om.Headers == nil {
					om.Headers = map[string]string{}
				}
				om.Headers[websiteRedirect] = v
			}
		}
	}
	om.Headers = withObjectACL(om.Headers, acl) // the copy's own ACL, not the source's
	if om.Headers, err = s3extra.CopyTags(om.Headers, &src, in.TaggingDirective, in.Tagging); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	om.Headers = s3lock.Request(om.Headers, in.ObjectLockMode, in.ObjectLockRetainUntilDate, in.ObjectLockLegalHoldStatus) // not the source's lock
	if src.Object != nil && (in.ChecksumAlgorithm == "" || src.Object.Checksums[string(in.ChecksumAlgorithm)] != "") {
		om.Checksums = maps.Clone(src.Object.Checksums) // the same bytes: the source's checksums hold
	}
	ki, err := b.copyInto(ctx, src, 0, int64(src.Size), dstBucket, dstKey, false, func(ctx context.Context, ck metaapi.CommitKey, etag string) (metaapi.KeyInfo, error) {
		om.ETag = etag
		om.ChecksumType = string(types.ChecksumTypeFullObject)
		ck.Object = om
		return b.meta.CommitKey(ctx, dstBucket, dstKey, ck)
	})
	if err != nil {
		return s3response.CopyObjectOutput{}, toS3(err, s3err.ErrNoSuchKey)
	}
	cs := checksumsOf(&ki)
	return s3response.CopyObjectOutput{VersionId: nilIfEmpty(&ki.VersionID), CopySourceVersionId: nilIfEmpty(&src.VersionID), CopyObjectResult: &s3response.CopyObjectResult{
		ETag: ptr(etagOf(&ki)), LastModified: &ki.Created, ChecksumType: types.ChecksumTypeFullObject,
		ChecksumCRC32: cs.crc32, ChecksumCRC32C: cs.crc32c, ChecksumCRC64NVME: cs.crc64nvme, ChecksumSHA1: cs.sha1, ChecksumSHA256: cs.sha256,
	}}, nil
}

// copyPreconditions evaluates a copy's x-amz-copy-source-if-* headers
// against its source. A copy is a write: where a GET would answer 304 Not
// Modified (If-None-Match matching, If-Modified-Since not met), S3 answers
// 412 PreconditionFailed.
func copyPreconditions(src *metaapi.KeyInfo, ifMatch, ifNoneMatch *string, ifModSince, ifUnmodSince *time.Time) error {
	err := backend.EvaluatePreconditions(etagOf(src), src.Created, backend.PreConditions{
		IfMatch: ifMatch, IfNoneMatch: ifNoneMatch, IfModSince: ifModSince, IfUnmodeSince: ifUnmodSince})
	var ae s3err.APIError
	if errors.As(err, &ae) && ae.HTTPStatusCode == http.StatusNotModified {
		return s3err.GetAPIError(s3err.ErrPreconditionFailed)
	}
	return err
}

// copyInto streams length bytes of src from offset into a Put of
// bucket/key, committed by commit with the MD5 of the bytes (noInline: in
// blocks whatever the size, for a commit that cannot store a value inline).
func (b *Backend) copyInto(ctx context.Context, src metaapi.KeyInfo, offset, length int64, bucket, key string, noInline bool,
	commit func(ctx context.Context, ck metaapi.CommitKey, etag string) (metaapi.KeyInfo, error)) (metaapi.KeyInfo, error) {
	body := b.openBody(src, offset, length)
	defer func() { _ = body.Close() }() // always nil (objectBody.Close)
	h := b.md5s.NewDigest()
	hr := &hashingReader{r: body, h: h}
	defer hr.wait()
	res, err := b.kc.Put(ctx, bucket, key, hr, keyclient.PutOptions{
		NoInline:      noInline,
		SizeHintBytes: length,
		Commit: func(ctx context.Context, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
			if ck.Size != uint64(length) {
				return metaapi.KeyInfo{}, fmt.Errorf("s3gw: copy read %d bytes of %d", ck.Size, length)
			}
			return commit(ctx, ck, hex.EncodeToString(h.Sum(nil)))
		},
	})
	return res.Key, err
}

// listPage is one page of a listing in S3's terms.
type listPage struct {
	objects   []s3response.Object
	prefixes  []types.CommonPrefix
	truncated bool
	next      string // the last entry returned, when truncated
}

func (b *Backend) list(ctx context.Context, bucket, prefix, delim, after string, maxKeys int32) (listPage, error) {
	var p listPage
	if maxKeys <= 0 {
		if _, err := b.meta.GetBucket(ctx, bucket); err != nil {
			return p, bucketErr(err)
		}
		return p, nil
	}
	l, err := b.meta.List(ctx, bucket, metaapi.ListOptions{Prefix: prefix, StartAfter: after, Delimiter: delim, Limit: int(min(maxKeys, MaxListKeys))})
	if err != nil {
		return p, bucketErr(err)
	}
	for i := range l.Keys {
		ki := &l.Keys[i]
		size := int64(ki.Size)
		p.objects = append(p.objects, s3response.Object{
			Key: &ki.Key, ETag: ptr(etagOf(ki)), Size: &size, LastModified: &ki.Created,
			StorageClass: types.ObjectStorageClassStandard, ChecksumType: types.ChecksumTypeFullObject,
			ChecksumAlgorithm: []types.ChecksumAlgorithm{types.ChecksumAlgorithmCrc32c},
		})
	}
	for _, cp := range l.CommonPrefixes {
		p.prefixes = append(p.prefixes, types.CommonPrefix{Prefix: ptr(cp)})
	}
	if l.Next != "" {
		p.truncated, p.next = true, l.Next
	}
	return p, nil
}

// listQueryKey is where noteListQuery leaves what versitygw's listing
// controllers do not pass to the backend: the encoding-type parameter, and
// whether continuation-token and start-after were present at all (an empty
// one is answered as an empty element, as S3 does).
type listQueryKey struct{}

// listQuery is what noteListQuery keeps of a request's query.
type listQuery struct {
	encodingType                  types.EncodingType
	continuationToken, startAfter bool
}

// noteListQuery keeps the request's listing parameters for the backend.
func noteListQuery(c fiber.Ctx) {
	args := c.Request().URI().QueryArgs()
	q := listQuery{encodingType: types.EncodingType(args.Peek("encoding-type")),
		continuationToken: args.Has("continuation-token"), startAfter: args.Has("start-after")}
	if q != (listQuery{}) {
		c.RequestCtx().SetUserValue(listQueryKey{}, q)
	}
}

// listQueryOf is the request's listQuery (zero without one).
func listQueryOf(ctx context.Context) listQuery {
	q, _ := ctx.Value(listQueryKey{}).(listQuery)
	return q
}

// encodingType is the listing's encoding-type: the input's, else the
// request's query parameter; "url" is the one S3 knows.
func encodingType(ctx context.Context, in types.EncodingType) (types.EncodingType, error) {
	if in == "" {
		in = listQueryOf(ctx).encodingType
	}
	if in != "" && in != types.EncodingTypeUrl {
		return "", s3err.APIError{Code: "InvalidArgument", Description: "Invalid Encoding Method specified in Request", HTTPStatusCode: http.StatusBadRequest}
	}
	return in, nil
}

// keyEncoder returns how a listing writes key names: as they are, or with
// encoding-type=url percent-encoded as S3 does ('/' kept, a space as %20,
// '+' as %2B), which SDKs that ask for it (boto3, minio-go) decode; the
// response then says EncodingType url.
func keyEncoder(enc types.EncodingType) func(*string) *string {
	if enc != types.EncodingTypeUrl {
		return func(s *string) *string { return s }
	}
	return func(s *string) *string {
		if s == nil {
			return nil
		}
		e := strings.NewReplacer("+", "%20", "%2F", "/").Replace(url.QueryEscape(*s))
		return &e
	}
}

// encode rewrites the page's keys, prefixes and next marker with enc.
func (p *listPage) encode(enc func(*string) *string) {
	for i := range p.objects {
		p.objects[i].Key = enc(p.objects[i].Key)
	}
	for i := range p.prefixes {
		p.prefixes[i].Prefix = enc(p.prefixes[i].Prefix)
	}
}

// keyErr is how S3 refuses a key Spindle cannot hold: KeyTooLongError past
// 1,024 bytes, InvalidRequest for the rest (a leading '/', a "." or ".."
// segment, a control character: see metaapi.ValidKey).
func keyErr(key string) error {
	if len(key) > metaapi.MaxKeyBytes {
		return s3err.GetAPIError(s3err.ErrKeyTooLong)
	}
	if metaapi.ValidKey(key) != nil {
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	}
	return nil
}

// nilIfEmpty is s, or nil when it points to "": a delimiter or marker the
// request did not set is absent from the response, as in S3.
func nilIfEmpty(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}

// always is s, or "" for nil: the elements S3 always answers, empty when
// the request had none (ListObjects' Prefix and Marker, ListObjectsV2's
// Prefix).
func always(s *string) *string {
	if s == nil {
		return ptr("")
	}
	return s
}

// maxKeysOf is a listing's MaxKeys: the request's, else MaxListKeys.
func maxKeysOf(p *int32) int32 {
	if p != nil {
		return *p
	}
	return MaxListKeys
}

// owner is the Owner a listing names for the bucket's objects: the
// bucket's owner (objects belong to it in Spindle).
func bucketOwner(ctx context.Context, b *Backend, bucket string) (*types.Owner, error) {
	doc, err := b.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: &bucket})
	if err != nil {
		return nil, err
	}
	acl, err := auth.ParseACL(doc)
	if err != nil {
		return nil, err
	}
	return &types.Owner{ID: ptr(acl.Owner), DisplayName: ptr(acl.Owner)}, nil
}

// withOwner names the bucket's owner in every object of the page.
func withOwner(ctx context.Context, b *Backend, bucket string, p *listPage) error {
	if len(p.objects) == 0 {
		return nil
	}
	o, err := bucketOwner(ctx, b, bucket)
	if err != nil {
		return err
	}
	for i := range p.objects {
		p.objects[i].Owner = o
	}
	return nil
}

// ListObjects is ListObjects v1 (marker, NextMarker); every object names
// its owner, and Prefix and Marker are always answered, as in S3.
func (b *Backend) ListObjects(ctx context.Context, in *s3.ListObjectsInput) (s3response.ListObjectsResult, error) {
	maxKeys := maxKeysOf(in.MaxKeys)
	p, err := b.list(ctx, deref(in.Bucket), deref(in.Prefix), deref(in.Delimiter), deref(in.Marker), maxKeys)
	if err != nil {
		return s3response.ListObjectsResult{}, err
	}
	if in.EncodingType, err = encodingType(ctx, in.EncodingType); err != nil {
		return s3response.ListObjectsResult{}, err
	}
	if err := withOwner(ctx, b, deref(in.Bucket), &p); err != nil {
		return s3response.ListObjectsResult{}, err
	}
	enc := keyEncoder(in.EncodingType)
	p.encode(enc)
	res := s3response.ListObjectsResult{
		Name: in.Bucket, Prefix: enc(always(in.Prefix)), Marker: enc(always(in.Marker)), MaxKeys: &maxKeys, Delimiter: enc(nilIfEmpty(in.Delimiter)),
		IsTruncated: &p.truncated, Contents: p.objects, CommonPrefixes: p.prefixes, EncodingType: in.EncodingType,
	}
	if p.truncated {
		res.NextMarker = enc(&p.next)
	}
	return res, nil
}

// ListObjectsV2 pages with continuation tokens: base64 of the last entry.
// Prefix is always answered; ContinuationToken and StartAfter when the
// request had them (empty included); owners with fetch-owner=true.
func (b *Backend) ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input) (s3response.ListObjectsV2Result, error) {
	maxKeys := maxKeysOf(in.MaxKeys)
	after := deref(in.StartAfter)
	if tok := deref(in.ContinuationToken); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return s3response.ListObjectsV2Result{}, s3err.GetAPIError(s3err.ErrInvalidRequest)
		}
		after = string(raw)
	}
	p, err := b.list(ctx, deref(in.Bucket), deref(in.Prefix), deref(in.Delimiter), after, maxKeys)
	if err != nil {
		return s3response.ListObjectsV2Result{}, err
	}
	count := int32(len(p.objects) + len(p.prefixes))
	if in.EncodingType, err = encodingType(ctx, in.EncodingType); err != nil {
		return s3response.ListObjectsV2Result{}, err
	}
	if aws.ToBool(in.FetchOwner) {
		if err := withOwner(ctx, b, deref(in.Bucket), &p); err != nil {
			return s3response.ListObjectsV2Result{}, err
		}
	}
	enc := keyEncoder(in.EncodingType)
	p.encode(enc) // the continuation token keeps the raw key
	res := s3response.ListObjectsV2Result{
		Name: in.Bucket, Prefix: enc(always(in.Prefix)), StartAfter: enc(nilIfEmpty(in.StartAfter)), MaxKeys: &maxKeys, Delimiter: enc(nilIfEmpty(in.Delimiter)),
		IsTruncated: &p.truncated, Contents: p.objects, CommonPrefixes: p.prefixes, KeyCount: &count, EncodingType: in.EncodingType,
	}
	q := listQueryOf(ctx)
	if q.continuationToken || deref(in.ContinuationToken) != "" {
		res.ContinuationToken = always(in.ContinuationToken)
	}
	if q.startAfter {
		res.StartAfter = enc(always(in.StartAfter))
	}
	if p.truncated {
		res.NextContinuationToken = ptr(base64.RawURLEncoding.EncodeToString([]byte(p.next)))
	}
	return res, nil
}

// ListObjectVersions lists a page of versions (package s3ver).
func (b *Backend) ListObjectVersions(ctx context.Context, in *s3.ListObjectVersionsInput) (s3response.ListVersionsResult, error) {
	var err error
	if in.EncodingType, err = encodingType(ctx, in.EncodingType); err != nil {
		return s3response.ListVersionsResult{}, err
	}
	owner, err := bucketOwner(ctx, b, deref(in.Bucket))
	if err != nil {
		return s3response.ListVersionsResult{}, err
	}
	return b.List(ctx, in, maxKeysOf(in.MaxKeys), owner, keyEncoder(in.EncodingType))
}
