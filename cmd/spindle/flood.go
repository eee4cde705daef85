package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchFloodCmd() *cobra.Command {
	var cfg scenario.FloodConfig
	chunkSize := units.ByteSize(scenario.DefaultFloodChunkBytes)
	clientBudget := units.ByteSize(scenario.DefaultFloodBudgetBytes)
	raftBudget := units.ByteSize(scenario.DefaultFloodBudgetBytes)
	cmd := &cobra.Command{
		Use:   "flood",
		Short: "A pipeline leader under idle connections and a flood of maximum-size frames: other clients' p99 and the leader's memory",
		Long: `Starts three ` + "`spindle datanode`" + ` processes on 127.0.0.1 forming one pipeline (as
bench chunk-write does), with payload budgets --client-budget and
--raft-budget. --clients writers write --chunk-size chunks through the
pipeline client for --phase (quiet), then again for --phase while the
leader holds --idle-conns idle connections (each sent one request, then
nothing) and --peers connections send it maximum-size frames (never reading
the answers), at most --frames each: half WriteChunks of the pipeline of
64 MiB with wrong checksums (admitted against the client budget, refused by
the leader at their first bad piece as they arrive, the rest of each read and
dropped at the connection's skip rate), half 68 MiB RaftMessages of its group
from a non-member at a stale term (MsgApps older than the group's term,
which raft would reject whatever they carry: refused from their header and
dropped at the skip rate, never admitted). With --refused the frames are ones a datanode refuses from
their header (68 MiB WriteChunks, RaftMessages of a group it does not serve):
their payloads are read and dropped, never held.

Reports the writes of the flooded phase (ops, latency) and, in extra, the
quiet and flooded p99 and their ratio, and the leader's resident memory:
VmHWM and VmRSS from /proc/PID/status against the budgets (client + raft).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("flood: finding the spindle binary for the datanodes: %w", err)
			}
			cfg.Binary = bin
			cfg.ChunkSizeBytes = chunkSize.Int64()
			cfg.ClientBudgetBytes, cfg.RaftBudgetBytes = clientBudget.Int64(), raftBudget.Int64()
			cfg.Progress = bench.TerminalProgress()
			cfg.Logger = slog.Default()
			res, err := scenario.RunFlood(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return printResult(cmd, res.Result, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "parent of the datanodes' volumes (default: a temporary directory)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "parent of the datanodes' Raft logs (default: a temporary directory)")
	f.IntVar(&cfg.Clients, "clients", scenario.DefaultFloodClients, "well-behaved writers")
	f.Var(&chunkSize, "chunk-size", "bytes per chunk write of the writers")
	f.DurationVar(&cfg.Phase, "phase", scenario.DefaultFloodPhase, "duration of each phase (quiet, flooded)")
	f.IntVar(&cfg.IdleConns, "idle-conns", scenario.DefaultFloodIdleConns, "idle connections to the leader during the flood")
	f.IntVar(&cfg.Peers, "peers", scenario.DefaultFloodPeers, "connections flooding the leader with maximum-size frames")
	f.IntVar(&cfg.FramesPerPeer, "frames", scenario.DefaultFloodFrames, "frames per flooding connection, at most")
	f.BoolVar(&cfg.Refused, "refused", false, "flood with frames refused from their header instead of admitted ones")
	f.Var(&clientBudget, "client-budget", "the datanodes' client payload budget (--client-payload-budget)")
	f.Var(&raftBudget, "raft-budget", "the datanodes' raft payload budget (--raft-payload-budget)")
	f.StringArrayVar(&cfg.DatanodeArgs, "datanode-arg", nil, "argument added to every datanode's command line (repeatable)")
	return cmd
}
