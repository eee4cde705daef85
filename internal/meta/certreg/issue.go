package certreg

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Join tokens (issue 17 item 2, issue 33 item 2). An admin certificate
// asks for a token naming a role (datanode, s3 or client:
// certapi.JoinRoles; never meta or admin) and the hosts its holder serves
// at; a new process, without a certificate, sends it with a certificate
// request over TLS (tlsconf.JoinALPN lets it handshake without a client
// certificate; the meta service lets it call the join route only) and
// gets a certificate of that role for exactly the token's hosts, signed
// by Config.JoinCA, under a name the meta service draws ("dn-", "s3-" or
// "client-" and 12 random hex digits): a joiner chooses neither its name,
// nor its role, nor its addresses. Joins are rate-limited (JoinsPerSecond,
// AllowJoin, before anything is read), and the token is looked up before
// the request's signature is checked: an unauthenticated flood costs
// neither signature checks nor certificates. Every certificate issued is
// recorded.
//
// A token is random (128 bits), used once, and valid until it expires
// (metaapi.DefaultJoinTokenTTL, at most MaxJoinTokenTTL). Only its SHA-256
// is kept, in this member's memory: a restart forgets the tokens not yet
// used (ask for another), and with a replicated meta service the joiner
// joins through the member that made its token. At most maxJoinTokens are
// pending; expired ones are dropped when a token is made.
//
// Renewal (Renew): a caller presenting a valid, unrevoked certificate of
// the cluster CA gets a new one with the same name, role and hosts for a
// new key, valid Config.CertValidity (RenewalsPerSecond at most).

const (
	// maxJoinTokens bounds the pending tokens.
	maxJoinTokens = 1024
	// JoinsPerSecond and RenewalsPerSecond bound joins and renewals (token
	// buckets of as many).
	JoinsPerSecond    = 10
	RenewalsPerSecond = 50
)

// joinGrant is what a token allows.
type joinGrant struct {
	expires time.Time
	role    tlsconf.Role
	hosts   []string
}

// joinTokens are the pending tokens, by SHA-256, with what they allow.
type joinTokens struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]joinGrant
}

// create makes a token for g.
func (j *joinTokens) create(now time.Time, g joinGrant) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("meta: join token: %w", err)
	}
	tok := hex.EncodeToString(b[:])
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.m == nil {
		j.m = map[[sha256.Size]byte]joinGrant{}
	}
	for h, g := range j.m {
		if !now.Before(g.expires) {
			delete(j.m, h)
		}
	}
	if len(j.m) >= maxJoinTokens {
		return "", fmt.Errorf("%w: %d join tokens pending already", metaapi.ErrUnavailable, maxJoinTokens)
	}
	j.m[sha256.Sum256([]byte(tok))] = g
	return tok, nil
}

// peek is what tok allows, when it is pending and not expired.
func (j *joinTokens) peek(tok string, now time.Time) (joinGrant, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	g, ok := j.m[sha256.Sum256([]byte(tok))]
	return g, ok && now.Before(g.expires)
}

// use consumes tok: true when it was pending and not expired.
func (j *joinTokens) use(tok string, now time.Time) bool {
	h := sha256.Sum256([]byte(tok))
	j.mu.Lock()
	defer j.mu.Unlock()
	g, ok := j.m[h]
	delete(j.m, h)
	return ok && now.Before(g.expires)
}

// AllowJoin takes a token of the joins' bucket: false beyond the rate
// (the caller answers busy before reading the request).
func (g *Registry) AllowJoin() bool { return g.joinRate.Allow(time.Now()) }

// CreateJoinToken makes a one-time join token for req's role and hosts,
// valid req.TTLSeconds (0: the default).
func (g *Registry) CreateJoinToken(req certapi.JoinTokenRequest) (metaapi.JoinToken, error) {
	if g.Cfg.JoinCA == nil {
		return metaapi.JoinToken{}, fmt.Errorf("%w: this meta service admits no joins (it has no CA key: spindle meta --join-ca-dir)", metaapi.ErrInvalid)
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	if ttl == 0 {
		ttl = metaapi.DefaultJoinTokenTTL
	}
	if ttl < time.Second || ttl > metaapi.MaxJoinTokenTTL {
		return metaapi.JoinToken{}, fmt.Errorf("%w: join token TTL %v: want 1s..%v", metaapi.ErrInvalid, ttl, metaapi.MaxJoinTokenTTL)
	}
	if req.Role == "" {
		req.Role = string(tlsconf.RoleDatanode)
	}
	if !slices.Contains(certapi.JoinRoles, req.Role) {
		return metaapi.JoinToken{}, fmt.Errorf("%w: a join token for role %q: want one of %v", metaapi.ErrInvalid, req.Role, certapi.JoinRoles)
	}
	if err := validHosts(req.Hosts, req.Role != string(tlsconf.RoleClient)); err != nil {
		return metaapi.JoinToken{}, err
	}
	now := g.Cfg.Now()
	tok, err := g.joins.create(now, joinGrant{expires: now.Add(ttl), role: tlsconf.Role(req.Role), hosts: slices.Clone(req.Hosts)})
	if err != nil {
		return metaapi.JoinToken{}, err
	}
	g.Log.Info("join token made", "role", req.Role, "hosts", req.Hosts, "expires", now.Add(ttl))
	return metaapi.JoinToken{Token: tok, ExpiresAt: now.Add(ttl)}, nil
}

// validHosts checks a token's hosts: 1..MaxJoinHosts IP addresses or DNS
// names (none needed when !need).
func validHosts(hosts []string, need bool) error {
	if need && len(hosts) == 0 || len(hosts) > metaapi.MaxJoinHosts {
		return fmt.Errorf("%w: join token: %d hosts, want 1..%d (--host: the addresses the joiner is dialled at)", metaapi.ErrInvalid, len(hosts), metaapi.MaxJoinHosts)
	}
	for _, h := range hosts {
		if net.ParseIP(h) == nil && !validDNSName(h) {
			return fmt.Errorf("%w: join token: host %q is neither an IP address nor a DNS name", metaapi.ErrInvalid, h)
		}
	}
	return nil
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

// Join admits a joiner (from remote) whose token is pending: it signs the
// request's key as a certificate of the token's role for the token's
// hosts. The token is looked up first: an unknown, used or expired token
// is refused (ErrForbidden) and logged before the request's signature is
// checked; hosts the request names beyond the token's are refused too.
func (g *Registry) Join(req *metaapi.JoinRequest, remote string) (*metaapi.JoinResponse, error) {
	if g.Cfg.JoinCA == nil {
		return nil, fmt.Errorf("%w: this meta service admits no joins", metaapi.ErrInvalid)
	}
	now := g.Cfg.Now()
	grant, ok := g.joins.peek(req.Token, now)
	if !ok {
		g.Log.Warn("join refused: unknown, used or expired token", "remote", remote)
		return nil, fmt.Errorf("%w: join token unknown, used or expired", metaapi.ErrForbidden)
	}
	for _, h := range req.Hosts {
		if !slices.Contains(grant.hosts, h) {
			g.Log.Warn("join refused: a host the token does not name", "host", h, "token_hosts", grant.hosts, "remote", remote)
			return nil, fmt.Errorf("%w: join: this token is for hosts %v, not %q", metaapi.ErrForbidden, grant.hosts, h)
		}
	}
	pub, err := tlsconf.RequestKey([]byte(req.CSR))
	if err != nil {
		return nil, fmt.Errorf("%w: join: %v", metaapi.ErrInvalid, err)
	}
	if !g.joins.use(req.Token, now) {
		return nil, fmt.Errorf("%w: join token unknown, used or expired", metaapi.ErrForbidden)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("meta: join: %w", err)
	}
	name := map[tlsconf.Role]string{tlsconf.RoleDatanode: "dn-", tlsconf.RoleS3: "s3-"}[grant.role]
	if name == "" {
		name = string(grant.role) + "-"
	}
	name += hex.EncodeToString(b[:])
	cert, err := g.issue(tlsconf.IssueRequest{Name: name, Role: grant.role, Hosts: grant.hosts}, pub, HowJoin)
	if err != nil {
		return nil, err
	}
	g.Log.Info(string(grant.role)+" joined: certificate issued", "name", name, "role", grant.role, "hosts", grant.hosts, "remote", remote)
	return &metaapi.JoinResponse{Name: name, Cert: string(cert), CA: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.Cfg.JoinCA.Cert.Raw}))}, nil
}

// Renew issues the holder of leaf (a verified certificate) a certificate
// like it for req's key.
func (g *Registry) Renew(leaf *x509.Certificate, req certapi.RenewRequest) (certapi.RenewResponse, error) {
	if g.Cfg.JoinCA == nil {
		return certapi.RenewResponse{}, fmt.Errorf("%w: this meta service issues no certificates (it has no CA key: spindle meta --join-ca-dir)", metaapi.ErrInvalid)
	}
	if !g.renewRate.Allow(time.Now()) {
		return certapi.RenewResponse{}, fmt.Errorf("%w: renewals are limited to %d a second: try again", metaapi.ErrBusy, RenewalsPerSecond)
	}
	if leaf == nil {
		return certapi.RenewResponse{}, fmt.Errorf("%w: renewal needs a verified certificate", metaapi.ErrForbidden)
	}
	name, role, err := tlsconf.IdentityOf(leaf)
	if err != nil {
		return certapi.RenewResponse{}, fmt.Errorf("%w: %v", metaapi.ErrForbidden, err)
	}
	if revoked, err := g.IsRevoked(tlsconf.SerialOf(leaf)); err != nil || revoked {
		return certapi.RenewResponse{}, fmt.Errorf("%w: certificate %s is revoked (%v)", metaapi.ErrForbidden, tlsconf.SerialOf(leaf), err)
	}
	pub, err := tlsconf.RequestKey([]byte(req.CSR))
	if err != nil {
		return certapi.RenewResponse{}, fmt.Errorf("%w: renew: %v", metaapi.ErrInvalid, err)
	}
	hosts := append([]string(nil), leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	cert, err := g.issue(tlsconf.IssueRequest{Name: name, Role: role, Hosts: hosts}, pub, HowRenew)
	if err != nil {
		return certapi.RenewResponse{}, err
	}
	c, err := tlsconf.ParseCert(cert)
	if err != nil {
		return certapi.RenewResponse{}, err
	}
	g.Log.Info("certificate renewed", "name", name, "role", role, "old_serial", tlsconf.SerialOf(leaf), "serial", tlsconf.SerialOf(c), "not_after", c.NotAfter)
	return certapi.RenewResponse{Cert: string(cert), NotAfter: c.NotAfter}, nil
}

// issue signs req for pub with JoinCA (lifetime Config.CertValidity) and
// records the certificate; nothing is handed out unless it is recorded.
func (g *Registry) issue(req tlsconf.IssueRequest, pub crypto.PublicKey, how uint8) ([]byte, error) {
	req.Validity = g.Cfg.CertValidity
	certPEM, err := g.Cfg.JoinCA.IssueFor(req, pub)
	if err != nil {
		return nil, fmt.Errorf("meta: issue: %w", err)
	}
	c, err := tlsconf.ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	rec := certapi.Cert{Serial: tlsconf.SerialOf(c), Name: req.Name, Role: string(req.Role), Hosts: req.Hosts, IssuedAt: g.Cfg.Now(), NotAfter: c.NotAfter}
	if err := g.Record(rec, how); err != nil {
		return nil, fmt.Errorf("meta: recording certificate %s: %w", rec.Serial, err)
	}
	return certPEM, nil
}
