package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

func newBenchRereplicateCmd() *cobra.Command {
	var cfg scenario.RereplicateConfig
	size := units.ByteSize(2 * units.GiB)
	containerSize := units.ByteSize(0)
	cmd := &cobra.Command{
		Use:   "rereplicate",
		Short: "Re-replication of a lost datanode's closed containers, against the copy limit of this machine",
		Long: `The re-replication experiment: generates --size of keys offline (spindle gen: closed
containers with 3 replicas over --datanodes datanodes, and the meta store), starts
the embedded cluster on it and reads keys back, stops it, deletes one datanode's
data and log, restarts, and waits until every container has 3 healthy replicas
again — the meta service's replication manager copies each under-replicated
container from a surviving replica to another datanode by zero-copy streaming
(sendfile, no staging). Then reads keys back again.

Reports the re-replication rate (bytes copied over the time from the first copy
command delivered to a target to the last copy completed, as the meta service
saw them; MB = 10^6 bytes; the time from the first decision is in extra)
and, as the baseline, the copy limit measured in the same run on the same
directory: the slowest of disk read, disk write and loopback TCP sendfile, one
stream each (as fio and iperf3 measure by default), each repeated for 2 s with
the cluster stopped just before the restart, with the ratio. --profile-source
traces datanode 1 with strace during the copies and reports its data-moving
system calls by bytes (sendfile for what it sends).

--dir holds every datanode's and the meta service's directories (a new
subdirectory when it exists), removed at the end unless --keep. Mind the space:
3 × --size of replicas plus the copy-limit file (on /dev/shm: memory).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("rereplicate: finding the spindle binary for the datanodes: %w", err)
			}
			cfg.Binary = bin
			cfg.SizeBytes = size.Int64()
			cfg.ContainerSizeBytes = containerSize.Int64()
			cfg.Progress = bench.TerminalProgress()
			res, err := scenario.Rereplicate(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return printResult(cmd, res.Result, res)
		},
	}
	f := cmd.Flags()
	f.Var(&size, "size", "bytes of keys to generate (the replicas take 3 times as much)")
	f.StringVar(&cfg.Dir, "dir", "", "directory for every datanode and the meta service (default: a temporary directory)")
	f.IntVar(&cfg.Datanodes, "datanodes", scenario.DefaultRereplicateDatanodes, "datanodes (≥ 4; the last one loses its data)")
	f.Var(&containerSize, "container-size", "container size (default size/64 within [16MiB, 1GiB])")
	f.IntVar(&cfg.MaxCopies, "max-copies", 2, "copies a target datanode runs at once")
	f.IntVar(&cfg.MaxCopiesPerNode, "max-scheduled", 4, "copies the meta service schedules per source and per target (more than --max-copies: the next copy is queued on the target)")
	f.DurationVar(&cfg.Timeout, "timeout", scenario.DefaultRereplicateTimeout, "bound of the whole run")
	f.BoolVar(&cfg.Keep, "keep", false, "leave the cluster's directories in place")
	f.StringVar(&cfg.CPUProfileDir, "cpuprofile-dir", "", "each datanode of the restarted cluster writes a CPU profile dn<i>.pprof here, and the bench (meta service) bench.pprof from the restart to full replication")
	f.BoolVar(&cfg.TLS, "tls", false, "run the cluster with mutual TLS, as spindle server does by default (copies encrypted in user space instead of sendfile); default plaintext")
	f.BoolVar(&cfg.ProfileSource, "profile-source", false, "trace datanode 1 (a source) with strace during the copies and report its data-moving system calls by bytes (slows the copies)")
	return cmd
}
