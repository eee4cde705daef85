package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/units"
	"github.com/spindle-store/spindle/internal/vfs"
	"github.com/spindle-store/spindle/internal/wal"
)

// allTmpfs says whether every directory is on tmpfs: the directory, or
// the nearest of its parents that exists (a datanode creates its
// directories). One that cannot be read is not.
func allTmpfs(dirs []string) bool {
	for _, d := range dirs {
		var st unix.Statfs_t
		if err := unix.Statfs(vfs.NearestExisting(d), &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			return false
		}
	}
	return len(dirs) > 0
}

// logInlineHelp is the help of --log-inline-max-bytes (datanode, server,
// bench chunk-write).
const logInlineHelp = "chunks of at most this size travel with their bytes in the raft log (one log fsync per round makes them durable; their block files are synced at PutBlock or before the log is compacted past them); larger chunks are written and fsynced in their block files; 0: never, at most 256KiB; unset: 64KiB, or 0 when every data directory is on tmpfs (no block-file fsync to spare)"

func newDatanodeCmd() *cobra.Command {
	var cfg datanode.Config
	var pipelines []string
	var metaAddr, joinToken string
	var listenFD int
	var tf tlsFlags
	clientBudget := units.ByteSize(pipeline.DefaultMaxInflightPayloadBytes)
	raftBudget := units.ByteSize(pipeline.DefaultMaxInflightRaftPayloadBytes)
	var memLimit units.ByteSize
	logSegment := units.ByteSize(wal.DefaultSegmentSizeBytes)
	logInline := units.ByteSize(pipeline.DefaultLogInlineMaxBytes)
	scrubRateMB := float64(datanode.DefaultScrubRateBytesPerS) / 1e6
	cmd := &cobra.Command{
		Use:   "datanode",
		Short: "Run a datanode: storage engine, shared raft log, static pipelines",
		Long: `Runs a datanode: the storage engine over --data-dir, one shared raft log
in --log-dir (put it on its own device to keep log fsyncs off the data disk),
and the pipelines given by --pipeline GROUP:ID=ADDR,ID=ADDR,ID=ADDR
(repeatable; this datanode is --id in each), or, with --meta ADDR, those the
meta service assigns (the datanode registers, heartbeats with its container
and pipeline reports, and keeps its identity and pipelines in --log-dir). Peers and clients use the one
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
			if joinToken != "" {
				host := cfg.AdvertiseAddr
				if host == "" {
					host = cfg.ListenAddr
				}
				if err := joinCluster(cmd.Context(), metaAddr, joinToken, &tf, host); err != nil {
					return err
				}
			}
			sec, err := tf.server("datanode")
			if err != nil {
				return err
			}
			cfg.TLS = sec
			if metaAddr != "" {
				mc, err := metaapi.NewClient(metaAddr, metaapi.ClientOptions{TLS: sec})
				if err != nil {
					return err
				}
				cfg.Meta = mc
			}
			cfg.MaxClientPayloadBytes, cfg.MaxRaftPayloadBytes = clientBudget.Int64(), raftBudget.Int64()
			cfg.LogSegmentSizeBytes = logSegment.Int64()
			// tmpfs: no unwritten extents to convert (wal.Config.SkipZeroAhead).
			cfg.LogSkipZeroAhead = allTmpfs([]string{cfg.LogDir})
			if logInline.Int64() < 0 || logInline.Int64() > pipeline.MaxLogInlineBytesLimit {
				return cli.UsageErr(fmt.Errorf("--log-inline-max-bytes %d: want 0 .. %d", logInline.Int64(), pipeline.MaxLogInlineBytesLimit))
			}
			cfg.LogInlineMaxBytes = int(logInline.Int64())
			if !cmd.Flags().Changed("log-inline-max-bytes") && allTmpfs(cfg.DataDirs) {
				// On tmpfs a block file's fsync costs nothing and chunks in
				// the log cost copies (ARCHITECTURE §12.6).
				cfg.LogInlineMaxBytes = 0
			}
			if scrubRateMB < 0 {
				return cli.UsageErr(fmt.Errorf("--scrub-rate %g: want MB/s ≥ 0 (0: no scrubber)", scrubRateMB))
			}
			cfg.ScrubRateBytesPerS = uint64(scrubRateMB * 1e6)
			if cfg.ScrubInterval <= 0 {
				return cli.UsageErr(fmt.Errorf("--scrub-interval %s: want a positive duration", cfg.ScrubInterval))
			}
			if memLimit.Int64() == 0 && os.Getenv("GOMEMLIMIT") == "" {
				memLimit = units.ByteSize(datanode.MemoryLimitBytes(cfg))
			}
			if memLimit.Int64() > 0 {
				debug.SetMemoryLimit(memLimit.Int64())
			}
			ln, err := inheritedListener(listenFD)
			if err != nil {
				return err
			}
			cfg.Listener = ln
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return datanode.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	tf.add(f)
	f.StringVar(&joinToken, "join-token", "", "a one-time token (spindle admin join-token): when --tls-cert does not exist yet, get this datanode's certificate from the meta service with it (written to --tls-cert and --tls-key)")
	f.Uint64Var(&cfg.ID, "id", 0, "this datanode's raft ID (1..65535), the same in every pipeline (with --meta: assigned by the meta service)")
	f.StringVar(&metaAddr, "meta", "", "meta service address (host:port), or every member of a replicated one, comma-separated: register, heartbeat, and serve the pipelines it assigns")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", metaapi.DefaultHeartbeatInterval, "heartbeat period (with --meta)")
	f.StringVar(&cfg.ListenAddr, "listen", "127.0.0.1:0", "address for peers and clients")
	f.IntVar(&listenFD, "listen-fd", 0, listenFDHelp)
	f.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "address other hosts reach this datanode at (host or host:port; default: --listen's; required when --listen is 0.0.0.0 or [::])")
	f.StringSliceVar(&cfg.DataDirs, "data-dir", nil, "volume directory (repeat or comma-separate for several)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "raft log directory")
	f.Var(&logInline, "log-inline-max-bytes", logInlineHelp)
	f.Var(&logSegment, "log-segment-size", "size of the raft log's segment files, preallocated (a small log volume needs smaller ones; at least 2MiB)")
	f.StringArrayVar(&pipelines, "pipeline", nil, "GROUP:ID=ADDR,ID=ADDR,ID=ADDR (repeatable)")
	f.StringVar(&cfg.ReadyFile, "ready-file", "", "write ADDR and PID here once serving")
	f.DurationVar(&cfg.TickInterval, "tick", pipeline.DefaultTickInterval, "raft tick")
	f.IntVar(&cfg.ElectionTicks, "election-ticks", pipeline.DefaultElectionTicks, "ticks without a leader before an election")
	f.Uint64Var(&cfg.RetainEntries, "retain-entries", pipeline.DefaultRetainEntries, "applied entries a pipeline keeps in its log for lagging followers")
	f.Uint64Var(&cfg.MaxRetainEntries, "max-retain-entries", pipeline.DefaultMaxRetainEntries, "the most applied entries a leader keeps for a follower that is down; one further behind is replaced by container copies")
	f.DurationVar(&cfg.DiskStallThreshold, "disk-stall-threshold", pipeline.DefaultDiskStallThreshold, "a write or fdatasync round of the storage taking longer fails the datanode (it exits, so that its pipelines are closed)")
	f.IntVar(&cfg.HeartbeatTicks, "heartbeat-ticks", pipeline.DefaultHeartbeatTicks, "ticks between leader heartbeats")
	f.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile here")
	f.StringVar(&cfg.BlockTokenKeyFile, "block-token-keys", "", "static pipelines with TLS: serve clients' chunk reads and writes only with a block token signed by a key of this JSON file ([{\"id\":N,\"secret\":BASE64}]); with --meta the keys come with the heartbeats")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:0", "HTTP address of Prometheus /metrics (empty: none)")
	f.IntVar(&cfg.MaxCopies, "max-copies", datanode.DefaultMaxCopies, "container copies (re-replication) received at once")
	f.IntVar(&cfg.MaxExports, "max-exports", bulk.DefaultMaxExports, "whole-container reads (re-replication sources) served at once")
	f.Var(&clientBudget, "client-payload-budget", "client chunk bytes held in memory until answered; a client write beyond it waits unread")
	f.Var(&raftBudget, "raft-payload-budget", "chunk bytes of peers' raft messages held in memory until appended; beyond it the peer's connection waits unread")
	f.Var(&memLimit, "memory-limit", "soft memory limit of the process (Go's GOMEMLIMIT; default, unless GOMEMLIMIT is set: the two payload budgets + 256MiB)")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", transport.DefaultIdleTimeout, "a data-path connection on which no frame begins for this long is closed")
	f.DurationVar(&cfg.ReadTimeout, "read-timeout", transport.DefaultReadTimeout, "a data-path connection whose frame stops arriving for this long is closed")
	f.Float64Var(&scrubRateMB, "scrub-rate", scrubRateMB, "scrubber: MB/s (10^6 bytes) of CLOSED containers' blocks re-verified in the background, all volumes together (0: no scrubber)")
	f.DurationVar(&cfg.ScrubInterval, "scrub-interval", datanode.DefaultScrubInterval, "scrubber: a CLOSED container is verified again at most this often")
	f.IntVar(&cfg.FailedVolumesTolerated, "failed-volumes-tolerated", datanode.DefaultFailedVolumesTolerated, "data directories that may fail (at start or while running: removed, unmounted, I/O errors) before the datanode stops; -1: any number while one works")
	f.DurationVar(&cfg.VolumeCheckInterval, "volume-check-interval", datanode.DefaultVolumeCheckInterval, "how often every data directory is probed (identity record, a synced write)")
	return cmd
}
