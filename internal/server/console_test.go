package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/console"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// consoleClient is a browser-like HTTPS client of the console (the
// server's CA trusted, cookies kept, redirects not followed).
type consoleClient struct {
	t    *testing.T
	hc   *http.Client
	base string
}

func newConsoleClient(t *testing.T, s *Server, c *console.Console) *consoleClient {
	t.Helper()
	pem, err := os.ReadFile(s.CABundle())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &consoleClient{t: t, base: "https://" + c.Addr(), hc: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (cc *consoleClient) do(req *http.Request) (int, string) {
	cc.t.Helper()
	resp, err := cc.hc.Do(req)
	if err != nil {
		cc.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cc.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (cc *consoleClient) get(path string) (int, string) {
	cc.t.Helper()
	req, err := http.NewRequest(http.MethodGet, cc.base+path, nil)
	if err != nil {
		cc.t.Fatal(err)
	}
	return cc.do(req)
}

func (cc *consoleClient) post(path string, v url.Values) (int, string) {
	cc.t.Helper()
	req, err := http.NewRequest(http.MethodPost, cc.base+path, strings.NewReader(v.Encode()))
	if err != nil {
		cc.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return cc.do(req)
}

func (cc *consoleClient) upload(bucket, csrf, name string, data []byte) (int, string) {
	cc.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormField("csrf")
	if err == nil {
		_, err = fw.Write([]byte(csrf))
	}
	if err == nil {
		fw, err = mw.CreateFormFile("file", name)
	}
	if err == nil {
		_, err = fw.Write(data)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		cc.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, cc.base+"/ui/upload/"+bucket, &buf)
	if err != nil {
		cc.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return cc.do(req)
}

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs in and returns the session's CSRF token.
func (cc *consoleClient) signIn(access, secret string) string {
	cc.t.Helper()
	if code, body := cc.post("/ui/login", url.Values{"access_key": {access}, "secret_key": {secret}}); code != http.StatusSeeOther {
		cc.t.Fatalf("sign-in of %s: %d %s", access, code, body)
	}
	code, body := cc.get("/ui/buckets")
	m := consoleCSRF.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		cc.t.Fatalf("buckets page: %d %s", code, body)
	}
	return m[1]
}

// The console against a real cluster: its views show the meta service's
// datanodes; the admin credential (the S3 root user) uploads a key and
// downloads it byte for byte; an S3 user without grants on the bucket is
// refused by the meta service (403) on download, upload and delete, token
// and all, and the key is still there.
func TestConsoleFollowsGrants(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cfg := testConfig(dir)
	cfg.S3 = S3Config{Listen: S3Off, AccessKey: "CONSOLEROOTKEY000001", SecretKey: "console-root-secret-0123"}
	cfg.Console = console.Options{Listen: "127.0.0.1:0"}
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeServer(t, s)
	c, stop, err := s.startConsole()
	if err != nil || c == nil {
		t.Fatalf("console: %v %v", c, err)
	}
	defer stop()
	if _, err := s.Meta().CreateBucket(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	reader, err := s.Meta().CreateUser(ctx, metaapi.CreateUser{Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}

	admin := newConsoleClient(t, s, c)
	token := admin.signIn(cfg.S3.AccessKey, cfg.S3.SecretKey)
	code, body := admin.get("/ui/datanodes")
	if code != http.StatusOK || strings.Count(body, `data-f="health">HEALTHY<`) != 3 {
		t.Fatalf("datanodes page: %d %s", code, body)
	}
	data := bytes.Repeat([]byte("spindle console "), 70_000) // 1.1 MB: blocks on the datanodes, not inline
	if code, body := admin.upload("shared", token, "big.bin", data); code != http.StatusSeeOther {
		t.Fatalf("admin upload: %d %s", code, body)
	}
	if code, body := admin.get("/ui/download/shared/big.bin"); code != http.StatusOK || body != string(data) {
		t.Fatalf("admin download: %d, %d bytes, want %d bytes equal", code, len(body), len(data))
	}

	ro := newConsoleClient(t, s, c)
	roToken := ro.signIn(reader.AccessKey, reader.SecretKey)
	if code, body := ro.get("/ui/download/shared/big.bin"); code != http.StatusForbidden {
		t.Fatalf("reader's download: %d %.200s, want 403", code, body)
	}
	if code, body := ro.upload("shared", roToken, "mine.bin", []byte("x")); code != http.StatusForbidden || !strings.Contains(body, "forbidden") {
		t.Fatalf("reader's upload: %d %.300s, want 403", code, body)
	}
	if code, body := ro.post("/ui/delete/shared/big.bin", url.Values{"csrf": {roToken}}); code != http.StatusForbidden {
		t.Fatalf("reader's delete: %d %.300s, want 403", code, body)
	}
	if code, _ := ro.get("/ui/datanodes"); code != http.StatusOK {
		t.Fatalf("reader's datanodes page: %d, want the read-only view", code)
	}
	if _, err := s.Meta().GetKey(ctx, "shared", "big.bin"); err != nil {
		t.Fatalf("the key after the reader's attempts: %v", err)
	}
	if _, err := s.Meta().GetKey(ctx, "shared", "mine.bin"); err == nil {
		t.Fatal("the reader's upload was stored")
	}
	if code, _ := admin.post("/ui/delete/shared/big.bin", url.Values{"csrf": {token}}); code != http.StatusSeeOther {
		t.Fatalf("admin delete: %d", code)
	}
}
