package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// S3 object lock from the native CLI (issue 35 item 2; rules:
// internal/meta/lockmeta): bucket create --object-lock, bucket
// object-lock, bucket retention, bucket legal-hold, and rm --version-id
// (which a locked version refuses, as over S3).

const lockHelp = `A bucket with object lock keeps its versioning Enabled for good. A
version under retention (mode GOVERNANCE or COMPLIANCE until a date) or a
legal hold cannot be deleted by its version ID, by anyone: a COMPLIANCE
retention until its date (it can only be extended), a legal hold until it
is turned off; a GOVERNANCE retention gives way only to a request with
--bypass-governance-retention from a caller with the admin right on the
bucket (its owner, an admin grant, an admin certificate). A delete without
a version ID still just makes a delete marker.`

// WithObjectLock gives the bucket command object lock: create
// --object-lock and the object-lock, retention and legal-hold commands.
func WithObjectLock(bucket *cobra.Command, env Env) *cobra.Command {
	bucket.Use += "|object-lock|retention|legal-hold"
	for _, c := range bucket.Commands() {
		if c.Name() == "create" {
			withLockFlag(c, env)
		}
	}
	var mode string
	var days, years int
	conf := &cobra.Command{
		Use: "object-lock NAME", Short: "Show or set a bucket's S3 object lock and default retention (--mode with --days or --years)",
		Long: "Without flags, prints the bucket's object lock configuration. With --mode and --days or --years, enables\n" +
			"object lock (the bucket's versioning must be enabled; it stays so) with that default retention for new versions.\n\n" + lockHelp,
		Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := metaapi.ValidBucket(args[0]); err != nil {
				return UsageErr(err)
			}
			set := cmd.Flags().Changed("mode") || cmd.Flags().Changed("days") || cmd.Flags().Changed("years")
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				if set {
					lc := versionapi.LockConfig{Enabled: true, Mode: strings.ToUpper(mode), Days: days, Years: years}
					if err := versionapi.PutLockConfig(ctx, mc, args[0], lc); err != nil {
						return KeyExit(err, args[0], "")
					}
				}
				lc, err := versionapi.GetLockConfig(ctx, mc, args[0])
				if err != nil {
					return KeyExit(err, args[0], "")
				}
				return printLockConfig(cmd, lc)
			})
		},
	}
	conf.Flags().StringVar(&mode, "mode", "", "default retention mode: GOVERNANCE or COMPLIANCE")
	conf.Flags().IntVar(&days, "days", 0, "default retention in days")
	conf.Flags().IntVar(&years, "years", 0, "default retention in years")
	bucket.AddCommand(conf, retentionCmd(env), legalHoldCmd(env))
	return bucket
}

func withLockFlag(create *cobra.Command, env Env) {
	var on bool
	create.Flags().BoolVar(&on, "object-lock", false, "create the bucket with S3 object lock (its versioning enabled for good)")
	run := create.RunE
	create.RunE = func(cmd *cobra.Command, args []string) error {
		if err := run(cmd, args); err != nil || !on {
			return err
		}
		return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
			if err := versionapi.PutLockConfig(ctx, mc, args[0], versionapi.LockConfig{Enabled: true, Create: true}); err != nil {
				return KeyExit(errors.Join(fmt.Errorf("bucket %s created without object lock", args[0]), err), args[0], "")
			}
			return nil
		})
	}
}

func printLockConfig(cmd *cobra.Command, lc versionapi.LockConfig) error {
	switch {
	case !lc.Enabled:
		return Printf(cmd.OutOrStdout(), "no object lock\n")
	case lc.Mode == "":
		return Printf(cmd.OutOrStdout(), "object lock enabled, no default retention\n")
	case lc.Years > 0:
		return Printf(cmd.OutOrStdout(), "object lock enabled, default retention %s %d years\n", lc.Mode, lc.Years)
	}
	return Printf(cmd.OutOrStdout(), "object lock enabled, default retention %s %d days\n", lc.Mode, lc.Days)
}

// lockRef parses BUCKET/KEY and the --version-id and
// --bypass-governance-retention flags.
func lockRef(cmd *cobra.Command, arg string) (versionapi.Ref, error) {
	bucket, key, _ := strings.Cut(arg, "/")
	if metaapi.ValidBucket(bucket) != nil || metaapi.ValidKey(key) != nil {
		return versionapi.Ref{}, UsageErr(fmt.Errorf("%q: want BUCKET/KEY", arg))
	}
	vid, _ := cmd.Flags().GetString("version-id")
	bypass, _ := cmd.Flags().GetBool("bypass-governance-retention")
	return versionapi.Ref{Bucket: bucket, Key: key, VersionID: vid, Bypass: bypass}, nil
}

func refFlags(cmd *cobra.Command, bypass bool) {
	cmd.Flags().String("version-id", "", "the version (default: the current one)")
	if bypass {
		cmd.Flags().Bool("bypass-governance-retention", false, "override a GOVERNANCE retention (needs the admin right on the bucket)")
	}
}

func retentionCmd(env Env) *cobra.Command {
	var mode, until string
	cmd := &cobra.Command{
		Use: "retention BUCKET/KEY", Short: "Show or set a version's S3 object lock retention (--mode and --until)",
		Long: "Without --mode, prints the version's retention and legal hold. With --mode GOVERNANCE|COMPLIANCE and\n" +
			"--until (RFC 3339, or a duration from now such as 720h), sets its retention.\n\n" + lockHelp,
		Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := lockRef(cmd, args[0])
			if err != nil {
				return err
			}
			var when time.Time
			if mode != "" {
				if when, err = parseUntil(until); err != nil {
					return UsageErr(fmt.Errorf("--until: %w", err))
				}
			}
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				if mode != "" {
					r := versionapi.Retention{Ref: ref, Mode: strings.ToUpper(mode), Until: when}
					if err := versionapi.PutRetention(ctx, mc, r); err != nil {
						return KeyExit(err, ref.Bucket, ref.Key)
					}
				}
				return printLock(ctx, cmd, mc, ref)
			})
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "retention mode: GOVERNANCE or COMPLIANCE")
	cmd.Flags().StringVar(&until, "until", "", "retain until this time (RFC 3339) or for this long from now (a duration)")
	refFlags(cmd, true)
	return cmd
}

func parseUntil(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(d), nil
	}
	return time.Parse(time.RFC3339, s)
}

func legalHoldCmd(env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use: "legal-hold BUCKET/KEY [on|off]", Short: "Show or set a version's S3 legal hold",
		Long: "Without a state, prints the version's retention and legal hold; on or off sets its legal hold.\n\n" + lockHelp,
		Args: RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := lockRef(cmd, args[0])
			if err != nil {
				return err
			}
			if len(args) == 2 && args[1] != "on" && args[1] != "off" {
				return UsageErr(fmt.Errorf("%q: want on or off", args[1]))
			}
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				if len(args) == 2 {
					if err := versionapi.PutLegalHold(ctx, mc, versionapi.LegalHold{Ref: ref, On: args[1] == "on"}); err != nil {
						return KeyExit(err, ref.Bucket, ref.Key)
					}
				}
				return printLock(ctx, cmd, mc, ref)
			})
		},
	}
	refFlags(cmd, false)
	return cmd
}

func printLock(ctx context.Context, cmd *cobra.Command, mc *metaapi.Client, ref versionapi.Ref) error {
	l, err := versionapi.GetLock(ctx, mc, ref)
	if err != nil {
		return KeyExit(err, ref.Bucket, ref.Key)
	}
	ret, hold := "no retention", "off"
	if l.Mode != "" {
		ret = l.Mode + " until " + l.Until.UTC().Format(time.RFC3339)
	}
	if l.LegalHold {
		hold = "on"
	}
	return Printf(cmd.OutOrStdout(), "retention: %s\nlegal hold: %s\n", ret, hold)
}

// WithVersionDelete gives rm --version-id (delete that version for good;
// a locked one is refused) and --bypass-governance-retention.
func WithVersionDelete(rm *cobra.Command, env Env) *cobra.Command {
	refFlags(rm, true)
	orig := rm.RunE
	rm.RunE = func(cmd *cobra.Command, args []string) error {
		ref, err := lockRef(cmd, args[0])
		if err != nil || ref.VersionID == "" {
			return orig(cmd, args)
		}
		return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
			_, err := versionapi.Delete(ctx, mc, ref)
			return KeyExit(err, ref.Bucket, ref.Key)
		})
	}
	return rm
}
