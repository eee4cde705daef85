package meta

import (
	"encoding/binary"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/raftnet"
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

// openStream starts a raft stream to addr by hand; the answer's status
// arrives on the channel returned once the stream has ended (its body
// ended), 0 if the request failed.
func openStream(t *testing.T, addr string) (*io.PipeWriter, chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	res := make(chan int, 1)
	go func() {
		code := 0
		resp, err := http.Post("http://"+addr+raftnet.StreamRoute, "application/octet-stream", pr)
		if err == nil {
			// The stream may be cut, and this goroutine may outlive the
			// test: its status is what the test reads.
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			code = resp.StatusCode
		}
		pr.CloseWithError(io.ErrClosedPipe)
		res <- code
	}()
	t.Cleanup(func() { mustClose(t, pw) })
	return pw, res
}

// waitEnded waits for a stream to end (failing the test if it has not
// within 20 s, waitFor's bound).
func waitEnded(t *testing.T, res chan int) {
	t.Helper()
	select {
	case <-res:
	case <-time.After(20 * time.Second):
		t.Fatal("timed out (20 s) waiting for the raft stream to end")
	}
}

// TestRaftStreamRefusesOversizedFrame: a frame announced past
// maxRaftFrameBytes ends the stream before any of it is read.
func TestRaftStreamRefusesOversizedFrame(t *testing.T) {
	g := newRGroup(t, 3)
	pw, res := openStream(t, g.addrs[0])
	if _, err := pw.Write(binary.LittleEndian.AppendUint32(nil, raftnet.MaxRaftFrameBytes+1)); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, res)
}

// TestRaftStreamEndsWhenMemberStops: a stream a member receives ends when
// the member stops (its HTTP server's shutdown would wait for it
// otherwise), and one opened after ends at once.
func TestRaftStreamEndsWhenMemberStops(t *testing.T) {
	g := newRGroup(t, 3)
	pw, res := openStream(t, g.addrs[0])
	if _, err := pw.Write(make([]byte, 4)); err != nil { // an empty frame
		t.Fatal(err)
	}
	g.srvs[0].Service().rep.StopStreams()
	waitEnded(t, res)
	pw2, res2 := openStream(t, g.addrs[0])
	_, _ = pw2.Write(make([]byte, 4)) // may fail: the stream is cut
	waitEnded(t, res2)
}
