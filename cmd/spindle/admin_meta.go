package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
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
		Use:         "meta [backup DIR | add ID=ADDR | remove ID]",
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
	cmd.AddCommand(newAdminMetaBackupCmd(env), newAdminMetaChangeCmd(env, asJSON, true), newAdminMetaChangeCmd(env, asJSON, false))
	return cmd
}

// tlsLabel shows a member's TLS mode; plaintext is named as such.
func tlsLabel(mode string) string {
	if mode == tlsconf.ModeInsecure {
		return "INSECURE(plaintext)"
	}
	return mode
}

// newAdminMetaChangeCmd is spindle admin meta add ID=ADDR (add) or
// spindle admin meta remove ID.
func newAdminMetaChangeCmd(env *keyEnv, asJSON *bool, add bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove member ID from the replicated meta service (a raft membership change; the group keeps serving)",
		Long: `Removes member ID from the meta service's raft group, through the leader,
and returns once the leader applied the change. A leader that removes
itself steps down and another member is elected. Stop the removed member's
process afterwards, and drop its address from every --meta list. One
change at a time; removing a member that is not one succeeds.`,
		Args: cli.ExactArgs(1),
	}
	if add {
		cmd.Use = "add ID=ADDR"
		cmd.Short = "Add member ID at ADDR to the replicated meta service (start it with spindle meta --join)"
		cmd.Long = `Adds member ID, serving at ADDR (host:port, its --listen), to the meta
service's raft group, through the leader, and returns once the leader
applied the change. Start the new member with
'spindle meta --id ID --join --peers ...' (its --peers naming at least
the current members and itself) on an empty --dir, before or after this
command: it receives a snapshot of the store, catches up from the log, and
votes from then on. Add ADDR to every --meta list. One change at a time;
adding a member already there at ADDR succeeds. A member whose --dir was
lost rejoins this way under a new ID (after remove of the old one).`
	}
	var force bool
	cmd.Flags().BoolVar(&force, "force", false, "make the change even if it leaves fewer members up than a quorum of the new member set (refused otherwise)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ch := metaapi.MemberChange{Op: "remove", Force: force}
		idArg := args[0]
		if add {
			ch.Op = "add"
			id, addr, ok := strings.Cut(args[0], "=")
			if !ok || addr == "" {
				return cli.UsageErr(fmt.Errorf("%q: want ID=HOST:PORT", args[0]))
			}
			idArg, ch.Addr = id, addr
		}
		id, err := strconv.ParseUint(idArg, 10, 64)
		if err != nil || id == 0 {
			return cli.UsageErr(fmt.Errorf("member ID %q: want a number ≥ 1", idArg))
		}
		ch.ID = id
		mc, err := env.metaClient()
		if err != nil {
			return err
		}
		st, err := mc.ChangeMembers(cmd.Context(), ch)
		if err != nil {
			return cli.KeyExit(fmt.Errorf("admin meta %s %s: %w", ch.Op, args[0], err), "", "")
		}
		out := cmd.OutOrStdout()
		if *asJSON {
			return json.NewEncoder(out).Encode(st)
		}
		var ids []string
		for _, m := range st.Members {
			ids = append(ids, fmt.Sprintf("%d=%s", m.ID, m.Addr))
		}
		return printf(out, "members: %s (leader %d, term %d)\n", strings.Join(ids, ","), st.LeaderID, st.Term)
	}
	return cmd
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
