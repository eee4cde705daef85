// Package cli holds spindle's subcommands that live outside cmd/spindle,
// and what every command shares: exit statuses (exitcode.go), argument
// checks, and Env, the command line's access to the meta service.
//
// A command group here is a func returning a *cobra.Command, registered
// from cmd/spindle with one line; cmd/spindle provides the Env (its flags:
// meta addresses, TLS, output form). cmd/spindle is bounded in size
// (scripts/codesize): new commands go here, one file per group.
//
// Invariants: every error a command returns carries its exit status
// (ExitError, or one ExitCode maps); nothing here keeps state between
// commands. Concurrency: a command runs on one goroutine; Env's functions
// may be called from any.
package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Env is what a command group needs of the command line it is part of.
type Env struct {
	// MetaClient returns a client of the meta service the flags name.
	MetaClient func() (*metaapi.Client, error)
	// JSON: print JSON instead of tables (set by --json once parsed).
	JSON *bool
}

// WithMeta runs fn with a client of the meta service.
func (e Env) WithMeta(ctx context.Context, fn func(context.Context, *metaapi.Client) error) error {
	mc, err := e.MetaClient()
	if err != nil {
		return err
	}
	return fn(ctx, mc)
}

// ExactArgs is cobra.ExactArgs with the usage exit status.
func ExactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return UsageErr(err)
		}
		return nil
	}
}

// RangeArgs is cobra.RangeArgs with the usage exit status.
func RangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(cmd, args); err != nil {
			return UsageErr(err)
		}
		return nil
	}
}

// Printf writes to w and returns the write's error: a command's output
// that cannot be written (a closed pipe, a full disk behind a redirect)
// fails the command.
func Printf(w io.Writer, format string, args ...any) error {
	_, err := fmt.Fprintf(w, format, args...)
	return err
}
