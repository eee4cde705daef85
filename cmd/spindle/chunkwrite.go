package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/tokenbench"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchChunkWriteCmd() *cobra.Command {
	var cfg scenario.ChunkWriteLocalConfig
	var pcfg scenario.ChunkWritePipelineConfig
	var local, blockTokens bool
	var logDir, placements, diskDir, tmpfsDir string
	chunkSize := units.ByteSize(units.MiB)
	blockSize := units.ByteSize(64 * units.MiB)
	retain := units.ByteSize(units.GiB)
	maxBytes := units.ByteSize(scenario.DefaultPipelineMaxBytes)
	bpc := units.ByteSize(engine.DefaultBytesPerChecksum)
	logInline := units.ByteSize(pipeline.DefaultLogInlineMaxBytes)
	cmd := &cobra.Command{
		Use:   "chunk-write",
		Short: "Durable chunk writes through a 3-replica pipeline (the log/data placement experiment); --local: straight into the storage engine",
		Long: `Writes chunks of --chunk-size from --clients concurrent writers for
--duration (or --count writes), each write acknowledged only once durable,
a PutBlock per full block (--block-size). Then measures, in the same run and
on the same data directory, the raw baseline: a loop of pwrite + fdatasync
of the same size, one sync per write, the same number of writers, writing
new space as the store does (append).

By default (replicated): starts three ` + "`spindle datanode`" + ` processes on
127.0.0.1 forming one Raft pipeline, with their volumes in --data-dir/dn1..3
and their Raft logs in --log-dir/dn1..3 (put them on different devices to
compare placements: the log/data placement experiment), waits for a leader and writes through
the pipeline client: a write is acknowledged once a quorum of the replicas
has fsynced its data and its log record. The datanodes are stopped and their
directories removed at the end (also on error or interrupt). The JSON adds
replicas, data_dir, log_dir and placement (filesystem and device of each).

--placements DATA:LOG,... runs the replicated form once per placement of
the datanodes' data and Raft log (tmpfs: a new directory under --tmpfs-dir;
disk: under --dir; or an absolute directory), one after the other with the
same flags, and prints one table with each placement's ratio to the
tmpfs:tmpfs run and seed 002's Ozone figure for it (memdisk/memdisk 8,900,
hdd/same hdd 420, hdd/different hdd 520, hdd/memdisk 1,400 writes/s);
--json prints one object with every run under "placements".

--local runs the engine in this process on --data-dir (repeatable, one per
volume), without network or log; it also reports an overwrite-in-place
baseline.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bpc.Int64() < engine.MinBytesPerChecksum || bpc.Int64() > engine.MaxBytesPerChecksum {
				return fmt.Errorf("chunk-write: --bytes-per-checksum %d not in [%d, %d]", bpc.Int64(), engine.MinBytesPerChecksum, engine.MaxBytesPerChecksum)
			}
			if placements != "" && (local || len(cfg.DataDirs) > 0 || logDir != "") {
				return errors.New("chunk-write: --placements chooses the data and log directories itself (under --dir and --tmpfs-dir); it takes neither --local, --data-dir nor --log-dir")
			}
			if placements == "" && (cmd.Flags().Changed("dir") || cmd.Flags().Changed("tmpfs-dir")) {
				return errors.New("chunk-write: --dir and --tmpfs-dir are for --placements")
			}
			var specs []scenario.PlacementSpec
			if placements != "" {
				var err error
				if specs, err = scenario.ParsePlacements(placements); err != nil {
					return fmt.Errorf("chunk-write: %w", err)
				}
			}
			if !local {
				if len(cfg.DataDirs) > 1 {
					return errors.New("chunk-write: the replicated form takes one --data-dir (each datanode gets a subdirectory of it)")
				}
				if len(cfg.DataDirs) == 1 {
					pcfg.DataDir = cfg.DataDirs[0]
				}
				bin, err := os.Executable()
				if err != nil {
					return fmt.Errorf("chunk-write: finding the spindle binary for the datanodes: %w", err)
				}
				pcfg.Binary = bin
				pcfg.LogDir = logDir
				pcfg.ChunkSizeBytes = chunkSize.Int64()
				pcfg.BlockSizeBytes = blockSize.Int64()
				pcfg.MaxBytes = maxBytes.Int64()
				pcfg.BytesPerChecksum = uint32(bpc.Int64())
				if cmd.Flags().Changed("log-inline-max-bytes") {
					pcfg.DatanodeArgs = append(pcfg.DatanodeArgs, "--log-inline-max-bytes", fmt.Sprint(logInline.Int64()))
				}
				pcfg.Clients, pcfg.Duration, pcfg.Count = cfg.Clients, cfg.Duration, cfg.Count
				pcfg.Containers, pcfg.NoBaseline = cfg.Containers, cfg.NoBaseline
				pcfg.Progress = bench.TerminalProgress()
				pcfg.Logger = slog.Default()
				if specs != nil {
					res, err := scenario.RunChunkWritePlacements(cmd.Context(), scenario.PlacementsConfig{
						Pipeline: pcfg, Placements: specs, DiskDir: diskDir, TmpfsDir: tmpfsDir})
					if err != nil {
						if len(res.Runs) > 0 {
							if werr := res.WriteTable(cmd.ErrOrStderr()); werr != nil { // the placements done
								return errors.Join(err, werr)
							}
						}
						return err
					}
					if asJSON, _ := cmd.Flags().GetBool(jsonFlag); asJSON {
						return res.WriteJSON(cmd.OutOrStdout())
					}
					return res.WriteTable(cmd.OutOrStdout())
				}
				if blockTokens {
					asJSON, _ := cmd.Flags().GetBool(jsonFlag)
					return tokenbench.Print(cmd.Context(), cmd.OutOrStdout(), pcfg, asJSON)
				}
				res, err := scenario.RunChunkWritePipeline(cmd.Context(), pcfg)
				if err != nil {
					return err
				}
				return printResult(cmd, res.Result, res)
			}
			if logDir != "" {
				return errors.New("chunk-write: --log-dir needs the Raft pipeline; --local has no log")
			}
			if pcfg.Floor {
				return errors.New("chunk-write: --floor measures three replicas; --local has one")
			}
			cfg.ChunkSizeBytes = chunkSize.Int64()
			cfg.BlockSizeBytes = blockSize.Int64()
			cfg.RetainBytes = retain.Int64()
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
	f.BoolVar(&local, "local", false, "write straight into the storage engine in this process (no network, no log)")
	f.StringSliceVar(&cfg.DataDirs, "data-dir", nil, "volume directory (--local: repeat or comma-separate for several; default: a temporary directory)")
	f.StringVar(&logDir, "log-dir", "", "Raft log directory of the datanodes (default: a temporary directory)")
	f.StringVar(&placements, "placements", "", "replicated: run once per DATA:LOG placement (comma-separated; each side tmpfs, disk or an absolute directory), e.g. tmpfs:tmpfs,disk:disk,disk:tmpfs,tmpfs:disk — seed 002's experiment, printed beside its figures")
	f.StringVar(&diskDir, "dir", "", "--placements: where \"disk\" directories are made (default: $TMPDIR or /tmp)")
	f.StringVar(&tmpfsDir, "tmpfs-dir", "/dev/shm", "--placements: where \"tmpfs\" directories are made")
	f.Var(&chunkSize, "chunk-size", "bytes per chunk write (e.g. 1KiB, 1MiB)")
	f.IntVar(&cfg.Clients, "clients", 16, "concurrent writers")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "run time bound (0: none; then --count is required)")
	f.Int64Var(&cfg.Count, "count", 0, "bound on the total number of writes (0: none)")
	f.Var(&blockSize, "block-size", "a writer commits its block (PutBlock) and starts a new one at this size")
	f.Var(&bpc, "bytes-per-checksum", "CRC32C piece size")
	f.IntVar(&cfg.Containers, "containers", 4, "containers the writers share at a time")
	f.Var(&retain, "retain", "--local: data kept on disk; past it each writer deletes its oldest blocks (bounds disk use)")
	f.IntVar(&cfg.SyncWorkers, "sync-workers", 0, "--local: group commit: sync rounds in flight and parallel fdatasyncs per round (0: engine default)")
	f.BoolVar(&cfg.NoBaseline, "no-baseline", false, "skip the raw baselines")
	f.BoolVar(&pcfg.Floor, "floor", false, "replicated: also measure the replication floor (the same writes through three replicas with none of Spindle's protocol, log or bookkeeping: receive, CRC32C check, pwrite, forward; no log, no fsync) and report Spindle's CPU per GB over it")
	f.BoolVar(&blockTokens, "block-tokens", false, "replicated, over TLS: run four times, alternately without and with the datanodes checking a block token on every write (datanode --block-token-keys), and print each run's writes/s and CPU µs per write and the ratios")
	f.BoolVar(&pcfg.TLS, "tls", false, "replicated form: mutual TLS 1.3 on every connection, as spindle server runs by default (default plaintext: the storage path alone)")
	f.BoolVar(&cfg.NoOverwriteBaseline, "no-overwrite-baseline", false, "--local: skip the second (overwrite in place) baseline")
	f.Var(&maxBytes, "max-bytes", "replicated: stop after writing this many bytes (each replica holds them all), whatever --duration says")
	f.IntVar(&pcfg.Conns, "conns", scenario.DefaultPipelineConns, "replicated: connections to each datanode, shared by all clients")
	f.IntVar(&pcfg.Window, "window", 0, "replicated: requests in flight per connection (0: enough for every client)")
	f.DurationVar(&pcfg.Tick, "tick", 0, "replicated: the datanodes' raft tick (0: their default)")
	f.IntVar(&pcfg.ElectionTicks, "election-ticks", 0, "replicated: the datanodes' election timeout in ticks (0: their default)")
	f.IntVar(&pcfg.DatanodeProcs, "datanode-procs", 0, "replicated: each datanode's GOMAXPROCS (0: an equal share of the CPUs, max(1, NumCPU/3); -1: Go's default)")
	f.StringSliceVar(&pcfg.DatanodeEnv, "datanode-env", nil, "replicated: NAME=VALUE added to the datanodes' environment (repeatable)")
	f.Var(&logInline, "log-inline-max-bytes", "replicated: the datanodes' --log-inline-max-bytes: "+logInlineHelp)
	f.StringVar(&pcfg.CPUProfileDir, "cpuprofile-dir", "", "replicated: each datanode writes a CPU profile dn<i>.pprof here")
	return cmd
}
