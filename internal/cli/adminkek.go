package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/credapi"
	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// AdminKEKCmd is spindle admin kek status|add|rotate: the meta service's
// key encryption key (package kek), which seals the S3 secrets it stores.
func AdminKEKCmd(env Env) *cobra.Command {
	asJSON := env.JSON
	cmd := &cobra.Command{
		Use:   "kek status|add|rotate",
		Short: "The key encryption key sealing the meta service's secrets: status, add a key to a keyring file, rotate",
		Args:  ExactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			return UsageErr(fmt.Errorf("want admin kek status | add FILE | rotate"))
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "The keyring of the meta member reached: its source and key IDs (never the keys)",
		Args:  ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				st, err := credapi.GetKEKStatus(ctx, mc)
				if err != nil {
					return KeyExit(err, "", "")
				}
				if *asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
				}
				return Printf(cmd.OutOrStdout(), "member %d\nsource %s\ncurrent %s\nkeys %s\n", st.Member, st.Source, st.Current, strings.Join(st.Keys, " "))
			})
		},
	}
	add := &cobra.Command{
		Use:   "add FILE",
		Short: "Add a new key to the keyring file FILE (made 0600 if absent), here, without the meta service; it becomes the current key",
		Long: `Adds a new random key to the keyring file FILE, as the last (current) key,
and prints its ID: the first step of a rotation. Then copy FILE to every meta
member's --kek-file (members reread it; no restart) and run
'spindle admin kek rotate', which checks that every member holds the new key
before it re-seals anything. Keep the old keys in the file.`,
		Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := kek.AddKey(nil, args[0])
			if err != nil {
				return err
			}
			return Printf(cmd.OutOrStdout(), "key %s added to %s: copy it to every meta member, then spindle admin kek rotate\n", id, args[0])
		},
	}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Re-seal every secret under the leader's current key, once every meta member holds it",
		Args:  ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				r, err := credapi.RotateKEK(ctx, mc)
				if err != nil {
					return KeyExit(err, "", "")
				}
				if *asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
				}
				var ms []string
				for _, m := range r.Members {
					ms = append(ms, fmt.Sprint(m.Member))
				}
				return Printf(cmd.OutOrStdout(), "%d secrets re-sealed; every secret is under key %s, held by members %s\n", r.Resealed, r.KeyID, strings.Join(ms, " "))
			})
		},
	}
	cmd.AddCommand(status, add, rotate)
	return cmd
}

// userKeysCmd is spindle admin user keys NAME: set a user's keys (the
// root user's included), creating it when absent.
func userKeysCmd(env Env) *cobra.Command {
	var req credapi.SetKeys
	cmd := &cobra.Command{
		Use:   "keys NAME",
		Short: "Set an S3 user's keys (a new secret unless given; the access key kept unless given); prints them",
		Args:  ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				u, err := credapi.SetUserKeys(ctx, mc, args[0], req)
				if err != nil {
					return KeyExit(err, "", "")
				}
				if *env.JSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(u)
				}
				return Printf(cmd.OutOrStdout(), "user %s\naccess key %s\nsecret key %s\n", u.Name, u.AccessKey, u.SecretKey)
			})
		},
	}
	cmd.Flags().StringVar(&req.AccessKey, "access-key", "", accessKeyHelp+" (default: the user's)")
	cmd.Flags().StringVar(&req.SecretKey, "secret-key", "", secretKeyHelp)
	return cmd
}

const (
	accessKeyHelp = "access key (3..128 of letters, digits, -_.@+)"
	secretKeyHelp = "secret key (8..128 printable characters; default: generated)"
)
