package blocktoken

import (
	"errors"
	"fmt"

	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
)

// ErrNoKeys: the datanode has no keys yet (before its first heartbeat
// response): answered UNAVAILABLE, the client retries.
var ErrNoKeys = errors.New("block tokens: no signing keys from the meta service yet")

// Request is a datanode's check of one client request (the pipeline's
// chunk read and write handlers call it): nil when c's peer may do op on
// block local of container with token, else the response refusing it —
// FORBIDDEN (with the reason, "block token required" for none) or
// UNAVAILABLE (ErrNoKeys). A nil Verifier checks nothing (a datanode
// outside a meta-managed cluster); so does a connection without a verified
// certificate (plaintext: nothing is authenticated) and one from a
// datanode certificate (peers replicating, repairing and copying keep
// their datanode identity).
func (v *Verifier) Request(c *transport.Conn, token []byte, container, local uint64, op Op, reqID uint64) *transport.Response {
	if v == nil {
		return nil
	}
	p, err := c.Peer()
	if err == nil && (!p.Authenticated() || p.Role == tlsconf.RoleDatanode) {
		return nil
	}
	if err == nil {
		err = v.Check(token, container, local, op, p.Name)
	}
	if err == nil {
		return nil
	}
	st := transport.StatusForbidden
	if errors.Is(err, ErrNoKeys) {
		st = transport.StatusUnavailable
	}
	return &transport.Response{RequestID: reqID, Status: st, Message: fmt.Sprintf("%v (%s of block %d/%d)", err, op, container, local)}
}
