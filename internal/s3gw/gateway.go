package s3gw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/embedgw"
	"github.com/versity/versitygw/s3api"

	"github.com/spindle-store/spindle/internal/certwatch"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3acl"
	"github.com/spindle-store/spindle/internal/s3gw/s3extra"
	"github.com/spindle-store/spindle/internal/s3gw/s3lc"
	"github.com/spindle-store/spindle/internal/s3gw/sigcompat"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Defaults of the gateway.
const (
	DefaultListen = "127.0.0.1:9878"
	DefaultRegion = "us-east-1"
	// MaxConnections and MaxRequests bound the gateway's TCP connections
	// and requests in flight (versitygw's limiter; beyond them requests
	// wait or are refused with SlowDown).
	MaxConnections = 4096
	MaxRequests    = 1024
	// ChunkBytes is the key client's chunk size for S3 bodies: with the
	// key client's window it bounds the memory of one PUT in flight
	// (keyclient.Options.MaxBufferedChunks chunks).
	ChunkBytes = 1 << 20
)

// Config configures a gateway.
type Config struct {
	// Meta is the meta service's address (host:port).
	Meta string
	// Listen is the S3 address (DefaultListen).
	Listen string
	// Region answered to clients (DefaultRegion).
	Region string
	// Domain, when set, enables virtual-host-style addressing
	// (BUCKET.Domain) besides path style.
	Domain string
	// AccessKey and SecretKey are the root user's: full access to every
	// bucket. Required.
	AccessKey, SecretKey string
	// KeyClient configures the key client of the bytes (zero: defaults,
	// with ChunkBytes chunks).
	KeyClient keyclient.Options
	Logger    *slog.Logger
	// TLS secures the gateway's connections to the cluster (meta service
	// and datanodes: mutual TLS 1.3 with the gateway's certificate); nil:
	// plaintext.
	TLS *tlsconf.Settings
	// CertFile and KeyFile, when set, make the S3 address HTTPS with that
	// certificate (S3 clients present none: they sign requests instead);
	// empty: plain HTTP. versitygw serves it (TLS 1.2 and 1.3).
	CertFile, KeyFile string
}

// Run serves S3 on cfg.Listen until ctx is done. One gateway per process
// (versitygw's embedgw keeps package-level state); a second concurrent
// Run fails.
func Run(ctx context.Context, cfg Config) error {
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return errors.New("s3gw: the root user's access key and secret key are required")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	mc, err := metaClient(cfg.Meta, cfg.TLS) // identity.go: calls name their S3 user
	if err != nil {
		return fmt.Errorf("s3gw: %w", err)
	}
	wctx, wstop := context.WithCancel(ctx)
	var watch sync.WaitGroup
	defer func() { wstop(); watch.Wait() }()
	reload := make(chan struct{}, 1) // the HTTPS certificate read again after a renewal (versitygw's SIGHUP)
	certwatch.Start(wctx, &watch, cfg.TLS, mc, cfg.Logger, certwatch.Notify(reload))
	kopts := cfg.KeyClient
	if kopts.ChunkSize == 0 {
		kopts.ChunkSize = ChunkBytes
	}
	if kopts.Logger == nil {
		kopts.Logger = cfg.Logger
	}
	kc, err := keyclient.New(mc, kopts)
	if err != nil {
		return fmt.Errorf("s3gw: %w", err)
	}
	defer func() { _ = kc.Close() }() // always nil (keyclient.Client.Close)
	pc := NewPermCache(mc)
	iam := NewIAM(mc, pc)
	defer func() { _ = iam.Shutdown() }() // always nil; embedgw shuts it down too
	v2, v4c := &sigV2{access: cfg.AccessKey, secret: cfg.SecretKey, iam: iam, region: cfg.Region, now: time.Now}, sigcompat.New(cfg.AccessKey, cfg.SecretKey, iam, cfg.Region)
	expectOpts := sigcompat.ExpectHook(v4c, cfg.Logger)
	cfg.Logger.Info("s3 gateway listening", "addr", cfg.Listen, "https", cfg.CertFile != "", "meta", cfg.Meta, "cluster_tls", cfg.TLS.Mode(), "region", cfg.Region, "domain", cfg.Domain)
	if cfg.CertFile == "" {
		cfg.Logger.Warn("s3 gateway serving plain HTTP (--insecure): requests and data travel unencrypted", "addr", cfg.Listen)
	}
	be := NewBackend(mc, kc, cfg.Region, pc)
	lc := &s3lc.Handler{Meta: mc, Be: be, IAM: iam, ToS3: bucketErr} // bucket lifecycle (package s3lc)
	err = embedgw.RunVersityGW(ctx, be, &embedgw.Config{
		RootUserAccess:    cfg.AccessKey,
		RootUserSecret:    cfg.SecretKey,
		Region:            cfg.Region,
		Ports:             []string{cfg.Listen},
		CertFile:          cfg.CertFile,
		SigHup:            reload,
		KeyFile:           cfg.KeyFile,
		MaxConnections:    MaxConnections,
		MaxRequests:       MaxRequests,
		MultipartMaxParts: metaapi.MaxParts,
		VirtualDomain:     cfg.Domain,
		IAMService:        iam,
		S3Options: append(expectOpts, s3api.WithMiddleware("/", func(c fiber.Ctx) error {
			noteListQuery(c)
			be.anonymousRead(c, cfg.Domain)
			if err := s3extra.PostFilename(c); err != nil {
				return err
			}
			err := v4c.Handle(c, func() error { return v2.handle(c) })
			s3acl.Answer(c) // S3's AccessControlPolicy documents
			lc.Answer(c)    // PutBucketLifecycleConfiguration and co., which versitygw does not implement
			return err
		})),
		KeepAlive: true,
		Quiet:     true,
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("s3gw: %w", err)
	}
	return nil
}
