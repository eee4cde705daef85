package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
)

// `spindle admin damaged` (blocks the datanodes found damaged, the keys
// that lost data, the scrubbers' progress) and `spindle admin datanode
// decommission|maintenance|recommission`. No logic here beyond
// formatting.

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
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			st, err := mc.Damaged(cmd.Context())
			if err != nil {
				return keyExit(err, "", "")
			}
			if *asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
			}
			return printDamage(cmd.OutOrStdout(), st)
		},
	}
	return []*cobra.Command{damaged}
}

func printDamage(out io.Writer, st *metaapi.DamageStatus) error {
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
	return tw.Flush()
}
