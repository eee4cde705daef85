package tlsconf

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
)

// The flags every command that connects to a cluster takes (cmd/spindle),
// and that parents pass to the processes they start (Files.Args).
const (
	FlagCert     = "tls-cert"
	FlagKey      = "tls-key"
	FlagCA       = "tls-ca"
	FlagInsecure = "insecure"
)

// IsZero says no file is named.
func (f Files) IsZero() bool { return f == Files{} }

// Args are the command-line flags naming f: --tls-cert, --tls-key and
// --tls-ca, or --insecure for the zero Files (plaintext).
func (f Files) Args() []string {
	if f.IsZero() {
		return []string{"--" + FlagInsecure}
	}
	return []string{"--" + FlagCert, f.Cert, "--" + FlagKey, f.Key, "--" + FlagCA, f.CA}
}

// Settings is one process's (or one embedded role's) choice for its
// connections, made once from its flags (--tls-cert, --tls-key, --tls-ca or
// --insecure) and used by every listener and dialer: mutual TLS 1.3 with
// the certificate of a Reloader, or plaintext. The nil *Settings is
// plaintext: every method is safe on it, so that a zero configuration
// (tests, benches) keeps today's plaintext connections; the commands refuse
// to start a process without certificates unless --insecure says so.
type Settings struct {
	r *Reloader
	// join: a client offering JoinALPN may handshake without a
	// certificate (WithJoin).
	join bool
	// g checks peers beyond the CA (guard.go), shared by the Settings
	// derived from one NewSettings; pin: the roles a server dialed may
	// have (Pin; empty: any).
	g   *Guard
	pin []Role
}

// WithJoin is s for a server that admits joining datanodes: a client
// offering JoinALPN may complete the handshake without a certificate (it
// is then an unauthenticated caller, PeerOfState's zero Peer); every
// other client still needs one. Plaintext: s.
func (s *Settings) WithJoin() *Settings {
	if !s.Enabled() {
		return s
	}
	c := *s
	c.join = true
	return &c
}

// NewSettings loads f (certificate, key, CA) for mutual TLS.
func NewSettings(f Files) (*Settings, error) {
	r, err := NewReloader(f)
	if err != nil {
		return nil, err
	}
	return &Settings{r: r, g: NewGuard()}, nil
}

// Enabled says connections use TLS.
func (s *Settings) Enabled() bool { return s != nil && s.r != nil }

// Mode names the choice for logs and status: "mtls" or "insecure".
func (s *Settings) Mode() string {
	if s.Enabled() {
		return ModeMTLS
	}
	return ModeInsecure
}

// The modes Mode reports.
const (
	ModeMTLS     = "mtls"
	ModeInsecure = "insecure"
)

// Files is what s was loaded from (zero when plaintext).
func (s *Settings) Files() Files {
	if !s.Enabled() {
		return Files{}
	}
	return s.r.files
}

// Reload re-reads the files now when they changed (a rotation); nil when
// plaintext.
func (s *Settings) Reload() error {
	if !s.Enabled() {
		return nil
	}
	return s.r.Reload()
}

// ServerConfig is the mutual TLS server configuration (nil when
// plaintext).
func (s *Settings) ServerConfig() *tls.Config {
	if !s.Enabled() {
		return nil
	}
	return s.r.serverConfig(s.join, s.g)
}

// ClientConfig is the client configuration for a server at addr
// (host:port or host), verifying the server's certificate for host (nil
// when plaintext).
func (s *Settings) ClientConfig(addr string) *tls.Config { return s.clientConfig(addr, nil) }

// clientConfig is ClientConfig, tracking rc (when not nil) in s's Guard.
func (s *Settings) clientConfig(addr string, rc *RecordConn) *tls.Config {
	if !s.Enabled() {
		return nil
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	return s.r.clientConfig(host, s.g, rc, s.pin)
}

// Listener wraps ln so that every accepted connection is a TLS server
// connection requiring a client certificate (the handshake runs on the
// first read or write, in the server's goroutine for that connection),
// over a RecordConn; plaintext: ln itself.
func (s *Settings) Listener(ln net.Listener) net.Listener {
	if !s.Enabled() {
		return ln
	}
	return recordListener{Listener: ln, cfg: s.ServerConfig()}
}

// Server returns c as a TLS server connection over a RecordConn, its
// handshake done within ctx; plaintext: c. On error c is closed.
func (s *Settings) Server(ctx context.Context, c net.Conn) (net.Conn, error) {
	if !s.Enabled() {
		return c, nil
	}
	tc := tls.Server(NewRecordConn(c), s.ServerConfig())
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close() // the handshake's error is the one
		return nil, fmt.Errorf("tls handshake with %s: %w", c.RemoteAddr(), err)
	}
	return tc, nil
}

// Client returns c, connected to addr, as a TLS client connection over a
// RecordConn, its handshake done within ctx; plaintext: c. On error c is
// closed.
func (s *Settings) Client(ctx context.Context, c net.Conn, addr string) (net.Conn, error) {
	if !s.Enabled() {
		return c, nil
	}
	rc := NewRecordConn(c)
	tc := tls.Client(rc, s.clientConfig(addr, rc))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close() // the handshake's error is the one
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// Dial connects to addr over TCP and, with TLS, completes the handshake,
// all within ctx.
func (s *Settings) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return s.Client(ctx, c, addr)
}

// Scheme is the URL scheme of HTTP services: "https" or "http".
func (s *Settings) Scheme() string {
	if s.Enabled() {
		return "https"
	}
	return "http"
}

// HTTPTransport sets t's TLS client configuration (the server name from
// each request's host; the certificate re-read when rotated); t unchanged
// when plaintext. It returns t.
func (s *Settings) HTTPTransport(t *http.Transport) *http.Transport {
	if !s.Enabled() {
		return t
	}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return s.Dial(ctx, addr)
	}
	return t
}
