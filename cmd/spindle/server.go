package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/units"
)

func newServerCmd() *cobra.Command {
	var cfg server.Config
	var readyFile string
	var checkReplication func() error
	maxCopies := datanode.DefaultMaxCopies
	logInline := units.ByteSize(pipeline.DefaultLogInlineMaxBytes)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the embedded cluster: the meta service and N datanodes on 127.0.0.1 under one directory",
		Long: `Runs Spindle's embedded default: the meta service in this process and
--datanodes datanode processes (default 3), all on 127.0.0.1, all under --dir
(meta/, datanodes/dn<i>/, server.json). Started again on the same --dir it
comes back with the same datanodes (on new ports), pipelines, namespace and data. Clients
use --meta-listen (default 127.0.0.1:9860): spindle put, get, ls, ... .
S3 clients use --s3-listen (default 127.0.0.1:9878, "off": none) with the
root user of --s3-access-key/--s3-secret-key, or one generated at the first
start into --dir/s3-credentials.json (0600). Ctrl-C or SIGTERM stops everything cleanly.

Every connection is mutual TLS 1.3: at the first start the server makes a
cluster CA and a certificate per role under --dir/tls (keys 0600), and
writes a client profile (` + "`~/.config/spindle/clients/`" + `, or
$SPINDLE_CLIENT_CONFIG_DIR) that spindle put, get, admin, ... find by their
--meta address: no flag needed on this machine. The S3 gateway serves HTTPS;
S3 clients verify it with the CA bundle --dir/tls/ca/ca.crt (aws
--ca-bundle, AWS_CA_BUNDLE). --insecure runs everything in plaintext
(logged as such, and shown by spindle admin).

With --meta-replicas 3 the meta service is a raft group of 3 'spindle meta'
processes (--dir/meta<i>, logs in --dir/meta<i>.log; member 1 on
--meta-listen, the others on ports chosen at the first start and kept in
server.json): a member may crash or be killed and the cluster keeps
serving. Datanodes and the S3 gateway get every member's address; so must
clients (--meta A,B,C or SPINDLE_META, printed at the start). The meta
settings given here (replication flags) are passed to every member.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkReplication(); err != nil {
				return err
			}
			if maxCopies < 1 {
				return cli.UsageErr(fmt.Errorf("--max-copies %d: want at least 1", maxCopies))
			}
			cfg.DatanodeArgs = append(cfg.DatanodeArgs, "--max-copies", fmt.Sprint(maxCopies))
			if cmd.Flags().Changed("log-inline-max-bytes") {
				cfg.DatanodeArgs = append(cfg.DatanodeArgs, "--log-inline-max-bytes", fmt.Sprint(logInline.Int64()))
			}
			if cfg.MetaReplicas > 1 {
				// The meta settings given go to every member's command
				// line: the flags the meta command has too.
				mf := newMetaCmd().Flags()
				cfg.Meta.CertValidity = cfg.CertValidity
				cmd.Flags().Visit(func(fl *pflag.Flag) {
					switch fl.Name {
					case "dir", "ready-file", "listen", tlsconf.FlagInsecure, "console-listen", "console-reports": // TLS: the server's own flags for its members; the console: the server's
						return
					}
					if mf.Lookup(fl.Name) != nil {
						cfg.MetaArgs = append(cfg.MetaArgs, "--"+fl.Name+"="+fl.Value.String())
					}
				})
			}
			cfg.ClientProfile = true
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return server.Run(ctx, cfg, readyFile)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory of the whole cluster (required)")
	f.IntVar(&cfg.Datanodes, "datanodes", server.DefaultDatanodes, "datanode processes (3..9)")
	f.StringVar(&cfg.MetaListen, "meta-listen", "127.0.0.1:9860", "address of the meta service (member 1's with --meta-replicas)")
	f.IntVar(&cfg.MetaReplicas, "meta-replicas", 1, fmt.Sprintf("meta service members: 1 (in this process) or up to %d raft members as separate processes", server.MaxMetaReplicas))
	f.StringVar(&readyFile, "ready-file", "", "write the meta address and PID here once ready")
	f.IntVar(&maxCopies, "max-copies", maxCopies, "re-replication: container copies each datanode receives at once")
	f.Var(&logInline, "log-inline-max-bytes", "datanodes: "+logInlineHelp)
	addS3Flags(f, &cfg.S3)
	server.AddConsoleFlags(f, &cfg.Console)
	f.DurationVar(&cfg.CertValidity, "cert-validity", tlsconf.DefaultCertValidity, certValidityHelp)
	f.BoolVar(&cfg.Insecure, tlsconf.FlagInsecure, false, "plaintext connections everywhere, no TLS (meta, datanodes, S3 over http): anyone who reaches a port can use it")
	checkReplication = addReplicationFlags(f, &cfg.Meta)
	return cmd
}
