package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/server"
)

func newServerCmd() *cobra.Command {
	var cfg server.Config
	var readyFile string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the embedded cluster: the meta service and N datanodes on 127.0.0.1 under one directory",
		Long: `Runs Spindle's embedded default: the meta service in this process and
--datanodes datanode processes (default 3), all on 127.0.0.1, all under --dir
(meta/, datanodes/dn<i>/, server.json). Started again on the same --dir it
comes back with the same datanodes, pipelines, namespace and data. Clients
use --meta-listen (default 127.0.0.1:9860): spindle put, get, ls, ... .
Ctrl-C or SIGTERM stops everything cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	return cmd
}
