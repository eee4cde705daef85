package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
)

// `spindle admin replication` and `spindle admin safemode`: the meta
// service's replication manager (metaapi.Client.Replication,
// ExitSafeMode). No logic here beyond formatting.

// newAdminReplicationCmds returns the replication and safemode commands
// of `admin`, sharing its --meta and --json flags.
func newAdminReplicationCmds(env *keyEnv, asJSON *bool) []*cobra.Command {
	var watch time.Duration
	repl := &cobra.Command{
		Use:   "replication",
		Short: "Re-replication: safe mode, under-replicated containers, bytes pending, copies in flight (source → target), copied, rate; EC shards missing, rebuilds",
		Args:  cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if watch < 0 {
				return cli.UsageErr(fmt.Errorf("--watch %s: want a positive interval", watch))
			}
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			show := func() error {
				st, err := mc.Replication(cmd.Context())
				if err != nil {
					return cli.KeyExit(err, "", "")
				}
				if *asJSON {
					return json.NewEncoder(out).Encode(st)
				}
				return errors.Join(printReplication(out, st, watch > 0), cli.PrintECStatus(cmd.Context(), mc, out))
			}
			if watch == 0 {
				return show()
			}
			return watchLoop(cmd.Context(), watch, show, cmd.ErrOrStderr())
		},
	}
	repl.Flags().DurationVar(&watch, "watch", 0, "print the status again every interval (e.g. 2s) until interrupted")

	status := func(cmd *cobra.Command, st *metaapi.ReplicationStatus, verb string) error {
		if *asJSON {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
		}
		_, err := fmt.Fprintln(cmd.OutOrStdout(), "safe mode: "+safeModeText(st)+verb)
		return err
	}
	safemode := &cobra.Command{
		Use:   "safemode status|exit",
		Short: "Safe mode after a start (no replication decisions until enough reports arrived): show it, or leave it now",
		Args:  cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.UsageErr(errors.New("want admin safemode status|exit"))
		},
	}
	safemode.AddCommand(
		&cobra.Command{
			Use: "status", Short: "Whether the meta service is in safe mode, and what it waits for", Args: cli.ExactArgs(0),
			RunE: func(cmd *cobra.Command, _ []string) error {
				mc, err := env.metaClient()
				if err != nil {
					return err
				}
				st, err := mc.Replication(cmd.Context())
				if err != nil {
					return cli.KeyExit(err, "", "")
				}
				return status(cmd, st, "")
			},
		},
		&cobra.Command{
			Use: "exit", Short: "Leave safe mode now, whatever the reports (replication decisions start)", Args: cli.ExactArgs(0),
			RunE: func(cmd *cobra.Command, _ []string) error {
				mc, err := env.metaClient()
				if err != nil {
					return err
				}
				st, err := mc.ExitSafeMode(cmd.Context())
				if err != nil {
					return cli.KeyExit(err, "", "")
				}
				return status(cmd, st, " (exited)")
			},
		},
	)
	return []*cobra.Command{repl, safemode}
}

// watchLoop calls show every interval until ctx ends (nil: interrupted
// is how a watch ends); a failed call is reported and the watch goes on.
func watchLoop(ctx context.Context, every time.Duration, show func() error, errOut io.Writer) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := show(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if _, werr := fmt.Fprintln(errOut, "spindle:", err); werr != nil {
				return errors.Join(err, werr) // no watch without its errors shown
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func safeModeText(st *metaapi.ReplicationStatus) string {
	if st.SafeMode {
		return "ON (" + st.SafeModeReason + ")"
	}
	return "off"
}

// printReplication prints the summary, then the copies in flight.
func printReplication(w io.Writer, st *metaapi.ReplicationStatus, stamped bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if stamped {
		fmt.Fprintf(tw, "at:\t%s\n", time.Now().Format(time.TimeOnly))
	}
	fmt.Fprintf(tw, "safe mode:\t%s\n", safeModeText(st))
	fmt.Fprintf(tw, "replication factor:\t%d\n", st.ReplicationFactor)
	fmt.Fprintf(tw, "under-replicated:\t%d containers (%d with no replica left; %d OPEN on a pipeline with a DEAD member)\n", st.UnderReplicated, st.Unrecoverable, st.UnderReplicatedOpen)
	fmt.Fprintf(tw, "min live replicas:\t%d (a pipeline with fewer HEALTHY members takes no writes)\n", st.MinLiveReplicas)
	fmt.Fprintf(tw, "at risk:\t%d containers with a replica on a STALE datanode (copied once it is DEAD)\n", st.AtRisk)
	fmt.Fprintf(tw, "pending:\t%s\n", units.FormatBytes(int64(st.PendingBytes)))
	fmt.Fprintf(tw, "over-replicated:\t%d containers; %d extra replicas being deleted, %d deleted\n", st.OverReplicated, st.Trimming, st.TrimmedReplicas)
	fmt.Fprintf(tw, "behind:\t%d replicas below their container's highest BCSID (not counted)\n", st.BehindReplicas)
	fmt.Fprintf(tw, "copied:\t%d containers, %s; %d copies failed\n", st.CopiedContainers, units.FormatBytes(int64(st.CopiedBytes)), st.FailedCopies)
	r := "-"
	if st.RateBytesPerS > 0 {
		r = fmt.Sprintf("%.1f MB/s (first copy scheduled %s, last completed %s)", st.RateBytesPerS/1e6, ago(st.FirstScheduled), ago(st.LastCompleted))
	}
	fmt.Fprintf(tw, "rate:\t%s\n", r)
	fmt.Fprintf(tw, "in flight:\t%d\n", len(st.Inflight))
	l := st.Limits
	minNodes := "min(3, registered)"
	if l.SafeModeMinNodes > 0 {
		minNodes = fmt.Sprint(l.SafeModeMinNodes)
	}
	fmt.Fprintf(tw, "limits:\t%d copies per source, %d per target, %d in all; retry a failed source after %s; a copy is lost after %s at least\n",
		l.MaxCopiesPerSource, l.MaxCopiesPerTarget, l.MaxInflightCopies,
		time.Duration(l.CopyRetryAfterMs)*time.Millisecond, time.Duration(l.CopyTimeoutMinMs)*time.Millisecond)
	fmt.Fprintf(tw, "safe mode ends at:\t%s datanodes heard and %g of the containers with a replica\n", minNodes, l.SafeModeContainerFraction)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Inflight) > 0 {
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "CONTAINER\tSOURCE → TARGET\tSIZE\tSTARTED\tATTEMPT")
		for _, t := range st.Inflight {
			fmt.Fprintf(tw, "%d\t%d → %d\t%s\t%s\t%d\n", t.Container, t.Source, t.Target, units.FormatBytes(int64(t.SizeBytes)), ago(t.Started), t.Attempt)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if stamped {
		_, err := fmt.Fprintln(w) // a blank line between two watches
		return err
	}
	return nil
}
