package s3gw_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// signedRequest is a SigV4 header-signed request built by hand: signed
// lists the headers signed (besides host), payloadHash is the hash in the
// canonical request (sent as x-amz-content-sha256 only when listed),
// secret the key it is signed with. The request time goes in X-Amz-Date,
// or in Date (RFC 1123) when "date" is signed instead.
func signedRequest(t *testing.T, method, path string, body []byte, hdr map[string]string, signed []string, payloadHash, secret string) *http.Request {
	t.Helper()
	now := time.Now().UTC()
	req, err := http.NewRequest(method, endpoint+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	for _, h := range signed {
		switch h {
		case "x-amz-date":
			req.Header.Set("X-Amz-Date", now.Format("20060102T150405Z"))
		case "date":
			req.Header.Set("Date", now.Format(time.RFC1123Z))
		case "x-amz-content-sha256":
			req.Header.Set("X-Amz-Content-Sha256", payloadHash)
		}
	}
	names := append([]string{"host"}, signed...)
	sort.Strings(names)
	var canon strings.Builder
	for _, h := range names {
		v := req.Header.Get(h)
		if h == "host" {
			v = req.URL.Host
		}
		canon.WriteString(h + ":" + strings.TrimSpace(v) + "\n")
	}
	day := now.Format("20060102")
	scope := day + "/us-east-1/s3/aws4_request"
	creq := strings.Join([]string{method, req.URL.EscapedPath(), req.URL.RawQuery, canon.String(), strings.Join(names, ";"), payloadHash}, "\n")
	sts := strings.Join([]string{"AWS4-HMAC-SHA256", now.Format("20060102T150405Z"), scope, sha256Hex([]byte(creq))}, "\n")
	key := hmacSHA256(hmacSHA256(hmacSHA256(hmacSHA256([]byte("AWS4"+secret), day), "us-east-1"), "s3"), "aws4_request")
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		rootAccess, scope, strings.Join(names, ";"), hex.EncodeToString(hmacSHA256(key, sts))))
	return req
}

// do sends req and returns its status and body.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, res.Body)
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// TestHeaderAuthVariants: a request signed with Date (no X-Amz-Date) and
// one without x-amz-content-sha256 (curl --aws-sigv4: the empty payload's
// hash signed) are taken; the same with a wrong signature are refused, and
// nothing is written (the gateway re-signs them for versitygw only after
// checking them).
func TestHeaderAuthVariants(t *testing.T) {
	c := root()
	b := "hdr-auth"
	mkBucket(t, c, b)
	body := []byte("hello with a key of spaces")
	for _, tc := range []struct {
		name, key   string
		signed      []string
		payloadHash string
	}{
		{"Date header", "date key+1", []string{"date", "x-amz-content-sha256"}, sha256Hex(body)},
		{"no x-amz-content-sha256", "curl key~2", []string{"x-amz-date"}, emptySHA256},
		{"Date and no x-amz-content-sha256", "both", []string{"date"}, emptySHA256},
	} {
		path := "/" + b + "/" + strings.ReplaceAll(url.PathEscape(tc.key), "+", "%2B")
		if st, msg := do(t, signedRequest(t, http.MethodPut, path, body, nil, tc.signed, tc.payloadHash, "wrong-secret")); st != http.StatusForbidden || !strings.Contains(msg, "SignatureDoesNotMatch") {
			t.Fatalf("%s, wrong signature: %d %s", tc.name, st, msg)
		}
		mustBeAbsent(t, b, tc.key)
		if st, msg := do(t, signedRequest(t, http.MethodPut, path, body, nil, tc.signed, tc.payloadHash, rootSecret)); st != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.name, st, msg)
		}
		if got := get(t, c, b, tc.key, ""); !bytes.Equal(got, body) {
			t.Fatalf("%s: read back %q", tc.name, got)
		}
	}
	// a GET signed the curl way
	st, got := do(t, signedRequest(t, http.MethodGet, "/"+b+"/both", nil, nil, []string{"x-amz-date"}, emptySHA256, rootSecret))
	if st != http.StatusOK || got != string(body) {
		t.Fatalf("curl-style GET: %d %q", st, got)
	}
	// a Date signed with a real hash that the body does not have
	st, msg := do(t, signedRequest(t, http.MethodPut, "/"+b+"/bad-body", body, nil, []string{"date", "x-amz-content-sha256"}, sha256Hex([]byte("other")), rootSecret))
	if st == http.StatusOK {
		t.Fatalf("a body that is not the signed hash was taken: %s", msg)
	}
	mustBeAbsent(t, b, "bad-body")
}

// TestCurlAWSSigV4 puts and gets with curl --aws-sigv4 itself (skipped
// without curl).
func TestCurlAWSSigV4(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	mkBucket(t, root(), "curl-sigv4")
	f := t.TempDir() + "/body"
	data := randBytes(7, 100_000)
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	u := endpoint + "/curl-sigv4/obj"
	sig := []string{"-sS", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", rootAccess + ":" + rootSecret}
	if out, err := exec.Command("curl", append(sig, "-T", f, u)...).CombinedOutput(); err != nil {
		t.Fatalf("curl PUT: %v %s", err, out)
	}
	out, err := exec.Command("curl", append(sig, u)...).Output()
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("curl GET: %v, %d bytes", err, len(out))
	}
}

// TestChunkedWithoutLength: a PUT with Transfer-Encoding: chunked and no
// Content-Length is taken (its body read first, within its bound); past
// the bound it is refused with S3's 411.
func TestChunkedWithoutLength(t *testing.T) {
	b := "chunked-put"
	mkBucket(t, root(), b)
	put := func(key string, body []byte) (int, string) {
		req, err := http.NewRequest(http.MethodPut, endpoint+"/"+b+"/"+key, io.NopCloser(bytes.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // chunked
		req.Header.Set("X-Amz-Content-Sha256", sha256Hex(body))
		creds := aws.Credentials{AccessKeyID: rootAccess, SecretAccessKey: rootSecret}
		if err := v4.NewSigner().SignHTTP(testCtx(t), creds, req, sha256Hex(body), "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		return do(t, req)
	}
	data := randBytes(3, 3<<20)
	if st, msg := put("small", data); st != http.StatusOK {
		t.Fatalf("chunked PUT: %d %s", st, msg)
	}
	if got := get(t, root(), b, "small", ""); !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes", len(got))
	}
	if st, msg := put("big", randBytes(4, 16<<20+1)); st != http.StatusLengthRequired || !strings.Contains(msg, "MissingContentLength") {
		t.Fatalf("chunked PUT past the bound: %d %s", st, msg)
	}
	mustBeAbsent(t, b, "big")
}

// expectFirst sends a PUT's headers with Expect: 100-continue and returns
// the first status line the gateway answers, before any body is sent.
func expectFirst(t *testing.T, req *http.Request) string {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, conn)
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n", req.Method, req.URL.RequestURI(), u.Host, req.ContentLength)
	for k, vs := range req.Header {
		for _, v := range vs {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v)
		}
	}
	head.WriteString("\r\n")
	if _, err := io.WriteString(conn, head.String()); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// TestExpectContinueAfterSignature: a PUT that says Expect: 100-continue
// is answered 403 before its body when its signature is wrong or its key
// unknown, and 100 Continue when it is right.
func TestExpectContinueAfterSignature(t *testing.T) {
	b := "expect-continue"
	mkBucket(t, root(), b)
	body := []byte("the body")
	bad := signedRequest(t, http.MethodPut, "/"+b+"/a%20key", body, nil, []string{"x-amz-content-sha256", "x-amz-date"}, "UNSIGNED-PAYLOAD", "wrong-secret")
	if got := expectFirst(t, bad); !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Fatalf("a wrong signature with Expect: 100-continue: first answer %q", got)
	}
	good := signedRequest(t, http.MethodPut, "/"+b+"/a%20key", body, nil, []string{"x-amz-content-sha256", "x-amz-date"}, "UNSIGNED-PAYLOAD", rootSecret)
	if got := expectFirst(t, good); got != "HTTP/1.1 100 Continue" {
		t.Fatalf("a good signature with Expect: 100-continue: first answer %q", got)
	}
	// the Go client waits for the 100 and sends the body
	good = signedRequest(t, http.MethodPut, "/"+b+"/a%20key", body, map[string]string{"Expect": "100-continue"}, []string{"x-amz-content-sha256", "x-amz-date"}, "UNSIGNED-PAYLOAD", rootSecret)
	if st, msg := do(t, good); st != http.StatusOK {
		t.Fatalf("PUT with Expect: %d %s", st, msg)
	}
	if got := get(t, root(), b, "a key", ""); !bytes.Equal(got, body) {
		t.Fatalf("read back %q", got)
	}
	mustBeAbsent(t, b, "never")
}
