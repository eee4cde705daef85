package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/console"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/units"
)

func newMetaCmd() *cobra.Command {
	var cfg meta.Config
	containerSize := units.ByteSize(metaapi.DefaultContainerSizeBytes)
	var checkReplication func() error
	var peers string
	var tf tlsFlags
	var joinCADir, adminTokenFile string
	var listenFD int
	var con console.MetaOptions
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Run the meta service: datanode registry, pipelines, containers, buckets and keys",
		Long: `Runs the meta service: the cluster manager (datanode registration and health, pipelines
of 3 datanodes, container allocation and closing, block deletion on datanodes) and the namespace
(buckets, keys → block lists), in a Pebble store under --dir, served as JSON over HTTP on --listen,
with Prometheus metrics on /metrics. Datanodes join with 'spindle datanode --meta ADDR'. Once
serving it writes "ADDR\nPID\n" to --ready-file. SIGTERM or SIGINT stops it cleanly. With
--console-listen it serves the web console too (docs/OPERATIONS.md §11).

With --peers 1=ADDR,2=ADDR,3=ADDR it is member --id of a replicated meta service (a raft group;
ADDR is each member's --listen, which defaults to its own entry): the leader serves, the others
answer with its address; clients, datanodes and the CLI take every ADDR in --meta, comma-separated.
Start every member with an empty --dir the first time.

Each member checkpoints its store every --snapshot-entries applied entries and keeps
--log-retain-entries of its raft log behind the checkpoint; a member further behind receives a
checkpoint. A member added to a running group ('spindle admin meta add ID=ADDR') starts with
--join on an empty --dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if containerSize <= 0 {
				return cli.UsageErr(fmt.Errorf("--container-size %s: want a positive size", containerSize))
			}
			if err := checkReplication(); err != nil {
				return err
			}
			cfg.ContainerSizeBytes = uint64(containerSize)
			if peers != "" {
				m, err := parsePeers(peers)
				if err != nil {
					return cli.UsageErr(err)
				}
				if _, ok := m[cfg.ID]; !ok {
					return cli.UsageErr(fmt.Errorf("--id %d: want one of the IDs of --peers", cfg.ID))
				}
				cfg.Peers = m
				if !cmd.Flags().Changed("listen") {
					cfg.Listen = m[cfg.ID]
				}
				if cfg.RestoreAsNewGroup && (cfg.Join || len(m) != 1) {
					return cli.UsageErr(errors.New("--restore starts a new group of one: --peers names this member only, without --join"))
				}
			} else if cfg.Join {
				return cli.UsageErr(errors.New("--join needs --peers: the members to join"))
			} else if cfg.RestoreAsNewGroup {
				return cli.UsageErr(errors.New("--restore needs --peers ID=ADDR (this member): a single meta service opens a restored backup as it is"))
			} else if cfg.ID > 1 {
				return cli.UsageErr(errors.New("--id without --peers: a single meta service is member 1"))
			}
			sec, err := tf.server("meta")
			if err != nil {
				return err
			}
			cfg.TLS = sec
			if adminTokenFile != "" {
				if sec.Enabled() {
					return cli.UsageErr(errors.New("--admin-token-file is for --insecure: with TLS the admin credential is an admin certificate"))
				}
				if cfg.AdminToken, err = readAdminToken(adminTokenFile); err != nil {
					return err
				}
			}
			if joinCADir != "" {
				if !sec.Enabled() {
					return cli.UsageErr(errors.New("--join-ca-dir with --insecure: joins hand out certificates, there are none without TLS"))
				}
				if cfg.JoinCA, err = tlsconf.LoadCA(joinCADir); err != nil {
					return cli.UsageErr(fmt.Errorf("--join-ca-dir: %w", err))
				}
			}
			if cfg.Listener, err = inheritedListener(listenFD); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return console.WithMeta(ctx, &con, cfg, meta.Run)
		},
	}
	f := cmd.Flags()
	tf.add(f)
	f.StringVar(&adminTokenFile, "admin-token-file", "", adminTokenHelp)
	f.StringVar(&joinCADir, "join-ca-dir", "", "the cluster CA's directory (ca.crt and ca.key, spindle cert init): datanodes may then join with a one-time token (spindle admin join-token) and get a certificate signed by it")
	f.DurationVar(&cfg.CertValidity, "cert-validity", tlsconf.DefaultCertValidity, certValidityHelp)
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:9860", "HTTP address of the meta service")
	f.IntVar(&listenFD, "listen-fd", 0, listenFDHelp)
	f.StringVar(&cfg.Dir, "dir", "", "directory of the meta service's store (required)")
	f.StringVar(&cfg.KEKFile, "kek-file", "", "keyring file of the key encryption key sealing the stored S3 secrets (0600, created if absent; default meta-kek.json beside --dir; env SPINDLE_KEK holds the keys instead; every member the same)")
	f.StringVar(&cfg.ReadyFile, "ready-file", "", "write ADDR and PID here once serving")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", metaapi.DefaultHeartbeatInterval, "datanode heartbeat interval (the cluster manager's tick)")
	f.DurationVar(&cfg.StaleAfter, "stale-after", metaapi.DefaultStaleAfter, "a datanode silent this long is STALE (no new blocks on it)")
	f.DurationVar(&cfg.DeadAfter, "dead-after", metaapi.DefaultDeadAfter, "a datanode silent this long is DEAD (its pipelines are closed)")
	f.IntVar(&cfg.PipelinesPerNode, "pipelines-per-node", metaapi.DefaultPipelinesPerNode, "open pipelines a datanode is a member of, at most")
	f.Var(&containerSize, "container-size", "a container is closed once this full")
	f.IntVar(&cfg.ContainersPerPipeline, "containers-per-pipeline", meta.DefaultContainersPerPipeline, "open containers per open pipeline")
	f.DurationVar(&cfg.AllocationGrace, "allocation-grace", meta.DefaultAllocationGrace, "blocks allocated and not committed for this long are deleted (interrupted puts)")
	f.DurationVar(&cfg.LeaveTimeout, "leave-timeout", meta.DefaultLeaveTimeout, "a closed pipeline's members leave it once its containers are closed, or after this long")
	f.Uint64Var(&cfg.ID, "id", 0, "this member's ID in --peers")
	f.StringVar(&peers, "peers", "", "the members of a replicated meta service: ID=HOST:PORT,… (each member's --listen)")
	f.BoolVar(&cfg.Join, "join", false, "join a running group as a member added by 'spindle admin meta add' (empty --dir; no bootstrap)")
	f.BoolVar(&cfg.RestoreAsNewGroup, "restore", false, "--dir holds a restored backup (spindle admin meta backup): start a new group of this member alone from it (--peers ID=ADDR of this member only); grow it with 'spindle admin meta add'")
	f.IntVar(&cfg.SnapshotEntries, "snapshot-entries", meta.DefaultSnapshotEntries, "checkpoint the store every this many applied raft entries")
	f.IntVar(&cfg.LogRetainEntries, "log-retain-entries", meta.DefaultLogRetainEntries, "raft log entries kept behind the latest checkpoint, for followers a little behind (negative: none)")
	checkReplication = addReplicationFlags(f, &cfg)
	console.AddMetaFlags(f, &con)
	return cmd
}

// parsePeers parses --peers: ID=HOST:PORT,… with distinct IDs ≥ 1.
func parsePeers(list string) (map[uint64]string, error) {
	m := map[uint64]string{}
	for _, part := range strings.Split(list, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil || n == 0 || addr == "" {
			return nil, fmt.Errorf("--peers: %q: want ID=HOST:PORT with ID ≥ 1", part)
		}
		if _, dup := m[n]; dup {
			return nil, fmt.Errorf("--peers: member %d twice", n)
		}
		m[n] = addr
	}
	return m, nil
}
