package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/pipeline"
)

func newDatanodeCmd() *cobra.Command {
	var cfg datanode.Config
	var pipelines []string
	cmd := &cobra.Command{
		Use:   "datanode",
		Short: "Run a datanode: storage engine, shared raft log, static pipelines",
		Long: `Runs a datanode: the storage engine over --data-dir, one shared raft log
in --log-dir (put it on its own device to keep log fsyncs off the data disk),
and the pipelines given by --pipeline GROUP:ID=ADDR,ID=ADDR,ID=ADDR
(repeatable; this datanode is --id in each). Peers and clients use the one
--listen address. Once serving it writes "ADDR\nPID\n" to --ready-file.
SIGTERM or SIGINT stops it cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range pipelines {
				p, err := datanode.ParsePipeline(s)
				if err != nil {
					return err
				}
				cfg.Pipelines = append(cfg.Pipelines, p)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return datanode.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&cfg.ID, "id", 0, "this datanode's raft ID (1..65535), the same in every pipeline")
	f.StringVar(&cfg.ListenAddr, "listen", "127.0.0.1:0", "address for peers and clients")
	f.StringSliceVar(&cfg.DataDirs, "data-dir", nil, "volume directory (repeat or comma-separate for several)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "raft log directory")
	f.StringArrayVar(&pipelines, "pipeline", nil, "GROUP:ID=ADDR,ID=ADDR,ID=ADDR (repeatable)")
	f.StringVar(&cfg.ReadyFile, "ready-file", "", "write ADDR and PID here once serving")
	f.DurationVar(&cfg.TickInterval, "tick", pipeline.DefaultTickInterval, "raft tick")
	f.IntVar(&cfg.ElectionTicks, "election-ticks", pipeline.DefaultElectionTicks, "ticks without a leader before an election")
	f.IntVar(&cfg.HeartbeatTicks, "heartbeat-ticks", pipeline.DefaultHeartbeatTicks, "ticks between leader heartbeats")
	f.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile here")
	return cmd
}
