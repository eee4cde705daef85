// Package raftnet is the transport between the members of a replicated
// meta service: raft messages streamed over HTTP (see the format below),
// one sender goroutine per peer with a bounded queue. It owns no raft
// state: the member it serves (Host) learns of lost messages and of
// snapshots sent or lost through Host's callbacks.
//
// Invariants: a message is sent at most once, in the order queued for its
// peer; a message that cannot be sent (full queue, broken stream,
// isolated member) is dropped and reported (raft resends what matters).
// Concurrency: Send, SetPeers and Close may be called from any goroutine;
// the callbacks are called from the senders' goroutines and must not
// block.
package raftnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/tlsconf"

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
	// StreamBufferBytes is a received stream's read buffer.
	StreamBufferBytes = 64 << 10
	// raftRetryPause is the pause after a failed stream (a member that is
	// down is not hammered; raft resends what matters).
	raftRetryPause = 100 * time.Millisecond
)

// Host is what the transport needs of the member it serves.
type Host struct {
	// ID is the member's own ID (never sent to).
	ID uint64
	// TLS secures the streams and the snapshot fetches.
	TLS *tlsconf.Settings
	Log *slog.Logger
	// Isolated: a test cut the member off; nothing is sent.
	Isolated func() bool
	// SnapshotSent reports a MsgSnap to member id sent (ok) or lost.
	SnapshotSent func(id uint64, ok bool)
	// Unreachable reports messages to member id lost.
	Unreachable func(id uint64)
}

// Net sends raft messages to the other members.
type Net struct {
	h Host
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

// New returns the transport of member h.ID, sending to addrs (member →
// address); Start starts its senders.
func New(h Host, addrs map[uint64]string) *Net {
	n := &Net{h: h, peers: map[uint64]*raftPeer{}, stop: make(chan struct{}),
		hc:         &http.Client{Transport: h.TLS.Pin(tlsconf.RoleMeta).HTTPTransport(&http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2})},
		snapClient: &http.Client{Transport: h.TLS.Pin(tlsconf.RoleMeta).HTTPTransport(&http.Transport{Proxy: nil})}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.SetPeers(addrs)
	return n
}

// SnapClient is the HTTP client that fetches snapshot streams (no
// overall timeout: the fetch's context bounds it).
func (n *Net) SnapClient() *http.Client { return n.snapClient }

// SetPeers makes addrs (member → address) the members sent to: a sender
// for each new one (or one whose address changed), none for the others.
func (n *Net) SetPeers(addrs map[uint64]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, p := range n.peers {
		if a, ok := addrs[id]; !ok || n.h.TLS.Scheme()+"://"+a+StreamRoute != p.url {
			close(p.quit)
			delete(n.peers, id)
		}
	}
	for id, a := range addrs {
		if id == n.h.ID || n.peers[id] != nil {
			continue
		}
		p := &raftPeer{id: id, url: n.h.TLS.Scheme() + "://" + a + StreamRoute, wake: make(chan struct{}, 1), quit: make(chan struct{})}
		n.peers[id] = p
		if n.started {
			n.wg.Add(1)
			go n.sender(p)
		}
	}
}

// Start starts a sender per peer.
func (n *Net) Start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.started = true
	for _, p := range n.peers {
		n.wg.Add(1)
		go n.sender(p)
	}
}

// Close stops the senders and waits for them.
func (n *Net) Close() {
	close(n.stop)
	n.cancel()
	n.wg.Wait()
	n.hc.CloseIdleConnections()
	n.snapClient.CloseIdleConnections()
}

// Send queues m for its peer (dropped when the queue is full).
func (n *Net) Send(m *pb.Message) {
	n.mu.Lock()
	p := n.peers[m.GetTo()]
	n.mu.Unlock()
	if p == nil || n.h.Isolated() {
		if m.GetType() == pb.MessageType_MsgSnap {
			n.h.SnapshotSent(m.GetTo(), false)
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
			n.h.SnapshotSent(m.GetTo(), false)
		}
		n.h.Unreachable(p.id)
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (n *Net) sender(p *raftPeer) {
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
				n.h.Unreachable(p.id)
				p.mu.Lock()
				for _, m := range p.q {
					snap = snap || m.GetType() == pb.MessageType_MsgSnap
				}
				p.q = nil // stale by the time the peer is back
				p.mu.Unlock()
				if snap {
					n.h.SnapshotSent(p.id, false)
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
				n.h.SnapshotSent(p.id, true)
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
func (n *Net) openStream(p *raftPeer) *raftStream {
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
			n.h.Unreachable(p.id) // it went away (stopped, restarted, died)
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
func (n *Net) stream(ctx context.Context, p *raftPeer, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := n.hc.Do(req)
	if err != nil {
		return fmt.Errorf("meta member %d: %s: %w", p.id, p.url, err)
	}
	defer CloseBody(n.h.Log, resp.Body)
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxErrorBodyBytes))
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

// MaxErrorBodyBytes bounds the body of an error answer read.
const MaxErrorBodyBytes = 1 << 16

// CloseBody closes an HTTP response body once its answer is read (for a
// snapshot, verified): an error then is the connection's, not the
// answer's, and is logged, not returned, so that what the caller reports
// does not change.
func CloseBody(log *slog.Logger, body io.Closer) {
	if err := body.Close(); err != nil {
		log.Debug("meta: closing a response body", "err", err)
	}
}

// CutRead makes a stream's pending and next reads fail now. It fails only
// on a connection that takes no deadline (http.ErrNotSupported): logged,
// the stream then ends when its sender ends it or the server stops.
// CutRead is exported for the receiving side's stream handler.
func CutRead(rc *http.ResponseController, log *slog.Logger) {
	if err := rc.SetReadDeadline(time.Now()); err != nil {
		log.Warn("meta raft stream: cannot cut its read", "err", err)
	}
}

// DecodeMessages splits a POST body into messages.
func DecodeMessages(body []byte) ([]*pb.Message, error) {
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

// BoundSender is the meta member a raft stream's sender may speak for:
// the member ID its verified certificate's name binds (tlsconf.MemberOf:
// meta-ID, local-meta-ID); bound false without TLS. A meta certificate
// that binds no member is an error: its raft messages are refused.
func BoundSender(req *http.Request) (id uint64, bound bool, err error) {
	if req.TLS == nil {
		return 0, false, nil
	}
	p, err := tlsconf.PeerOfState(req.TLS)
	if err != nil {
		return 0, false, err
	}
	id, ok := tlsconf.MemberOf(p.Name)
	if !ok {
		return 0, false, fmt.Errorf("certificate %s binds no meta member (name it meta-ID)", p)
	}
	return id, true, nil
}
