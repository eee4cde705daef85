package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
)

// `spindle admin damaged` (blocks the datanodes found damaged, the keys that
// lost data, the scrubbers' progress) and `spindle admin datanode decommission|
// maintenance|recommission|remove`. No logic here beyond formatting.

// newAdminOpsCmds returns the commands of `admin` for damage and datanode
// operations, sharing its --meta and --json flags.
func newAdminOpsCmds(env *keyEnv, asJSON *bool) []*cobra.Command {
	damaged := &cobra.Command{
		Use:   "damaged",
		Short: "Damaged data: keys that lost a block (damaged on every replica), blocks being repaired, each datanode's scrubber",
		Long: `Lists what the datanodes report damaged (found by their scrubbers or by reads):
the keys holding a block damaged on every replica (their reads fail, exit
status 5; delete or rewrite them), the blocks damaged on some replicas only
(repaired from a good one, or their replica replaced), and each datanode's
scrubber progress. Exit status 0 whatever it finds.`,
		Args: cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			st, err := mc.Damaged(cmd.Context())
			if err != nil {
				return cli.KeyExit(err, "", "")
			}
			if *asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
			}
			return printDamage(cmd.OutOrStdout(), st)
		},
	}
	return []*cobra.Command{damaged, newAdminDatanodeCmd(env, asJSON)}
}

func printDamage(w io.Writer, st *metaapi.DamageStatus) error {
	out := bufio.NewWriter(w) // its Flush, returned, has the first write error
	fmt.Fprintf(out, "lost blocks (damaged on every replica): %d; keys holding them: %d", len(st.Lost), len(st.Keys))
	if st.KeysTruncated {
		fmt.Fprintf(out, " (first %d)", len(st.Keys))
	}
	fmt.Fprintln(out)
	for _, k := range st.Keys {
		var blocks []string
		for _, b := range k.Blocks {
			blocks = append(blocks, fmt.Sprintf("%d/%d", b.Container, b.Local))
		}
		fmt.Fprintf(out, "  %s/%s\tblocks %v\n", k.Bucket, k.Key, blocks)
	}
	fmt.Fprintf(out, "repairable damaged blocks (a good replica exists): %d; repairs in flight: %d; blocks repaired: %d; repairs failed: %d\n",
		len(st.Repairable), st.Repairs, st.RepairedBlocks, st.FailedRepairs)
	for _, b := range st.Repairable {
		fmt.Fprintf(out, "  container %d block %d on node %v\n", b.Container, b.Local, b.Nodes)
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSCRUB RATE\tPASSES\tSCANNED\tBLOCKS\tDAMAGE FOUND\tREPAIRED\tNOW\tLAST PASS")
	for _, n := range st.Scrub {
		rate, cur, last := "off", "-", "-"
		if n.RateBytesPerS > 0 {
			rate = units.FormatBytes(int64(n.RateBytesPerS)) + "/s"
		}
		if n.Container != 0 {
			cur = fmt.Sprintf("container %d", n.Container)
		}
		if !n.LastPassEnded.IsZero() {
			last = ago(n.LastPassEnded)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", n.NodeID, rate, n.Passes, units.FormatBytes(int64(n.ScannedBytes)),
			n.ScannedBlocks, n.DamageFound, n.RepairedBlocks, cur, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return out.Flush()
}

// nodeState is a node's operational state for `admin nodes`: the state,
// a decommission's progress, a maintenance's end, failed volumes.
func nodeState(n metaapi.NodeInfo) string {
	st := n.OpState
	if st == "" {
		st = metaapi.NodeInService
	}
	if d := n.Decommission; d != nil && n.OpState == metaapi.NodeDecommissioning {
		st += fmt.Sprintf(" %d/%d", d.Replicated, d.Containers)
		if len(d.Waiting) > 0 {
			st += fmt.Sprintf(" (waiting for containers %v)", d.Waiting)
		}
	}
	if !n.MaintenanceUntil.IsZero() {
		st += " until " + n.MaintenanceUntil.Local().Format("2006-01-02 15:04:05")
	}
	if len(n.FailedVolumes) > 0 {
		st += fmt.Sprintf(", %d failed volume(s)", len(n.FailedVolumes))
	}
	if len(n.ReadOnlyVolumes) > 0 {
		st += fmt.Sprintf(", %d volume(s) READ-ONLY (full at start)", len(n.ReadOnlyVolumes))
	}
	return st
}

// newAdminDatanodeCmd is `admin datanode decommission|maintenance|recommission|remove ID`.
func newAdminDatanodeCmd(env *keyEnv, asJSON *bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "datanode decommission|maintenance|recommission|remove ID",
		Short: "Take a datanode out of service (decommission: its replicas copied elsewhere; maintenance: restart it without copies) or back, or remove it for good",
		Args:  cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.UsageErr(errors.New("want admin datanode decommission|maintenance|recommission|remove ID"))
		},
	}
	var wait bool
	var every time.Duration
	var forD time.Duration
	run := func(op string) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return cli.UsageErr(fmt.Errorf("datanode ID %q: want a node ID (spindle admin nodes)", args[0]))
			}
			if op == metaapi.OpMaintenance && (forD <= 0 || forD > metaapi.MaxMaintenance) {
				return cli.UsageErr(fmt.Errorf("--for %s: want a duration in (0, %s]", forD, metaapi.MaxMaintenance))
			}
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			ni, err := mc.NodeOp(cmd.Context(), id, op, forD)
			if err != nil {
				return cli.KeyExit(err, "", "")
			}
			out := cmd.OutOrStdout()
			show := func(ni *metaapi.NodeInfo) error {
				if *asJSON {
					return json.NewEncoder(out).Encode(ni)
				}
				_, err := fmt.Fprintf(out, "datanode %d (%s): %s\n", ni.NodeID, ni.Addr, nodeState(*ni))
				return err
			}
			if err := show(ni); err != nil || !wait || op != metaapi.OpDecommission {
				return err
			}
			for ni.OpState == metaapi.NodeDecommissioning {
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(every):
				}
				ns, err := mc.Nodes(cmd.Context())
				if err != nil {
					return cli.KeyExit(err, "", "")
				}
				for i := range ns {
					if ns[i].NodeID == id {
						ni = &ns[i]
					}
				}
				if err := show(ni); err != nil {
					return err
				}
			}
			return nil
		}
	}
	decom := &cobra.Command{
		Use:   "decommission ID",
		Short: "Copy every replica the datanode holds to other datanodes, then mark it DECOMMISSIONED (it can then be stopped)",
		Args:  cli.ExactArgs(1),
		RunE:  run(metaapi.OpDecommission),
	}
	decom.Flags().BoolVar(&wait, "wait", false, "wait until DECOMMISSIONED, printing the progress (containers with their replicas elsewhere / held)")
	decom.Flags().DurationVar(&every, "every", 2*time.Second, "with --wait: progress interval")
	maint := &cobra.Command{
		Use:   "maintenance ID --for DURATION",
		Short: "Let the datanode be down (restarted, upgraded) for DURATION without its replicas being copied; no new pipelines on it meanwhile",
		Args:  cli.ExactArgs(1),
		RunE:  run(metaapi.OpMaintenance),
	}
	maint.Flags().DurationVar(&forD, "for", 0, "how long (e.g. 1h); at the end the datanode is IN_SERVICE again")
	recom := &cobra.Command{
		Use:   "recommission ID",
		Short: "Undo decommission or maintenance: the datanode is IN_SERVICE again",
		Args:  cli.ExactArgs(1),
		RunE:  run(metaapi.OpRecommission),
	}
	cmd.AddCommand(decom, maint, recom, newAdminDatanodeRemoveCmd(env, asJSON))
	return cmd
}

// newAdminDatanodeRemoveCmd is `admin datanode remove ID`.
func newAdminDatanodeRemoveCmd(env *keyEnv, asJSON *bool) *cobra.Command {
	return &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a DECOMMISSIONED datanode, or a DEAD one whose containers are copied elsewhere, for good: it leaves every listing and metric",
		Long: `Removes the datanode for good: it leaves 'spindle admin nodes', the
pipelines' member lists and the metrics; its node ID is never given again,
and the meta service refuses its heartbeats (to use the host again, wipe
the datanode's directories: it joins as a new datanode with a new ID).

Allowed for a DECOMMISSIONED datanode (stop it first), or a DEAD one whose
containers all have their replication factor of replicas elsewhere.
Refused (exit status 1, naming what is in the way) while the datanode is
alive and not DECOMMISSIONED, IN_MAINTENANCE, a member of an OPEN pipeline
or of one still closing, or may hold the last healthy replica of a
container.`,
		Args: cli.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return cli.UsageErr(fmt.Errorf("datanode ID %q: want a node ID (spindle admin nodes)", args[0]))
			}
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			nr, err := mc.RemoveNode(cmd.Context(), id)
			if errors.Is(err, metaapi.ErrPrecondition) {
				return cli.Exit(cli.ExitFailure, err)
			}
			if err != nil {
				return cli.KeyExit(err, "", "")
			}
			out := cmd.OutOrStdout()
			if *asJSON {
				return json.NewEncoder(out).Encode(nr)
			}
			if nr.AlreadyRemoved {
				_, err = fmt.Fprintf(out, "datanode %d (%s) was removed already, at %s\n", nr.NodeID, nr.Addr, nr.RemovedAt.Local().Format("2006-01-02 15:04:05"))
				return err
			}
			_, err = fmt.Fprintf(out, "datanode %d (%s, %s %s) removed; past member of CLOSED pipelines %v\n", nr.NodeID, nr.Addr, nr.Health, nr.OpState, nr.Pipelines)
			return err
		},
	}
}
