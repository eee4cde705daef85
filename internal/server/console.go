package server

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/console"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// AddConsoleFlags adds the console's flags (package console) to f.
func AddConsoleFlags(f *pflag.FlagSet, c *console.Options) { console.AddFlags(f, c) }

// startConsole starts the web console (unless off): HTTPS with the s3
// role's pair (the local CA's; self-signed with Insecure), the admin
// client's views and metrics, the s3 role's client for buckets and keys,
// the S3 root user as its admin credential. A console that cannot listen
// is logged, not fatal: the cluster serves without it.
// It returns the console (nil: none) and what stops it.
func (s *Server) startConsole() (c *console.Console, stop func(), err error) {
	o := s.cfg.Console
	if o.Listen == console.Off {
		return nil, func() {}, nil
	}
	access, secret, _, err := s3Root(s.cfg.Dir, s.cfg.S3)
	if err != nil {
		return nil, nil, err
	}
	var s3TLS *tlsconf.Settings
	var certFile, keyFile string
	if !s.cfg.Insecure {
		if s3TLS, err = s.pki.Settings(tlsconf.RoleS3); err != nil {
			return nil, nil, fmt.Errorf("server: %w", err)
		}
		f := s.pki.Files(tlsconf.RoleS3)
		certFile, keyFile = f.Cert, f.Key
	}
	store, err := console.NewMetaStore(s.metaAddr, s3TLS, s.cfg.Logger)
	if err != nil {
		return nil, nil, err
	}
	hc := &http.Client{Transport: s.adminTLS.Pin(tlsconf.RoleMeta, tlsconf.RoleDatanode).HTTPTransport(&http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute})}
	var metaURLs []string
	for _, a := range strings.Split(s.metaAddr, ",") {
		metaURLs = append(metaURLs, s.adminTLS.Scheme()+"://"+a+"/metrics")
	}
	c, err = console.Start(console.Config{
		Listen: o.Listen, CertFile: certFile, KeyFile: keyFile,
		Cluster: s.client, Store: store, ReportsDir: o.Reports,
		Scrape:      console.HTTPScrape(hc, s.client, metaURLs, 2*time.Second),
		Admin:       console.Credential{AccessKey: access, SecretKey: secret},
		SampleEvery: s.cfg.ConsoleSampleEvery, Logger: s.cfg.Logger,
	})
	if err != nil {
		s.cfg.Logger.Warn("web console not started", "listen", o.Listen, "err", err)
		return nil, func() {}, store.Close()
	}
	ca := ""
	if !s.cfg.Insecure {
		ca = "; certificate of the CA " + s.pki.CA
	}
	fmt.Fprintf(os.Stderr, "spindle server: console at %s (sign in with the S3 root user's access key %s and secret, or an S3 user's%s)\n", c.URL(), access, ca)
	return c, func() {
		if err := c.Close(); err != nil {
			s.cfg.Logger.Warn("web console", "err", err)
		}
		if err := store.Close(); err != nil {
			s.cfg.Logger.Warn("web console store", "err", err)
		}
		hc.CloseIdleConnections()
	}, nil
}
