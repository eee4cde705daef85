package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// AdminUserCmd is spindle admin user create|ls|rm: the S3 users of the
// meta service.
func AdminUserCmd(env Env) *cobra.Command {
	asJSON := env.JSON
	cmd := &cobra.Command{
		Use:   "user create|ls|rm|keys",
		Short: "S3 users: create (keys generated unless given), list, remove, set keys",
		Args:  ExactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			return UsageErr(fmt.Errorf("want admin user create NAME | ls | rm NAME | keys NAME"))
		},
	}
	var req metaapi.CreateUser
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an S3 user; prints its access key and secret key",
		Args:  ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mc, err := env.MetaClient()
			if err != nil {
				return err
			}
			req.Name = args[0]
			u, err := mc.CreateUser(cmd.Context(), req)
			if err != nil {
				return KeyExit(err, "", "")
			}
			out := cmd.OutOrStdout()
			if *asJSON {
				return json.NewEncoder(out).Encode(u)
			}
			return Printf(out, "user %s\naccess key %s\nsecret key %s\n", u.Name, u.AccessKey, u.SecretKey)
		},
	}
	create.Flags().StringVar(&req.AccessKey, "access-key", "", accessKeyHelp+" (default: generated)")
	create.Flags().StringVar(&req.SecretKey, "secret-key", "", secretKeyHelp)
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the S3 users (without their secrets)",
		Args:  ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				us, err := mc.Users(ctx)
				if err != nil {
					return KeyExit(err, "", "")
				}
				out := cmd.OutOrStdout()
				if *asJSON {
					return json.NewEncoder(out).Encode(us)
				}
				tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tACCESS KEY\tCREATED")
				for _, u := range us {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", u.Name, u.AccessKey, u.Created.Format("2006-01-02 15:04:05"))
				}
				return tw.Flush()
			})
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove an S3 user (its buckets stay, owned by its access key)",
		Args:  ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				if err := mc.DeleteUser(ctx, args[0]); err != nil {
					return KeyExit(err, "", "")
				}
				return nil
			})
		},
	}
	cmd.AddCommand(create, ls, rm, userKeysCmd(env))
	return cmd
}
