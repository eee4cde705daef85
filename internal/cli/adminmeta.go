package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// promoteWaitPoll is how often admin meta add asks whether its learner
// has been promoted.
const promoteWaitPoll = 500 * time.Millisecond

// AdminMetaChangeCmds are spindle admin meta add|promote|remove|replace:
// the membership changes of a replicated meta service (raft learners,
// etcd's way: internal/meta/raftgroup/learners.go).
func AdminMetaChangeCmds(env Env) []*cobra.Command {
	add := metaChangeCmd(env, "add", "add ID=ADDR",
		"Add member ID at ADDR as a learner; the leader promotes it to a voter once it has caught up (start it with spindle meta --join)",
		`Adds member ID, serving at ADDR (host:port, its --listen), to the meta
service's raft group as a learner, through the leader: it receives a
snapshot of the store and the log, acknowledges appends, and has no vote.
The leader promotes it to a voter once it has caught up (and its vote
keeps a quorum of the voters up). Start the new member with
'spindle meta --id ID --join --peers ...' (its --peers naming at least the
current members and itself) on an empty --dir, before or after this
command. The command waits for the promotion (--wait, default 2m; 0: do
not wait). Add ADDR to every --meta list. One change at a time; adding a
member already there at ADDR succeeds. --voter adds it as a voter at once
(refused while that would leave fewer voters up than a quorum, unless
--force).`)
	promote := metaChangeCmd(env, "promote", "promote ID",
		"Promote learner ID to a voter now (it must have caught up, unless --force)",
		`Makes learner ID a voter, through the leader. The leader does this by
itself once a learner has caught up; this command is for a learner it
has not promoted (refused while it has not caught up or the change would
leave fewer voters up than a quorum, unless --force).`)
	remove := metaChangeCmd(env, "remove", "remove ID",
		"Remove member ID from the replicated meta service (a raft membership change; the group keeps serving)",
		`Removes member ID from the meta service's raft group, through the leader,
and returns once the leader applied the change. A leader that removes
itself steps down and another member is elected. Stop the removed member's
process afterwards, and drop its address from every --meta list. One
change at a time; removing a member that is not one succeeds. Refused,
unless --force, when it would leave fewer voters up than a quorum.`)
	replace := metaChangeCmd(env, "replace", "replace ID[=ADDR]",
		"Make voter ID a learner again (at ADDR when given): for a member whose disk is lost or replaced",
		`For a member whose --dir is lost, or that moves to a new host: makes
voter ID a learner (at ADDR when given), so that it has no vote until it
holds the group's log again. Start it with 'spindle meta --id ID --join'
on an empty --dir at ADDR; it catches up from a snapshot and the leader
promotes it (the command waits for that, --wait). A member that restarts
on an empty directory asks for this itself. The leader is not replaced
in place: it hands the leadership over and the command asks again.`)
	return []*cobra.Command{add, promote, remove, replace}
}

// metaChangeCmd is one membership change command.
func metaChangeCmd(env Env, op, use, short, long string) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: ExactArgs(1)}
	var force, voter bool
	var wait time.Duration
	cmd.Flags().BoolVar(&force, "force", false, "make the change even if it leaves fewer voters up than a quorum of the new voter set, or promotes a learner that has not caught up (refused otherwise)")
	if op == "add" {
		cmd.Flags().BoolVar(&voter, "voter", false, "add the member as a voter at once instead of a learner")
	}
	if op == "add" || op == "replace" {
		cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "wait this long for the leader to promote the learner (0: return once it is a learner)")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ch := metaapi.MemberChange{Op: op, Force: force, Voter: voter}
		idArg := args[0]
		if id, addr, ok := strings.Cut(idArg, "="); ok {
			if op != "add" && op != "replace" || addr == "" {
				return UsageErr(fmt.Errorf("%q: want %s", idArg, use))
			}
			idArg, ch.Addr = id, addr
		} else if op == "add" {
			return UsageErr(fmt.Errorf("%q: want ID=HOST:PORT", idArg))
		}
		id, err := strconv.ParseUint(idArg, 10, 64)
		if err != nil || id == 0 {
			return UsageErr(fmt.Errorf("member ID %q: want a number ≥ 1", idArg))
		}
		ch.ID = id
		mc, err := env.MetaClient()
		if err != nil {
			return err
		}
		st, err := mc.ChangeMembers(cmd.Context(), ch)
		if err != nil {
			return KeyExit(fmt.Errorf("admin meta %s %s: %w", op, args[0], err), "", "")
		}
		if (op == "add" && !voter || op == "replace") && wait > 0 {
			if st, err = waitPromoted(cmd, mc, id, wait); err != nil {
				return err
			}
		}
		out := cmd.OutOrStdout()
		if *env.JSON {
			return json.NewEncoder(out).Encode(st)
		}
		return Printf(out, "members: %s (leader %d, term %d)\n", memberList(st.Members), st.LeaderID, st.Term)
	}
	return cmd
}

// waitPromoted waits, at most d, until member id is a voter in the
// leader's member set, showing its progress on stderr.
func waitPromoted(cmd *cobra.Command, mc *metaapi.Client, id uint64, d time.Duration) (metaapi.MetaStatus, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), d)
	defer cancel()
	var last string
	for {
		st, err := leaderStatus(ctx, mc)
		if err == nil {
			learner, member := false, false
			for _, m := range st.Members {
				if m.ID == id {
					member, learner = true, m.Learner
				}
			}
			if !member {
				return st, Exit(ExitFailure, fmt.Errorf("member %d left the group while waiting for its promotion", id))
			}
			if !learner {
				return st, nil
			}
			if p := fmt.Sprintf("member %d: a learner, log to %d of %d; waiting for its promotion", id, st.Match[id], st.LastIndex); p != last {
				_, _ = fmt.Fprintln(cmd.ErrOrStderr(), p) // progress only
				last = p
			}
		}
		select {
		case <-ctx.Done():
			why := "the leader has not promoted it"
			if err != nil {
				why = err.Error()
			}
			return metaapi.MetaStatus{}, Exit(ExitUnavailable, fmt.Errorf("member %d is still a learner after %s (%s): is it started (spindle meta --join) and reachable? see spindle admin meta", id, d, why))
		case <-time.After(promoteWaitPoll):
		}
	}
}

// leaderStatus is the leader's status: the client's current member's,
// or the leader's it names.
func leaderStatus(ctx context.Context, mc *metaapi.Client) (metaapi.MetaStatus, error) {
	st, err := mc.MetaStatus(ctx)
	if err != nil || st.Role == "leader" {
		return st, err
	}
	if st.LeaderAddr == "" {
		return st, errors.New("no leader known")
	}
	lc, err := metaapi.NewClient(st.LeaderAddr, metaapi.ClientOptions{Attempts: 1, TLS: mc.TLS()})
	if err != nil {
		return st, err
	}
	return lc.MetaStatus(ctx)
}

// memberList formats members as ID=ADDR, a learner marked.
func memberList(ms []metaapi.MetaMember) string {
	var ids []string
	for _, m := range ms {
		s := fmt.Sprintf("%d=%s", m.ID, m.Addr)
		if m.Learner {
			s += "(learner)"
		}
		ids = append(ids, s)
	}
	return strings.Join(ids, ",")
}
