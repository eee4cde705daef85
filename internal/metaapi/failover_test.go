package metaapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// member is a fake meta member: it serves (leader) or refuses with
// NOT_LEADER naming leaderAddr; calls counts the requests it got.
type member struct {
	srv        *httptest.Server
	serving    atomic.Bool
	leaderAddr atomic.Value // string
	calls      atomic.Int64
	// unknown: answer UNAVAILABLE without not_leader (outcome unknown).
	unknown atomic.Bool
	// busy: refuse this many more requests BUSY (nothing done).
	busy atomic.Int64
}

func newMember(t *testing.T) *member {
	m := &member{}
	m.leaderAddr.Store("")
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case m.busy.Add(-1) >= 0:
			w.WriteHeader(http.StatusServiceUnavailable)
			encodeT(t, w, Error{Code: CodeBusy, Message: "request bodies in flight at their bound"})
		case m.unknown.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			encodeT(t, w, Error{Code: CodeUnavailable, Message: "leadership lost, outcome unknown"})
		case !m.serving.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			encodeT(t, w, Error{Code: CodeUnavailable, Message: "not the leader", NotLeader: true, Leader: m.leaderAddr.Load().(string)})
		default:
			w.WriteHeader(http.StatusCreated)
			encodeT(t, w, Bucket{Name: "b01"})
		}
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *member) addr() string { return strings.TrimPrefix(m.srv.URL, "http://") }

// TestClientFollowsTheLeader: a client given three members reaches the
// leader a follower names, for a non-idempotent call too (the refusal did
// nothing), and stays there.
func TestClientFollowsTheLeader(t *testing.T) {
	ms := []*member{newMember(t), newMember(t), newMember(t)}
	ms[2].serving.Store(true)
	for _, m := range ms[:2] {
		m.leaderAddr.Store(ms[2].addr())
	}
	c, err := NewClient(ms[0].addr()+","+ms[1].addr()+","+ms[2].addr(), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBucket(context.Background(), "b01"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if c.Addr() != ms[2].addr() || ms[0].calls.Load() != 1 || ms[1].calls.Load() != 0 || ms[2].calls.Load() != 1 {
		t.Fatalf("client at %s, calls %d %d %d; want the leader %s after one refusal", c.Addr(), ms[0].calls.Load(), ms[1].calls.Load(), ms[2].calls.Load(), ms[2].addr())
	}
	if _, err := c.CreateBucket(context.Background(), "b01"); err != nil || ms[2].calls.Load() != 2 || ms[0].calls.Load() != 1 {
		t.Fatalf("second create: %v, calls %d %d", err, ms[0].calls.Load(), ms[2].calls.Load())
	}
}

// TestClientTriesTheNextMember: a dead member (refused dial) and one that
// knows no leader send the client on to the next address.
func TestClientTriesTheNextMember(t *testing.T) {
	// Nothing listens on port 1 (a port taken and closed could be anyone's
	// by the time the client dials it).
	const dead = "127.0.0.1:1"
	noLeader, leader := newMember(t), newMember(t)
	leader.serving.Store(true)
	c, err := NewClient(dead+","+noLeader.addr()+","+leader.addr(), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBucket(context.Background(), "b01"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if c.Addr() != leader.addr() || noLeader.calls.Load() != 1 || leader.calls.Load() != 1 {
		t.Fatalf("client at %s, calls %d %d", c.Addr(), noLeader.calls.Load(), leader.calls.Load())
	}
}

// TestClientDoesNotRepeatAnUnknownOutcome: an UNAVAILABLE answer that is
// not a NOT_LEADER refusal leaves the outcome unknown: a non-idempotent
// call is not tried again, an idempotent one is, within its bound.
func TestClientDoesNotRepeatAnUnknownOutcome(t *testing.T) {
	a, b := newMember(t), newMember(t)
	a.unknown.Store(true)
	b.unknown.Store(true)
	c, err := NewClient(a.addr()+","+b.addr(), ClientOptions{FailoverTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateBucket(context.Background(), "b01")
	if !errors.Is(err, ErrUnavailable) || a.calls.Load()+b.calls.Load() != 1 {
		t.Fatalf("create: %v after %d calls, want UNAVAILABLE after 1", err, a.calls.Load()+b.calls.Load())
	}
	_, err = c.ListBuckets(context.Background())
	if !errors.Is(err, ErrUnavailable) || a.calls.Load()+b.calls.Load() < 3 || a.calls.Load()+b.calls.Load() > 1+MaxFailoverAttempts {
		t.Fatalf("list: %v after %d calls, want UNAVAILABLE after retries within the bound", err, a.calls.Load()+b.calls.Load()-1)
	}
}

// TestClientRetriesBusy: a BUSY refusal did nothing, so a non-idempotent
// call is tried again on the same member (one address) until it is
// served; UNAVAILABLE without that promise is not repeated (above).
func TestClientRetriesBusy(t *testing.T) {
	m := newMember(t)
	m.serving.Store(true)
	m.busy.Store(2)
	c, err := NewClient(m.addr(), ClientOptions{Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBucket(context.Background(), "b01"); err != nil || m.calls.Load() != 3 {
		t.Fatalf("create: %v after %d calls; want served on the third", err, m.calls.Load())
	}
}
