package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// policyHelp describes a policy's text.
const policyHelp = `A policy is rep3 (three replicas, the built-in default) or rs-3-2, rs-6-3,
rs-10-4 (Reed-Solomon, k data + m parity shards, each on its own datanode:
raw bytes (k+m)/k of the logical ones), optionally followed by settings:
rs-6-3,cell=1MiB,min-age=1h,min-bytes=64MiB (the cell size, and how old and
big a CLOSED container must be before it is converted).`

// WithEC adds the erasure-coding commands to the bucket command: the
// --ec flag of bucket create, bucket set-ec NAME POLICY, bucket get-ec
// NAME and bucket ec-default [POLICY].
func WithEC(bucket *cobra.Command, env Env) *cobra.Command {
	bucket.Use += "|set-ec|get-ec|ec-default"
	for _, c := range bucket.Commands() {
		if c.Name() == "create" {
			withECFlag(c, env)
		}
	}
	setEC := &cobra.Command{
		Use: "set-ec NAME POLICY", Short: "Set the erasure-coding policy of a bucket's containers (\"\" removes the bucket's own)",
		Long: "Set the erasure-coding policy of a bucket.\n\n" + policyHelp, Args: ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := metaapi.ValidBucket(args[0]); err != nil {
				return UsageErr(err)
			}
			if args[1] != "" {
				if _, err := ec.ParseSpec(args[1]); err != nil {
					return UsageErr(err)
				}
			}
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				if err := ecapi.SetBucket(ctx, mc, args[0], args[1]); err != nil {
					return KeyExit(err, args[0], "")
				}
				return printPolicy(ctx, cmd, mc, args[0])
			})
		},
	}
	getEC := &cobra.Command{
		Use: "get-ec NAME", Short: "Show the erasure-coding policy a bucket's containers get, and where it comes from", Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := metaapi.ValidBucket(args[0]); err != nil {
				return UsageErr(err)
			}
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				return printPolicy(ctx, cmd, mc, args[0])
			})
		},
	}
	def := &cobra.Command{
		Use: "ec-default [POLICY]", Short: "Show or set the cluster's default erasure-coding policy",
		Long: "Show or set the cluster's default erasure-coding policy (buckets without their own or a spindle-ec tag take it).\n\n" + policyHelp,
		Args: RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if _, err := ec.ParseSpec(args[0]); err != nil {
					return UsageErr(err)
				}
			}
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				if len(args) == 1 {
					if err := ecapi.SetDefault(ctx, mc, args[0]); err != nil {
						return KeyExit(err, "", "")
					}
				}
				p, err := ecapi.GetDefault(ctx, mc)
				if err != nil {
					return KeyExit(err, "", "")
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "default\t%s\n", p.Policy)
				return err
			})
		},
	}
	bucket.AddCommand(setEC, getEC, def)
	return bucket
}

// withECFlag adds --ec to bucket create: the bucket's policy, set once it
// exists (a refusal then leaves the bucket with the default, and says so).
func withECFlag(create *cobra.Command, env Env) {
	var policy string
	create.Flags().StringVar(&policy, "ec", "", "the bucket's erasure-coding policy (rep3, rs-3-2, rs-6-3, rs-10-4[,cell=SIZE,min-age=D,min-bytes=SIZE]); default: the cluster's")
	run := create.RunE
	create.RunE = func(cmd *cobra.Command, args []string) error {
		if policy != "" {
			if _, err := ec.ParseSpec(policy); err != nil {
				return UsageErr(fmt.Errorf("--ec: %w", err))
			}
		}
		if err := run(cmd, args); err != nil || policy == "" {
			return err
		}
		return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
			if err := ecapi.SetBucket(ctx, mc, args[0], policy); err != nil {
				return KeyExit(errors.Join(fmt.Errorf("bucket %s created, its policy not set (it takes the cluster's default)", args[0]), err), args[0], "")
			}
			return printPolicy(ctx, create, mc, args[0])
		})
	}
}

func printPolicy(ctx context.Context, cmd *cobra.Command, mc *metaapi.Client, bucket string) error {
	p, err := ecapi.GetBucket(ctx, mc, bucket)
	if err != nil {
		return KeyExit(err, bucket, "")
	}
	src := p.Source
	if src == "" {
		src = "built-in"
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t(%s)\n", bucket, p.Policy, src)
	return err
}
