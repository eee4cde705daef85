package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/s3gw"
	"github.com/spindle-store/spindle/internal/server"
)

// addS3Flags binds the S3 gateway's flags of spindle server.
func addS3Flags(f *pflag.FlagSet, c *server.S3Config) {
	f.StringVar(&c.Listen, "s3-listen", s3gw.DefaultListen, `address of the S3 gateway ("off": none)`)
	f.StringVar(&c.Region, "s3-region", s3gw.DefaultRegion, "region the S3 gateway answers")
	f.StringVar(&c.Domain, "s3-domain", "", "domain of virtual-host-style S3 addressing (BUCKET.DOMAIN); path style always works")
	f.StringVar(&c.AccessKey, "s3-access-key", "", "access key of the S3 root user (env SPINDLE_S3_ACCESS_KEY; default: generated into --dir)")
	f.StringVar(&c.SecretKey, "s3-secret-key", "", "secret key of the S3 root user (env SPINDLE_S3_SECRET_KEY)")
}

func newS3Cmd() *cobra.Command {
	var cfg s3gw.Config
	var env keyEnv
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "Run an S3 gateway in front of a Spindle cluster (stateless: run several behind a load balancer)",
		Long: `Serves the S3 API on --listen for the meta service at --meta (stateless: users, buckets, objects
live there). Its root user (full access) is --s3-access-key with --s3-secret-key, or the meta service's
user of that access key (spindle server's user root). Other users: spindle admin user create.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.AccessKey == "" {
				return cli.UsageErr(errors.New("--s3-access-key is required"))
			}
			cfg.Meta = env.meta
			sec, err := env.tls.server("s3")
			if err != nil {
				return err
			}
			cfg.TLS = sec
			scheme := "http"
			if sec.Enabled() { // the same certificate serves HTTPS (issue it with --role s3 --host of --listen)
				cfg.CertFile, cfg.KeyFile, scheme = env.tls.cert, env.tls.key, "https"
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cfg.SecretKey == "" {
				mc, err := env.metaClient()
				if err != nil {
					return err
				}
				u, err := mc.UserByAccessKey(ctx, cfg.AccessKey)
				if err != nil {
					return fmt.Errorf("s3: the secret of access key %s: %w", cfg.AccessKey, err)
				}
				cfg.SecretKey = u.SecretKey
			}
			fmt.Fprintf(os.Stderr, "spindle s3: serving S3 at %s://%s for the meta service at %s (%s)\n", scheme, cfg.Listen, cfg.Meta, sec.Mode())
			return s3gw.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	env.addFlags(f)
	f.StringVar(&cfg.Listen, "listen", s3gw.DefaultListen, "address of the S3 gateway")
	f.StringVar(&cfg.Region, "s3-region", s3gw.DefaultRegion, "region the gateway answers")
	f.StringVar(&cfg.Domain, "s3-domain", "", "domain of virtual-host-style addressing (BUCKET.DOMAIN)")
	f.StringVar(&cfg.AccessKey, "s3-access-key", "", "access key of the root user (env SPINDLE_S3_ACCESS_KEY)")
	f.StringVar(&cfg.SecretKey, "s3-secret-key", "", "secret key of the root user (env SPINDLE_S3_SECRET_KEY; default: the meta service's user of the access key)")
	return cmd
}
