package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/buildinfo"
)

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go toolchain of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !asJSON {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), buildinfo.String())
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(buildinfo.Get())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"version","commit","go","platform"} as JSON`)
	return cmd
}
