package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// newAdminJoinTokenCmd is `spindle admin join-token`: a one-time token
// with which a new datanode obtains its certificate (spindle datanode
// --join-token).
func newAdminJoinTokenCmd(env *keyEnv, asJSON *bool) *cobra.Command {
	ttl := metaapi.DefaultJoinTokenTTL
	cmd := &cobra.Command{
		Use:   "join-token",
		Short: "Make a one-time token with which one new datanode gets its certificate (spindle datanode --join-token)",
		Long: `Asks the meta service (an admin certificate's call) for a one-time join
token, valid --ttl. A new datanode started with --join-token TOKEN,
--tls-ca (the cluster CA's certificate) and --tls-cert/--tls-key naming
files that do not exist yet sends it to the meta service with a certificate
request and writes the datanode certificate it gets (its name drawn by the
meta service) and its key there. The token is known to the meta member
that made it only (--meta: give the datanode the same address), used once,
and forgotten by a restart of that member.`,
		Args: cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			t, err := mc.CreateJoinToken(cmd.Context(), ttl)
			if err != nil {
				return cli.KeyExit(err, "", "")
			}
			out := cmd.OutOrStdout()
			if *asJSON {
				return json.NewEncoder(out).Encode(t)
			}
			if err := printf(out, "%s\n", t.Token); err != nil {
				return err
			}
			return printf(cmd.ErrOrStderr(), "valid until %s, once: spindle datanode --meta %s --join-token TOKEN --tls-ca CA --tls-cert NEW.crt --tls-key NEW.key ...\n", t.ExpiresAt.Format(time.RFC3339), mc.Addr())
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", ttl, fmt.Sprintf("how long the token is valid (at most %s)", metaapi.MaxJoinTokenTTL))
	return cmd
}
