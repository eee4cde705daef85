package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/units"
)

// ECNotes describes each erasure-coded container for `spindle admin
// containers`: its policy, its shards present of all, the datanode of
// each, its generation once compacted, its deleted bytes not yet
// compacted away, those missing or moving and the rebuilds in flight. Empty when
// the meta service does not answer GET /v1/ec/status (an older one):
// the view is then as it was.
func ECNotes(ctx context.Context, mc ecapi.Doer) map[uint64]string {
	st, err := ecapi.GetStatus(ctx, mc)
	if err != nil {
		return map[uint64]string{}
	}
	rebuilding := map[uint64][]string{}
	for _, t := range st.Repairs {
		rebuilding[t.Container] = append(rebuilding[t.Container], fmt.Sprintf("%d:%d→%d", t.Index, t.From, t.Node))
	}
	out := map[uint64]string{}
	for _, c := range st.Containers {
		nodes := make([]string, len(c.Nodes))
		for i, n := range c.Nodes {
			nodes[i] = fmt.Sprint(n)
		}
		s := fmt.Sprintf(" EC %s %d/%d shards on %s", c.Policy, len(c.Nodes)-len(c.Missing), len(c.Nodes), strings.Join(nodes, ","))
		if c.Generation > 0 {
			s += fmt.Sprintf(" generation %d", c.Generation)
		}
		if c.DeadBytes > 0 {
			s += fmt.Sprintf(" %s deleted", units.FormatBytes(int64(c.DeadBytes)))
		}
		if len(c.Missing) > 0 {
			s += fmt.Sprintf(" MISSING shards %v", c.Missing)
		}
		if len(c.Moving) > 0 {
			s += fmt.Sprintf(" moving shards %v", c.Moving)
		}
		if r := rebuilding[c.Container]; len(r) > 0 {
			s += " rebuilding " + strings.Join(r, " ")
		}
		out[c.Container] = s
	}
	return out
}

// PrintECStatus prints the state of erasure coding for `spindle admin
// replication`: EC containers, shards missing and moving, conversions,
// compactions and shard rebuilds in flight (a table), done and failed,
// the shard bytes compactions freed and the deleted bytes they have not. Nothing when the
// meta service does not answer GET /v1/ec/status (an older one).
func PrintECStatus(ctx context.Context, mc ecapi.Doer, w io.Writer) error {
	st, err := ecapi.GetStatus(ctx, mc)
	if err != nil {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "erasure-coded:\t%d containers, %d shards: %d missing, %d moving (decommission); %d degraded, %d unrecoverable (fewer than k shards)\n",
		st.Coded, st.Shards, st.ShardsMissing, st.ShardsMoving, st.Degraded, st.Unrecoverable)
	fmt.Fprintf(tw, "EC work:\t%d conversions, %d shard rebuilds in flight; %d shards rebuilt (%s), %d rebuilds failed\n",
		len(st.Conversions), len(st.Repairs), st.RepairsDone, units.FormatBytes(int64(st.RepairedBytes)), st.RepairsFailed)
	fmt.Fprintf(tw, "EC compaction:\t%d in flight; %d done (%s of shards freed), %d failed; %s of deleted blocks not yet compacted away\n",
		len(st.Compactions), st.CompactionsDone, units.FormatBytes(int64(st.ReclaimedBytes)), st.CompactionsFailed, units.FormatBytes(int64(st.DeadBytes)))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Conversions)+len(st.Repairs)+len(st.Compactions) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tEC WORK\tSHARD\tFROM → DATANODE\tSTARTED")
	for _, t := range append(append(st.Conversions, st.Compactions...), st.Repairs...) {
		shard, from := "all", "-"
		if t.Index >= 0 {
			shard, from = fmt.Sprint(t.Index), fmt.Sprint(t.From)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s → %d\t%s ago\n", t.Container, t.Why, shard, from, t.Node, time.Since(time.UnixMilli(t.Started)).Round(100*time.Millisecond))
	}
	return tw.Flush()
}

// ECNodeSpace writes (to the view's tabwriter, flushed by the caller) the cluster's raw and logical bytes for `spindle
// admin nodes` (a line: replicas as the datanodes report them, EC shards,
// the logical bytes they hold — each replicated container once, each EC
// container's logical bytes — and raw/logical), and returns each
// datanode's EC shards as a suffix of its USED column (" + 3 shards
// 1.2 MiB"). Nothing when the meta service does not answer GET
// /v1/ec/status (an older one).
func ECNodeSpace(ctx context.Context, mc ecapi.Doer, w *tabwriter.Writer) map[uint64]string {
	out := map[uint64]string{}
	st, err := ecapi.GetStatus(ctx, mc)
	if err != nil {
		return out
	}
	ratio := "-"
	if st.LogicalBytes > 0 {
		ratio = fmt.Sprintf("%.2f×", float64(st.ReplicaBytes+st.ShardBytes)/float64(st.LogicalBytes))
	}
	fmt.Fprintf(w, "raw: %s (replicas %s, EC shards %s); logical: %s (EC %s); raw/logical %s\n",
		units.FormatBytes(int64(st.ReplicaBytes+st.ShardBytes)), units.FormatBytes(int64(st.ReplicaBytes)), units.FormatBytes(int64(st.ShardBytes)),
		units.FormatBytes(int64(st.LogicalBytes)), units.FormatBytes(int64(st.ECLogicalBytes)), ratio)
	for _, n := range st.Nodes {
		if n.Shards > 0 {
			out[n.Node] = fmt.Sprintf(" + %d shards %s", n.Shards, units.FormatBytes(int64(n.ShardBytes)))
		}
	}
	return out
}

// ECOrReplicas is the REPLICAS column of `spindle admin containers`: an
// erasure-coded container's note (ECNotes: it has shards, not replicas,
// and is not under-replicated for lack of them), else its replicas.
func ECOrReplicas(ecNote, replicas string) string {
	if ecNote != "" {
		return strings.TrimSpace(ecNote)
	}
	return replicas
}
