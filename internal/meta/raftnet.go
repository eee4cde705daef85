package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
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
	r  *replicator
	hc *http.Client
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

func newRaftNet(r *replicator) *raftNet {
	n := &raftNet{r: r, peers: map[uint64]*raftPeer{}, stop: make(chan struct{}),
		hc:         &http.Client{Timeout: raftPostTimeout, Transport: r.s.cfg.TLS.HTTPTransport(&http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2})},
		snapClient: &http.Client{Transport: r.s.cfg.TLS.HTTPTransport(&http.Transport{Proxy: nil})}}
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
		if a, ok := addrs[id]; !ok || n.r.s.cfg.TLS.Scheme()+"://"+a+raftMessagesRoute != p.url {
			close(p.quit)
			delete(n.peers, id)
		}
	}
	for id, a := range addrs {
		if id == n.r.id || n.peers[id] != nil {
			continue
		}
		p := &raftPeer{id: id, url: n.r.s.cfg.TLS.Scheme() + "://" + a + raftMessagesRoute, wake: make(chan struct{}, 1), quit: make(chan struct{})}
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
	n.wg.Wait()
	n.hc.CloseIdleConnections()
	n.snapClient.CloseIdleConnections()
}

// send queues m for its peer (dropped when the queue is full).
func (n *raftNet) send(m *pb.Message) {
	n.mu.Lock()
	p := n.peers[m.GetTo()]
	n.mu.Unlock()
	if p == nil || n.r.isolated.Load() {
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
	var buf []byte
	for {
		select {
		case <-n.stop:
			return
		case <-p.quit:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			q := p.q
			k := 0
			snap := false
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
				snap = snap || q[k].GetType() == pb.MessageType_MsgSnap
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
	mux.Handle("GET "+metaapi.MetaStatusRoute, s.guard("meta_status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.MetaStatus())
	})))
	if s.rep == nil {
		return
	}
	mux.Handle("POST "+raftMessagesRoute, s.guard("meta_raft", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			if s.rep.peerAddr(m.GetFrom()) != "" && m.GetTo() == s.rep.id {
				ok = append(ok, m)
			}
		}
		if !s.rep.isolated.Load() {
			s.rep.deliver(ok)
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	mux.Handle("GET "+snapshotRoute, s.guard("meta_snapshot", http.HandlerFunc(s.snapshotHandler))) // snapshot.go
	mux.Handle("POST "+metaapi.MetaMembersRoute, s.guardInstrumented("meta_members", s.membersHandler))
}

// snapshotSent reports a MsgSnap to member id sent (or lost) to raft.
func (r *replicator) snapshotSent(id uint64, ok bool) {
	r.in.mu.Lock()
	r.in.snapSent[id] = ok
	r.in.mu.Unlock()
	r.wake()
}

// transferLeader asks raft, on the leader, to hand the leadership to id.
func (r *replicator) transferLeader(id uint64) {
	r.in.mu.Lock()
	r.in.transfer = id
	r.in.mu.Unlock()
	r.wake()
}

// MetaStatus is this member's view of the meta group (a group of one:
// member 1, always the leader).
func (s *Service) MetaStatus() metaapi.MetaStatus {
	var st metaapi.MetaStatus
	if s.rep != nil {
		st = s.rep.status()
	} else {
		st = metaapi.MetaStatus{ID: 1, LeaderID: 1, Role: "leader", Serving: s.Serving(), Members: []metaapi.MetaMember{{ID: 1}}}
	}
	st.TLS = s.cfg.TLS.Mode()
	return st
}
