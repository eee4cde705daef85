package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// The transport between meta members: plain HTTP on each member's API
// address. A member POSTs batches of raft messages to /v1/raft/messages
// of another (body: for each message, its protobuf length u32 LE then the
// bytes); the receiver hands them to its raft goroutine and answers 204
// at once. One sender goroutine per peer, with a bounded queue: raft
// tolerates lost messages (it resends), so a full queue or a failed POST
// drops messages and reports the peer unreachable.
const (
	raftMessagesRoute = "/v1/raft/messages"
	// maxQueuedRaftMsgs bounds the messages queued for one peer.
	maxQueuedRaftMsgs = 4096
	// maxRaftPostBytes bounds one POST's body (a message is at most
	// maxRaftMsgBytes of entries, or one entry of maxRaftRecordBytes).
	maxRaftPostBytes = 4 * maxRaftRecordBytes
	// raftPostTimeout bounds one POST.
	raftPostTimeout = 5 * time.Second
	// raftRetryPause is the pause after a failed POST (a member that is
	// down is not hammered; raft resends what matters).
	raftRetryPause = 100 * time.Millisecond
)

type raftNet struct {
	r     *replicator
	hc    *http.Client
	peers map[uint64]*raftPeer
	stop  chan struct{}
	wg    sync.WaitGroup
}

type raftPeer struct {
	id   uint64
	url  string
	mu   sync.Mutex
	q    []*pb.Message
	wake chan struct{} // cap 1
}

func newRaftNet(r *replicator) *raftNet {
	n := &raftNet{r: r, peers: map[uint64]*raftPeer{}, stop: make(chan struct{}),
		hc: &http.Client{Timeout: raftPostTimeout, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}}
	for id, addr := range r.peers {
		if id != r.id {
			n.peers[id] = &raftPeer{id: id, url: "http://" + addr + raftMessagesRoute, wake: make(chan struct{}, 1)}
		}
	}
	return n
}

func (n *raftNet) start() {
	for _, p := range n.peers {
		n.wg.Add(1)
		go n.sender(p)
	}
}

func (n *raftNet) close() {
	close(n.stop)
	n.wg.Wait()
	n.hc.CloseIdleConnections()
}

// send queues m for its peer (dropped when the queue is full).
func (n *raftNet) send(m *pb.Message) {
	p := n.peers[m.GetTo()]
	if p == nil || n.r.isolated.Load() {
		return
	}
	p.mu.Lock()
	full := len(p.q) >= maxQueuedRaftMsgs
	if !full {
		p.q = append(p.q, m)
	}
	p.mu.Unlock()
	if full {
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
	var buf []byte
	for {
		select {
		case <-n.stop:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			q := p.q
			k := 0
			buf = buf[:0]
			for ; k < len(q); k++ {
				b, err := proto.Marshal(q[k])
				if err != nil {
					continue
				}
				if k > 0 && len(buf)+4+len(b) > maxRaftPostBytes {
					break
				}
				buf = binary.LittleEndian.AppendUint32(buf, uint32(len(b)))
				buf = append(buf, b...)
			}
			p.q = q[k:]
			more := len(p.q) > 0
			p.mu.Unlock()
			if len(buf) == 0 {
				break
			}
			if err := n.post(p, buf); err != nil {
				n.r.unreachable(p.id)
				p.mu.Lock()
				p.q = nil // stale by the time the peer is back
				p.mu.Unlock()
				select {
				case <-n.stop:
					return
				case <-time.After(raftRetryPause):
				}
				break
			}
			if !more {
				break
			}
		}
	}
}

func (n *raftNet) post(p *raftPeer, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), raftPostTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := n.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBodyBytes))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("meta member %d: %s: HTTP %d", p.id, p.url, resp.StatusCode)
	}
	return nil
}

const maxErrorBodyBytes = 1 << 16

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

// raftRoutes adds the routes of a replicated member: raft messages in,
// and the member's status (served by every member, leader or not).
func (s *Service) raftRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+metaapi.MetaStatusRoute, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.MetaStatus())
	})
	if s.rep == nil {
		return
	}
	mux.HandleFunc("POST "+raftMessagesRoute, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRaftPostBytes))
		if err != nil {
			writeError(w, http.StatusBadRequest, metaapi.CodeInvalid, "raft messages: "+err.Error())
			return
		}
		msgs, err := decodeRaftMessages(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, metaapi.CodeInvalid, "raft messages: "+err.Error())
			return
		}
		ok := msgs[:0]
		for _, m := range msgs {
			if _, known := s.rep.peers[m.GetFrom()]; known && m.GetTo() == s.rep.id {
				ok = append(ok, m)
			}
		}
		if !s.rep.isolated.Load() {
			s.rep.deliver(ok)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// MetaStatus is this member's view of the meta group (a group of one:
// member 1, always the leader).
func (s *Service) MetaStatus() metaapi.MetaStatus {
	if s.rep != nil {
		return s.rep.status()
	}
	return metaapi.MetaStatus{ID: 1, LeaderID: 1, Role: "leader", Serving: s.Serving(), Members: []metaapi.MetaMember{{ID: 1}}}
}
