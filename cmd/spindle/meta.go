package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
)

func newMetaCmd() *cobra.Command {
	var cfg meta.Config
	containerSize := units.ByteSize(metaapi.DefaultContainerSizeBytes)
	var checkReplication func() error
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Run the meta service: datanode registry, pipelines, containers, buckets and keys",
		Long: `Runs the meta service: the cluster manager (datanode registration and
health, pipelines of 3 datanodes, container allocation and closing, block
deletion on datanodes) and the namespace (buckets, keys → block lists), in a
Pebble store under --dir, served as JSON over HTTP on --listen, with
Prometheus metrics on /metrics. Datanodes join with
'spindle datanode --meta ADDR'. Once serving it writes "ADDR\nPID\n" to
--ready-file. SIGTERM or SIGINT stops it cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if containerSize <= 0 {
				return usageErr(fmt.Errorf("--container-size %s: want a positive size", containerSize))
			}
			if err := checkReplication(); err != nil {
				return err
			}
			cfg.ContainerSizeBytes = uint64(containerSize)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return meta.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:9860", "HTTP address of the meta service")
	f.StringVar(&cfg.Dir, "dir", "", "directory of the meta service's store (required)")
	f.StringVar(&cfg.ReadyFile, "ready-file", "", "write ADDR and PID here once serving")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", metaapi.DefaultHeartbeatInterval, "datanode heartbeat interval (the cluster manager's tick)")
	f.DurationVar(&cfg.StaleAfter, "stale-after", metaapi.DefaultStaleAfter, "a datanode silent this long is STALE (no new blocks on it)")
	f.DurationVar(&cfg.DeadAfter, "dead-after", metaapi.DefaultDeadAfter, "a datanode silent this long is DEAD (its pipelines are closed)")
	f.IntVar(&cfg.PipelinesPerNode, "pipelines-per-node", metaapi.DefaultPipelinesPerNode, "open pipelines a datanode is a member of, at most")
	f.Var(&containerSize, "container-size", "a container is closed once this full")
	f.IntVar(&cfg.ContainersPerPipeline, "containers-per-pipeline", meta.DefaultContainersPerPipeline, "open containers per open pipeline")
	f.DurationVar(&cfg.AllocationGrace, "allocation-grace", meta.DefaultAllocationGrace, "blocks allocated and not committed for this long are deleted (interrupted puts)")
	f.DurationVar(&cfg.LeaveTimeout, "leave-timeout", meta.DefaultLeaveTimeout, "a closed pipeline's members leave it once its containers are closed, or after this long")
	checkReplication = addReplicationFlags(f, &cfg)
	return cmd
}
