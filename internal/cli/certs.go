package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/certwatch"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// AdminCertCmd is spindle admin cert ls|revoke: the certificates the meta
// service issued (joins, renewals) and their revocation (certapi).
func AdminCertCmd(env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "The certificates the meta service issued: list them, revoke one",
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the certificates the meta service issued: serial, name, role, hosts, until when, revoked",
		Args:  ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				l, err := certapi.List(ctx, mc)
				if err != nil {
					return KeyExit(err, "", "")
				}
				out := cmd.OutOrStdout()
				if *env.JSON {
					return json.NewEncoder(out).Encode(l)
				}
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "SERIAL\tNAME\tROLE\tHOSTS\tNOT AFTER\tHOW\tREVOKED")
				for _, c := range l {
					rev := "-"
					if c.RevokedAt != nil {
						rev = c.RevokedAt.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Serial, dash(c.Name), dash(c.Role), dash(strings.Join(c.Hosts, ",")),
						notAfter(c.NotAfter), c.How, rev)
				}
				return w.Flush()
			})
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke SERIAL|NAME",
		Short: "Revoke a certificate by serial, or every certificate recorded under a name: refused on every port within seconds, its connections closed",
		Long: `Revoke a certificate: SERIAL (hexadecimal, as 'admin cert ls' or
'openssl x509 -noout -serial' print it; a serial the meta service did not
issue is revoked too) or NAME (every certificate recorded under it). The
meta service keeps the deny-list as replicated state; every server fetches
it every second, refuses those certificates on every port and closes their
open connections. A revoked holder cannot renew: give it a new join token
or a new certificate under another name.`,
		Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				r, err := certapi.Revoke(ctx, mc, args[0])
				if err != nil {
					return KeyExit(err, "", "")
				}
				if *env.JSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
				}
				return Printf(cmd.OutOrStdout(), "revoked %s\n", strings.Join(r.Serials, " "))
			})
		},
	}
	cmd.AddCommand(ls, revoke)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func notAfter(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// AdminJoinTokenCmd is spindle admin join-token: a one-time token with
// which one new process (a datanode, by default) gets its certificate.
func AdminJoinTokenCmd(env Env) *cobra.Command {
	ttl := metaapi.DefaultJoinTokenTTL
	var role string
	var hosts []string
	cmd := &cobra.Command{
		Use:   "join-token --host ADDR [--host ADDR]... [--role datanode|s3|client]",
		Short: "Make a one-time token with which one new datanode gets its certificate (spindle datanode --join-token)",
		Long: `Asks the meta service (an admin certificate's call) for a one-time join
token, valid --ttl, for one holder of --role (datanode, s3 or client) at
the --host addresses: the certificate it yields has that role, a name the
meta service draws, and exactly those addresses, whatever the joiner asks.
A new datanode started with --join-token TOKEN, --tls-ca (the cluster CA's
certificate) and --tls-cert/--tls-key naming files that do not exist yet
sends it to the meta service with a certificate request and writes the
certificate it gets and its key there. The token is known to the meta
member that made it only (--meta: give the datanode the same address),
used once, and forgotten by a restart of that member.`,
		Args: ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				t, err := certapi.CreateJoinToken(ctx, mc, certapi.JoinTokenRequest{TTLSeconds: int64(ttl / time.Second), Role: role, Hosts: hosts})
				if err != nil {
					return KeyExit(err, "", "")
				}
				out := cmd.OutOrStdout()
				if *env.JSON {
					return json.NewEncoder(out).Encode(t)
				}
				if err := Printf(out, "%s\n", t.Token); err != nil {
					return err
				}
				return Printf(cmd.ErrOrStderr(), "valid until %s, once, for a %s at %s: spindle datanode --meta %s --join-token TOKEN --tls-ca CA --tls-cert NEW.crt --tls-key NEW.key ...\n",
					t.ExpiresAt.Format(time.RFC3339), role, strings.Join(hosts, ","), mc.Addr())
			})
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", ttl, fmt.Sprintf("how long the token is valid (at most %s)", metaapi.MaxJoinTokenTTL))
	cmd.Flags().StringVar(&role, "role", "datanode", "the role of the certificate it yields: "+strings.Join(certapi.JoinRoles, ", "))
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "an IP address or DNS name the joiner is dialled at (repeatable; required but for --role client): its certificate names exactly these")
	return cmd
}

// RenewProfile renews the certificate of a client profile (s, for the
// meta service at meta) through the meta service when it is past 2/3 of
// its lifetime (certwatch.RenewIfDue), so that a profile whose server
// was down a while still works; a failure is only logged (the
// certificate may still be valid).
func RenewProfile(s *tlsconf.Settings, meta string) {
	if !certwatch.Due(s, time.Now()) {
		return
	}
	mc, err := metaapi.NewClient(meta, metaapi.ClientOptions{TLS: s, Timeout: 5 * time.Second})
	if err == nil {
		_, err = certwatch.RenewIfDue(context.Background(), s, mc, nil)
	}
	if err != nil {
		slog.Warn("client profile: certificate renewal failed", "err", err)
	}
}
