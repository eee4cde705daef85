package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
)

// maxBucketDrainRounds bounds how often bucket rm --force lists and deletes
// the keys again when puts keep adding keys while it deletes.
const maxBucketDrainRounds = 3

// stdinIsTerminal says whether the command's standard input is a terminal
// (a variable: tests answer the confirmation through it).
var stdinIsTerminal = func(cmd *cobra.Command) bool {
	if cmd.InOrStdin() != io.Reader(os.Stdin) {
		return false
	}
	_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS)
	return err == nil
}

func newBucketRmCmd(env *keyEnv) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a bucket: an empty one, or with --force one and all its keys",
		Long: `Deletes the bucket NAME. Without --force the bucket must hold no key.
With --force every key (every version of it) is deleted first (their blocks
are deleted on the datanodes later), then the bucket; on a terminal it asks
first, and goes on only when the bucket's name is typed back.`,
		Args: cli.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := metaapi.ValidBucket(name); err != nil {
				return cli.UsageErr(err)
			}
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer closeQuietly(kc)
			ctx := cmd.Context()
			if !force {
				if err := kc.DeleteBucket(ctx, name); err != nil {
					if errors.Is(err, metaapi.ErrNotEmpty) {
						return cli.Exit(cli.ExitFailure, fmt.Errorf("bucket %s is not empty: delete its keys first, or use --force", name))
					}
					return cli.KeyExit(err, name, "")
				}
				return nil
			}
			if stdinIsTerminal(cmd) {
				b, err := findBucket(cmd, kc, name)
				if err != nil {
					return err
				}
				if err := printf(cmd.ErrOrStderr(), "Delete bucket %s with its %d keys (%s)? Type its name to confirm: ", name, b.Keys, units.FormatBytes(int64(b.Bytes))); err != nil {
					return err
				}
				line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if strings.TrimSpace(line) != name {
					return cli.Exit(cli.ExitFailure, fmt.Errorf("bucket %s not deleted: not confirmed", name))
				}
			}
			deleted := 0
			for round := 1; ; round++ {
				n, err := cli.DeleteVersions(ctx, cli.Env{MetaClient: env.metaClient}, name) // every version of every key (S3 versioning)
				if deleted += n; err != nil {
					return cli.KeyExit(fmt.Errorf("bucket rm --force %s: %d keys deleted, then: %w", name, deleted, err), name, "")
				}
				err = kc.DeleteBucket(ctx, name)
				if err == nil {
					return printf(cmd.OutOrStdout(), "deleted bucket %s and %d keys\n", name, deleted)
				}
				if !errors.Is(err, metaapi.ErrNotEmpty) || round >= maxBucketDrainRounds {
					return cli.KeyExit(fmt.Errorf("bucket rm --force %s: %d keys deleted, then: %w", name, deleted, err), name, "")
				}
			}
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete the bucket's keys too (asks first on a terminal)")
	return cmd
}

// findBucket returns bucket name's listing entry.
func findBucket(cmd *cobra.Command, kc *keyclient.Client, name string) (metaapi.Bucket, error) {
	bs, err := kc.ListBuckets(cmd.Context())
	if err != nil {
		return metaapi.Bucket{}, cli.KeyExit(err, "", "")
	}
	for _, b := range bs {
		if b.Name == name {
			return b, nil
		}
	}
	return metaapi.Bucket{}, cli.Exit(cli.ExitNotFound, fmt.Errorf("unknown bucket %s", name))
}
