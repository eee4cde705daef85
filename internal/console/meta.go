package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// MetaOptions are `spindle meta`'s console settings (AddMetaFlags).
type MetaOptions struct {
	Options
	// CertFile and KeyFile are a certificate of role s3 of the cluster
	// CA: the console's HTTPS pair and its identity at the meta service
	// (role s3 may look S3 users up and act for them). Required with TLS.
	CertFile, KeyFile string
}

// AddMetaFlags adds the console's flags of `spindle meta` to f.
func AddMetaFlags(f *pflag.FlagSet, o *MetaOptions) {
	f.StringVar(&o.Listen, "console-listen", Off, `HTTPS address of the web console at /ui/ (sign in with an S3 user's access key and secret; "off": none); with TLS it needs --console-tls-cert and --console-tls-key`)
	f.StringVar(&o.Reports, "console-reports", "", "directory of report run directories (spindle report run --out) the console shows")
	f.StringVar(&o.CertFile, "console-tls-cert", "", "the console's certificate, of role s3 (spindle cert issue --role s3, with the console's host): its HTTPS pair and its identity at the meta service")
	f.StringVar(&o.KeyFile, "console-tls-key", "", "the console certificate's private key (PEM, 0600)")
}

// WithMeta runs the meta service (run with ctx and cfg: meta.Run) with
// the console beside it (unless o.Listen is Off), reaching the service at
// its members' addresses; the console stops when run returns.
func WithMeta(ctx context.Context, o *MetaOptions, cfg state.Config, run func(context.Context, state.Config) error) error {
	if o == nil || o.Listen == "" || o.Listen == Off {
		return run(ctx, cfg)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var sec *tlsconf.Settings
	if cfg.TLS.Enabled() {
		if o.CertFile == "" || o.KeyFile == "" {
			return errors.New("console: --console-listen with TLS needs --console-tls-cert and --console-tls-key (a certificate of role s3)")
		}
		var err error
		if sec, err = tlsconf.NewSettings(tlsconf.Files{Cert: o.CertFile, Key: o.KeyFile, CA: cfg.TLS.Files().CA}); err != nil {
			return fmt.Errorf("console: %w", err)
		}
		if l := sec.Leaf(); l == nil {
			return fmt.Errorf("console: --console-tls-cert %s: no certificate", o.CertFile)
		} else if _, role, err := tlsconf.IdentityOf(l); err != nil || role != tlsconf.RoleS3 {
			return fmt.Errorf("console: --console-tls-cert %s: want a certificate of role s3", o.CertFile)
		}
	}
	if cfg.Listener == nil {
		// Listened on here, so that the console knows the port of a
		// --listen with port 0; the service serves on it as on its own.
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("meta: listen: %w", err)
		}
		defer func() { _ = ln.Close() }() // the service closed it (an error then), unless it failed to start
		cfg.Listener = ln
	}
	addrs := []string{cfg.Listener.Addr().String()}
	for id, a := range cfg.Peers {
		if id != cfg.ID {
			addrs = append(addrs, a)
		}
	}
	mc, err := metaapi.NewClient(strings.Join(addrs, ","), metaapi.ClientOptions{TLS: sec})
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	store, err := NewMetaStore(strings.Join(addrs, ","), sec, log)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: sec.Pin(tlsconf.RoleMeta, tlsconf.RoleDatanode).HTTPTransport(&http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute})}
	var metaURLs []string
	for _, a := range addrs {
		metaURLs = append(metaURLs, sec.Scheme()+"://"+a+"/metrics")
	}
	c, err := Start(Config{Listen: o.Listen, CertFile: o.CertFile, KeyFile: o.KeyFile, Cluster: mc, Store: store,
		ReportsDir: o.Reports, Scrape: HTTPScrape(hc, mc, metaURLs, 2*time.Second), Logger: log})
	if err != nil {
		return errors.Join(err, store.Close())
	}
	log.Info("web console serving: sign in with an S3 user's access key and secret", "url", c.URL())
	err = run(ctx, cfg)
	hc.CloseIdleConnections()
	return errors.Join(err, c.Close(), store.Close())
}
