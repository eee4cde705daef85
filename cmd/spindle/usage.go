package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
)

// strictSubcommands makes every command that only groups subcommands
// (bench, report, admin, bucket, ...) answer a mistake as the root does:
// an unknown subcommand ("spindle bench nonsense") or a missing one
// ("spindle bench") is a usage error, exit status 2, with the commands it
// has and a suggestion when a name is close. Without it cobra prints the
// group's help and exits 0, as if the mistake were a success.
func strictSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		strictSubcommands(c)
	}
	if !root.HasSubCommands() || !root.HasParent() {
		return // the root: cobra itself rejects an unknown command there
	}
	group := root
	group.SuggestionsMinimumDistance = 2 // cobra's default at the root
	alone := group.Annotations[runsAlone] != ""
	group.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return cli.UsageErr(fmt.Errorf("%s (commands: %s; see %s --help)", msg, subcommandNames(cmd), cmd.CommandPath()))
	}
	if alone {
		return // it does something itself without a subcommand (admin meta)
	}
	group.RunE = func(cmd *cobra.Command, _ []string) error {
		return cli.UsageErr(fmt.Errorf("%s needs a command: %s (see %s --help)", cmd.CommandPath(), subcommandNames(cmd), cmd.CommandPath()))
	}
	group.Run = nil
}

// runsAlone is the annotation of a command with subcommands that also runs
// by itself (spindle admin meta shows the members; admin meta backup DIR
// is its subcommand): strictSubcommands keeps its RunE and refuses only
// unknown subcommands.
const runsAlone = "spindle-runs-alone"

// subcommandNames lists a command's visible subcommands, comma-separated.
func subcommandNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}
