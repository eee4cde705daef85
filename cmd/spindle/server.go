package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/server"
)

func newServerCmd() *cobra.Command {
	var cfg server.Config
	var readyFile string
	var checkReplication func() error
	maxCopies := datanode.DefaultMaxCopies
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the embedded cluster: the meta service and N datanodes on 127.0.0.1 under one directory",
		Long: `Runs Spindle's embedded default: the meta service in this process and
--datanodes datanode processes (default 3), all on 127.0.0.1, all under --dir
(meta/, datanodes/dn<i>/, server.json). Started again on the same --dir it
comes back with the same datanodes, pipelines, namespace and data. Clients
use --meta-listen (default 127.0.0.1:9860): spindle put, get, ls, ... .
S3 clients use --s3-listen (default 127.0.0.1:9878, "off": none) with the
root user of --s3-access-key/--s3-secret-key, or one generated at the first
start into --dir/s3-credentials.json (0600).
Ctrl-C or SIGTERM stops everything cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkReplication(); err != nil {
				return err
			}
			if maxCopies < 1 {
				return usageErr(fmt.Errorf("--max-copies %d: want at least 1", maxCopies))
			}
			cfg.DatanodeArgs = append(cfg.DatanodeArgs, "--max-copies", fmt.Sprint(maxCopies))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return server.Run(ctx, cfg, readyFile)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory of the whole cluster (required)")
	f.IntVar(&cfg.Datanodes, "datanodes", server.DefaultDatanodes, "datanode processes (3..9)")
	f.StringVar(&cfg.MetaListen, "meta-listen", "127.0.0.1:9860", "address of the meta service")
	f.StringVar(&readyFile, "ready-file", "", "write the meta address and PID here once ready")
	f.IntVar(&maxCopies, "max-copies", maxCopies, "re-replication: container copies each datanode receives at once")
	addS3Flags(f, &cfg.S3)
	checkReplication = addReplicationFlags(f, &cfg.Meta)
	return cmd
}
