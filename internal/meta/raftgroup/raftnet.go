package raftgroup

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The transport between meta members: HTTP on each member's API address.
// A member streams raft messages to each other member in one long POST
// to /v1/raft/stream (chunked body, kept open): the body is a sequence of
// frames, each a u32 LE length then, for each message of a batch, its
// protobuf length u32 LE and the bytes; the receiver hands each frame's
// messages to its raft goroutine as it reads them. It answers 200 at once
// and writes nothing more (the answer's body ends with the stream), so the
// sender, reading the answer, learns at once that a stream ended (the
// peer stopped, restarted or died) and opens a new one for the next
// frame instead of losing it. One sender goroutine per peer, with a
// bounded queue, writes everything queued as one frame (no round trip per
// batch: the next frame goes as soon as the last is written). Raft
// tolerates lost messages (it resends), so a full queue or a failed
// stream drops messages and reports the peer unreachable; the next batch
// opens a new stream.
const (
	StreamRoute = "/v1/raft/stream"
	// maxQueuedRaftMsgs bounds the messages queued for one peer.
	maxQueuedRaftMsgs = 4096
	// maxRaftFrameBytes bounds one frame (a message is at most
	// maxRaftMsgBytes of entries, or one entry of maxRaftRecordBytes).
	MaxRaftFrameBytes = 4 * state.MaxRaftRecordBytes
	// raftWriteTimeout bounds the write of one frame (a peer that stops
	// reading: the stream is closed and the peer reported unreachable).
	raftWriteTimeout = 5 * time.Second
	// raftStreamIdle: a stream no frame was written to for this long is
	// closed by its sender (the next batch opens another).
	raftStreamIdle = 30 * time.Second
	// raftStreamBufferBytes is a received stream's read buffer.
	raftStreamBufferBytes = 64 << 10
	// raftRetryPause is the pause after a failed stream (a member that is
	// down is not hammered; raft resends what matters).
	raftRetryPause = 100 * time.Millisecond
)

type raftNet struct {
	r *Member
	// hc carries the streams (no overall timeout: a stream lasts); ctx
	// is theirs, cancelled at close.
	hc     *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	// snapClient fetches snapshot streams (no overall timeout: the
	// fetch's context bounds it).
	snapClient *http.Client
	stop       chan struct{}
	wg         sync.WaitGroup
	// mu guards peers (membership changes add and remove senders) and
	// started.
	mu      sync.Mutex
	peers   map[uint64]*raftPeer
	started bool
}

type raftPeer struct {
	id   uint64
	url  string
	mu   sync.Mutex
	q    []*pb.Message
	wake chan struct{} // cap 1
	quit chan struct{} // closed when the member is removed
}

func newRaftNet(r *Member) *raftNet {
	n := &raftNet{r: r, peers: map[uint64]*raftPeer{}, stop: make(chan struct{}),
		hc:         &http.Client{Transport: r.s.Cfg.TLS.HTTPTransport(&http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2})},
		snapClient: &http.Client{Transport: r.s.Cfg.TLS.HTTPTransport(&http.Transport{Proxy: nil})}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	r.pmu.RLock()
	addrs := maps.Clone(r.addrs)
	r.pmu.RUnlock()
	n.setPeers(addrs)
	return n
}

// setPeers makes addrs (member → address) the members sent to: a sender
// for each new one (or one whose address changed), none for the others.
func (n *raftNet) setPeers(addrs map[uint64]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, p := range n.peers {
		if a, ok := addrs[id]; !ok || n.r.s.Cfg.TLS.Scheme()+"://"+a+StreamRoute != p.url {
			close(p.quit)
			delete(n.peers, id)
		}
	}
	for id, a := range addrs {
		if id == n.r.id || n.peers[id] != nil {
			continue
		}
		p := &raftPeer{id: id, url: n.r.s.Cfg.TLS.Scheme() + "://" + a + StreamRoute, wake: make(chan struct{}, 1), quit: make(chan struct{})}
		n.peers[id] = p
		if n.started {
			n.wg.Add(1)
			go n.sender(p)
		}
	}
}

func (n *raftNet) start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.started = true
	for _, p := range n.peers {
		n.wg.Add(1)
		go n.sender(p)
	}
}

func (n *raftNet) close() {
	close(n.stop)
	n.cancel()
	n.wg.Wait()
	n.hc.CloseIdleConnections()
	n.snapClient.CloseIdleConnections()
}

// send queues m for its peer (dropped when the queue is full).
func (n *raftNet) send(m *pb.Message) {
	n.mu.Lock()
	p := n.peers[m.GetTo()]
	n.mu.Unlock()
	if p == nil || n.r.iso.isolated() {
		if m.GetType() == pb.MessageType_MsgSnap {
			n.r.snapshotSent(m.GetTo(), false)
		}
		return
	}
	p.mu.Lock()
	full := len(p.q) >= maxQueuedRaftMsgs
	if !full {
		p.q = append(p.q, m)
	}
	p.mu.Unlock()
	if full {
		if m.GetType() == pb.MessageType_MsgSnap {
			n.r.snapshotSent(m.GetTo(), false)
		}
		n.r.unreachable(p.id)
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (n *raftNet) sender(p *raftPeer) {
	defer n.wg.Done()
	var st *raftStream
	defer func() {
		if st != nil {
			st.close()
		}
	}()
	idle := time.NewTimer(raftStreamIdle)
	defer idle.Stop()
	var buf []byte
	for {
		select {
		case <-n.stop:
			return
		case <-p.quit:
			return
		case <-idle.C:
			if st != nil {
				st.close()
				st = nil
			}
			continue
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			q := p.q
			k := 0
			snap := false
			buf = append(buf[:0], 0, 0, 0, 0) // the frame's length
			for ; k < len(q); k++ {
				b, err := proto.Marshal(q[k])
				if err != nil {
					continue
				}
				if k > 0 && len(buf)+4+len(b) > MaxRaftFrameBytes {
					break
				}
				buf = binary.LittleEndian.AppendUint32(buf, uint32(len(b)))
				buf = append(buf, b...)
				snap = snap || q[k].GetType() == pb.MessageType_MsgSnap
			}
			p.q = q[k:]
			more := len(p.q) > 0
			p.mu.Unlock()
			if len(buf) == 4 {
				break
			}
			binary.LittleEndian.PutUint32(buf, uint32(len(buf)-4))
			if st != nil && st.ended() {
				// Ended since the last frame (the peer stopped or
				// restarted): a new stream, nothing lost.
				st.close()
				st = nil
			}
			if st == nil {
				st = n.openStream(p)
			}
			idle.Reset(raftStreamIdle)
			if err := st.write(buf); err != nil {
				st.close()
				st = nil
				n.r.unreachable(p.id)
				p.mu.Lock()
				for _, m := range p.q {
					snap = snap || m.GetType() == pb.MessageType_MsgSnap
				}
				p.q = nil // stale by the time the peer is back
				p.mu.Unlock()
				if snap {
					n.r.snapshotSent(p.id, false)
				}
				select {
				case <-n.stop:
					return
				case <-time.After(raftRetryPause):
				}
				break
			}
			if snap {
				// The follower fetches the data itself (snapshot.go):
				// raft may go on probing it.
				n.r.snapshotSent(p.id, true)
			}
			if !more {
				break
			}
		}
	}
}

// raftStream is one open stream to a peer: frames written to w go out as
// the request's body; done is closed when the request has ended (its
// error, if any, then fails every write).
type raftStream struct {
	w      *io.PipeWriter
	cancel context.CancelFunc
	done   chan struct{}
	// closing: the sender closed it (its end is no news).
	closing atomic.Bool
}

// openStream starts a stream to p (the request runs in its own goroutine
// until the stream is closed or fails).
func (n *raftNet) openStream(p *raftPeer) *raftStream {
	ctx, cancel := context.WithCancel(n.ctx)
	pr, pw := io.Pipe()
	st := &raftStream{w: pw, cancel: cancel, done: make(chan struct{})}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(st.done)
		err := n.stream(ctx, p, pr)
		if err == nil {
			err = fmt.Errorf("meta member %d: raft stream ended", p.id)
		}
		pr.CloseWithError(err) // a write in progress or later fails
		if !st.closing.Load() {
			n.r.unreachable(p.id) // it went away (stopped, restarted, died)
		}
	}()
	return st
}

// stream is the request of one stream: it returns when the stream ends —
// its answer's body ends (the peer answers 200 at once and writes nothing
// more, so the end comes when the peer closed the stream, stopped or
// died) or fails, or the request fails. Without reading the answer, a
// dead peer would go unnoticed until the next frame, which the
// transport would take from the body and lose.
func (n *raftNet) stream(ctx context.Context, p *raftPeer, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := n.hc.Do(req)
	if err != nil {
		return fmt.Errorf("meta member %d: %s: %w", p.id, p.url, err)
	}
	defer closeBody(n.r.log, resp.Body)
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBodyBytes))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("meta member %d: %s: HTTP %d", p.id, p.url, resp.StatusCode)
	}
	if err != nil {
		return fmt.Errorf("meta member %d: %s: %w", p.id, p.url, err)
	}
	return nil
}

// ended says whether the stream has ended (its next write would fail).
func (st *raftStream) ended() bool {
	select {
	case <-st.done:
		return true
	default:
		return false
	}
}

// write writes one frame, within raftWriteTimeout (past it the stream is
// cancelled, which fails the write).
func (st *raftStream) write(frame []byte) error {
	t := time.AfterFunc(raftWriteTimeout, st.cancel)
	defer t.Stop()
	_, err := st.w.Write(frame)
	return err
}

// close ends the stream: the body ends (the peer answers), or the
// request is cancelled raftWriteTimeout later if it is stuck.
func (st *raftStream) close() {
	st.closing.Store(true)
	_ = st.w.Close() // (*io.PipeWriter).Close always returns nil
	time.AfterFunc(raftWriteTimeout, st.cancel)
}

const maxErrorBodyBytes = 1 << 16

// closeBody closes an HTTP response body once its answer is read (for a
// snapshot, verified): an error then is the connection's, not the
// answer's, and is logged, not returned, so that what the caller reports
// does not change.
func closeBody(log *slog.Logger, body io.Closer) {
	if err := body.Close(); err != nil {
		log.Debug("meta: closing a response body", "err", err)
	}
}

// cutRead makes a stream's pending and next reads fail now. It fails only
// on a connection that takes no deadline (http.ErrNotSupported): logged,
// the stream then ends when its sender ends it or the server stops.
func cutRead(rc *http.ResponseController, log *slog.Logger) {
	if err := rc.SetReadDeadline(time.Now()); err != nil {
		log.Warn("meta raft stream: cannot cut its read", "err", err)
	}
}

// decodeRaftMessages splits a POST body into messages.
func decodeRaftMessages(body []byte) ([]*pb.Message, error) {
	var out []*pb.Message
	for len(body) > 0 {
		if len(body) < 4 {
			return nil, errors.New("truncated length")
		}
		n := int(binary.LittleEndian.Uint32(body))
		body = body[4:]
		if n > len(body) {
			return nil, fmt.Errorf("message of %d bytes, %d left", n, len(body))
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(body[:n], m); err != nil {
			return nil, err
		}
		out = append(out, m)
		body = body[n:]
	}
	return out, nil
}

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
			cutRead(rc, r.log) // the read below fails
		}
	})
	defer stop()
	// refuse ends the stream without reading the rest of it (the server
	// would read some before closing).
	refuse := func(why string) {
		cutRead(rc, r.log)
		r.log.Warn("meta raft stream refused", "from", req.RemoteAddr, "why", why)
	}
	br := bufio.NewReaderSize(req.Body, raftStreamBufferBytes)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return // closed by the sender, broken or cut off
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > MaxRaftFrameBytes {
			refuse(fmt.Sprintf("frame of %d bytes", n))
			return
		}
		frame := make([]byte, n) // fresh: decoded messages may point into it
		if _, err := io.ReadFull(br, frame); err != nil {
			return
		}
		msgs, err := decodeRaftMessages(frame)
		if err != nil {
			refuse(err.Error())
			return
		}
		ok := msgs[:0]
		for _, m := range msgs {
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
