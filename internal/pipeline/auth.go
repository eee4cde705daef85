package pipeline

import (
	"fmt"
	"time"

	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

// Who may use a datanode's port (issue 17 item 2). With TLS every
// connection's peer has a verified certificate (the demux handshakes
// first); its role and name, never an ID the peer sent, decide:
//
//   - a raft message only from a datanode certificate, for a pipeline
//     served here of which its sender (From) is a member, and under the
//     member's certificate when known (Member.CertName, the meta
//     service's binding): no datanode speaks for another member, nor a
//     non-member for anyone. Config.RequirePeerCertNames refuses members
//     whose certificate is not known yet (static members have none);
//   - client requests (chunk writes and reads, blocks) from the client,
//     s3, admin and datanode roles (not a meta certificate); but for a
//     datanode's, only with a block token for them (Config.BlockTokens).
//
// A refused raft message is dropped, a refused client's connection closed;
// each refusal counted (spindle_datanode_refused_total) and logged (one
// line per authLogInterval at most). Over plaintext nothing is refused.

// authLogInterval bounds the log lines of refused frames.
const authLogInterval = time.Second

// dataPathRoles may send client requests.
var dataPathRoles = []tlsconf.Role{tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin, tlsconf.RoleDatanode}

// peerOf is c's verified peer, or an error when the node runs TLS and c's
// peer has no certificate with a role. The zero Peer: plaintext.
func (n *Node) peerOf(c *transport.Conn) (tlsconf.Peer, error) {
	p, err := c.Peer()
	if err != nil {
		return p, err
	}
	if !p.Authenticated() && n.cfg.Conn.TLS.Enabled() {
		return p, fmt.Errorf("no verified certificate on a TLS node")
	}
	return p, nil
}

// authorizeClient says whether c's peer may send client requests.
func (n *Node) authorizeClient(c *transport.Conn) error {
	p, err := n.peerOf(c)
	if err != nil || !p.Authenticated() {
		return err
	}
	if !p.Is(dataPathRoles...) {
		return fmt.Errorf("certificate %s: role %s may not use the data path", p, p.Role)
	}
	return nil
}

// authorizeRaft says whether c's peer may deliver a raft message of
// pipeline gid sent by member from.
func (n *Node) authorizeRaft(c *transport.Conn, gid, from uint64) error {
	p, err := n.peerOf(c)
	if err != nil || !p.Authenticated() {
		return err
	}
	if p.Role != tlsconf.RoleDatanode {
		return fmt.Errorf("certificate %s: only datanodes send raft messages", p)
	}
	n.groupsMu.RLock()
	g := n.groups[gid]
	member := false
	if g != nil {
		_, member = g.members[from]
	}
	n.groupsMu.RUnlock()
	if g == nil {
		return nil // not served here: the loop drops it
	}
	if !member {
		return fmt.Errorf("certificate %s: node %d is not a member of pipeline %d", p, from, gid)
	}
	n.certMu.RLock()
	want := n.certNames[from]
	n.certMu.RUnlock()
	switch {
	case want == "" && n.cfg.RequirePeerCertNames:
		return fmt.Errorf("certificate %s: member %d of pipeline %d has no known certificate yet", p, from, gid)
	case want != "" && want != p.Name:
		return fmt.Errorf("certificate %s speaks for member %d of pipeline %d, which is bound to certificate %q", p, from, gid, want)
	}
	return nil
}

// refuse counts and logs (rate-limited) a refused frame of c.
func (n *Node) refuse(c *transport.Conn, what string, err error) {
	n.metrics.authRefused.WithLabelValues(what).Inc()
	now := time.Now().UnixNano()
	last := n.authLogAt.Load()
	if now-last < int64(authLogInterval) || !n.authLogAt.CompareAndSwap(last, now) {
		return
	}
	n.log.Warn(what+" refused", "remote", c.RemoteAddr(), "reason", err)
}
