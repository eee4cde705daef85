package meta

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Join tokens (issue 17 item 2). An admin certificate asks for a token
// (create_join_token); a new datanode, without a certificate, sends it
// with a certificate request over TLS (tlsconf.JoinALPN lets it handshake
// without a client certificate; guard lets it call the join route only)
// and gets a datanode certificate signed by Config.JoinCA, under a name
// the meta service draws ("dn-" and 12 random hex digits): a joiner cannot
// choose the name of a datanode that exists.
//
// A token is random (128 bits), used once, and valid until it expires
// (metaapi.DefaultJoinTokenTTL, at most MaxJoinTokenTTL). Only its SHA-256
// is kept, in this member's memory: a restart forgets the tokens not yet
// used (ask for another), and with a replicated meta service the datanode
// joins through the member that made its token. At most maxJoinTokens are
// pending; expired ones are dropped when a token is made.

// maxJoinTokens bounds the pending tokens.
const maxJoinTokens = 1024

// joinTokens are the pending tokens, by SHA-256, with their expiry.
type joinTokens struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]time.Time
}

// create makes a token valid until expires.
func (j *joinTokens) create(now, expires time.Time) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("meta: join token: %w", err)
	}
	tok := hex.EncodeToString(b[:])
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.m == nil {
		j.m = map[[sha256.Size]byte]time.Time{}
	}
	for h, exp := range j.m {
		if !now.Before(exp) {
			delete(j.m, h)
		}
	}
	if len(j.m) >= maxJoinTokens {
		return "", fmt.Errorf("%w: %d join tokens pending already", metaapi.ErrUnavailable, maxJoinTokens)
	}
	j.m[sha256.Sum256([]byte(tok))] = expires
	return tok, nil
}

// use consumes tok: true when it was pending and not expired.
func (j *joinTokens) use(tok string, now time.Time) bool {
	h := sha256.Sum256([]byte(tok))
	j.mu.Lock()
	defer j.mu.Unlock()
	exp, ok := j.m[h]
	delete(j.m, h)
	return ok && now.Before(exp)
}

func (s *Service) routeJoin(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("POST "+metaapi.JoinTokensRoute, "create_join_token", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.JoinTokenRequest
		if err := decodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		t, err := s.CreateJoinToken(time.Duration(req.TTLSeconds) * time.Second)
		return t, http.StatusOK, err
	})
	route("POST "+metaapi.JoinRoute, "join", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req metaapi.JoinRequest
		if err := decodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		resp, err := s.Join(&req, r.RemoteAddr)
		return resp, http.StatusOK, err
	})
}

// CreateJoinToken makes a one-time join token valid ttl (0: the default).
func (s *Service) CreateJoinToken(ttl time.Duration) (metaapi.JoinToken, error) {
	if s.Cfg.JoinCA == nil {
		return metaapi.JoinToken{}, fmt.Errorf("%w: this meta service admits no joins (it has no CA key: spindle meta --join-ca-dir)", metaapi.ErrInvalid)
	}
	if ttl == 0 {
		ttl = metaapi.DefaultJoinTokenTTL
	}
	if ttl < time.Second || ttl > metaapi.MaxJoinTokenTTL {
		return metaapi.JoinToken{}, fmt.Errorf("%w: join token TTL %v: want 1s..%v", metaapi.ErrInvalid, ttl, metaapi.MaxJoinTokenTTL)
	}
	now := s.Cfg.Now()
	tok, err := s.joins.create(now, now.Add(ttl))
	if err != nil {
		return metaapi.JoinToken{}, err
	}
	return metaapi.JoinToken{Token: tok, ExpiresAt: now.Add(ttl)}, nil
}

// Join admits a datanode (from remote) whose token is pending: it signs
// the request's key as a new datanode certificate. An unknown, used or
// expired token is refused (ErrForbidden) and logged.
func (s *Service) Join(req *metaapi.JoinRequest, remote string) (*metaapi.JoinResponse, error) {
	if s.Cfg.JoinCA == nil {
		return nil, fmt.Errorf("%w: this meta service admits no joins", metaapi.ErrInvalid)
	}
	if len(req.Hosts) == 0 || len(req.Hosts) > metaapi.MaxJoinHosts {
		return nil, fmt.Errorf("%w: join: %d hosts, want 1..%d", metaapi.ErrInvalid, len(req.Hosts), metaapi.MaxJoinHosts)
	}
	for _, h := range req.Hosts {
		if net.ParseIP(h) == nil && !validDNSName(h) {
			return nil, fmt.Errorf("%w: join: host %q is neither an IP address nor a DNS name", metaapi.ErrInvalid, h)
		}
	}
	pub, err := tlsconf.RequestKey([]byte(req.CSR))
	if err != nil {
		return nil, fmt.Errorf("%w: join: %v", metaapi.ErrInvalid, err)
	}
	if !s.joins.use(req.Token, s.Cfg.Now()) {
		s.Log.Warn("join refused: unknown, used or expired token", "remote", remote)
		return nil, fmt.Errorf("%w: join token unknown, used or expired", metaapi.ErrForbidden)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("meta: join: %w", err)
	}
	name := "dn-" + hex.EncodeToString(b[:])
	cert, err := s.Cfg.JoinCA.IssueFor(tlsconf.IssueRequest{Name: name, Role: tlsconf.RoleDatanode, Hosts: req.Hosts}, pub)
	if err != nil {
		return nil, fmt.Errorf("meta: join: %w", err)
	}
	s.Log.Info("datanode joined: certificate issued", "name", name, "hosts", req.Hosts, "remote", remote)
	return &metaapi.JoinResponse{Name: name, Cert: string(cert), CA: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Cfg.JoinCA.Cert.Raw}))}, nil
}

// validDNSName says h looks like a DNS name: 1..253 bytes of letters,
// digits, '-' and '.'.
func validDNSName(h string) bool {
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
