package raftgroup

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/spindle-store/spindle/internal/meta/raftnet"
)

// streamHandler receives a stream of raft messages from a peer (see the
// transport's comment above), until the body ends, it breaks, a frame is
// refused, or the member stops (stopStreams). It answers 200 at once and
// writes nothing more (full duplex): the answer's body ends with the
// stream, which is how the sender learns of the end.
func (r *Member) StreamHandler(w http.ResponseWriter, req *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/2 is full duplex without it
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	var mu sync.Mutex
	finished := false
	defer func() {
		mu.Lock()
		finished = true
		mu.Unlock()
	}()
	stop := context.AfterFunc(r.streamsCtx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			raftnet.CutRead(rc, r.log) // the read below fails
		}
	})
	defer stop()
	// refuse ends the stream without reading the rest of it (the server
	// would read some before closing).
	refuse := func(why string) {
		raftnet.CutRead(rc, r.log)
		r.log.Warn("meta raft stream refused", "from", req.RemoteAddr, "why", why)
	}
	from, bound, err := raftnet.BoundSender(req) // issue 33: its certificate's member only
	if err != nil {
		refuse(err.Error())
		return
	}
	br := bufio.NewReaderSize(req.Body, raftnet.StreamBufferBytes)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return // closed by the sender, broken or cut off
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > raftnet.MaxRaftFrameBytes {
			refuse(fmt.Sprintf("frame of %d bytes", n))
			return
		}
		frame := make([]byte, n) // fresh: decoded messages may point into it
		if _, err := io.ReadFull(br, frame); err != nil {
			return
		}
		msgs, err := raftnet.DecodeMessages(frame)
		if err != nil {
			refuse(err.Error())
			return
		}
		ok := msgs[:0]
		for _, m := range msgs {
			if bound && m.GetFrom() != from {
				refuse(fmt.Sprintf("a message from member %d under the certificate of member %d", m.GetFrom(), from))
				return
			}
			if r.peerAddr(m.GetFrom()) != "" && m.GetTo() == r.id {
				ok = append(ok, m)
			}
		}
		if !r.iso.isolated() {
			r.deliver(ok)
		}
	}
}

// stopStreams ends the streams this member receives (at its HTTP
// server's shutdown, which waits for them otherwise, and at close).
func (r *Member) StopStreams() { r.streamsStop() }

// snapshotSent reports a MsgSnap to member id sent (or lost) to raft.
func (r *Member) snapshotSent(id uint64, ok bool) {
	r.in.mu.Lock()
	r.in.snapSent[id] = ok
	r.in.mu.Unlock()
	r.wake()
}

// transferLeader asks raft, on the leader, to hand the leadership to id.
func (r *Member) TransferLeader(id uint64) {
	r.in.mu.Lock()
	r.in.transfer = id
	r.in.mu.Unlock()
	r.wake()
}
