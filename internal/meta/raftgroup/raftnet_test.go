package raftgroup

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/raftnet"
	"github.com/spindle-store/spindle/internal/meta/state"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestRaftStreamReopensAfterRestart: a follower stopped and started again
// on its address gets the entries committed meanwhile and after: the
// leader's stream to it broke and a new one was opened (and the
// follower's own streams to the others are new).
// bareReplicator is just enough of a member for one end of a raft
// stream: the sender's or the receiver's.
func bareReplicator(id uint64, addrs map[uint64]string) *Member {
	r := &Member{s: &state.State{}, id: id, log: quietLog, notify: make(chan struct{}, 1), membership: membership{addrs: addrs}}
	r.Snap.r = r
	r.in.unreachable = map[uint64]bool{}
	r.in.snapSent = map[uint64]bool{}
	r.streamsCtx, r.streamsStop = context.WithCancel(context.Background())
	return r
}

// serveStreams serves member 2's end of the streams on ln.
func serveStreams(t *testing.T, ln net.Listener) (*Member, *http.Server) {
	rcv := bareReplicator(2, map[uint64]string{1: "127.0.0.1:1"})
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+raftnet.StreamRoute, rcv.StreamHandler)
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() { rcv.StopStreams(); closeServer(t, srv) })
	return rcv, srv
}

// closeServer closes srv, failing the test on an error but that of a
// listener closed already (a test that closed srv itself).
func closeServer(t *testing.T, srv *http.Server) {
	t.Helper()
	if err := srv.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}

// received waits for a message delivered to rcv and returns what it has.
func received(t *testing.T, r *Member) []*pb.Message {
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
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	rcv, srv := serveStreams(t, ln)
	snd := bareReplicator(1, map[uint64]string{1: "127.0.0.1:1", 2: addr})
	n := raftnet.New(raftnet.Host{ID: 1, TLS: snd.s.Cfg.TLS, Log: snd.log, Isolated: snd.iso.isolated, SnapshotSent: snd.snapshotSent, Unreachable: snd.unreachable},
		map[uint64]string{2: addr})
	n.Start()
	defer n.Close()
	hb := func(term uint64) *pb.Message {
		return &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(term)}
	}
	n.Send(hb(1))
	if got := received(t, rcv); len(got) != 1 || got[0].GetTerm() != 1 {
		t.Fatalf("received %v, want the heartbeat of term 1", got)
	}
	// The peer goes away (its connections closed), another starts on
	// its address.
	rcv.StopStreams()
	closeServer(t, srv)
	// The sender's stream ended: reported unreachable once it knows.
	waitUntil(t, "the sender to see its stream end", func() bool {
		snd.in.mu.Lock()
		defer snd.in.mu.Unlock()
		return snd.in.unreachable[2]
	})
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rcv2, _ := serveStreams(t, ln2)
	n.Send(hb(2))
	if got := received(t, rcv2); len(got) != 1 || got[0].GetTerm() != 2 {
		t.Fatalf("received %v, want the heartbeat of term 2", got)
	}
}
