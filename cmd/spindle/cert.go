package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "The cluster's certificates: create a CA, issue a member's certificate",
		Long: `A cluster CA signs every Spindle process's certificate: the name it carries
is the holder's identity (a datanode's ID, a meta member's ID, a user), its role
what it may do (` + roleList() + `). For several hosts: run "cert init" once on a
safe machine, then "cert issue" for each process and copy its .crt, .key and the
CA's ca.crt to its host (the CA's key stays where it is).`,
	}
	cmd.AddCommand(newCertInitCmd(), newCertIssueCmd())
	return cmd
}

func roleList() string {
	var s []string
	for _, r := range tlsconf.Roles {
		s = append(s, string(r))
	}
	return strings.Join(s, ", ")
}

func newCertInitCmd() *cobra.Command {
	var dir, name string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "init --dir DIR",
		Short: "Create a cluster CA in DIR (ca.crt, and ca.key readable by the owner only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return cli.UsageErr(errors.New("cert init: --dir is required"))
			}
			ca, err := tlsconf.CreateCA(dir, name, validity)
			if errors.Is(err, tlsconf.ErrExists) {
				return cli.UsageErr(fmt.Errorf("cert init: %w (a new CA would orphan every certificate it issued)", err))
			}
			if err != nil {
				return err
			}
			return printf(cmd.OutOrStdout(), "CA %q valid until %s: %s, key %s (0600)\n", ca.Cert.Subject.CommonName,
				ca.Cert.NotAfter.UTC().Format(time.DateOnly), filepath.Join(dir, tlsconf.CACertFile), filepath.Join(dir, tlsconf.CAKeyFile))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the CA (created; refused when it holds one)")
	cmd.Flags().StringVar(&name, "name", "spindle-cluster-ca", "the CA's name")
	cmd.Flags().DurationVar(&validity, "validity", tlsconf.DefaultCAValidity, "the CA's lifetime")
	return cmd
}

func newCertIssueCmd() *cobra.Command {
	var caDir, out, name, role string
	var hosts []string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "issue --ca-dir DIR --name NAME --role ROLE [--host ADDR]...",
		Short: "Issue a certificate signed by the CA: OUT/NAME.crt and OUT/NAME.key (0600)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if caDir == "" || name == "" || role == "" {
				return cli.UsageErr(errors.New("cert issue: --ca-dir, --name and --role are required"))
			}
			ca, err := tlsconf.LoadCA(caDir)
			if err != nil {
				return err
			}
			c, k, err := ca.Issue(tlsconf.IssueRequest{Name: name, Role: tlsconf.Role(role), Hosts: hosts, Validity: validity})
			if err != nil {
				return cli.UsageErr(err)
			}
			if out == "" {
				out = caDir
			}
			cp, kp, err := tlsconf.WritePair(out, name, c, k)
			if err != nil {
				return err
			}
			return printf(cmd.OutOrStdout(), "%s (%s) for %s: %s, key %s (0600)\n", name, role, strings.Join(hosts, ","), cp, kp)
		},
	}
	cmd.Flags().StringVar(&caDir, "ca-dir", "", "directory of the CA (from cert init)")
	cmd.Flags().StringVar(&out, "out", "", "directory for NAME.crt and NAME.key (default: --ca-dir)")
	cmd.Flags().StringVar(&name, "name", "", "the holder's name: its identity in the cluster")
	cmd.Flags().StringVar(&role, "role", "", "what it may do: "+roleList())
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "IP address or DNS name it serves on (repeatable; servers need every address clients dial)")
	cmd.Flags().DurationVar(&validity, "validity", tlsconf.DefaultCertValidity, "the certificate's lifetime (at most the CA's)")
	return cmd
}
