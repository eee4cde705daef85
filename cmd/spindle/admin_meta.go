package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/units"
)

// newAdminMetaCmd is spindle admin meta: operations on the meta store.
func newAdminMetaCmd(env *keyEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "meta backup",
		Short: "Operations on the meta service's store: backup",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "backup DIR",
		Short: "Copy a consistent snapshot of the meta store into the new directory DIR",
		Long: `Asks the meta service for a consistent snapshot of its store (a Pebble
checkpoint: every commit before it, none after it; the service keeps
serving) and writes it into DIR, which must not exist. DIR appears only once
the whole snapshot is written and fsynced. DIR is a meta store directory:
to restore, stop the meta service and start it with --dir DIR, or copy DIR
over its --dir (see docs/OPERATIONS.md, "Backup and restore").`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if _, err := os.Lstat(dir); err == nil {
				return usageErr(fmt.Errorf("%s exists: a backup goes into a new directory", dir))
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			mc, err := env.metaClient()
			if err != nil {
				return err
			}
			start := time.Now()
			body, err := mc.Backup(cmd.Context())
			if err != nil {
				return keyExit(err, "", "")
			}
			defer body.Close()
			files, n, err := meta.UnpackBackup(body, dir)
			if err != nil {
				return keyExit(fmt.Errorf("backup of the meta service at %s into %s: %w", mc.Addr(), dir, err), "", "")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\t%d files\t%s\tin %.2fs\tfrom meta %s\n", dir, files, units.FormatBytes(n), time.Since(start).Seconds(), mc.Addr())
			return nil
		},
	})
	return cmd
}
