package meta

import (
	"encoding/binary"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestRaftStreamReopensAfterRestart: a follower stopped and started again
// on its address gets the entries committed meanwhile and after: the
// leader's stream to it broke and a new one was opened (and the
// follower's own streams to the others are new).
func TestRaftStreamReopensAfterRestart(t *testing.T) {
	g := newRGroup(t, 3)
	ld := g.leader()
	f := (ld + 1) % 3
	if _, err := g.cl.CreateBucket(bg, "before"); err != nil {
		t.Fatal(err)
	}
	g.stop(f)
	if _, err := g.cl.CreateBucket(bg, "while-down"); err != nil {
		t.Fatal(err)
	}
	g.restart(f)
	if _, err := g.cl.CreateBucket(bg, "after"); err != nil {
		t.Fatal(err)
	}
	want := g.srvs[ld].Service().MetaStatus().AppliedIndex
	waitFor(t, "the restarted follower applied every entry", func() bool {
		return g.srvs[f].Service().MetaStatus().AppliedIndex >= want
	})
}

// openStream starts a raft stream to addr by hand; the request's outcome
// arrives on the channel returned: the answer's status, or 0 when the
// request failed.
func openStream(t *testing.T, addr string) (*io.PipeWriter, chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	res := make(chan int, 1)
	go func() {
		code := 0
		resp, err := http.Post("http://"+addr+raftStreamRoute, "application/octet-stream", pr)
		if err == nil {
			resp.Body.Close()
			code = resp.StatusCode
		}
		pr.CloseWithError(io.ErrClosedPipe)
		res <- code
	}()
	t.Cleanup(func() { pw.Close() })
	return pw, res
}

// waitResult waits for a stream request to end (failing the test if it
// has not within 20 s, waitFor's bound).
func waitResult(t *testing.T, res chan int) int {
	t.Helper()
	select {
	case code := <-res:
		return code
	case <-time.After(20 * time.Second):
		t.Fatal("timed out (20 s) waiting for the raft stream to end")
		return 0
	}
}

// TestRaftStreamRefusesOversizedFrame: a frame announced past
// maxRaftFrameBytes ends the stream with 400 before any of it is read.
func TestRaftStreamRefusesOversizedFrame(t *testing.T) {
	g := newRGroup(t, 3)
	pw, res := openStream(t, g.addrs[0])
	if _, err := pw.Write(binary.LittleEndian.AppendUint32(nil, maxRaftFrameBytes+1)); err != nil {
		t.Fatal(err)
	}
	if code := waitResult(t, res); code != http.StatusBadRequest {
		t.Fatalf("oversized frame: HTTP %d, want 400", code)
	}
}

// TestRaftStreamEndsWhenMemberStops: a stream a member receives ends when
// the member stops (its HTTP server's shutdown would wait for it
// otherwise), and one opened after is cut at once.
func TestRaftStreamEndsWhenMemberStops(t *testing.T) {
	g := newRGroup(t, 3)
	pw, res := openStream(t, g.addrs[0])
	// An empty frame: the stream is open and read.
	if _, err := pw.Write(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	g.srvs[0].Service().rep.stopStreams()
	if code := waitResult(t, res); code == http.StatusNoContent {
		t.Fatal("the stream was answered 204 (ended by its sender), want it cut")
	}
	pw2, res2 := openStream(t, g.addrs[0])
	pw2.Write(make([]byte, 4)) // may fail: the stream is cut
	if code := waitResult(t, res2); code == http.StatusNoContent {
		t.Fatal("the stream was answered 204 (ended by its sender), want it cut")
	}
}
