package s3gw_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

func tagSet(tags map[string]string) *types.Tagging {
	t := &types.Tagging{}
	for k, v := range tags {
		t.TagSet = append(t.TagSet, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	return t
}

func tagMap(ts []types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range ts {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

func wantCode(t *testing.T, err error, code, what string) {
	t.Helper()
	if apiCode(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

// TestObjectTagging: tags at PUT (x-amz-tagging, lengths in Unicode
// characters), in GetObject's x-amz-tagging-count, replaced and deleted,
// copied or replaced by CopyObject's tagging directive, taken from
// CreateMultipartUpload; S3's limits and error codes.
func TestObjectTagging(t *testing.T) {
	c, b := root(), "tagging"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	long := strings.Repeat("é", 128) // 128 characters, 256 bytes
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String("k"), Body: strings.NewReader("v"),
		Tagging: aws.String("color=blue&size=" + strings.Repeat("%C3%A9", 2) + "&" + long + "=x")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &b, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	closeT(t, g.Body)
	if aws.ToInt32(g.TagCount) != 3 {
		t.Fatalf("x-amz-tagging-count %v, want 3", aws.ToInt32(g.TagCount))
	}
	got, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &b, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if m := tagMap(got.TagSet); len(m) != 3 || m["color"] != "blue" || m["size"] != "éé" || m[long] != "x" {
		t.Fatalf("tags %v", m)
	}
	for _, tc := range []struct{ tagging, code string }{
		{"a=1&a=2", "InvalidArgument"},
		{"a=1&b", ""},
		{"a?=1", "InvalidTag"},
		{"a=" + strings.Repeat("v", 257), "InvalidTag"},
		{strings.Repeat("k", 129) + "=v", "InvalidTag"},
		{"1&2&3&4&5&6&7&8&9&10&11", "BadRequest"},
	} {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String("bad"), Body: strings.NewReader("v"), Tagging: aws.String(tc.tagging)})
		if tc.code == "" && err != nil || tc.code != "" && apiCode(err) != tc.code {
			t.Fatalf("x-amz-tagging %.40q: %v, want %q", tc.tagging, err, tc.code)
		}
	}
	// PutObjectTagging replaces the set; limits as S3's
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &b, Key: aws.String("k"), Tagging: tagSet(map[string]string{"only": "one"})}); err != nil {
		t.Fatal(err)
	}
	eleven := map[string]string{}
	for i := range 11 {
		eleven[fmt.Sprint("k", i)] = "v"
	}
	_, err = c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &b, Key: aws.String("k"), Tagging: tagSet(eleven)})
	wantCode(t, err, "BadRequest", "11 tags")
	_, err = c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &b, Key: aws.String("k"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("d"), Value: aws.String("1")}, {Key: aws.String("d"), Value: aws.String("2")}}}})
	wantCode(t, err, "InvalidTag", "duplicate keys")
	_, err = c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &b, Key: aws.String("none"), Tagging: tagSet(map[string]string{"a": "b"})})
	wantCode(t, err, "NoSuchKey", "tagging a missing key")

	// copies: COPY keeps the source's tags, REPLACE takes the request's
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b, Key: aws.String("copy"), CopySource: aws.String(b + "/k")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b, Key: aws.String("replaced"), CopySource: aws.String(b + "/k"),
		TaggingDirective: types.TaggingDirectiveReplace, Tagging: aws.String("new=tag")}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"copy": "only=one", "replaced": "new=tag"} {
		got, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &b, Key: &key})
		if err != nil {
			t.Fatal(err)
		}
		if m := tagMap(got.TagSet); len(m) != 1 || fmt.Sprint(m) != fmt.Sprint(map[string]string{strings.Split(want, "=")[0]: strings.Split(want, "=")[1]}) {
			t.Fatalf("%s: tags %v, want %s", key, m, want)
		}
	}
	// a new version has only the tags its PUT gave
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String("k"), Body: strings.NewReader("v2")}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &b, Key: aws.String("k")}); err != nil || len(got.TagSet) != 0 {
		t.Fatalf("tags of a new version: %v, %v", got, err)
	}
	if _, err := c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: &b, Key: aws.String("copy")}); err != nil {
		t.Fatal(err)
	}
	if h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String("copy")}); err != nil || h.TagCount != nil {
		t.Fatalf("after DeleteObjectTagging: %v, %v", h.TagCount, err)
	}
	// multipart: the upload's tags become the object's
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &b, Key: aws.String("mp"), Tagging: aws.String("mp=yes")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &b, Key: aws.String("mp"), UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("part")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &b, Key: aws.String("mp"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: p.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &b, Key: aws.String("mp")}); err != nil || tagMap(got.TagSet)["mp"] != "yes" {
		t.Fatalf("multipart object's tags: %v, %v", got, err)
	}
}

// TestBucketTagging: Put/Get/Delete, at most 50 tags, NoSuchTagSet when
// none, tags given to CreateBucket.
func TestBucketTagging(t *testing.T) {
	c, b := root(), "bucket-tagging"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	_, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &b})
	wantCode(t, err, "NoSuchTagSet", "unset")
	fifty := map[string]string{}
	for i := range 50 {
		fifty[fmt.Sprint("k", i)] = fmt.Sprint(i)
	}
	if _, err := c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: &b, Tagging: tagSet(fifty)}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &b})
	if err != nil || len(got.TagSet) != 50 || tagMap(got.TagSet)["k49"] != "49" {
		t.Fatalf("bucket tags: %v, %v", got, err)
	}
	fifty["k50"] = "x"
	_, err = c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: &b, Tagging: tagSet(fifty)})
	wantCode(t, err, "BadRequest", "51 bucket tags")
	if _, err := c.DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: &b}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &b})
	wantCode(t, err, "NoSuchTagSet", "deleted")
	_, err = c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("no-such-bucket")})
	wantCode(t, err, "NoSuchBucket", "missing bucket")
	nb := "bucket-tagged-at-create"
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &nb, CreateBucketConfiguration: &types.CreateBucketConfiguration{
		Tags: []types.Tag{{Key: aws.String("team"), Value: aws.String("storage")}}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &nb}); err != nil || tagMap(got.TagSet)["team"] != "storage" {
		t.Fatalf("tags given at create: %v, %v", got, err)
	}
}

// TestCORS: the rules are stored; a preflight OPTIONS is answered from
// them (an origin with one wildcard, the method, the headers, MaxAge),
// refused (403) when no rule allows it; an actual request with an Origin
// gets the CORS headers (ExposeHeaders); deleted rules answer
// NoSuchCORSConfiguration.
func TestCORS(t *testing.T) {
	c, b := root(), "cors"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	_, err := c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: &b})
	wantCode(t, err, "NoSuchCORSConfiguration", "unset")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: &b, CORSConfiguration: &types.CORSConfiguration{CORSRules: []types.CORSRule{{
		AllowedOrigins: []string{"https://*.example.com"}, AllowedMethods: []string{"GET", "PUT"},
		AllowedHeaders: []string{"x-amz-meta-*", "content-type"}, ExposeHeaders: []string{"ETag", "x-amz-meta-color"}, MaxAgeSeconds: aws.Int32(600),
	}}}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: &b})
	if err != nil || len(got.CORSRules) != 1 || got.CORSRules[0].AllowedOrigins[0] != "https://*.example.com" || aws.ToInt32(got.CORSRules[0].MaxAgeSeconds) != 600 {
		t.Fatalf("rules %+v, %v", got, err)
	}
	preflight := func(origin, method, headers string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodOptions, endpoint+"/"+b+"/k", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", method)
		if headers != "" {
			req.Header.Set("Access-Control-Request-Headers", headers)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		closeT(t, resp.Body)
		return resp
	}
	r := preflight("https://app.example.com", "PUT", "content-type,x-amz-meta-color")
	if r.StatusCode != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "PUT") || r.Header.Get("Access-Control-Max-Age") != "600" ||
		!strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "x-amz-meta-color") {
		t.Fatalf("allowed preflight: %d %v", r.StatusCode, r.Header)
	}
	for _, bad := range [][3]string{{"https://evil.com", "GET", ""}, {"https://app.example.com", "DELETE", ""}, {"https://app.example.com", "GET", "x-other"}} {
		if r := preflight(bad[0], bad[1], bad[2]); r.StatusCode != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight %v: %d %v, want 403 without CORS headers", bad, r.StatusCode, r.Header)
		}
	}
	// an actual request with an Origin: a presigned GET, as a page's fetch
	ps, err := s3.NewPresignClient(c).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &b, Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ps.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", "https://app.example.com")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	closeT(t, resp.Body)
	allow, expose := resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Access-Control-Expose-Headers")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned GET with an Origin: %d", resp.StatusCode)
	}
	if allow != "https://app.example.com" || !strings.Contains(expose, "x-amz-meta-color") {
		t.Fatalf("actual request: Allow-Origin %q, Expose-Headers %q", allow, expose)
	}
	if _, err := c.DeleteBucketCors(ctx, &s3.DeleteBucketCorsInput{Bucket: &b}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: &b})
	wantCode(t, err, "NoSuchCORSConfiguration", "deleted")
	if r := preflight("https://app.example.com", "GET", ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("preflight without rules: %d", r.StatusCode)
	}
}

// TestConditionalWrites: writers racing with If-None-Match * — exactly
// one wins, the others get 412 PreconditionFailed (the check is the meta
// service's commit's); If-Match with another ETag is 412, on a missing key
// NoSuchKey; the shapes S3 does not take are NotImplemented; a
// conditional CompleteMultipartUpload of an upload completed meanwhile
// is 409 ConditionalRequestConflict.
func TestConditionalWrites(t *testing.T) {
	c, b := root(), "conditional"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	for round, size := range []int{10, 300 << 10} { // inline and in blocks
		key := fmt.Sprint("race-", round)
		const writers = 6
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				_, errs[i] = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: &key, Body: bytes.NewReader(randBytes(uint64(i), size)), IfNoneMatch: aws.String("*")})
			})
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
			} else if apiCode(err) != "PreconditionFailed" {
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("%d bytes: %d writers won, want 1: %v", size, won, errs)
		}
	}
	put := func(key string, ifMatch, ifNoneMatch *string) (*s3.PutObjectOutput, error) {
		return c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: &key, Body: strings.NewReader("x"), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
	}
	first, err := put("k", nil, aws.String("*"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = put("k", aws.String(`"0123"`), nil)
	wantCode(t, err, "PreconditionFailed", "If-Match another ETag")
	if _, err := put("k", first.ETag, nil); err != nil {
		t.Fatalf("If-Match its ETag: %v", err)
	}
	_, err = put("absent", first.ETag, nil)
	wantCode(t, err, "NoSuchKey", "If-Match on a missing key")
	_, err = put("k", nil, first.ETag)
	wantCode(t, err, "NotImplemented", "If-None-Match of an ETag")
	_, err = put("k", first.ETag, aws.String("*"))
	wantCode(t, err, "NotImplemented", "both conditions")

	// multipart: two uploads of one key completed with If-None-Match *
	mp := func(key string) (*string, []types.CompletedPart) {
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &b, Key: &key})
		if err != nil {
			t.Fatal(err)
		}
		var parts []types.CompletedPart
		for n := int32(1); n <= 2; n++ {
			body := randBytes(uint64(n), 5<<20)
			if n == 2 {
				body = body[:10]
			}
			p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &b, Key: &key, UploadId: up.UploadId, PartNumber: aws.Int32(n), Body: bytes.NewReader(body)})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: p.ETag})
		}
		return up.UploadId, parts
	}
	complete := func(key string, id *string, parts []types.CompletedPart, ifNoneMatch *string) error {
		_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &b, Key: &key, UploadId: id,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}, IfNoneMatch: ifNoneMatch})
		return err
	}
	id1, parts1 := mp("mp")
	id2, parts2 := mp("mp")
	if err := complete("mp", id1, parts1, aws.String("*")); err != nil {
		t.Fatal(err)
	}
	wantCode(t, complete("mp", id2, parts2, aws.String("*")), "PreconditionFailed", "second completion with If-None-Match *")
	// the first upload again, with other parts: completed meanwhile
	wantCode(t, complete("mp", id1, parts1[:1], aws.String("*")), "ConditionalRequestConflict", "conditional completion of a completed upload")
	if err := complete("mp", id1, parts1, aws.String("*")); err != nil {
		t.Fatalf("a retried completion (its answer lost) is answered the object: %v", err)
	}
}

// TestCopyKeepsMetadata: a copy keeps x-amz-meta-*, the content headers
// and the checksum the client sent (COPY); REPLACE takes the request's
// headers and keeps the checksum (the bytes are the same).
func TestCopyKeepsMetadata(t *testing.T) {
	c, b := root(), "copymeta"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	body := randBytes(9, 1000)
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String("src"), Body: bytes.NewReader(body),
		ContentType: aws.String("text/x-test"), ContentEncoding: aws.String("gzip"), ContentDisposition: aws.String(`attachment; filename="a.txt"`),
		ContentLanguage: aws.String("fr"), CacheControl: aws.String("max-age=60"), Expires: &exp,
		Metadata: map[string]string{"color": "blue", "name": "Hello World"}, ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b, Key: aws.String("dst"), CopySource: aws.String(b + "/src")}); err != nil {
		t.Fatal(err)
	}
	src, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String("src"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String("dst"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	describe := func(h *s3.HeadObjectOutput) string {
		return fmt.Sprintf("%s|%s|%s|%s|%s|%s|%v|%s", aws.ToString(h.ContentType), aws.ToString(h.ContentEncoding), aws.ToString(h.ContentDisposition),
			aws.ToString(h.ContentLanguage), aws.ToString(h.CacheControl), aws.ToString(h.ExpiresString), h.Metadata, aws.ToString(h.ChecksumSHA256))
	}
	if describe(src) != describe(dst) || aws.ToString(dst.ChecksumSHA256) == "" || dst.Metadata["color"] != "blue" {
		t.Fatalf("copy:\n src %s\n dst %s", describe(src), describe(dst))
	}
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b, Key: aws.String("dst2"), CopySource: aws.String(b + "/src"),
		MetadataDirective: types.MetadataDirectiveReplace, ContentType: aws.String("image/png"), Metadata: map[string]string{"new": "1"}}); err != nil {
		t.Fatal(err)
	}
	r, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String("dst2"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(r.ContentType) != "image/png" || r.Metadata["new"] != "1" || r.Metadata["color"] != "" || r.ContentEncoding != nil ||
		aws.ToString(r.ChecksumSHA256) != aws.ToString(src.ChecksumSHA256) {
		t.Fatalf("REPLACE copy: %s", describe(r))
	}
}

// postPolicy signs a browser upload policy (SigV4 POST) and returns the
// form fields that carry it.
func postPolicy(t *testing.T, bucket string, conditions []any, expires time.Time) map[string]string {
	t.Helper()
	now := time.Now().UTC()
	date := now.Format("20060102")
	cred := rootAccess + "/" + date + "/us-east-1/s3/aws4_request"
	amzDate := now.Format("20060102T150405Z")
	conds := append([]any{map[string]string{"bucket": bucket}, map[string]string{"x-amz-algorithm": "AWS4-HMAC-SHA256"},
		map[string]string{"x-amz-credential": cred}, map[string]string{"x-amz-date": amzDate}}, conditions...)
	doc, err := json.Marshal(map[string]any{"expiration": expires.UTC().Format("2006-01-02T15:04:05.000Z"), "conditions": conds})
	if err != nil {
		t.Fatal(err)
	}
	policy := base64.StdEncoding.EncodeToString(doc)
	key := hmacSHA256([]byte("AWS4"+rootSecret), date)
	for _, s := range []string{"us-east-1", "s3", "aws4_request"} {
		key = hmacSHA256(key, s)
	}
	return map[string]string{"policy": policy, "x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": cred,
		"x-amz-date": amzDate, "x-amz-signature": hex.EncodeToString(hmacSHA256(key, policy))}
}

// postForm sends a multipart/form-data POST to the bucket: the fields,
// then the file (as a browser's form does).
func postForm(t *testing.T, bucket string, fields map[string]string, filename string, file []byte) (*http.Response, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		if err := w.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := w.CreateFormFile("file", filename)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.Write(file); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, endpoint+"/"+bucket, &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, resp.Body)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// TestPresignedPOST: a browser form upload with a signed policy (eq,
// starts-with, content-length-range): the object is stored under the key
// with ${filename} replaced, with its x-amz-meta-*, Content-Type and
// tags; success_action_status 201 answers the PostResponse XML, a
// success_action_redirect a 303 to it; a field outside the policy, a body
// out of the length range and a bad signature are refused.
func TestPresignedPOST(t *testing.T) {
	c, b := root(), "browser-upload"
	mkBucket(t, c, b)
	ctx := testCtx(t)
	conds := []any{[]any{"starts-with", "$key", "uploads/"}, []any{"content-length-range", 1, 1000},
		[]any{"eq", "$x-amz-meta-owner", "alice"}, []any{"starts-with", "$Content-Type", "text/"},
		map[string]string{"success_action_status": "201"}, []any{"starts-with", "$tagging", ""}}
	fields := postPolicy(t, b, conds, time.Now().Add(time.Hour))
	fields["key"] = "uploads/${filename}"
	fields["x-amz-meta-owner"] = "alice"
	fields["Content-Type"] = "text/plain"
	fields["success_action_status"] = "201"
	fields["tagging"] = "<Tagging><TagSet><Tag><Key>via</Key><Value>form</Value></Tag></TagSet></Tagging>"
	resp, body := postForm(t, b, fields, "hello.txt", []byte("hello, form"))
	if resp.StatusCode != http.StatusCreated || !strings.Contains(body, "<Key>uploads/hello.txt</Key>") {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String("uploads/hello.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["owner"] != "alice" || aws.ToString(h.ContentType) != "text/plain" || aws.ToInt32(h.TagCount) != 1 || aws.ToInt64(h.ContentLength) != 11 {
		t.Fatalf("posted object: meta %v, type %s, tags %v, %d bytes", h.Metadata, aws.ToString(h.ContentType), h.TagCount, aws.ToInt64(h.ContentLength))
	}
	if got := get(t, c, b, "uploads/hello.txt", ""); string(got) != "hello, form" {
		t.Fatalf("posted bytes %q", got)
	}

	redirect := postPolicy(t, b, []any{[]any{"starts-with", "$key", ""}, map[string]string{"success_action_redirect": "http://127.0.0.1/done"}}, time.Now().Add(time.Hour))
	redirect["key"], redirect["success_action_redirect"] = "r.txt", "http://127.0.0.1/done"
	if resp, body := postForm(t, b, redirect, "r.txt", []byte("r")); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "http://127.0.0.1/done?") ||
		!strings.Contains(resp.Header.Get("Location"), "key=r.txt") {
		t.Fatalf("redirect: %d %v %s", resp.StatusCode, resp.Header, body)
	}

	for name, tc := range map[string]struct {
		change func(map[string]string)
		file   []byte
	}{
		"key outside starts-with":  {func(f map[string]string) { f["key"] = "other/x" }, []byte("x")},
		"meta not eq":              {func(f map[string]string) { f["x-amz-meta-owner"] = "mallory" }, []byte("x")},
		"too large":                {nil, bytes.Repeat([]byte("x"), 1001)},
		"bad signature":            {func(f map[string]string) { f["x-amz-signature"] = strings.Repeat("0", 64) }, []byte("x")},
		"field not in the policy:": {func(f map[string]string) { f["x-amz-meta-extra"] = "1" }, []byte("x")},
	} {
		f := map[string]string{}
		for k, v := range fields {
			f[k] = v
		}
		if tc.change != nil {
			tc.change(f)
		}
		f["key"] = strings.Replace(f["key"], "${filename}", "refused.txt", 1)
		if resp, body := postForm(t, b, f, "refused.txt", tc.file); resp.StatusCode < 400 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String("uploads/refused.txt")}); apiCode(err) != "NotFound" {
		var ae smithy.APIError
		t.Fatalf("a refused POST stored the object: %v %v", err, errors.As(err, &ae))
	}
}
