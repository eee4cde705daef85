package httpdirect

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// server is a real net/http server on 127.0.0.1:0 counting the
// connections it accepted and the requests it handled.
type server struct {
	*httptest.Server
	conns atomic.Int32
	calls atomic.Int32
	idle  chan struct{} // a connection went idle (answer written)
}

func newServer(t *testing.T, tlsOn bool, h func(n int32, w http.ResponseWriter, r *http.Request)) (*server, *Transport) {
	t.Helper()
	s := &server{idle: make(chan struct{}, 1024)}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(s.calls.Add(1), w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateIdle:
			select {
			case s.idle <- struct{}{}:
			default:
			}
		}
	}
	tr := &Transport{}
	if tlsOn {
		s.StartTLS()
		cfg := s.Client().Transport.(*http.Transport).TLSClientConfig
		tr.DialTLS = func(ctx context.Context, addr string) (net.Conn, error) {
			// As tlsconf dials: a RecordConn between TLS and the socket.
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			cc := cfg.Clone()
			cc.ServerName, _, _ = net.SplitHostPort(addr)
			return tls.Client(tlsconf.NewRecordConn(c), cc), nil
		}
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	t.Cleanup(tr.CloseIdleConnections)
	return s, tr
}

func call(t *testing.T, tr *Transport, ctx context.Context, method, url string, body []byte) (*http.Response, []byte, error) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read to its end
	return resp, b, err
}

// echo answers a request's body upper-cased, in the shape the path asks.
func echo(_ int32, w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/chunked":
		_, _ = w.Write(bytes.ToUpper(b)) // the client's read checks what came
		w.(http.Flusher).Flush()         // no Content-Length: chunked
		_, _ = w.Write([]byte("!"))
	case "/empty":
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("X-Len", strings.Repeat("n", len(b)))
		_, _ = w.Write(bytes.ToUpper(b)) // the client's read checks what came
	}
}

// Every answer's shape is read whole, and one connection carries them all.
func TestReuseOneConnection(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		s, tr := newServer(t, tlsOn, echo)
		for i := 0; i < 20; i++ {
			for _, path := range []string{"/plain", "/chunked", "/empty"} {
				resp, got, err := call(t, tr, context.Background(), http.MethodPost, s.URL+path, []byte("abc"))
				if err != nil {
					t.Fatalf("tls %v %s #%d: %v", tlsOn, path, i, err)
				}
				want := map[string]string{"/plain": "ABC", "/chunked": "ABC!", "/empty": ""}[path]
				if string(got) != want {
					t.Fatalf("tls %v %s: got %q, want %q", tlsOn, path, got, want)
				}
				if path == "/plain" && resp.Header.Get("X-Len") != "nnn" {
					t.Fatalf("header lost: %v", resp.Header)
				}
			}
			resp, _, err := call(t, tr, context.Background(), http.MethodHead, s.URL+"/plain", nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("HEAD: %v", err)
			}
		}
		if n := s.conns.Load(); n != 1 {
			t.Fatalf("tls %v: %d connections for sequential calls, want 1", tlsOn, n)
		}
	}
}

// A server that closed its idle connection (restart, idle timeout) costs
// no failed call, a POST included: the close is seen before reuse. Without
// alive's peek the POST fails (checked by hand).
func TestServerClosedIdle(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		s, tr := newServer(t, tlsOn, echo)
		if _, _, err := call(t, tr, context.Background(), http.MethodPost, s.URL, []byte("a")); err != nil {
			t.Fatal(err)
		}
		<-s.idle                             // the client may read the answer before the server marks the connection idle
		s.Config.SetKeepAlivesEnabled(false) // closes the idle connections now
		s.Config.SetKeepAlivesEnabled(true)
		_, got, err := call(t, tr, context.Background(), http.MethodPost, s.URL, []byte("b"))
		if err != nil || string(got) != "B" {
			t.Fatalf("tls %v: POST after the server closed the idle connection: %q, %v", tlsOn, got, err)
		}
		if n := s.conns.Load(); n != 2 {
			t.Fatalf("tls %v: %d connections, want 2", tlsOn, n)
		}
	}
}

// A connection dropped after the request was read, before an answer: a
// GET is sent once more on a new connection; a POST is not (its outcome
// is unknown: the caller decides).
func TestDroppedBeforeAnswer(t *testing.T) {
	drop := func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 2 { // the second call, on the reused connection
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = c.Close()
			}
			return
		}
		echo(n, w, r)
	}
	s, tr := newServer(t, false, drop)
	if _, _, err := call(t, tr, context.Background(), http.MethodGet, s.URL, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := call(t, tr, context.Background(), http.MethodGet, s.URL, nil); err != nil {
		t.Fatalf("GET on a connection dropped before its answer: %v", err)
	}
	if n := s.calls.Load(); n != 3 {
		t.Fatalf("%d calls handled, want 3 (the GET sent again)", n)
	}
	s2, tr2 := newServer(t, false, drop)
	if _, _, err := call(t, tr2, context.Background(), http.MethodPost, s2.URL, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := call(t, tr2, context.Background(), http.MethodPost, s2.URL, []byte("b")); err == nil {
		t.Fatal("POST dropped before its answer: no error")
	}
	if n := s2.calls.Load(); n != 2 {
		t.Fatalf("%d calls handled, want 2 (the POST not sent again)", n)
	}
}

// A cancelled call returns ctx's error at once and its connection is not
// reused.
func TestCancel(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s, tr := newServer(t, false, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			once.Do(func() { close(started) })
			<-release
		}
		echo(n, w, r)
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	if _, _, err := call(t, tr, ctx, http.MethodPost, s.URL, []byte("a")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}
	if _, got, err := call(t, tr, context.Background(), http.MethodPost, s.URL, []byte("b")); err != nil || string(got) != "B" {
		t.Fatalf("call after a cancelled one: %q, %v", got, err)
	}
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the cut one not reused)", n)
	}
}

// A body closed unread: a short rest is drained and the connection kept;
// a long one closes it.
func TestCloseUnread(t *testing.T) {
	s, tr := newServer(t, false, func(_ int32, w http.ResponseWriter, r *http.Request) {
		size := 10
		if r.URL.Path == "/big" {
			size = 1 << 20
		}
		_, _ = w.Write(bytes.Repeat([]byte("x"), size)) // fails when the client closes unread: the point
	})
	for i, c := range []struct {
		path  string
		conns int32
	}{{"/small", 1}, {"/small", 1}, {"/big", 2}, {"/small", 2}} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+c.path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close() // unread
		if _, _, err := call(t, tr, context.Background(), http.MethodGet, s.URL+"/small", nil); err != nil {
			t.Fatal(err)
		}
		if n := s.conns.Load(); n != c.conns {
			t.Fatalf("step %d (%s closed unread): %d connections, want %d", i, c.path, n, c.conns)
		}
	}
}

// Bad requests are refused with a clear error.
func TestRefused(t *testing.T) {
	tr := &Transport{}
	for _, u := range []string{"ftp://127.0.0.1:1/x", "https://127.0.0.1:1/x"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "httpdirect") {
			t.Fatalf("%s: %v", u, err)
		}
	}
}
