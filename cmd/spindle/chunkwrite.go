package main

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchChunkWriteCmd() *cobra.Command {
	var cfg scenario.ChunkWriteLocalConfig
	var local bool
	var logDir string
	chunkSize := units.ByteSize(units.MiB)
	blockSize := units.ByteSize(64 * units.MiB)
	retain := units.ByteSize(units.GiB)
	bpc := units.ByteSize(engine.DefaultBytesPerChecksum)
	cmd := &cobra.Command{
		Use:   "chunk-write",
		Short: "Durable chunk writes (seed 002); --local: straight into the storage engine",
		Long: `Writes chunks of --chunk-size from --clients concurrent writers for
--duration (or --count writes), each write acknowledged only once durable
(WriteChunk, then a group-committed sync), a PutBlock per full block. Then
measures, in the same run and on the same directory, the raw baseline: a
loop of pwrite + fdatasync of the same size, one sync per write, the same
number of writers, writing new space as the engine does (append); and, as
a second figure, the same loop rewriting space in place (overwrite).

--local runs the engine in this process on --data-dir (repeatable, one per
volume). The replicated form (three datanodes, a Raft pipeline, --log-dir)
comes with the pipelines.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !local {
				return errors.New("chunk-write: only --local (engine, no network) exists yet; the replicated pipeline comes with the pipelines issue")
			}
			if logDir != "" {
				return errors.New("chunk-write: --log-dir needs the Raft pipeline; --local has no log")
			}
			cfg.ChunkSizeBytes = chunkSize.Int64()
			cfg.BlockSizeBytes = blockSize.Int64()
			cfg.RetainBytes = retain.Int64()
			if bpc.Int64() < engine.MinBytesPerChecksum || bpc.Int64() > engine.MaxBytesPerChecksum {
				return fmt.Errorf("chunk-write: --bytes-per-checksum %d not in [%d, %d]", bpc.Int64(), engine.MinBytesPerChecksum, engine.MaxBytesPerChecksum)
			}
			cfg.BytesPerChecksum = uint32(bpc.Int64())
			cfg.Logger = slog.Default()
			res, err := scenario.RunChunkWriteLocal(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return printResult(cmd, res, nil)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&local, "local", false, "write straight into the storage engine in this process (no network)")
	f.StringSliceVar(&cfg.DataDirs, "data-dir", nil, "volume directory (repeat or comma-separate for several; default: a temporary directory)")
	f.StringVar(&logDir, "log-dir", "", "Raft log directory (pipeline mode only)")
	f.Var(&chunkSize, "chunk-size", "bytes per chunk write (e.g. 1KiB, 1MiB)")
	f.IntVar(&cfg.Clients, "clients", 16, "concurrent writers")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "run time bound (0: none; then --count is required)")
	f.Int64Var(&cfg.Count, "count", 0, "bound on the total number of writes (0: none)")
	f.Var(&blockSize, "block-size", "a writer commits its block (PutBlock) and starts a new one at this size")
	f.Var(&bpc, "bytes-per-checksum", "CRC32C piece size")
	f.IntVar(&cfg.Containers, "containers", 4, "OPEN containers the writers share")
	f.Var(&retain, "retain", "data kept on disk; past it each writer deletes its oldest blocks (bounds disk use)")
	f.IntVar(&cfg.SyncWorkers, "sync-workers", 0, "group commit: sync rounds in flight and parallel fdatasyncs per round (0: engine default)")
	f.BoolVar(&cfg.NoBaseline, "no-baseline", false, "skip the raw baselines")
	f.BoolVar(&cfg.NoOverwriteBaseline, "no-overwrite-baseline", false, "skip the second (overwrite in place) baseline")
	return cmd
}
