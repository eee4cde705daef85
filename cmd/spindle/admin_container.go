package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/units"
)

// newAdminContainerGetCmd is `spindle admin container-get`: a whole CLOSED
// container read from one datanode by the re-replication path.
func newAdminContainerGetCmd(env *keyEnv) *cobra.Command {
	var addr, out string
	var id uint64
	cmd := &cobra.Command{
		Use:   "container-get",
		Short: "Download a CLOSED container from one datanode (the re-replication stream: sendfile at the source), every block verified",
		Long: `Reads a whole CLOSED container from the datanode at --datanode (its data
address, as "spindle admin nodes" lists it) by the same stream re-replication
uses — the datanode sends its block files with sendfile — and writes one file per
block (<local ID in hex>.blk) and blocks.json (the block metadata) into --out,
a new directory. Every checksum is verified as the bytes arrive; a failed or
corrupted download leaves nothing.`,
		Args: cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" || id == 0 || out == "" {
				return cli.UsageErr(fmt.Errorf("container-get needs --datanode, --container and --out"))
			}
			sec, err := env.clientTLS() // the datanodes are the meta service's cluster's
			if err != nil {
				return err
			}
			m, err := bulk.DownloadContainer(cmd.Context(), sec, addr, id, out)
			if err != nil {
				return err
			}
			return printf(cmd.OutOrStdout(), "container %d: %d blocks, %s, verified, in %s\n", m.Container, len(m.Blocks), units.FormatBytes(int64(m.Bytes)), out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "datanode", "", "the datanode's data address (host:port)")
	f.Uint64Var(&id, "container", 0, "container ID")
	f.StringVar(&out, "out", "", "new directory for the blocks and blocks.json")
	return cmd
}
