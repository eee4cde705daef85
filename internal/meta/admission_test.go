package meta

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// rawPost sends the head of a POST to route announcing n body bytes, and
// the first bytes of the body only, on a connection of its own.
func rawPost(t *testing.T, addr, route string, n int64, first string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, c) })
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: meta\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", route, n, first); err != nil {
		t.Fatal(err)
	}
	return c
}

// answer reads the response on c (bounded: a server that never answers
// fails the test instead of hanging it).
func answer(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	mustNo(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A client that sends a body's first byte and then nothing is cut off at
// BodyReadTimeout and answered INVALID; before the deadline existed, the
// service waited for the rest for as long as the connection lived.
func TestSlowBodyIsCutOff(t *testing.T) {
	cfg := testConfig(t.TempDir(), newClock())
	cfg.BodyReadTimeout = 200 * time.Millisecond
	srv, _ := serve(t, cfg)
	c := rawPost(t, srv.Addr(), "/v1/allocate", 1000, "{")
	status, body := answer(t, c)
	if status != http.StatusBadRequest || !strings.Contains(body, metaapi.CodeInvalid) || !strings.Contains(body, "timeout") {
		t.Fatalf("answered %d %s; want 400 INVALID (i/o timeout)", status, body)
	}
}

// While admitted bodies weigh MaxBodyBytesInFlight, another request with
// a body is refused BUSY (503) once BodyAdmitWait has passed, before its
// body is read; requests without a body are served; when the body that
// held the room ends, bodies are admitted again.
func TestBodiesInFlightAreBounded(t *testing.T) {
	cfg := testConfig(t.TempDir(), newClock())
	cfg.MaxBodyBytesInFlight = state.MaxRequestBytes
	cfg.BodyAdmitWait = 50 * time.Millisecond
	srv, cl := serve(t, cfg)
	ctx := context.Background()
	must[metaapi.Bucket](t)(cl.CreateBucket(ctx, "bkt"))

	// A holds all the room: announced MaxRequestBytes, sent one byte.
	holder := rawPost(t, srv.Addr(), "/v1/allocate", state.MaxRequestBytes, "{")
	waitFor(t, "the first body admitted", func() bool { return srv.svc.bodies.inFlightBytes.Load() == state.MaxRequestBytes })

	c := rawPost(t, srv.Addr(), "/v1/allocate", 2, "{}")
	if status, body := answer(t, c); status != http.StatusServiceUnavailable || !strings.Contains(body, metaapi.CodeBusy) {
		t.Fatalf("second body answered %d %s; want 503 BUSY", status, body)
	}
	// The key client's view: ErrBusy (an ErrUnavailable) after its retries.
	_, err := cl.Allocate(ctx, metaapi.AllocateRequest{Bucket: "bkt", Key: "k"})
	if !errors.Is(err, metaapi.ErrBusy) || !errors.Is(err, metaapi.ErrUnavailable) {
		t.Fatalf("allocate with the room full: %v; want ErrBusy", err)
	}
	if _, err := cl.ListBuckets(ctx); err != nil {
		t.Fatalf("a request without a body with the room full: %v", err)
	}

	mustClose(t, holder) // its body ends short: INVALID, and the room is given back
	waitFor(t, "the first body's room given back", func() bool { return srv.svc.bodies.inFlightBytes.Load() == 0 })
	c = rawPost(t, srv.Addr(), "/v1/allocate", 2, "{}")
	if status, body := answer(t, c); status == http.StatusServiceUnavailable {
		t.Fatalf("a body after the room was given back answered %d %s", status, body)
	}
}
