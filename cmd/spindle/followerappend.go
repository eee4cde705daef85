package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchFollowerAppendCmd() *cobra.Command {
	var cfg scenario.FollowerAppendConfig
	chunkSize := units.ByteSize(scenario.DefaultFollowerAppendChunkBytes)
	blockSize := units.ByteSize(scenario.DefaultFollowerAppendBlockBytes)
	retain := units.ByteSize(scenario.DefaultFollowerAppendRetainBytes)
	cmd := &cobra.Command{
		Use:   "follower-append",
		Short: "A real datanode as Raft follower, this process as its leader: throughput and syscalls per message (the follower syscall-profile experiment)",
		Long: `Starts a real datanode (spindle datanode) as a child process, the follower
(node 2) of a test pipeline, and plays that pipeline's Raft leader against
it over the wire protocol: AppendEntries (MsgApp) carrying WriteChunk
entries, their chunk bytes as the frame's payload, with --window of them in
flight. The datanode acknowledges an AppendEntries once its log record and
its chunk data are fdatasynced.

A MESSAGE is one replicated WriteChunk of --chunk-size bytes, as in the
follower syscall-profile experiment this bench repeats (its batch-1 and
batch-10 runs both wrote 30000 chunks). An
AppendEntries carries --batch of them in one raft entry: --messages 30000
--batch 10 sends 3000 AppendEntries. ops = messages; latency is per
AppendEntries round trip.

Chunks go sequentially into blocks of --block-size, 16 blocks per container
(4 GiB); past --retain bytes of block data the leader deletes the oldest
block (a DeleteBlock in the next entry), which bounds the disk used.

The first run measures throughput without any tracer. Then the raw baseline
runs on --data-dir: pwrite of --chunk-size with an fdatasync per --batch
writes. With --profile-syscalls a second run puts the datanode under
strace -f -c and reports its system calls per message, per AppendEntries and
by name, the threads it created and its fdatasyncs per message, counted over
the datanode's whole life (start-up and shutdown included). Without strace,
or where it cannot trace, the bench fails rather than report a figure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.ChunkSizeBytes = chunkSize.Int64()
			cfg.BlockSizeBytes = blockSize.Int64()
			cfg.RetainBytes = retain.Int64()
			cfg.Logger = slog.Default()
			res, err := scenario.RunFollowerAppend(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			asJSON, err := cmd.Flags().GetBool(jsonFlag)
			if err != nil {
				return err
			}
			if !asJSON {
				return res.WriteTable(cmd.OutOrStdout())
			}
			return printResult(cmd, res.Result, res)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&cfg.Messages, "messages", scenario.DefaultFollowerAppendMessages, "messages to replicate: a message is one WriteChunk")
	f.IntVar(&cfg.Batch, "batch", 1, "WriteChunks (messages) per AppendEntries")
	f.Var(&chunkSize, "chunk-size", "bytes per WriteChunk (e.g. 1KiB, 1MiB)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "the datanode's data directory (created if missing; default: a temporary directory)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "the datanode's Raft log directory (created if missing; default: a temporary directory)")
	f.BoolVar(&cfg.ProfileSyscalls, "profile-syscalls", false, "a second run under strace -f -c: syscalls per message (needs strace: make deps)")
	f.Var(&retain, "retain", "block data kept on the datanode; past it the leader deletes the oldest blocks")
	f.Var(&blockSize, "block-size", "chunks are written sequentially into blocks of this size")
	f.IntVar(&cfg.Window, "window", scenario.DefaultFollowerAppendWindow, "AppendEntries in flight")
	f.DurationVar(&cfg.Timeout, "timeout", scenario.DefaultFollowerAppendTimeout, "bound on the whole bench (all runs)")
	f.BoolVar(&cfg.NoBaseline, "no-baseline", false, "skip the raw pwrite + fdatasync baseline")
	f.StringVar(&cfg.Binary, "datanode-binary", "", "the spindle binary to run as the datanode (default: this one)")
	f.StringVar(&cfg.Strace, "strace", "", "the strace binary (default: strace on PATH)")
	return cmd
}
