package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/units"
)

// adminMetaTimeout bounds the status request to one member.
const adminMetaTimeout = 3 * time.Second

// metaGroupView is what `spindle admin meta --json` prints: the leader
// (by its member ID; 0 when none is known) and each member as it
// describes itself (Error set when it did not answer).
type metaGroupView struct {
	LeaderID uint64           `json:"leader_id"`
	Term     uint64           `json:"term"`
	Members  []metaMemberView `json:"members"`
}

type metaMemberView struct {
	Addr string `json:"addr"`
	metaapi.MetaStatus
	// Lag is the entries the member has still to apply of what the
	// leader's log holds (0 without a leader's answer).
	Lag   uint64 `json:"lag"`
	Error string `json:"error,omitempty"`
}

func newAdminMetaCmd(env *keyEnv, asJSON *bool) *cobra.Command {
	cmd := &cobra.Command{
		Annotations: map[string]string{runsAlone: "true"},
		Use:         "meta [backup DIR | add ID=ADDR | promote ID | remove ID | replace ID]",
		Short:       "The meta service's members: leader, role, term, applied and commit index, last snapshot of each (asks every --meta address)",
		Args:        cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			addrs := metaapi.SplitAddrs(env.meta)
			if len(addrs) == 0 {
				return cli.UsageErr(errors.New("--meta: no address"))
			}
			v := metaGroupView{Members: make([]metaMemberView, len(addrs))}
			for i, a := range addrs {
				v.Members[i].Addr = a
				mc, err := env.metaClientAt(a, metaapi.ClientOptions{Attempts: 1, Timeout: adminMetaTimeout})
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), adminMetaTimeout)
				st, err := mc.MetaStatus(ctx)
				cancel()
				if err != nil {
					v.Members[i].Error = err.Error()
					continue
				}
				v.Members[i].MetaStatus = st
			}
			v.LeaderID, v.Term = metaLeader(v.Members)
			for _, m := range v.Members {
				if m.Error == "" && m.ID == v.LeaderID {
					for i := range v.Members {
						if v.Members[i].Error == "" && m.LastIndex > v.Members[i].AppliedIndex {
							v.Members[i].Lag = m.LastIndex - v.Members[i].AppliedIndex
						}
					}
				}
			}
			out := cmd.OutOrStdout()
			if *asJSON {
				return json.NewEncoder(out).Encode(v)
			}
			tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
			fmt.Fprintf(tw, "leader: %d (term %d)\n", v.LeaderID, v.Term)
			fmt.Fprintln(tw, "ADDR\tID\tROLE\tSERVING\tTERM\tAPPLIED\tCOMMIT\tLAST\tLAG\tSNAPSHOT\tTLS\tERROR")
			for _, m := range v.Members {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", m.Addr, m.ID, m.Role, m.Serving, m.Term, m.AppliedIndex, m.CommitIndex, m.LastIndex, m.Lag, m.SnapshotIndex, tlsLabel(m.TLS), m.Error)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(newAdminMetaBackupCmd(env))
	cmd.AddCommand(cli.AdminMetaChangeCmds(cli.Env{MetaClient: env.metaClient, JSON: asJSON})...)
	return cmd
}

// tlsLabel shows a member's TLS mode; plaintext is named as such.
func tlsLabel(mode string) string {
	if mode == tlsconf.ModeInsecure {
		return "INSECURE(plaintext)"
	}
	return mode
}

// metaLeader is the leader the members' answers agree on: a member that
// serves as leader in the highest term, else the leader named in the
// highest term (0 when none).
func metaLeader(ms []metaMemberView) (id, term uint64) {
	sorted := append([]metaMemberView(nil), ms...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Term > sorted[j].Term })
	for _, m := range sorted {
		if m.Error == "" && m.Role == "leader" && m.Serving {
			return m.ID, m.Term
		}
	}
	for _, m := range sorted {
		if m.Error == "" && m.LeaderID != 0 {
			return m.LeaderID, m.Term
		}
	}
	return 0, 0
}

// newAdminMetaBackupCmd is spindle admin meta backup DIR.
func newAdminMetaBackupCmd(env *keyEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "backup DIR",
		Short: "Copy a consistent snapshot of the meta store into the new directory DIR",
		Long: `Asks the meta service for a consistent snapshot of its store (a Pebble
checkpoint: every commit before it, none after it; the service keeps
serving) and writes it into DIR, which must not exist. DIR appears only once
the whole snapshot is written and fsynced. DIR is a meta store directory:
to restore, stop the meta service and start it with --dir DIR, or copy DIR
over its --dir (see docs/OPERATIONS.md, "Backup and restore").`,
		Args: cli.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if _, err := os.Lstat(dir); err == nil {
				return cli.UsageErr(fmt.Errorf("%s exists: a backup goes into a new directory", dir))
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			start := time.Now()
			body, err := mc.Backup(cmd.Context())
			if err != nil {
				return cli.KeyExit(err, "", "")
			}
			defer closeQuietly(body) // read to its end: UnpackBackup's error is the one
			files, n, err := meta.UnpackBackup(body, dir)
			if err != nil {
				return cli.KeyExit(fmt.Errorf("backup of the meta service at %s into %s: %w", mc.Addr(), dir, err), "", "")
			}
			return printf(cmd.OutOrStdout(), "%s\t%d files\t%s\tin %.2fs\tfrom meta %s\n", dir, files, units.FormatBytes(n), time.Since(start).Seconds(), mc.Addr())
		},
	}
}
