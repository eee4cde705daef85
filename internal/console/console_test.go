package console

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/authz"
)

// fakeCluster answers fixed views.
type fakeCluster struct{}

func (fakeCluster) Nodes(context.Context) ([]metaapi.NodeInfo, error) {
	return []metaapi.NodeInfo{
		{NodeID: 1, Addr: "127.0.0.1:1001", Health: "HEALTHY", CapacityBytes: 1000, AvailableBytes: 400, UsedBytes: 77, Pipelines: []uint64{1}},
		{NodeID: 2, Addr: "127.0.0.1:1002", Health: "STALE", CapacityBytes: 1000, AvailableBytes: 500, Pipelines: []uint64{1}},
	}, nil
}
func (fakeCluster) Pipelines(context.Context) ([]metaapi.Pipeline, error) {
	return []metaapi.Pipeline{{ID: 1, State: "OPEN", Leader: 1, Members: []metaapi.Member{{NodeID: 1, Addr: "127.0.0.1:1001"}}}}, nil
}
func (fakeCluster) Containers(context.Context) ([]metaapi.ContainerInfo, error) {
	return []metaapi.ContainerInfo{{ID: 3, Pipeline: 1, State: "CLOSED"}, {ID: 9, Pipeline: 1, State: "OPEN", UnderReplicated: true, Missing: []uint64{2}}}, nil
}
func (fakeCluster) Replication(context.Context) (*metaapi.ReplicationStatus, error) {
	return &metaapi.ReplicationStatus{ReplicationFactor: 3, UnderReplicated: 1, PendingBytes: 100, RateBytesPerS: 10}, nil
}

// fakeStore keeps keys in memory; "writer" may write, other users only
// read (as the meta service's grants would have it); it counts changes.
type fakeStore struct {
	mu      sync.Mutex
	keys    map[string][]byte
	changes int
}

const (
	adminAccess, adminSecret   = "ADMINACCESSKEY000001", "admin-secret-0123456789"
	readerAccess, readerSecret = "READERACCESSKEY00001", "reader-secret-0123456789"
)

func (s *fakeStore) LookupUser(_ context.Context, access string) (metaapi.User, error) {
	if access == readerAccess {
		return metaapi.User{Name: "reader", AccessKey: readerAccess, SecretKey: readerSecret}, nil
	}
	return metaapi.User{}, fmt.Errorf("%w: no user", metaapi.ErrNotFound)
}
func (s *fakeStore) Buckets(context.Context, string) ([]metaapi.Bucket, error) {
	return []metaapi.Bucket{{Name: "b1", Keys: uint64(len(s.keys))}}, nil
}
func (s *fakeStore) List(_ context.Context, _, bucket string, o metaapi.ListOptions) (metaapi.KeyList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l metaapi.KeyList
	for k, v := range s.keys {
		if strings.HasPrefix(k, o.Prefix) {
			l.Keys = append(l.Keys, metaapi.KeyInfo{Bucket: bucket, Key: k, Size: uint64(len(v))})
		}
	}
	return l, nil
}
func (s *fakeStore) Stat(_ context.Context, _, bucket, key string) (metaapi.KeyInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.keys[key]
	if !ok {
		return metaapi.KeyInfo{}, fmt.Errorf("%w: %s", metaapi.ErrNotFound, key)
	}
	return metaapi.KeyInfo{Bucket: bucket, Key: key, Size: uint64(len(v))}, nil
}
func (s *fakeStore) Get(_ context.Context, _, _, key string, w io.Writer) error {
	s.mu.Lock()
	v := s.keys[key]
	s.mu.Unlock()
	_, err := w.Write(v)
	return err
}
func (s *fakeStore) may(user string) error {
	if user != authz.S3Root {
		return fmt.Errorf("%w: %s may not write", metaapi.ErrForbidden, user)
	}
	return nil
}
func (s *fakeStore) Put(_ context.Context, user, _, key string, r io.Reader, _ int64) (metaapi.KeyInfo, error) {
	if err := s.may(user); err != nil {
		return metaapi.KeyInfo{}, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return metaapi.KeyInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = b
	s.changes++
	return metaapi.KeyInfo{Key: key, Size: uint64(len(b))}, nil
}
func (s *fakeStore) Delete(_ context.Context, user, _, key string) error {
	if err := s.may(user); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
	s.changes++
	return nil
}

func (s *fakeStore) changed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes
}

type testConsole struct {
	c     *Console
	store *fakeStore
	now   time.Time
	mu    sync.Mutex
}

func startTest(t *testing.T) *testConsole {
	t.Helper()
	tc := &testConsole{store: &fakeStore{keys: map[string][]byte{"a/one": []byte("first")}}, now: time.Now()}
	c, err := Start(Config{Listen: "127.0.0.1:0", Cluster: fakeCluster{}, Store: tc.store,
		Admin: Credential{adminAccess, adminSecret}, SessionTTL: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:    func() time.Time { tc.mu.Lock(); defer tc.mu.Unlock(); return tc.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	tc.c = c
	return tc
}

func (tc *testConsole) advance(d time.Duration) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.now = tc.now.Add(d)
}

// browser is an HTTPS client with a cookie jar that does not follow
// redirects (the tests look at them).
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // the console's self-signed pair
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, hc *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func get(t *testing.T, hc *http.Client, u string) (*http.Response, string) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, hc, req)
}

func postForm(t *testing.T, hc *http.Client, u string, v url.Values, hdr map[string]string) (*http.Response, string) {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(v.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(t, hc, req)
}

func (tc *testConsole) login(t *testing.T, hc *http.Client, access, secret string) *http.Response {
	t.Helper()
	resp, _ := postForm(t, hc, "https://"+tc.c.Addr()+"/ui/login", url.Values{"access_key": {access}, "secret_key": {secret}, "next": {"/ui/datanodes"}}, nil)
	return resp
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf is the CSRF token a signed-in page carries.
func (tc *testConsole) csrfOf(t *testing.T, hc *http.Client) string {
	t.Helper()
	_, body := get(t, hc, "https://"+tc.c.Addr()+"/ui/buckets/b1")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the keys page: %s", body)
	}
	return m[1]
}

// Sign-in: the admin credential and an S3 user's keys are accepted, with a
// session cookie that is Secure, HttpOnly and SameSite=Strict; a wrong
// secret, an unknown key and a cross-origin form are refused without a
// cookie; pages without a session send to the sign-in page; a session
// ends after its TTL.
func TestLoginAndCookieFlags(t *testing.T) {
	tc := startTest(t)
	base := "https://" + tc.c.Addr()
	hc := browser(t)
	resp, _ := get(t, hc, base+"/ui/datanodes")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login?next=") {
		t.Fatalf("signed out: %d %q, want a redirect to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, bad := range [][2]string{{adminAccess, "wrong"}, {readerAccess, adminSecret}, {"NOSUCHKEY", readerSecret}, {"", ""}} {
		resp := tc.login(t, hc, bad[0], bad[1])
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Fatalf("sign-in with %q/%q: %d, cookies %v; want 401 and none", bad[0], bad[1], resp.StatusCode, resp.Cookies())
		}
	}
	resp, _ = postForm(t, hc, base+"/ui/login", url.Values{"access_key": {adminAccess}, "secret_key": {adminSecret}}, map[string]string{"Origin": "https://evil.example"})
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("cross-origin sign-in: %d %v, want 403 without a cookie", resp.StatusCode, resp.Cookies())
	}
	for _, cred := range [][2]string{{adminAccess, adminSecret}, {readerAccess, readerSecret}} {
		hc := browser(t)
		resp := tc.login(t, hc, cred[0], cred[1])
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/datanodes" {
			t.Fatalf("sign-in of %s: %d %q", cred[0], resp.StatusCode, resp.Header.Get("Location"))
		}
		cs := resp.Cookies()
		if len(cs) != 1 || cs[0].Name != CookieName || !cs[0].Secure || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || len(cs[0].Value) < 40 {
			t.Fatalf("session cookie %+v: want Secure, HttpOnly, SameSite=Strict and a long random value", cs)
		}
		if r := resp.Header.Get("Set-Cookie"); !strings.Contains(r, "Secure") || !strings.Contains(r, "HttpOnly") || !strings.Contains(r, "SameSite=Strict") {
			t.Fatalf("Set-Cookie %q", r)
		}
		resp, body := get(t, hc, base+"/ui/datanodes")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-node="2"`) || !strings.Contains(body, "STALE") {
			t.Fatalf("datanodes page: %d %s", resp.StatusCode, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Fatalf("CSP %q", csp)
		}
	}
	tc.advance(2 * time.Hour)
	if resp, _ := get(t, hc, base+"/ui/"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a session past its TTL: %d, want the sign-in page", resp.StatusCode)
	}
}

func multipartUpload(t *testing.T, u, csrf, name string, data []byte) *http.Request {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if csrf != "" {
		if err := mw.WriteField("csrf", csrf); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.WriteField("prefix", "up/"); err != nil {
		t.Fatal(err)
	}
	fw, err := mw.CreateFormFile("file", name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, u, &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return req
}

// CSRF: an upload, a delete or a sign-out without the session's token,
// with another session's token, or from another origin is refused (403)
// before the store sees it; with the token it is done.
func TestCSRFRefusesChanges(t *testing.T) {
	tc := startTest(t)
	base := "https://" + tc.c.Addr()
	hc := browser(t)
	tc.login(t, hc, adminAccess, adminSecret)
	token := tc.csrfOf(t, hc)
	other := browser(t)
	tc.login(t, other, adminAccess, adminSecret)
	otherToken := tc.csrfOf(t, other)
	if token == otherToken {
		t.Fatal("two sessions share a CSRF token")
	}
	del := base + "/ui/delete/b1/a/one"
	for name, c := range map[string]struct {
		v   url.Values
		hdr map[string]string
	}{
		"no token":       {url.Values{}, nil},
		"another's":      {url.Values{"csrf": {otherToken}}, nil},
		"cross-origin":   {url.Values{"csrf": {token}}, map[string]string{"Origin": "https://evil.example"}},
		"cross-site":     {url.Values{"csrf": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"truncated mine": {url.Values{"csrf": {token[:len(token)-1]}}, nil},
	} {
		if resp, _ := postForm(t, hc, del, c.v, c.hdr); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("delete, %s: %d, want 403", name, resp.StatusCode)
		}
	}
	for name, tok := range map[string]string{"no token": "", "another's": otherToken} {
		if resp, _ := do(t, hc, multipartUpload(t, base+"/ui/upload/b1", tok, "x.bin", []byte("data"))); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("upload, %s: %d, want 403", name, resp.StatusCode)
		}
	}
	if resp, _ := postForm(t, hc, base+"/ui/logout", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-out without a token: %d", resp.StatusCode)
	}
	if n := tc.store.changed(); n != 0 {
		t.Fatalf("%d changes reached the store without a valid token", n)
	}
	if resp, _ := do(t, hc, multipartUpload(t, base+"/ui/upload/b1", token, "x.bin", []byte("data"))); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("upload with the token: %d", resp.StatusCode)
	}
	if resp, _ := postForm(t, hc, del, url.Values{"csrf": {token}}, map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete with the token: %d", resp.StatusCode)
	}
	if n := tc.store.changed(); n != 2 {
		t.Fatalf("%d changes, want the upload and the delete", n)
	}
	if resp, _ := postForm(t, hc, base+"/ui/logout", url.Values{"csrf": {token}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	if resp, _ := get(t, hc, base+"/ui/"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d, want the sign-in page", resp.StatusCode)
	}
}

// A user the store refuses (the meta service's grants) gets 403 on an
// upload and a delete and changes nothing, token or not; the admin
// credential acts as the S3 root user.
func TestReadOnlyUserRefused(t *testing.T) {
	tc := startTest(t)
	base := "https://" + tc.c.Addr()
	hc := browser(t)
	tc.login(t, hc, readerAccess, readerSecret)
	token := tc.csrfOf(t, hc)
	if resp, body := do(t, hc, multipartUpload(t, base+"/ui/upload/b1", token, "x.bin", []byte("data"))); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "may not write") {
		t.Fatalf("reader's upload: %d %s", resp.StatusCode, body)
	}
	if resp, _ := postForm(t, hc, base+"/ui/delete/b1/a/one", url.Values{"csrf": {token}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("reader's delete: %d", resp.StatusCode)
	}
	if resp, body := get(t, hc, base+"/ui/download/b1/a/one"); resp.StatusCode != http.StatusOK || body != "first" {
		t.Fatalf("reader's download: %d %q", resp.StatusCode, body)
	}
	if n := tc.store.changed(); n != 0 {
		t.Fatalf("the reader changed %d keys", n)
	}
}

// Every page renders from the views; containers list the under-replicated
// first; the charts come from the sampler's points.
func TestPagesRender(t *testing.T) {
	tc := startTest(t)
	base := "https://" + tc.c.Addr()
	hc := browser(t)
	tc.login(t, hc, adminAccess, adminSecret)
	now := time.Now()
	tc.c.Sampler().Add(now.Add(-10*time.Second), []Scrape{{"m", []byte("spindle_meta_key_commits_total 100\nspindle_datanode_chunk_bytes_total 0\n")}})
	tc.c.Sampler().Add(now, []Scrape{{"m", []byte("# HELP x\nspindle_meta_key_commits_total 150\nspindle_datanode_chunk_bytes_total 2e7\n" +
		`spindle_meta_request_seconds_count{code="200",route="commit_key"} 10` + "\n" + `spindle_meta_request_seconds_sum{code="200",route="commit_key"} 0.05` + "\n")}})
	pts := tc.c.Sampler().Points()
	if len(pts) != 1 || pts[0].PutOps != 5 || pts[0].WriteMBps != 2 || pts[0].PutLatencyMs != 5 {
		t.Fatalf("points %+v: want 5 puts/s, 2 MB/s, 5 ms", pts)
	}
	for page, want := range map[string][]string{
		"/ui/":                {"1 STALE", "1 containers under-replicated", "Safe mode"},
		"/ui/pipelines":       {`data-pipeline="1"`, "1=127.0.0.1:1001"},
		"/ui/containers":      {"UNDER-REPLICATED"},
		"/ui/replication":     {`data-f="eta">10s<`},
		"/ui/buckets":         {`data-bucket="b1"`},
		"/ui/buckets/b1":      {`data-key="a/one"`},
		"/ui/object/b1/a/one": {`data-f="size">5 bytes`},
		"/ui/charts":          {`data-f="put-ops">5.00<`, "<svg", "Operations per second"},
		"/ui/charts/ops.svg":  {"<polyline"},
		"/ui/reports":         {"No report"},
	} {
		resp, body := get(t, hc, base+page)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", page, resp.StatusCode)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q", page, w)
			}
		}
	}
	_, body := get(t, hc, base+"/ui/containers")
	if strings.Index(body, `data-container="9"`) > strings.Index(body, `data-container="3"`) {
		t.Error("the under-replicated container is not listed first")
	}
}

// The report page's Markdown is escaped; images and links only to the
// run's own files or http(s).
func TestMarkdownEscapes(t *testing.T) {
	got := string(markdown("# T <b>\n<script>x</script>\n![c](chart.svg) ![e](../etc/passwd) [j](javascript:alert(1))\n| a | b |\n|---|---|\n| <i> | 2 |", "/ui/reports/r/"))
	for _, bad := range []string{"<script", "<b>", "<i>", "javascript:", "../etc"} {
		if strings.Contains(got, bad) {
			t.Errorf("rendered %q contains %q", got, bad)
		}
	}
	if !strings.Contains(got, `<img src="/ui/reports/r/chart.svg"`) || !strings.Contains(got, "<th>a</th>") {
		t.Errorf("rendered %q", got)
	}
}

// syncBuffer is a log sink safe for the console's and the service's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `spindle meta --console-listen`: WithMeta serves the console beside a
// plaintext meta service on port 0 (its URL logged), and an S3 user of
// that service signs in and sees its views.
func TestWithMeta(t *testing.T) {
	logs := &syncBuffer{}
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	cfg := state.Config{Dir: filepath.Join(dir, "meta"), Listen: "127.0.0.1:0", ReadyFile: ready, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WithMeta(ctx, &MetaOptions{Options: Options{Listen: "127.0.0.1:0"}}, cfg, meta.Run)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	urlRE := regexp.MustCompile(`web console serving.* url=(https://\S+/ui/)`)
	var consoleURL, metaAddr string
	deadline := time.Now().Add(30 * time.Second)
	for consoleURL == "" || metaAddr == "" {
		if m := urlRE.FindStringSubmatch(logs.String()); m != nil {
			consoleURL = m[1]
		}
		if b, err := os.ReadFile(ready); err == nil {
			metaAddr, _, _ = strings.Cut(string(b), "\n")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no console URL logged or no ready file: %s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	mc, err := metaapi.NewClient(metaAddr, metaapi.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user, err := mc.CreateUser(ctx, metaapi.CreateUser{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	hc := browser(t)
	resp, _ := postForm(t, hc, consoleURL+"login", url.Values{"access_key": {user.AccessKey}, "secret_key": {user.SecretKey}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	if resp, body := get(t, hc, consoleURL+"replication"); resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-f="factor">3<`) {
		t.Fatalf("replication page: %d %s", resp.StatusCode, body)
	}
}
