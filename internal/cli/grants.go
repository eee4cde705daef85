package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/authz"
)

// principalHelp says how a principal is named.
const principalHelp = `PRINCIPAL is cert:NAME (a certificate's name, as 'spindle cert issue
--name' made it) or user:NAME (an S3 user, 'spindle admin user create
NAME'). ACTION is read (get, stat, ls), write (put a new key), delete
(rm; with write: replace a key) or admin (everything, and the bucket's
grants). PREFIX limits the grant to the keys equal to it or below it on a
'/' boundary ("logs" covers "logs" and "logs/a", not "logs2"). A bucket's
owner (who created it) and admin certificates need no grant.`

// AdminGrantCmds are spindle admin grant, revoke-grant and grants: the
// per-bucket grants of the meta service (metaapi/authz).
func AdminGrantCmds(env Env) []*cobra.Command {
	change := func(use, short string, do func(context.Context, *metaapi.Client, authz.GrantChange) error, done string) *cobra.Command {
		return &cobra.Command{
			Use:   use + " PRINCIPAL BUCKET[/PREFIX] read|write|delete|admin",
			Short: short,
			Long:  short + ".\n\n" + principalHelp,
			Args:  ExactArgs(3),
			RunE: func(cmd *cobra.Command, args []string) error {
				bucket, prefix := authz.ParseTarget(args[1])
				g := authz.GrantChange{Principal: args[0], Bucket: bucket, Prefix: prefix, Action: args[2]}
				if err := g.Validate(); err != nil {
					return UsageErr(err)
				}
				return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
					if err := do(ctx, mc, g); err != nil {
						return KeyExit(err, bucket, "")
					}
					return Printf(cmd.OutOrStdout(), "%s %s %s on %s\n", done, g.Principal, g.Action, args[1])
				})
			},
		}
	}
	ls := &cobra.Command{
		Use:   "grants [BUCKET]",
		Short: "List the grants of a bucket (of every bucket: an admin certificate)",
		Long:  "List the grants of a bucket (of every bucket: an admin certificate).\n\n" + principalHelp,
		Args:  RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket := ""
			if len(args) == 1 {
				bucket = args[0]
				if err := metaapi.ValidBucket(bucket); err != nil {
					return UsageErr(err)
				}
			}
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				gs, err := authz.List(ctx, mc, bucket)
				if err != nil {
					return KeyExit(err, bucket, "")
				}
				out := cmd.OutOrStdout()
				if *env.JSON {
					return json.NewEncoder(out).Encode(gs)
				}
				tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
				fmt.Fprintln(tw, "PRINCIPAL\tBUCKET\tPREFIX\tACTIONS\tCREATED")
				for _, g := range gs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.Principal, g.Bucket, g.Prefix, strings.Join(g.Actions, ","), g.Created.Format("2006-01-02 15:04:05"))
				}
				return tw.Flush()
			})
		},
	}
	return []*cobra.Command{
		change("grant", "Give a principal an action on a bucket or a key prefix", authz.Add, "granted"),
		change("revoke-grant", "Take an action given with grant from a principal", authz.Revoke, "revoked"),
		ls,
	}
}
