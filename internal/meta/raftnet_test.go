package meta

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
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
		resp, err := http.Post("http://"+addr+raftStreamRoute, "application/octet-stream", pr)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
		}
		pr.CloseWithError(io.ErrClosedPipe)
		res <- code
	}()
	t.Cleanup(func() { pw.Close() })
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
	if _, err := pw.Write(binary.LittleEndian.AppendUint32(nil, maxRaftFrameBytes+1)); err != nil {
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
	g.srvs[0].Service().rep.stopStreams()
	waitEnded(t, res)
	pw2, res2 := openStream(t, g.addrs[0])
	pw2.Write(make([]byte, 4)) // may fail: the stream is cut
	waitEnded(t, res2)
}

// bareReplicator is just enough of a member for one end of a raft
// stream: the sender's or the receiver's.
func bareReplicator(id uint64, addrs map[uint64]string) *replicator {
	r := &replicator{s: &state.State{}, id: id, log: quiet, notify: make(chan struct{}, 1), membership: membership{addrs: addrs}}
	r.snap.r = r
	r.in.unreachable = map[uint64]bool{}
	r.in.snapSent = map[uint64]bool{}
	r.streamsCtx, r.streamsStop = context.WithCancel(context.Background())
	return r
}

// serveStreams serves member 2's end of the streams on ln.
func serveStreams(t *testing.T, ln net.Listener) (*replicator, *http.Server) {
	rcv := bareReplicator(2, map[uint64]string{1: "127.0.0.1:1"})
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+raftStreamRoute, rcv.streamHandler)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { rcv.stopStreams(); srv.Close() })
	return rcv, srv
}

// received waits for a message delivered to rcv and returns what it has.
func received(t *testing.T, r *replicator) []*pb.Message {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.in.mu.Lock()
		msgs := r.in.msgs
		r.in.msgs = nil
		r.in.mu.Unlock()
		if len(msgs) > 0 {
			return msgs
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatal("timed out (20 s) waiting for a raft message")
		}
	}
}

// TestRaftStreamSenderSeesPeerRestart: when the peer at the other end of
// a stream stops and another takes its address, the next message reaches
// the new one. Fails without reading the stream's answer: the sender
// learns of the end only by writing, and the transport takes the first
// frame after the end from the body and loses it.
func TestRaftStreamSenderSeesPeerRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustNo(t, err)
	addr := ln.Addr().String()
	rcv, srv := serveStreams(t, ln)
	snd := bareReplicator(1, map[uint64]string{1: "127.0.0.1:1", 2: addr})
	n := newRaftNet(snd)
	n.start()
	defer n.close()
	hb := func(term uint64) *pb.Message {
		return &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(term)}
	}
	n.send(hb(1))
	if got := received(t, rcv); len(got) != 1 || got[0].GetTerm() != 1 {
		t.Fatalf("received %v, want the heartbeat of term 1", got)
	}
	// The peer goes away (its connections closed), another starts on
	// its address.
	rcv.stopStreams()
	srv.Close()
	// The sender's stream ended: reported unreachable once it knows.
	waitFor(t, "the sender to see its stream end", func() bool {
		snd.in.mu.Lock()
		defer snd.in.mu.Unlock()
		return snd.in.unreachable[2]
	})
	ln2, err := net.Listen("tcp", addr)
	mustNo(t, err)
	rcv2, _ := serveStreams(t, ln2)
	n.send(hb(2))
	if got := received(t, rcv2); len(got) != 1 || got[0].GetTerm() != 2 {
		t.Fatalf("received %v, want the heartbeat of term 2", got)
	}
}
