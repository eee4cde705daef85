// Package tlsconf is Spindle's cluster PKI and TLS settings: a cluster CA,
// certificates issued by it that carry a member's name and role, and TLS 1.3
// configurations for mutual authentication whose certificates are re-read
// from their files when those change (no restart).
//
// Identity: a certificate's Subject CommonName is the holder's name (a
// datanode's ID, a meta member's ID, a user); its role (meta, datanode, s3,
// client, admin) is a URI SAN "spindle://role/<role>". A server that needs to
// know who called asks IdentityOf on the verified peer certificate, never a
// name the caller sent.
//
// Files: a CA directory holds ca.crt (0644) and ca.key (0600); an issued
// pair is NAME.crt (0644) and NAME.key (0600). Every file is written with
// vfs.WriteFileAtomicPerm (whole or not at all, fsynced, the key never
// readable by others).
//
// Invariants: TLS 1.3 only; a server configuration requires and verifies a
// client certificate from the cluster CA — except, on a server whose
// Settings allow joins (WithJoin), for a client that offers JoinALPN: it
// may handshake without one and is then the unauthenticated zero Peer,
// which its server must confine (the meta service: to its join route);
// keys are ECDSA P-256; records are always full-size
// (DynamicRecordSizingDisabled: no 1 KiB records at a connection's start,
// which only help a browser render early). Peer, PeerOfState and PeerOfConn give a connection's
// verified identity; CheckKeyPrivate refuses a key others may read.
//
// Beyond the CA (issue 33): every Settings has a Guard (guard.go) that
// refuses, at both ends of a handshake, a certificate on the deny-list
// (the meta service's, fed by certwatch) or outside its validity, tracks
// the connections it admitted by peer serial and closes them when their
// serial is denied; a dialer pins the role of the server it reaches
// (Settings.Pin: the meta client RoleMeta, the data path RoleDatanode).
// Certificates live DefaultCertValidity (7 days) and are renewed at
// RenewFraction of their lifetime; a meta member's name binds its raft ID
// (MemberOf).
//
// Every TLS connection Settings makes runs over a RecordConn, which lets
// the data path write a batch of records with one syscall and read many
// records per syscall (see RecordConn).
//
// Concurrency: a Reloader is safe for concurrent handshakes; it re-reads its
// files at most once per ReloadCheckInterval, under its own lock. See
// RecordConn for its own contract.
package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/vfs"
)

// Role is what a certificate's holder may do.
type Role string

// The roles.
const (
	RoleMeta     Role = "meta"
	RoleDatanode Role = "datanode"
	RoleS3       Role = "s3"
	RoleClient   Role = "client"
	RoleAdmin    Role = "admin"
)

// Roles lists every role, for validation and help texts.
var Roles = []Role{RoleMeta, RoleDatanode, RoleS3, RoleClient, RoleAdmin}

// File names in a CA directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

const (
	// DefaultCAValidity is a cluster CA's lifetime.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultCertValidity is an issued certificate's lifetime: short, so
	// that an identity cut off (a revocation, a datanode removed) cannot
	// outlive it; every process renews its own well before (certwatch).
	DefaultCertValidity = 7 * 24 * time.Hour
	// ReloadCheckInterval bounds how often a Reloader looks at its files.
	ReloadCheckInterval = time.Second
	// maxPEMBytes bounds a certificate or key file read.
	maxPEMBytes   = 1 << 20
	roleURIPrefix = "spindle://role/"
)

// ErrExists is returned by CreateCA when the directory already holds a CA.
var ErrExists = errors.New("tlsconf: a CA already exists there")

// CA is a cluster certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// CreateCA makes a new CA named name in dir (created if missing); ErrExists
// when dir already has one, so that a second start never replaces the CA
// every certificate was issued by.
func CreateCA(dir, name string, validity time.Duration) (*CA, error) {
	if _, err := os.Stat(filepath.Join(dir, CACertFile)); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, filepath.Join(dir, CACertFile))
	}
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Spindle"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clocks a little behind
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	if err := vfs.MkdirAllDurable(vfs.Default, dir); err != nil {
		return nil, fmt.Errorf("tlsconf: %w", err)
	}
	// The key first: a crash between the two leaves no ca.crt, and the
	// next CreateCA starts over.
	if err := vfs.WriteFileAtomicPerm(vfs.Default, filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("tlsconf: %w", err)
	}
	if err := vfs.WriteFileAtomicPerm(vfs.Default, filepath.Join(dir, CACertFile), certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("tlsconf: %w", err)
	}
	return LoadCA(dir)
}

// LoadCA reads the CA in dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := readPEM(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA in %s: %w", dir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA in %s: %w", dir, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("tlsconf: %s is not a CA certificate", filepath.Join(dir, CACertFile))
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("tlsconf: CA key in %s cannot sign", dir)
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: signer}, nil
}

// IssueRequest describes a certificate to issue.
type IssueRequest struct {
	Name     string        // the holder's name (CommonName)
	Role     Role          // what it may do
	Hosts    []string      // IP addresses and DNS names it serves on (servers)
	Validity time.Duration // default DefaultCertValidity
}

// Issue signs a new key pair for req and returns the certificate and key
// in PEM. Every certificate may act as server and client (peers dial each
// other).
func (ca *CA) Issue(req IssueRequest) (certPEM, keyPEM []byte, err error) {
	if req.Name == "" || strings.ContainsAny(req.Name, "/\x00") {
		return nil, nil, fmt.Errorf("tlsconf: certificate name %q: want a non-empty name without '/'", req.Name)
	}
	if !validRole(req.Role) {
		return nil, nil, fmt.Errorf("tlsconf: role %q: want one of %v", req.Role, Roles)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: key: %w", err)
	}
	certPEM, err = ca.IssueFor(req, key.Public())
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// IssueFor signs a certificate for req with the public key pub (from a
// certificate request: the holder keeps its private key) and returns it
// in PEM.
func (ca *CA) IssueFor(req IssueRequest, pub crypto.PublicKey) (certPEM []byte, err error) {
	if req.Name == "" || strings.ContainsAny(req.Name, "/\x00") {
		return nil, fmt.Errorf("tlsconf: certificate name %q: want a non-empty name without '/'", req.Name)
	}
	if !validRole(req.Role) {
		return nil, fmt.Errorf("tlsconf: role %q: want one of %v", req.Role, Roles)
	}
	if req.Validity <= 0 {
		req.Validity = DefaultCertValidity
	}
	roleURI, _ := url.Parse(roleURIPrefix + string(req.Role))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.Name, Organization: []string{"Spindle"}},
		NotBefore:    now.Add(-backdate(req.Validity)),
		NotAfter:     now.Add(req.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{roleURI},
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: certificate for %s: %w", req.Name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// NewKeyRequest makes an ECDSA P-256 key and a certificate request signed
// by it (what a joining datanode sends; the CA sets name, role and hosts)
// and returns both in PEM.
func NewKeyRequest() (csrPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "joining"}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: certificate request: %w", err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), keyPEM, nil
}

// RequestKey is the public key of a PEM certificate request whose
// signature checks (its holder has the private key).
func RequestKey(csrPEM []byte) (crypto.PublicKey, error) {
	blk, _ := pem.Decode(csrPEM)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("tlsconf: not a PEM certificate request")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("tlsconf: certificate request: %w", err)
	}
	return csr.PublicKey, nil
}

// WritePair writes an issued pair as dir/name.crt (0644) and dir/name.key
// (0600) and returns their paths.
func WritePair(dir, name string, certPEM, keyPEM []byte) (certPath, keyPath string, err error) {
	if err := vfs.MkdirAllDurable(vfs.Default, dir); err != nil {
		return "", "", fmt.Errorf("tlsconf: %w", err)
	}
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := vfs.WriteFileAtomicPerm(vfs.Default, keyPath, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("tlsconf: %w", err)
	}
	if err := vfs.WriteFileAtomicPerm(vfs.Default, certPath, certPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("tlsconf: %w", err)
	}
	return certPath, keyPath, nil
}

// WriteCertKey writes a pair to the paths of f: the key (0600) first,
// then the certificate (0644), each atomically and durably; their
// directory must exist.
func WriteCertKey(f Files, certPEM, keyPEM []byte) error {
	if err := vfs.WriteFileAtomicPerm(vfs.Default, f.Key, keyPEM, 0o600); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if err := vfs.WriteFileAtomicPerm(vfs.Default, f.Cert, certPEM, 0o644); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	return nil
}

// IdentityOf is the name and role a verified certificate carries.
func IdentityOf(cert *x509.Certificate) (name string, role Role, err error) {
	for _, u := range cert.URIs {
		if s := u.String(); strings.HasPrefix(s, roleURIPrefix) {
			role = Role(strings.TrimPrefix(s, roleURIPrefix))
		}
	}
	if !validRole(role) || cert.Subject.CommonName == "" {
		return "", "", fmt.Errorf("tlsconf: certificate %q carries no Spindle role", cert.Subject.CommonName)
	}
	return cert.Subject.CommonName, role, nil
}

// PeerIdentity is the identity of a TLS connection's verified peer.
func PeerIdentity(cs tls.ConnectionState) (name string, role Role, err error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", "", errors.New("tlsconf: no verified peer certificate")
	}
	return IdentityOf(cs.VerifiedChains[0][0])
}

// CheckKeyPrivate refuses a key file that group or others may read or
// write: a client's key is its credential (an admin key administers the
// cluster). A missing file is left to the loader's error.
func CheckKeyPrivate(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return nil
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("tlsconf: key %s is accessible to group or others (mode %04o): chmod 600 it, it is a credential", path, m)
	}
	return nil
}

// Files names a certificate, its key and the CA that verifies peers.
type Files struct {
	Cert, Key, CA string
}

// Reloader serves a certificate and CA pool from files, re-read when a
// file's size or modification time changes (looked at no more than once
// per ReloadCheckInterval), so that certificates are rotated without a
// restart. A failed re-read keeps what was loaded and is returned by the
// next Reload.
type Reloader struct {
	files Files

	mu        sync.Mutex
	checked   time.Time
	stamp     string // sizes and mtimes of the three files when loaded
	cert      *tls.Certificate
	pool      *x509.CertPool
	reloadErr error
}

// NewReloader loads files; an error when any is missing or invalid.
func NewReloader(f Files) (*Reloader, error) {
	r := &Reloader{files: f}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reloader) stampOf() string {
	var b strings.Builder
	for _, p := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
		} else {
			b.WriteString("-;")
		}
	}
	return b.String()
}

func (r *Reloader) load() error {
	stamp := r.stampOf()
	certPEM, err := readPEM(r.files.Cert)
	if err != nil {
		return err
	}
	keyPEM, err := readPEM(r.files.Key)
	if err != nil {
		return err
	}
	pool, err := CAPool(r.files.CA)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("tlsconf: %s and %s: %w", r.files.Cert, r.files.Key, err)
	}
	r.cert, r.pool, r.stamp = &pair, pool, stamp
	return nil
}

// Reload re-reads the files now if they changed; the error of a failed
// re-read (what was loaded before stays in use).
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = time.Now()
	if r.stampOf() == r.stamp {
		return nil
	}
	r.reloadErr = r.load()
	return r.reloadErr
}

// current returns the certificate and pool, reloading first when the last
// look at the files is older than ReloadCheckInterval.
func (r *Reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	due := time.Since(r.checked) >= ReloadCheckInterval
	r.mu.Unlock()
	if due {
		_ = r.Reload() // a failure keeps the loaded pair; Reload reports it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, r.pool
}

// ServerConfig is a TLS 1.3 server configuration that presents the current
// certificate and requires a client certificate verified by the current CA.
func (r *Reloader) ServerConfig() *tls.Config { return r.serverConfig(false, nil) }

// serverConfig is ServerConfig; with join, a client offering JoinALPN
// (a datanode with a join token, no certificate yet) may handshake
// without a client certificate: the server then serves it as an
// unauthenticated caller (the meta service only its join route).
// With g, every client certificate is checked by g (deny-list, validity)
// and its connection tracked.
func (r *Reloader) serverConfig(join bool, g *Guard) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := r.current()
			auth := tls.RequireAndVerifyClientCert
			if join && slices.Contains(hello.SupportedProtos, JoinALPN) {
				auth = tls.VerifyClientCertIfGiven
			}
			c := &tls.Config{
				MinVersion:                  tls.VersionTLS13,
				Certificates:                []tls.Certificate{*cert},
				ClientAuth:                  auth,
				ClientCAs:                   pool,
				DynamicRecordSizingDisabled: true,
			}
			if g != nil {
				rc, _ := hello.Conn.(*RecordConn)
				c.VerifyConnection = g.verifyConn(rc, nil)
			}
			return c, nil
		},
	}
}

// CAPool is the certificates of the PEM file caFile (a CA bundle).
func CAPool(caFile string) (*x509.CertPool, error) {
	caPEM, err := readPEM(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tlsconf: %s holds no certificate", caFile)
	}
	return pool, nil
}

// JoinALPN is the ALPN protocol a joining datanode offers: a server whose
// Settings allow joins (WithJoin) then lets it handshake without a client
// certificate. Every other connection still needs one.
const JoinALPN = "spindle-join/1"

// JoinClientConfig is the TLS configuration of a datanode joining with a
// token: no certificate of its own yet, the server verified by the CA in
// caFile, JoinALPN offered.
func JoinClientConfig(caFile, serverName string) (*tls.Config, error) {
	pool, err := CAPool(caFile)
	if err != nil {
		return nil, err
	}
	if h, _, err := net.SplitHostPort(serverName); err == nil {
		serverName = h
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: serverName, NextProtos: []string{JoinALPN},
		DynamicRecordSizingDisabled: true}, nil
}

// ClientConfig is a TLS 1.3 client configuration for a server named
// serverName (an IP address or DNS name in its certificate), presenting
// the current certificate and verifying the server by the current CA.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	return r.clientConfig(serverName, nil, nil, nil)
}

// clientConfig is ClientConfig; with g, the server's certificate is
// checked by g (deny-list, validity, a role of pin when pin is not empty)
// and rc (when not nil) tracked.
func (r *Reloader) clientConfig(serverName string, g *Guard, rc *RecordConn, pin []Role) *tls.Config {
	cert, pool := r.current()
	var verify func(tls.ConnectionState) error
	if g != nil {
		verify = g.verifyConn(rc, pin)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		RootCAs:    pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := r.current()
			return c, nil
		},
		Certificates:                []tls.Certificate{*cert},
		DynamicRecordSizingDisabled: true,
		VerifyConnection:            verify,
	}
}

// backdate is how far before its issue a certificate of lifetime v
// starts: an hour (clocks a little behind), at most a tenth of v, so that
// a short-lived certificate's renewal point (a fraction of NotBefore..
// NotAfter) is not in its past.
func backdate(v time.Duration) time.Duration { return min(time.Hour, v/10) }

func validRole(r Role) bool {
	for _, x := range Roles {
		if r == x {
			return true
		}
	}
	return false
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("tlsconf: random serial: %v", err)) // crypto/rand does not fail on Linux
	}
	return n
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// readPEM reads a PEM file of at most maxPEMBytes.
func readPEM(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	b, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("tlsconf: %s: %w", path, err)
	}
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("tlsconf: %s: larger than %d bytes", path, maxPEMBytes)
	}
	return b, nil
}

// Peer is who is at the other end of a connection: the name and role of
// its verified certificate. The zero Peer is an unauthenticated caller
// (plaintext, --insecure).
type Peer struct {
	Name string
	Role Role
}

// Authenticated says the peer presented a verified certificate with a
// Spindle role.
func (p Peer) Authenticated() bool { return p.Role != "" }

// String is "role:name", or "unauthenticated".
func (p Peer) String() string {
	if !p.Authenticated() {
		return "unauthenticated"
	}
	return string(p.Role) + ":" + p.Name
}

// Is says the peer holds one of roles.
func (p Peer) Is(roles ...Role) bool {
	for _, r := range roles {
		if p.Role == r {
			return true
		}
	}
	return false
}

// PeerOfState is the Peer of a TLS connection state: the zero Peer over
// plaintext (nil) or when the peer presented no certificate (a joining
// datanode, Settings.WithJoin); an error when its certificate carries no
// role.
func PeerOfState(cs *tls.ConnectionState) (Peer, error) {
	if cs == nil || len(cs.PeerCertificates) == 0 && len(cs.VerifiedChains) == 0 {
		return Peer{}, nil
	}
	name, role, err := PeerIdentity(*cs)
	if err != nil {
		return Peer{}, err
	}
	return Peer{Name: name, Role: role}, nil
}

// PeerOfConn is the Peer of a connection: a TLS connection's verified
// certificate (c or what it wraps has ConnectionState), else the zero Peer.
func PeerOfConn(c net.Conn) (Peer, error) {
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return Peer{}, nil
	}
	cs := tc.ConnectionState()
	return PeerOfState(&cs)
}
