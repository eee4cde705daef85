package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/chaos"
	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchChaosCmd() *cobra.Command {
	var cfg chaos.Config
	var faults string
	var maxBytes units.ByteSize
	volumeBytes := units.ByteSize(chaos.DefaultVolumeBytes)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "A real cluster under kill -9, pauses, meta crashes and bit rot; every byte and the history checked",
		Long: `Starts --meta-replicas meta members (default 3, a raft group) and --datanodes
datanodes, each a process in its own process group, every connection mutual
TLS (--insecure: plaintext), under --dir (default a new directory in $TMPDIR,
on its disk; removed at the end unless --keep), runs --writers and --readers
through the key client for --duration while a nemesis injects --faults on a
schedule drawn from --seed, one at a time (the old form, one member in
plaintext in memory: --meta-replicas 1 --insecure --dir /dev/shm):

  kill       kill -9 of one datanode, restarted on its directories later
  kill2      kill -9 of two datanodes at once (a majority of some pipeline),
             both restarted later; not in the default --faults
  pause      SIGSTOP of one datanode, SIGCONT later
  meta-kill  kill -9 of the meta leader, restarted on its directory later
  bitrot     one byte flipped on disk in a committed block of one replica
  partition  (root) one datanode cut from the other datanodes, its packets
             to them dropped silently; each datanode then runs in a network
             namespace of its own on a bridge the bench makes
  full       (root) one datanode's data volume filled to ENOSPC, freed
             later; each datanode's data directory is then a tmpfs of
             --volume-size of its own, mounted by the bench, and the values
             put stay within half of the volumes
  delay      (root) what one datanode sends delayed 20-200 ms (± a quarter)
             and up to 5 % of it lost (tc netem, or where the kernel has
             none a relay in the bench through a TUN device); namespaces as
             for partition

Then it heals everything, waits (bounded) for full replication, reads every
key back and checks that every acknowledged put reads back byte for byte,
that no failed put is visible in part, that no read returned wrong bytes,
and that the history of puts, gets and deletes of the hot keys is
linearizable (porcupine). It reports per fault kind, and exits 1 on any
violation, printing the seed to replay. See docs/CHAOS.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs, err := chaos.ParseFaults(faults)
			if err != nil {
				return cli.UsageErr(err)
			}
			cfg.Faults = fs
			cfg.MaxBytes = int64(maxBytes)
			cfg.VolumeBytes = int64(volumeBytes)
			if !cmd.Flags().Changed("hot-keys") {
				cfg.HotKeys = 0 // chaos.Config's default: scaled with --duration
			} else if cfg.HotKeys == 0 {
				cfg.HotKeys = -1 // none (0 is the default in chaos.Config)
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return fmt.Errorf("finding the spindle binary: %w", err)
			}
			cfg.Progress = cmd.ErrOrStderr()
			rep, err := chaos.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			asJSON, err := cmd.Flags().GetBool(jsonFlag)
			if err == nil && asJSON {
				err = bench.WriteJSON(cmd.OutOrStdout(), rep)
			} else if err == nil {
				err = rep.WriteTable(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if rep.Failed() {
				return fmt.Errorf("bench chaos: violations found (%d lost, %d unreadable, %d partial puts, %d wrong reads, history %s): replay with --seed %d",
					rep.Lost, rep.Unreadable, rep.PartialPuts, rep.WrongReads, rep.Linearizable, rep.Seed)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "parent of the run's directory (default $TMPDIR: a disk, unless it is a tmpfs)")
	f.IntVar(&cfg.MetaReplicas, "meta-replicas", chaos.DefaultMetaReplicas, "meta members, each a process: 1, 3 or 5 (meta-kill kills the leader)")
	f.BoolVar(&cfg.Insecure, "insecure", false, "plaintext connections (default: mutual TLS, with certificates the run makes)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the run's directory (data and logs)")
	f.IntVar(&cfg.Datanodes, "datanodes", chaos.DefaultDatanodes, "datanode processes")
	f.IntVar(&cfg.Writers, "writers", chaos.DefaultWriters, "concurrent writers")
	f.IntVar(&cfg.Readers, "readers", chaos.DefaultReaders, "concurrent readers")
	f.IntVar(&cfg.HotKeys, "hot-keys", chaos.DefaultHotKeys, fmt.Sprintf("keys whose history of puts, gets and deletes is checked for linearizability (0: none; default %d, and %d per minute of --duration for longer runs, at most %d)", chaos.DefaultHotKeys, chaos.HotKeysPerMinute, chaos.MaxHotKeys))
	f.DurationVar(&cfg.Duration, "duration", chaos.DefaultDuration, "time of the workload under faults")
	f.Int64Var(&cfg.Seed, "seed", 0, "seed of the schedule, sizes and values (0: from the clock, printed)")
	f.StringVar(&faults, "faults", strings.Join(chaos.DefaultFaults, ","), "fault kinds, comma-separated: kill, kill2, pause, meta-kill, bitrot, partition, full, delay (these three as root)")
	f.DurationVar(&cfg.SettleTimeout, "settle-timeout", chaos.DefaultSettleTimeout, "bound of the wait for full replication after the heal")
	f.IntVar(&cfg.MaxOps, "max-ops", 0, fmt.Sprintf("bound of the operations of the run (0: %d, or %d per second of --duration when more)", chaos.DefaultMaxOps, chaos.MaxOpsPerSecond))
	f.Var(&volumeBytes, "volume-size", "with --faults full: the tmpfs the bench mounts for each datanode's data directory (root)")
	f.Var(&maxBytes, "max-bytes", "bound of the bytes of values put, before replication; past it, acknowledged keys are read back and deleted to make room (default: a quarter of the free space of --dir's filesystem ÷ 3)")
	return cmd
}
