package console

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Defaults.
const (
	// DefaultListen is the console's address (Ozone Recon's port).
	DefaultListen = "127.0.0.1:9888"
	// Off is the Listen that runs no console.
	Off = "off"
	// DefaultSessionTTL ends a session.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultSampleEvery is the metrics sampler's period.
	DefaultSampleEvery = 5 * time.Second
	// History is how far back the charts go.
	History = time.Hour
	// MaxUploadBytes bounds one upload through the page.
	MaxUploadBytes = 5 << 30
)

// Cluster is the meta service's views (metaapi.Client has them): the
// calls `spindle admin nodes, pipelines, containers, replication` make.
type Cluster interface {
	Nodes(ctx context.Context) ([]metaapi.NodeInfo, error)
	Pipelines(ctx context.Context) ([]metaapi.Pipeline, error)
	Containers(ctx context.Context) ([]metaapi.ContainerInfo, error)
	Replication(ctx context.Context) (*metaapi.ReplicationStatus, error)
}

// Store is the buckets and keys as a user may see and change them: user
// is the access key of the signed-in S3 user (or metaapi/authz.S3Root
// for the admin credential), named on every meta call so that the meta
// service decides (MetaStore).
type Store interface {
	// LookupUser is the S3 user of an access key, with its secret.
	LookupUser(ctx context.Context, access string) (metaapi.User, error)
	Buckets(ctx context.Context, user string) ([]metaapi.Bucket, error)
	List(ctx context.Context, user, bucket string, o metaapi.ListOptions) (metaapi.KeyList, error)
	Stat(ctx context.Context, user, bucket, key string) (metaapi.KeyInfo, error)
	Get(ctx context.Context, user, bucket, key string, w io.Writer) error
	Put(ctx context.Context, user, bucket, key string, r io.Reader, size int64) (metaapi.KeyInfo, error)
	Delete(ctx context.Context, user, bucket, key string) error
}

// Credential is an access key and its secret.
type Credential struct{ AccessKey, SecretKey string }

// Config configures a Console.
type Config struct {
	// Listen is the HTTPS address (DefaultListen; port 0: any, Addr says).
	Listen string
	// CertFile and KeyFile are the HTTPS pair (read again when they
	// change: a renewal); empty: a self-signed pair made at the start.
	CertFile, KeyFile string
	Cluster           Cluster
	Store             Store
	// Scrape reads the servers' metrics for the sampler (nil: no charts).
	Scrape func(ctx context.Context) ([]Scrape, error)
	// ReportsDir holds `spindle report` output directories ("": none).
	ReportsDir string
	// Admin is the admin credential (the S3 root user's keys): every
	// right, acting as metaapi/authz.S3Root. Zero: none.
	Admin       Credential
	SessionTTL  time.Duration
	SampleEvery time.Duration
	Logger      *slog.Logger
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Console is a running console.
type Console struct {
	cfg      Config
	ln       net.Listener
	srv      *http.Server
	sessions *sessions
	sampler  *Sampler
	tmpl     *templates
	done     chan error
	cert     *certCache
}

// Start listens on cfg.Listen and serves until Close.
func Start(cfg Config) (*Console, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Cluster == nil || cfg.Store == nil {
		return nil, errors.New("console: no meta service (Cluster, Store)")
	}
	cc, err := newCertCache(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	tmpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, sessions: newSessions(cfg.SessionTTL, cfg.Now), tmpl: tmpl, done: make(chan error, 1), cert: cc}
	c.sampler = NewSampler(cfg.Scrape, cfg.SampleEvery, cfg.Logger)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c.ln = ln
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cc.get, ClientAuth: tls.NoClientCert}
	c.srv = &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
	c.sampler.Start()
	go func() {
		err := c.srv.Serve(tls.NewListener(ln, tc))
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		c.done <- err
	}()
	return c, nil
}

// Addr is the address the console listens on.
func (c *Console) Addr() string { return c.ln.Addr().String() }

// URL is the console's first page.
func (c *Console) URL() string { return "https://" + c.Addr() + "/ui/" }

// Sampler is the console's metrics sampler.
func (c *Console) Sampler() *Sampler { return c.sampler }

// Close stops serving (requests in flight get 5 s) and the sampler.
func (c *Console) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, c.srv.Close())
	}
	c.sampler.Stop()
	return errors.Join(err, <-c.done)
}

// certCache is the HTTPS pair, read again when its files change.
type certCache struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	mod               time.Time
	checked           time.Time
}

func newCertCache(certFile, keyFile string) (*certCache, error) {
	cc := &certCache{certFile: certFile, keyFile: keyFile}
	if certFile == "" {
		cert, err := selfSigned()
		if err != nil {
			return nil, err
		}
		cc.cert = cert
		return cc, nil
	}
	if _, err := cc.get(nil); err != nil {
		return nil, err
	}
	return cc, nil
}

// get is tls.Config.GetCertificate: the pair, its files checked at most
// every 10 s (a renewal replaces them).
func (cc *certCache) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.certFile == "" || (cc.cert != nil && time.Since(cc.checked) < 10*time.Second) {
		return cc.cert, nil
	}
	cc.checked = time.Now()
	st, err := os.Stat(cc.certFile)
	if err != nil {
		if cc.cert != nil {
			return cc.cert, nil
		}
		return nil, fmt.Errorf("console: %w", err)
	}
	if cc.cert != nil && st.ModTime().Equal(cc.mod) {
		return cc.cert, nil
	}
	pair, err := tls.LoadX509KeyPair(cc.certFile, cc.keyFile)
	if err != nil {
		if cc.cert != nil {
			return cc.cert, nil // mid-renewal: the old pair a moment longer
		}
		return nil, fmt.Errorf("console: %w", err)
	}
	cc.cert, cc.mod = &pair, st.ModTime()
	return cc.cert, nil
}

// selfSigned is a pair for 127.0.0.1, ::1 and localhost, valid a year
// (the console without a PKI: --insecure).
func selfSigned() (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "spindle console"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
