package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
)

// AdminLifecycleCmd is spindle admin lifecycle status: the S3 lifecycle
// runner's account (package meta/lcmeta).
func AdminLifecycleCmd(env Env) *cobra.Command {
	asJSON := env.JSON
	cmd := &cobra.Command{
		Use:   "lifecycle status",
		Short: "S3 bucket lifecycle: the meta leader's runs (last run, objects expired, delete markers removed, uploads aborted, bytes freed)",
		Args:  ExactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			return UsageErr(fmt.Errorf("want admin lifecycle status"))
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "The run under way and the last one completed, in total and per bucket",
		Long: `Shows the S3 lifecycle runner's account, kept in the meta store (so a new
meta leader resumes a run where the last one stopped): whether a run is under
way and how far (bucket, key), what it did so far, and the last completed
run's start, end and counts per bucket: current versions expired (deleted, or
hidden behind a delete marker in a versioned bucket), noncurrent versions
removed, expired object delete markers removed, incomplete multipart uploads
aborted, and the bytes of the versions removed (their blocks are deleted on
the datanodes by the block deletion that follows).`,
		Args: ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				st, err := lifecycle.GetStatus(ctx, mc)
				if err != nil {
					return KeyExit(err, "", "")
				}
				if *asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
				}
				return printLifecycle(cmd.OutOrStdout(), st)
			})
		},
	})
	return cmd
}

func lcCounts(c lifecycle.Counts) string {
	return fmt.Sprintf("expired %d, noncurrent removed %d, delete markers removed %d, uploads aborted %d, freed %s, kept by object lock %d",
		c.Expired, c.Noncurrent, c.MarkersRemoved, c.UploadsAborted, units.FormatBytes(int64(c.BytesFreed)), c.Locked)
}

func printLifecycle(w io.Writer, st *lifecycle.Status) error {
	out := bufio.NewWriter(w) // its Flush, returned, has the first write error
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	buckets := func(m map[string]lifecycle.Counts) {
		for _, b := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(out, "  %s: %s\n", b, lcCounts(m[b]))
		}
	}
	if st.Running {
		fmt.Fprintf(out, "run under way since %s, at bucket %s key %q (uploads: %v): %s\n", ts(st.RunStarted), st.Bucket, st.Key, st.Uploads, lcCounts(st.Run))
		buckets(st.Buckets)
	} else {
		fmt.Fprintln(out, "no run under way")
	}
	if st.LastEnded.IsZero() {
		fmt.Fprintln(out, "last run: none completed yet")
	} else {
		fmt.Fprintf(out, "last run: %s to %s (%s): %s\n", ts(st.LastStarted), ts(st.LastEnded), st.LastEnded.Sub(st.LastStarted).Round(time.Millisecond), lcCounts(st.Last))
		buckets(st.LastBuckets)
	}
	fmt.Fprintf(out, "runs completed: %d; in total: %s\n", st.Runs, lcCounts(st.Total))
	return out.Flush()
}
