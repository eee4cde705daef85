package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/gen"
	"github.com/spindle-store/spindle/internal/units"
)

func newGenCmd() *cobra.Command {
	var cfg gen.Config
	size := units.ByteSize(0)
	containerSize := units.ByteSize(gen.DefaultContainerSizeBytes)
	keySize := units.ByteSize(gen.DefaultKeySizeBytes)
	blockSize := units.ByteSize(0)
	var noBaseline bool
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "Offline data generator: write a cluster's closed containers, metadata and keys straight to disk",
		Long: `Writes a whole cluster state into --dir at disk speed, without running a
cluster (like Apache Ozone's offline generators in freon): --size bytes of keys (--key-size
each, the last one shorter, named key-00000000, ... in --bucket), cut into
blocks in CLOSED containers of --container-size, 3 replicas of each spread
over --datanodes datanodes, and the matching meta store (nodes, CLOSED
pipelines and containers, the bucket, the keys). The layout is the embedded
server's: start it with spindle server --dir DIR --datanodes N, and every key
reads back (its bytes depend only on --seed, the key and the offset).

Before generating, measures the disk's sequential write bandwidth in --dir
(one file of min(--size, 2GiB) in 4MiB writes, one fdatasync, deleted) and
reports the generator's rate (replica bytes per second; MB = 10^6 bytes) and
its ratio to it. ops are keys. Refuses a --dir that already holds a meta
store, datanode data or server.json; a failed or interrupted run removes what
it wrote. Progress goes to stderr; --json prints one JSON object on stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if size.Int64() <= 0 {
				return cli.UsageErr(errors.New("gen: --size is required (total bytes of keys, e.g. 5GiB)"))
			}
			cfg.SizeBytes = uint64(size.Int64())
			cfg.ContainerSizeBytes = uint64(containerSize.Int64())
			cfg.KeySizeBytes = uint64(keySize.Int64())
			cfg.BlockSizeBytes = uint64(blockSize.Int64())
			cfg.MeasureBaseline = !noBaseline
			cfg.Progress = cmd.ErrOrStderr()
			res, err := gen.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			bj := res.Bench()
			return printResult(cmd, bj.Result, bj)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory of the cluster to write (the embedded server's --dir; required, must not hold one)")
	f.IntVar(&cfg.Datanodes, "datanodes", gen.DefaultDatanodes, "datanodes (3..9); each container has 3 replicas")
	f.Var(&size, "size", "total bytes of keys, e.g. 5GiB (required; replicas take 3 times as much)")
	f.Var(&containerSize, "container-size", "bytes per container")
	f.Var(&keySize, "key-size", "bytes per key (the last key may be shorter)")
	f.Var(&blockSize, "block-size", "bytes per block (default: the key client's, 256MiB, at most the container size)")
	f.StringVar(&cfg.Bucket, "bucket", gen.DefaultBucket, "bucket of the keys")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the keys' content")
	f.IntVar(&cfg.Workers, "workers", 0, "parallel writers (0: 2 per datanode)")
	f.BoolVar(&noBaseline, "no-baseline", false, "skip the disk baseline")
	f.Bool(jsonFlag, false, "print the result as one line of JSON on stdout")
	return cmd
}
