package s3gw_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw"
	"github.com/spindle-store/spindle/internal/server"
)

// One embedded cluster and one gateway serve every test of the package
// (versitygw's embedgw runs one gateway per process).
var (
	endpoint string
	metaCli  *metaapi.Client
)

const (
	rootAccess = "AKIATESTROOT00000001"
	rootSecret = "test-root-secret-0123456789abcdef"
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) (code int) {
	dir, err := os.MkdirTemp("", "spindle-s3gw-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { code = atExit(code, "removing the test directory", os.RemoveAll(dir)) }()
	bin := filepath.Join(dir, "spindle")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/spindle-store/spindle/cmd/spindle")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building spindle: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.Start(ctx, server.Config{
		Dir: filepath.Join(dir, "srv"), MetaListen: "127.0.0.1:0", Binary: bin,
		Meta:         meta.Config{HeartbeatInterval: 100 * time.Millisecond},
		DatanodeArgs: []string{"--heartbeat-interval", "100ms", "--tick", "50ms"},
		Logger:       quiet,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { code = atExit(code, "stopping the server", srv.Close()) }()
	metaCli = srv.Meta()
	// portpick:allow the gateway (versitygw's embedgw) binds an address
	// itself and reports no port 0's: no listener to hand it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil { // the gateway listens itself; the port was free a moment ago
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	endpoint = "http://" + addr
	done := make(chan error, 1)
	go func() {
		done <- s3gw.Run(ctx, s3gw.Config{Meta: srv.MetaAddr(), TLS: srv.ClientTLS(), Listen: addr, AccessKey: rootAccess, SecretKey: rootSecret, Logger: quiet})
	}()
	if err := waitListening(addr, done); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code = m.Run()
	cancel()
	return atExit(code, "the s3 gateway", <-done)
}

// waitListening dials addr until it answers (bounded: 100 × 100 ms) or the
// gateway ends.
func waitListening(addr string, done <-chan error) error {
	for range 100 {
		select {
		case err := <-done:
			return fmt.Errorf("gateway ended: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			return c.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("gateway not listening on %s after 10 s", addr)
}

func client(access, secret string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials:      credentials.NewStaticCredentialsProvider(access, secret, ""),
		RetryMaxAttempts: 1,
	})
}

func root() *s3.Client { return client(rootAccess, rootSecret) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mkBucket(t *testing.T, c *s3.Client, name string) {
	t.Helper()
	if _, err := c.CreateBucket(testCtx(t), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
}

func get(t *testing.T, c *s3.Client, bucket, key, rng string) []byte {
	t.Helper()
	in := &s3.GetObjectInput{Bucket: &bucket, Key: &key}
	if rng != "" {
		in.Range = &rng
	}
	out, err := c.GetObject(testCtx(t), in)
	if err != nil {
		t.Fatalf("get %s/%s %s: %v", bucket, key, rng, err)
	}
	defer closeT(t, out.Body)
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("get %s/%s body: %v", bucket, key, err)
	}
	return b
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func crcB64(b []byte) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32c.Checksum(b)))
}

// TestConcurrentPutETags: PUTs at once (the gateway hashes their ETags
// together, in md5batch's lanes, while the chunks are written), of sizes
// that span several of the key client's chunks (whose buffers it reuses)
// and start a chunk off a 64-byte boundary, answer and store the MD5 of
// each object's bytes.
func TestConcurrentPutETags(t *testing.T) {
	c, b := root(), "etags"
	mkBucket(t, c, b)
	const puts = 16
	var wg sync.WaitGroup
	errs := make(chan error, puts)
	for i := range puts {
		wg.Go(func() {
			n := (1+i%9)<<20 + i*4097
			data := randBytes(uint64(1000+i), n)
			key := fmt.Sprintf("obj/%d", i)
			out, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: &key, Body: bytes.NewReader(data)})
			if err != nil {
				errs <- fmt.Errorf("put %d bytes: %w", n, err)
				return
			}
			sum := md5.Sum(data)
			want := `"` + hex.EncodeToString(sum[:]) + `"`
			h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: &key})
			if err != nil {
				errs <- err
				return
			}
			if aws.ToString(out.ETag) != want || aws.ToString(h.ETag) != want {
				errs <- fmt.Errorf("%d bytes: ETag %s (put), %s (head), want %s", n, aws.ToString(out.ETag), aws.ToString(h.ETag), want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestPutGetSizes: objects of 0 B, 1 B, 1 KiB and 3 MiB read back
// byte-exact with their MD5 as ETag, their metadata and, on a whole-object
// read with ChecksumMode, the CRC32C the client sent; a range reads its
// bytes.
func TestPutGetSizes(t *testing.T) {
	c, b := root(), "sizes"
	mkBucket(t, c, b)
	for i, n := range []int{0, 1, 1024, 3 << 20} {
		key := fmt.Sprintf("obj/%d", n)
		data := randBytes(uint64(i), n)
		_, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: &key, Body: bytes.NewReader(data),
			ContentType: aws.String("text/x-test"), Metadata: map[string]string{"color": "blue"},
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
		if err != nil {
			t.Fatalf("put %d bytes: %v", n, err)
		}
		if got := get(t, c, b, key, ""); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d bytes, not the same", n, len(got))
		}
		h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: &key, ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(data)
		if want := `"` + hex.EncodeToString(sum[:]) + `"`; aws.ToString(h.ETag) != want {
			t.Fatalf("%d bytes: ETag %s, want %s", n, aws.ToString(h.ETag), want)
		}
		if aws.ToString(h.ContentType) != "text/x-test" || h.Metadata["color"] != "blue" || aws.ToInt64(h.ContentLength) != int64(n) {
			t.Fatalf("%d bytes: head %s %v %d", n, aws.ToString(h.ContentType), h.Metadata, aws.ToInt64(h.ContentLength))
		}
		if aws.ToString(h.ChecksumCRC32C) != crcB64(data) {
			t.Fatalf("%d bytes: CRC32C %s, want %s", n, aws.ToString(h.ChecksumCRC32C), crcB64(data))
		}
		if n > 1000 {
			if got := get(t, c, b, key, "bytes=100-999"); !bytes.Equal(got, data[100:1000]) {
				t.Fatalf("%d bytes: range 100-999 read %d bytes, not the same", n, len(got))
			}
		}
	}
}

// TestMultipart: a 2-part upload (5 MiB + 1 MiB, parts sent out of order)
// reads back byte-exact with ETag md5-of-md5s-2 and the whole object's
// CRC32C; a part below 5 MiB that is not the last is refused with
// EntityTooSmall and leaves no key.
func TestMultipart(t *testing.T) {
	c, b, key := root(), "multipart", "big/object"
	mkBucket(t, c, b)
	data := randBytes(42, 6<<20)
	parts := [][]byte{data[:5<<20], data[5<<20:]}
	up, err := c.CreateMultipartUpload(testCtx(t), &s3.CreateMultipartUploadInput{Bucket: &b, Key: &key, ContentType: aws.String("application/x-big")})
	if err != nil {
		t.Fatal(err)
	}
	etags := make([]string, 2)
	md5s := md5.New()
	for _, i := range []int{1, 0} {
		out, err := c.UploadPart(testCtx(t), &s3.UploadPartInput{Bucket: &b, Key: &key, UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(parts[i])})
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		etags[i] = aws.ToString(out.ETag)
	}
	for _, p := range parts {
		s := md5.Sum(p)
		md5s.Write(s[:])
	}
	lp, err := c.ListParts(testCtx(t), &s3.ListPartsInput{Bucket: &b, Key: &key, UploadId: up.UploadId})
	if err != nil || len(lp.Parts) != 2 || aws.ToInt32(lp.Parts[0].PartNumber) != 1 || aws.ToInt64(lp.Parts[1].Size) != 1<<20 {
		t.Fatalf("list parts: %+v %v", lp, err)
	}
	_, err = c.CompleteMultipartUpload(testCtx(t), &s3.CompleteMultipartUploadInput{Bucket: &b, Key: &key, UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
			{PartNumber: aws.Int32(1), ETag: &etags[0]}, {PartNumber: aws.Int32(2), ETag: &etags[1]}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, b, key, ""); !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, not the same", len(got))
	}
	if got := get(t, c, b, key, "bytes=5242000-5243999"); !bytes.Equal(got, data[5242000:5244000]) {
		t.Fatal("a range across the parts differs")
	}
	h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: &key, ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + hex.EncodeToString(md5s.Sum(nil)) + `-2"`; aws.ToString(h.ETag) != want {
		t.Fatalf("ETag %s, want %s", aws.ToString(h.ETag), want)
	}
	if aws.ToString(h.ChecksumCRC32C) != crcB64(data) || aws.ToString(h.ContentType) != "application/x-big" {
		t.Fatalf("CRC32C %s (want %s), content type %s", aws.ToString(h.ChecksumCRC32C), crcB64(data), aws.ToString(h.ContentType))
	}
	if l, err := c.ListMultipartUploads(testCtx(t), &s3.ListMultipartUploadsInput{Bucket: &b}); err != nil || len(l.Uploads) != 0 {
		t.Fatalf("uploads left after completion: %+v %v", l, err)
	}

	// A small part that is not the last.
	key2 := "big/small-parts"
	up2, err := c.CreateMultipartUpload(testCtx(t), &s3.CreateMultipartUploadInput{Bucket: &b, Key: &key2})
	if err != nil {
		t.Fatal(err)
	}
	var cps []types.CompletedPart
	for i := range 2 {
		out, err := c.UploadPart(testCtx(t), &s3.UploadPartInput{Bucket: &b, Key: &key2, UploadId: up2.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(data[:1024])})
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag})
	}
	_, err = c.CompleteMultipartUpload(testCtx(t), &s3.CompleteMultipartUploadInput{Bucket: &b, Key: &key2, UploadId: up2.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cps}})
	if apiCode(err) != "EntityTooSmall" {
		t.Fatalf("complete with a small first part: %v, want EntityTooSmall", err)
	}
	if _, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: &key2}); err == nil {
		t.Fatal("a refused completion left a key")
	}
	if _, err := c.AbortMultipartUpload(testCtx(t), &s3.AbortMultipartUploadInput{Bucket: &b, Key: &key2, UploadId: up2.UploadId}); err != nil {
		t.Fatal(err)
	}
}

// TestListing: ListObjectsV2 pages of 7 return every key once, in order;
// with a delimiter, the keys under a sub-"directory" are one common prefix.
func TestListing(t *testing.T) {
	c, b := root(), "listing"
	mkBucket(t, c, b)
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("flat/%02d", i))
	}
	for _, k := range append(append([]string{}, want...), "flat/sub/a", "flat/sub/b", "other") {
		if _, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var tok *string
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("more than 10 pages")
		}
		out, err := c.ListObjectsV2(testCtx(t), &s3.ListObjectsV2Input{Bucket: &b, Prefix: aws.String("flat/"), Delimiter: aws.String("/"),
			MaxKeys: aws.Int32(7), ContinuationToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			got = append(got, aws.ToString(o.Key))
		}
		for _, p := range out.CommonPrefixes {
			got = append(got, "prefix:"+aws.ToString(p.Prefix))
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		tok = out.NextContinuationToken
	}
	if w := append(want, "prefix:flat/sub/"); strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("listed\n%v\nwant\n%v", got, w)
	}
}

// TestAuth: a wrong secret is refused (SignatureDoesNotMatch) and stores
// nothing; a presigned GET (V4, and V2) reads the object with plain HTTP; a
// second user
// (created in the meta service) cannot read the root's bucket (403) but
// owns the bucket it creates, which the root can read.
func TestAuth(t *testing.T) {
	c, b := root(), "auth"
	mkBucket(t, c, b)
	if _, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: aws.String("k"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	_, err := client(rootAccess, "not-the-secret-0123456789").PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: aws.String("bad"), Body: strings.NewReader("x")})
	if apiCode(err) != "SignatureDoesNotMatch" {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: aws.String("bad")}); err == nil {
		t.Fatal("a refused PUT stored a key")
	}
	pre, err := s3.NewPresignClient(c).PresignGetObject(testCtx(t), &s3.GetObjectInput{Bucket: &b, Key: aws.String("k")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(pre.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	closeT(t, resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Fatalf("presigned GET: %d %q", resp.StatusCode, body)
	}

	// A Signature V2 presigned URL (aws-cli v1's `aws s3 presign`): read
	// while valid, refused tampered or expired.
	v2 := func(expires int64, secret string) string {
		exp := fmt.Sprint(expires)
		mac := hmac.New(sha1.New, []byte(secret))
		mac.Write([]byte("GET\n\n\n" + exp + "\n/auth/k"))
		return fmt.Sprintf("%s/auth/k?AWSAccessKeyId=%s&Expires=%s&Signature=%s", endpoint, rootAccess, exp,
			url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil))))
	}
	for _, tc := range []struct {
		url  string
		code int
	}{
		{v2(time.Now().Unix()+60, rootSecret), 200},
		{v2(time.Now().Unix()+60, "a-wrong-secret-0123456789"), 403},
		{v2(time.Now().Unix()-1, rootSecret), 403},
	} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		closeT(t, resp.Body)
		if resp.StatusCode != tc.code || (tc.code == 200 && string(body) != "hello") {
			t.Fatalf("V2 presigned GET %s: %d %q, want %d", tc.url, resp.StatusCode, body, tc.code)
		}
	}

	// A V2 presigned PUT (boto3's default presigner for this endpoint):
	// Content-Type is part of what was signed.
	v2put := func(expires int64, contentType string) int {
		exp := fmt.Sprint(expires)
		mac := hmac.New(sha1.New, []byte(rootSecret))
		mac.Write([]byte("PUT\n\napplication/x-signed\n" + exp + "\n/auth/v2put"))
		u := fmt.Sprintf("%s/auth/v2put?AWSAccessKeyId=%s&Expires=%s&Signature=%s", endpoint, rootAccess, exp,
			url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil))))
		req, _ := http.NewRequest(http.MethodPut, u, strings.NewReader("put by V2"))
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		closeT(t, resp.Body)
		return resp.StatusCode
	}
	if code := v2put(time.Now().Unix()-1, "application/x-signed"); code != 403 {
		t.Fatalf("expired V2 presigned PUT: %d", code)
	}
	if code := v2put(time.Now().Unix()+60, "text/other"); code != 403 {
		t.Fatalf("V2 presigned PUT with another Content-Type: %d", code)
	}
	if _, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: aws.String("v2put")}); err == nil {
		t.Fatal("a refused V2 presigned PUT stored a key")
	}
	if code := v2put(time.Now().Unix()+60, "application/x-signed"); code != 200 {
		t.Fatalf("V2 presigned PUT: %d", code)
	}
	if got := get(t, c, b, "v2put", ""); string(got) != "put by V2" {
		t.Fatalf("V2 presigned PUT stored %q", got)
	}

	u, err := metaCli.CreateUser(testCtx(t), metaapi.CreateUser{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice := client(u.AccessKey, u.SecretKey)
	if _, err := alice.GetObject(testCtx(t), &s3.GetObjectInput{Bucket: &b, Key: aws.String("k")}); apiCode(err) != "AccessDenied" {
		t.Fatalf("another user's read of the root's bucket: %v, want AccessDenied", err)
	}
	mkBucket(t, alice, "alices")
	if _, err := alice.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: aws.String("alices"), Key: aws.String("a"), Body: strings.NewReader("mine")}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, "alices", "a", ""); string(got) != "mine" {
		t.Fatalf("root reads %q", got)
	}
	l, err := alice.ListBuckets(testCtx(t), &s3.ListBucketsInput{})
	if err != nil || len(l.Buckets) != 1 || aws.ToString(l.Buckets[0].Name) != "alices" {
		t.Fatalf("alice's buckets: %+v %v", l, err)
	}
}

// TestChecksumAndConditions: a PUT whose CRC32C header does not match its
// body is refused (BadDigest) and leaves the old version; If-None-Match *
// refuses to overwrite (412); CopyObject copies bytes and metadata;
// DeleteObjects deletes a batch.
func TestChecksumAndConditions(t *testing.T) {
	c, b := root(), "integrity"
	mkBucket(t, c, b)
	key := "k"
	if _, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: &key, Body: strings.NewReader("first"),
		Metadata: map[string]string{"v": "1"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: &key, Body: strings.NewReader("second"),
		ChecksumCRC32C: aws.String(crcB64([]byte("not second")))})
	if code := apiCode(err); code != "BadDigest" && code != "InvalidDigest" {
		t.Fatalf("wrong CRC32C: %v (%s)", err, code)
	}
	if got := get(t, c, b, key, ""); string(got) != "first" {
		t.Fatalf("after a refused PUT the key reads %q", got)
	}
	_, err = c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: &key, Body: strings.NewReader("third"), IfNoneMatch: aws.String("*")})
	if apiCode(err) != "PreconditionFailed" {
		t.Fatalf("If-None-Match * on an existing key: %v", err)
	}
	if _, err := c.CopyObject(testCtx(t), &s3.CopyObjectInput{Bucket: &b, Key: aws.String("copy"), CopySource: aws.String(b + "/" + key)}); err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: aws.String("copy")})
	if err != nil || h.Metadata["v"] != "1" {
		t.Fatalf("copy: %+v %v", h, err)
	}
	if got := get(t, c, b, "copy", ""); string(got) != "first" {
		t.Fatalf("copy reads %q", got)
	}
	out, err := c.DeleteObjects(testCtx(t), &s3.DeleteObjectsInput{Bucket: &b, Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("k")}, {Key: aws.String("copy")}, {Key: aws.String("never-was")}}}})
	if err != nil || len(out.Deleted) != 3 || len(out.Errors) != 0 {
		t.Fatalf("delete objects: %+v %v", out, err)
	}
	l, err := c.ListObjectsV2(testCtx(t), &s3.ListObjectsV2Input{Bucket: &b})
	if err != nil || aws.ToInt32(l.KeyCount) != 0 {
		t.Fatalf("after delete: %+v %v", l, err)
	}
	if _, err := c.DeleteBucket(testCtx(t), &s3.DeleteBucketInput{Bucket: &b}); err != nil {
		t.Fatal(err)
	}
}

// TestListingEncodingURL: with encoding-type=url, keys and prefixes come
// back URL-encoded (SDKs that ask for it decode them), so a key holding
// '+', '%', a space or a non-ASCII letter is listed unchanged after
// decoding; without it they come back raw.
func TestListingEncodingURL(t *testing.T) {
	c, b := root(), "encoding"
	mkBucket(t, c, b)
	keys := []string{"dir one/a+b%41é", "dir one/plain", "x&y=z"}
	for _, k := range keys {
		if _, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, enc := range []types.EncodingType{"", types.EncodingTypeUrl} {
		out, err := c.ListObjectsV2(testCtx(t), &s3.ListObjectsV2Input{Bucket: &b, EncodingType: enc})
		if err != nil {
			t.Fatal(err)
		}
		var got, raw []string
		for _, o := range out.Contents {
			k := aws.ToString(o.Key)
			raw = append(raw, k)
			if enc == types.EncodingTypeUrl {
				if k, err = url.QueryUnescape(k); err != nil {
					t.Fatal(err)
				}
			}
			got = append(got, k)
		}
		if want := "dir%20one/a%2Bb%2541%C3%A9|dir%20one/plain|x%26y%3Dz"; enc == types.EncodingTypeUrl && strings.Join(raw, "|") != want {
			t.Fatalf("URL-encoded keys %q, want %q", raw, want)
		}
		if strings.Join(got, "|") != strings.Join(keys, "|") {
			t.Fatalf("encoding %q: listed %q, want %q", enc, got, keys)
		}
		p, err := c.ListObjectsV2(testCtx(t), &s3.ListObjectsV2Input{Bucket: &b, Delimiter: aws.String("/"), EncodingType: enc})
		if err != nil || len(p.CommonPrefixes) != 1 {
			t.Fatalf("prefixes: %+v %v", p, err)
		}
		want := map[types.EncodingType]string{"": "dir one/", types.EncodingTypeUrl: "dir%20one/"}[enc]
		if got := aws.ToString(p.CommonPrefixes[0].Prefix); got != want {
			t.Fatalf("encoding %q: common prefix %q, want %q", enc, got, want)
		}
	}
}

// TestS3Details: what versitygw's suite found — a website redirect location
// kept and answered on GET/HEAD; a key past 1,024 bytes refused as
// KeyTooLongError on PUT, GET and DELETE; ListBuckets paged by
// max-buckets and continuation token; absent markers absent from listings.
func TestS3Details(t *testing.T) {
	c, b := root(), "details"
	mkBucket(t, c, b)
	if _, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: aws.String("r"), Body: strings.NewReader("x"),
		WebsiteRedirectLocation: aws.String("/elsewhere")}); err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: aws.String("r")})
	if err != nil || aws.ToString(h.WebsiteRedirectLocation) != "/elsewhere" {
		t.Fatalf("head: redirect %q, %v", aws.ToString(h.WebsiteRedirectLocation), err)
	}
	if _, err := c.CopyObject(testCtx(t), &s3.CopyObjectInput{Bucket: &b, Key: aws.String("r2"), CopySource: aws.String(b + "/r")}); err != nil {
		t.Fatal(err)
	}
	if h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: aws.String("r2")}); err != nil || h.WebsiteRedirectLocation != nil {
		t.Fatalf("a copy (metadata COPY) carries redirect %q, %v; S3 does not copy it", aws.ToString(h.WebsiteRedirectLocation), err)
	}
	if _, err := c.CopyObject(testCtx(t), &s3.CopyObjectInput{Bucket: &b, Key: aws.String("r2"), CopySource: aws.String(b + "/r2"),
		Metadata: map[string]string{"Hello": "World"}, MetadataDirective: types.MetadataDirectiveReplace}); err != nil {
		t.Fatal(err)
	}
	if h, err := c.HeadObject(testCtx(t), &s3.HeadObjectInput{Bucket: &b, Key: aws.String("r2")}); err != nil || h.Metadata["hello"] != "World" {
		t.Fatalf("a copy onto itself with new metadata: %v, %v", h.Metadata, err)
	}
	long := strings.Repeat("k", 1025)
	if _, err := c.PutObject(testCtx(t), &s3.PutObjectInput{Bucket: &b, Key: &long, Body: strings.NewReader("x")}); apiCode(err) != "KeyTooLongError" {
		t.Fatalf("put of a 1,025-byte key: %v", err)
	}
	if _, err := c.DeleteObject(testCtx(t), &s3.DeleteObjectInput{Bucket: &b, Key: &long}); apiCode(err) != "KeyTooLongError" {
		t.Fatalf("delete of a 1,025-byte key: %v", err)
	}
	for _, n := range []string{"details-p1", "details-p2", "details-p3"} {
		mkBucket(t, c, n)
	}
	var names []string
	in := &s3.ListBucketsInput{Prefix: aws.String("details-p"), MaxBuckets: aws.Int32(2)}
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages of buckets")
		}
		out, err := c.ListBuckets(testCtx(t), in)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Buckets) > 2 {
			t.Fatalf("a page of %d buckets with max-buckets 2", len(out.Buckets))
		}
		for _, bk := range out.Buckets {
			names = append(names, aws.ToString(bk.Name))
		}
		if aws.ToString(out.ContinuationToken) == "" {
			break
		}
		in.ContinuationToken = out.ContinuationToken
	}
	if strings.Join(names, ",") != "details-p1,details-p2,details-p3" {
		t.Fatalf("paged buckets %v", names)
	}
	l, err := c.ListObjects(testCtx(t), &s3.ListObjectsInput{Bucket: &b})
	if err != nil || l.Marker == nil || *l.Marker != "" || l.Prefix == nil || *l.Prefix != "" {
		t.Fatalf("ListObjects without a marker answers Marker %v, Prefix %v (%v): S3 answers both, empty", l.Marker, l.Prefix, err)
	}
	l2, err := c.ListObjectsV2(testCtx(t), &s3.ListObjectsV2Input{Bucket: &b})
	if err != nil || l2.StartAfter != nil {
		t.Fatalf("ListObjectsV2 without start-after answers StartAfter %q (%v)", aws.ToString(l2.StartAfter), err)
	}
}
