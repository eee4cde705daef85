package s3gw_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The streaming upload modes are written out by hand here (the SDK sends
// them only over HTTPS), so that a test can tamper with one chunk or one
// trailer and see the gateway refuse it.

const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// streamingPut is one hand-built PUT of body to bucket/key in the given
// x-amz-content-sha256 mode, cut into chunks of chunkBytes. tamper, when
// set, rewrites the encoded body before it is sent (a flipped byte in a
// chunk, a wrong trailer). It returns the HTTP status and the response body.
func streamingPut(t *testing.T, mode, bucket, key string, body []byte, chunkBytes int, trailer string,
	tamper func([]byte) []byte) (int, string) {
	t.Helper()
	now := time.Now().UTC()
	date := now.Format("20060102")
	scope := date + "/us-east-1/s3/aws4_request"
	req, err := http.NewRequest(http.MethodPut, endpoint+"/"+bucket+"/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", mode)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(len(body)))
	if trailer != "" {
		req.Header.Set("X-Amz-Trailer", strings.SplitN(trailer, ":", 2)[0])
	}
	creds := aws.Credentials{AccessKeyID: rootAccess, SecretAccessKey: rootSecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, mode, "s3", "us-east-1", now); err != nil {
		t.Fatal(err)
	}
	seed := regexp.MustCompile(`Signature=([0-9a-f]{64})`).FindStringSubmatch(req.Header.Get("Authorization"))
	if seed == nil {
		t.Fatalf("no seed signature in %q", req.Header.Get("Authorization"))
	}
	signing := hmacSHA256(hmacSHA256(hmacSHA256(hmacSHA256([]byte("AWS4"+rootSecret), date), "us-east-1"), "s3"), "aws4_request")
	signed := mode != "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	prev := seed[1]
	var enc bytes.Buffer
	chunk := func(p []byte) {
		if !signed {
			fmt.Fprintf(&enc, "%x\r\n", len(p))
		} else {
			sts := strings.Join([]string{"AWS4-HMAC-SHA256-PAYLOAD", now.Format("20060102T150405Z"), scope, prev, emptySHA256, sha256Hex(p)}, "\n")
			prev = hex.EncodeToString(hmacSHA256(signing, sts))
			fmt.Fprintf(&enc, "%x;chunk-signature=%s\r\n", len(p), prev)
		}
		enc.Write(p)
		if len(p) > 0 {
			enc.WriteString("\r\n")
		}
	}
	for off := 0; off < len(body); off += chunkBytes {
		chunk(body[off:min(off+chunkBytes, len(body))])
	}
	chunk(nil)
	if trailer != "" {
		enc.WriteString(trailer + "\r\n")
		if signed {
			sts := strings.Join([]string{"AWS4-HMAC-SHA256-TRAILER", now.Format("20060102T150405Z"), scope, prev, sha256Hex([]byte(trailer + "\n"))}, "\n")
			fmt.Fprintf(&enc, "x-amz-trailer-signature:%s\r\n", hex.EncodeToString(hmacSHA256(signing, sts)))
		}
	}
	enc.WriteString("\r\n")
	wire := enc.Bytes()
	if tamper != nil {
		wire = tamper(wire)
	}
	req.Body = io.NopCloser(bytes.NewReader(wire))
	req.ContentLength = int64(len(wire))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, resp.Body)
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// mustBeAbsent fails the test when bucket/key exists: a refused request
// stores nothing.
func mustBeAbsent(t *testing.T, bucket, key string) {
	t.Helper()
	_, err := root().HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if apiCode(err) != "NotFound" {
		t.Fatalf("%s/%s after a refused request: %v, want NotFound", bucket, key, err)
	}
}

// TestStreamingUploads: the streaming modes read back byte-exact when
// intact, and a flipped byte in a signed chunk, a wrong chunk signature or a
// wrong checksum trailer is refused with S3's error code, storing nothing.
// (With the backend turning a body read error into EOF, the five refused
// uploads are stored and this test fails.)
func TestStreamingUploads(t *testing.T) {
	b := "streaming"
	mkBucket(t, root(), b)
	body := randBytes(11, 200_000)
	good := "x-amz-checksum-crc32c:" + crcB64(body)
	bad := "x-amz-checksum-crc32c:" + crcB64(body[1:])
	flipInFirstChunk := func(w []byte) []byte {
		i := bytes.Index(w, []byte("\r\n")) + 100 // a byte of the first chunk's data
		w = bytes.Clone(w)
		w[i] ^= 0x40
		return w
	}
	wrongSignature := func(w []byte) []byte {
		i := bytes.Index(w, []byte("chunk-signature=")) + len("chunk-signature=")
		w = bytes.Clone(w)
		if w[i] == '0' {
			w[i] = '1'
		} else {
			w[i] = '0'
		}
		return w
	}
	for _, tc := range []struct {
		name, mode, trailer string
		tamper              func([]byte) []byte
		wantStatus          int
		wantCode            string
	}{
		{"signed", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "", nil, 200, ""},
		{"signed-trailer", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", good, nil, 200, ""},
		{"unsigned-trailer", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", good, nil, 200, ""},
		{"signed-flipped-byte", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "", flipInFirstChunk, 403, "SignatureDoesNotMatch"},
		{"signed-wrong-chunk-signature", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "", wrongSignature, 403, "SignatureDoesNotMatch"},
		{"unsigned-wrong-trailer", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", bad, nil, 400, "BadDigest"},
		{"unsigned-flipped-byte", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", good, flipInFirstChunk, 400, "BadDigest"},
		{"signed-trailer-wrong-trailer", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", bad, nil, 400, "BadDigest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, resp := streamingPut(t, tc.mode, b, tc.name, body, 64<<10, tc.trailer, tc.tamper)
			if status != tc.wantStatus || !strings.Contains(resp, tc.wantCode) {
				t.Fatalf("status %d %s, want %d %s", status, resp, tc.wantStatus, tc.wantCode)
			}
			if tc.wantStatus != 200 {
				mustBeAbsent(t, b, tc.name)
				return
			}
			if got := get(t, root(), b, tc.name, ""); !bytes.Equal(got, body) {
				t.Fatalf("read back %d bytes, not the ones sent", len(got))
			}
		})
	}
}

// TestExpiredPresignedURL: a V4 presigned PUT works while valid and is
// refused (AccessDenied) once expired, storing nothing; a presigned URL
// whose signature was altered is refused.
func TestExpiredPresignedURL(t *testing.T) {
	c, b := root(), "presign"
	mkBucket(t, c, b)
	put := func(u string, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPut, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer closeT(t, resp.Body)
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	pre := func(key string, signingTime time.Time, expires time.Duration) string {
		p, err := s3.NewPresignClient(c, func(o *s3.PresignOptions) {
			o.Presigner = presignerAt{v4.NewSigner(), signingTime}
		}).PresignPutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: &key}, s3.WithPresignExpires(expires))
		if err != nil {
			t.Fatal(err)
		}
		return p.URL
	}
	if status, resp := put(pre("valid", time.Now(), time.Minute), "hello"); status != 200 {
		t.Fatalf("valid presigned PUT: %d %s", status, resp)
	}
	if got := get(t, c, b, "valid", ""); string(got) != "hello" {
		t.Fatalf("presigned PUT stored %q", got)
	}
	if status, resp := put(pre("expired", time.Now().Add(-2*time.Minute), time.Minute), "late"); status != 403 || !strings.Contains(resp, "AccessDenied") {
		t.Fatalf("expired presigned PUT: %d %s, want 403 AccessDenied", status, resp)
	}
	mustBeAbsent(t, b, "expired")
	u, err := url.Parse(pre("altered", time.Now(), time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("X-Amz-Expires", "604800") // a longer life than was signed
	u.RawQuery = q.Encode()
	if status, resp := put(u.String(), "altered"); status != 403 || !strings.Contains(resp, "SignatureDoesNotMatch") {
		t.Fatalf("altered presigned PUT: %d %s, want 403 SignatureDoesNotMatch", status, resp)
	}
	mustBeAbsent(t, b, "altered")
}

// presignerAt signs as if at a fixed time, to make a URL that has already
// expired.
type presignerAt struct {
	s  *v4.Signer
	at time.Time
}

func (p presignerAt) PresignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string,
	_ time.Time, optFns ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return p.s.PresignHTTP(ctx, creds, r, payloadHash, service, region, p.at, optFns...)
}

// TestMultipartRefusals: completing with a part that was never uploaded
// (InvalidPart), with parts out of order (InvalidPartOrder) or with a wrong
// x-amz-mp-object-size (InvalidRequest) is refused and leaves no key; the
// upload can still be completed correctly afterwards, and that completion
// repeated answers the object (a retry after a lost answer).
func TestMultipartRefusals(t *testing.T) {
	c, b, key := root(), "mprefuse", "obj"
	mkBucket(t, c, b)
	data := randBytes(5, 5<<20+10)
	up, err := c.CreateMultipartUpload(testCtx(t), &s3.CreateMultipartUploadInput{Bucket: &b, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	for i, p := range [][]byte{data[:5<<20], data[5<<20:]} {
		out, err := c.UploadPart(testCtx(t), &s3.UploadPartInput{Bucket: &b, Key: &key, UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag})
	}
	complete := func(ps ...types.CompletedPart) error {
		_, err := c.CompleteMultipartUpload(testCtx(t), &s3.CompleteMultipartUploadInput{Bucket: &b, Key: &key, UploadId: up.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: ps}})
		return err
	}
	missing := types.CompletedPart{PartNumber: aws.Int32(3), ETag: parts[1].ETag}
	if err := complete(parts[0], missing); apiCode(err) != "InvalidPart" {
		t.Fatalf("complete with a part never uploaded: %v, want InvalidPart", err)
	}
	mustBeAbsent(t, b, key)
	wrongETag := types.CompletedPart{PartNumber: aws.Int32(2), ETag: parts[0].ETag}
	if err := complete(parts[0], wrongETag); apiCode(err) != "InvalidPart" {
		t.Fatalf("complete with a wrong ETag: %v, want InvalidPart", err)
	}
	mustBeAbsent(t, b, key)
	if err := complete(parts[1], parts[0]); apiCode(err) != "InvalidPartOrder" {
		t.Fatalf("complete with parts out of order: %v, want InvalidPartOrder", err)
	}
	mustBeAbsent(t, b, key)
	_, err = c.CompleteMultipartUpload(testCtx(t), &s3.CompleteMultipartUploadInput{Bucket: &b, Key: &key, UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}, MpuObjectSize: aws.Int64(int64(len(data)) + 1)})
	if apiCode(err) != "InvalidRequest" {
		t.Fatalf("complete with a wrong x-amz-mp-object-size: %v, want InvalidRequest", err)
	}
	mustBeAbsent(t, b, key)
	if err := complete(parts...); err != nil {
		t.Fatalf("complete after the refusals: %v", err)
	}
	// The same completion again (a client whose answer was lost retries):
	// answered with the object, as S3 does.
	if err := complete(parts...); err != nil {
		t.Fatalf("a repeated completion: %v", err)
	}
	if err := complete(parts[0]); apiCode(err) != "NoSuchUpload" {
		t.Fatalf("a completion of other parts of the completed upload: %v, want NoSuchUpload", err)
	}
	if got := get(t, c, b, key, ""); !bytes.Equal(got, data) {
		t.Fatal("the completed object differs")
	}
}

// TestNewerChecksumAlgorithms: an x-amz-checksum-sha512 (and the other
// algorithms newer SDKs send: MD5, XXHASH64/3/128) is verified — a wrong
// one refused with BadDigest, nothing stored — and answered on HEAD.
// (Before, only five algorithms were looked at and the rest stored unchecked.)
func TestNewerChecksumAlgorithms(t *testing.T) {
	c, b := root(), "newsums"
	mkBucket(t, c, b)
	body := []byte("checked with SHA-512")
	sum := sha512.Sum512(body)
	good := base64.StdEncoding.EncodeToString(sum[:])
	bad := base64.StdEncoding.EncodeToString(make([]byte, 64))
	_, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: aws.String("bad"), Body: bytes.NewReader(body), ChecksumSHA512: &bad})
	if apiCode(err) != "BadDigest" {
		t.Fatalf("a wrong SHA-512: %v, want BadDigest", err)
	}
	mustBeAbsent(t, b, "bad")
	if _, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: aws.String("good"), Body: bytes.NewReader(body), ChecksumSHA512: &good}); err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: aws.String("good"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil || aws.ToString(h.ChecksumSHA512) != good {
		t.Fatalf("HEAD: SHA-512 %q (want %q), %v", aws.ToString(h.ChecksumSHA512), good, err)
	}
}
