package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Guard is what a process's Settings check beyond the CA's verification
// (issue 33): the deny-list of revoked certificates (by serial), the
// certificate's validity period, and the open connections by peer serial,
// so that a revocation closes those already open. Every Settings made by
// NewSettings has one, shared by the Settings derived from it (WithJoin,
// Pin); a process feeds it the meta service's deny-list (certwatch).
//
// Invariants: a handshake whose peer certificate is denied or outside its
// validity period fails (VerifyConnection, both ends); a connection that
// passed is tracked under its peer's serial until closed, and SetDenied
// closes every tracked connection of a serial it denies before it
// returns. Admission and SetDenied run under one lock: a connection
// either is refused or is tracked before SetDenied looks.
//
// Concurrency: safe for concurrent use.
type Guard struct {
	mu      sync.Mutex
	denied  map[string]struct{}
	conns   map[*RecordConn]string // open connections → their peer's serial
	version uint64                 // of the deny-list SetDenied was given last
}

// NewGuard is a Guard denying nothing.
func NewGuard() *Guard {
	return &Guard{denied: map[string]struct{}{}, conns: map[*RecordConn]string{}}
}

// ErrRevoked marks a handshake refused because the peer's certificate is
// on the deny-list.
var ErrRevoked = errors.New("tlsconf: certificate revoked")

// SerialOf is a certificate's serial as the deny-list and `spindle admin
// cert ls` write it: lower-case hexadecimal.
func SerialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// SetDenied makes serials the deny-list (version: the list's version, for
// Version) and closes the open connections of every denied serial; it
// returns how many it closed.
func (g *Guard) SetDenied(version uint64, serials []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.version = version
	g.denied = make(map[string]struct{}, len(serials))
	for _, s := range serials {
		g.denied[s] = struct{}{}
	}
	closed := 0
	for rc, s := range g.conns {
		if _, ok := g.denied[s]; ok {
			delete(g.conns, rc)
			_ = rc.Conn.Close() // the socket: both ends see the connection end
			closed++
		}
	}
	return closed
}

// Version is the version SetDenied was given last (0: never).
func (g *Guard) Version() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.version
}

// Denied says serial is on the deny-list.
func (g *Guard) Denied(serial string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.denied[serial]
	return ok
}

// Open is the number of tracked connections (tests, metrics).
func (g *Guard) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// admit checks a verified peer certificate and tracks rc (nil: not
// tracked) under its serial.
func (g *Guard) admit(leaf *x509.Certificate, rc *RecordConn, now time.Time) error {
	if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return fmt.Errorf("tlsconf: certificate %q (serial %s) is valid %s..%s, not now", leaf.Subject.CommonName, SerialOf(leaf),
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	s := SerialOf(leaf)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.denied[s]; ok {
		return fmt.Errorf("%w: %q (serial %s)", ErrRevoked, leaf.Subject.CommonName, s)
	}
	if rc != nil {
		g.conns[rc] = s
		rc.guard.Store(g)
	}
	return nil
}

// untrack forgets rc (closed).
func (g *Guard) untrack(rc *RecordConn) {
	g.mu.Lock()
	delete(g.conns, rc)
	g.mu.Unlock()
}

// verifyConn is the VerifyConnection of a configuration of g: the peer's
// certificate (none: a joiner, which the server's ClientAuth allowed)
// checked by admit, and, when pin names roles, its role one of them.
func (g *Guard) verifyConn(rc *RecordConn, pin []Role) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			if len(pin) > 0 {
				return errors.New("tlsconf: the server presented no certificate")
			}
			return nil
		}
		leaf := cs.PeerCertificates[0]
		if len(pin) > 0 {
			name, role, err := IdentityOf(leaf)
			if err != nil {
				return err
			}
			if !slices.Contains(pin, role) {
				return fmt.Errorf("%w: %s:%s, want a certificate of role %v", ErrWrongRole, role, name, pin)
			}
		}
		return g.admit(leaf, rc, time.Now())
	}
}

// ErrWrongRole marks a handshake refused because the server's certificate
// has a role its dialer does not expect (Settings.Pin): a datanode's
// certificate at the meta service's address, say.
var ErrWrongRole = errors.New("tlsconf: server certificate of an unexpected role")

// Guard is s's Guard (nil when plaintext).
func (s *Settings) Guard() *Guard {
	if !s.Enabled() {
		return nil
	}
	return s.g
}

// Pin is s for dialing servers of one of roles only: a handshake with a
// server whose certificate has another role fails (ErrWrongRole). Every
// dialer pins the role of what it dials (the meta client: RoleMeta; the
// datanodes' data path: RoleDatanode). Plaintext: s.
func (s *Settings) Pin(roles ...Role) *Settings {
	if !s.Enabled() {
		return s
	}
	c := *s
	c.pin = roles
	return &c
}

// Leaf is the certificate s presents now (nil when plaintext).
func (s *Settings) Leaf() *x509.Certificate {
	if !s.Enabled() {
		return nil
	}
	c, _ := s.r.current()
	return c.Leaf
}

// PinDatanode is s.Pin(RoleDatanode): what the data path dials.
func (s *Settings) PinDatanode() *Settings { return s.Pin(RoleDatanode) }

// ParseCert parses the first certificate of a PEM block.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(certPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("tlsconf: not a PEM certificate")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: certificate: %w", err)
	}
	return c, nil
}

// RenewFraction is the part of its lifetime after which a certificate is
// renewed (certwatch): 2/3, a 7-day certificate with 2 days and 8 hours
// left.
const RenewFraction = 2.0 / 3

// RenewDue says c is past RenewFraction of its lifetime at now.
func RenewDue(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return !now.Before(c.NotBefore.Add(time.Duration(float64(life) * RenewFraction)))
}
