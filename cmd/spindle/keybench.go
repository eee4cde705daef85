package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/units"
)

// clusterFlags are the flags every key bench shares: where the cluster
// is and how the key client writes.
type clusterFlags struct {
	cfg         scenario.ClusterConfig
	chunkSize   units.ByteSize
	blockSize   units.ByteSize
	commitEvery units.ByteSize
}

func (c *clusterFlags) add(f *pflag.FlagSet) {
	f.StringVar(&c.cfg.Dir, "dir", "", "start an embedded spindle server with its data here (created and removed if missing; an existing directory gets a subdirectory, removed at the end; default: a temporary directory)")
	f.StringVar(&c.cfg.Meta, "meta", "", "use the running cluster whose meta service is at host:port instead of an embedded server")
	f.StringVar(&c.cfg.BaselineDir, "baseline-dir", "", "with --meta: run the raw disk baseline in this directory (default: none)")
	f.BoolVar(&c.cfg.TLS, "tls", false, "embedded server: mutual TLS on every connection, as spindle server runs by default (default plaintext: the storage path alone)")
	f.BoolVar(&c.cfg.Keep, "keep", false, "keep the keys (and the embedded server's data) at the end")
	f.IntVar(&c.cfg.Datanodes, "datanodes", 3, "embedded server: datanode processes")
	f.IntVar(&c.cfg.DatanodeProcs, "datanode-procs", 0, "embedded server: each datanode's GOMAXPROCS (0: Go's default)")
	f.StringSliceVar(&c.cfg.DatanodeEnv, "datanode-env", nil, "embedded server: NAME=VALUE added to the datanodes' environment (repeatable)")
	f.Var(&c.chunkSize, "chunk-size", "key client: bytes per chunk write (default 4MiB)")
	f.Var(&c.blockSize, "block-size", "key client: bytes per block (default 256MiB)")
	f.IntVar(&c.cfg.Client.InFlight, "in-flight", 0, "key client: chunks of one put in flight (0: its default, 8)")
	f.IntVar(&c.cfg.Client.InlineMaxBytes, "inline-max", 0, "key client: values of at most this many bytes are stored inline in the meta service (0: its default, 64 KiB; -1: never)")
	f.Var(&c.commitEvery, "commit-every", "key client: bytes of a block between checkpoint PutBlocks (default 16MiB)")
}

// resolve fills in the binary and the client options.
func (c *clusterFlags) resolve() (scenario.ClusterConfig, error) {
	cfg := c.cfg
	if cfg.Meta == "" {
		bin, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("finding the spindle binary for the datanodes: %w", err)
		}
		cfg.Binary = bin
	} else {
		// A running cluster: as its client profile says, else plaintext.
		addrs := append(metaapi.SplitAddrs(cfg.Meta), "")
		if p, _, found, err := tlsconf.LoadClientProfile(addrs[0]); err == nil && found && !p.Insecure {
			if cfg.MetaTLS, err = tlsconf.NewSettings(tlsconf.Files{Cert: p.Cert, Key: p.Key, CA: p.CA}); err != nil {
				return cfg, err
			}
		}
	}
	cfg.Client.ChunkSize = int(c.chunkSize.Int64())
	cfg.Client.BlockSize = c.blockSize.Int64()
	cfg.Client.CommitEvery = c.commitEvery.Int64()
	if cfg.Client.ChunkSize < 0 || cfg.Client.BlockSize < 0 || cfg.Client.CommitEvery < 0 {
		return cfg, fmt.Errorf("negative --chunk-size, --block-size or --commit-every")
	}
	return cfg, nil
}

func newBenchTeraGenCmd() *cobra.Command {
	var cf clusterFlags
	var cfg scenario.TeraGenConfig
	size := units.ByteSize(units.GiB)
	keySize := units.ByteSize(scenario.DefaultTeraGenKeyBytes)
	cmd := &cobra.Command{
		Use:   "teragen",
		Short: "TeraGen: Hadoop TeraGen's rows written as keys by N writers through the key client",
		Long: `Writes --size of Hadoop TeraGen rows (100 bytes each: GenSort's layout and
generator, so the same rows as a TeraGen job of that many rows) as keys through
the key client, from --writers concurrent writers. Each writer takes its
contiguous share of the rows, like a TeraGen map task, and writes it as keys
of at most --key-size (PREFIX/part-m-NNNNN in row order). Rows are generated
as they are sent, never held in memory.

Reports the whole run's MB/s (bytes of rows over the time from the first put
to the last commit; MB = 10^6 bytes), each writer's figures, TeraGen's
CHECKSUM (the sum of the rows' CRC32s, as TeraValidate computes it; 10^8 rows
give Hadoop's 214760662691937609), and a raw disk baseline measured in the
same directory after the run (one writer, pwrite of a chunk + fdatasync),
with the ratio. ops are keys; latency is per key.

By default starts an embedded spindle server (meta service + 3 datanodes on
127.0.0.1) with its data in --dir, stopped and removed at the end; --meta
uses a running cluster instead (the bench's keys are deleted at the end unless
--keep). The question this bench answers: with 2 writers, is it nearly as
fast as with 16?`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ccfg, err := cf.resolve()
			if err != nil {
				return fmt.Errorf("teragen: %w", err)
			}
			cfg.ClusterConfig = ccfg
			cfg.SizeBytes = size.Int64()
			cfg.KeyBytes = keySize.Int64()
			cfg.Progress = bench.TerminalProgress()
			cfg.Logger = slog.Default()
			res, err := scenario.RunTeraGen(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return printResult(cmd, res.Result, res)
		},
	}
	f := cmd.Flags()
	cf.add(f)
	f.Var(&size, "size", "bytes of rows to write (whole 100-byte rows; e.g. 10GiB)")
	f.IntVar(&cfg.Writers, "writers", 2, "concurrent writers (TeraGen's map tasks)")
	f.Var(&keySize, "key-size", "size of the keys a writer writes: its share is cut into ⌈share/key-size⌉ keys of equal row counts")
	f.StringVar(&cfg.Bucket, "bucket", scenario.DefaultTeraGenBucket, "bucket of the keys (created when missing)")
	f.StringVar(&cfg.Prefix, "prefix", "", "key name prefix (default teragen-DATE-TIME-PID/)")
	f.BoolVar(&cfg.Validate, "validate", false, "read every key back afterwards (timed apart) and check its rows' checksum")
	f.BoolVar(&cfg.NoBaseline, "no-baseline", false, "skip the raw disk baseline")
	f.DurationVar(&cfg.BaselineDuration, "baseline-duration", scenario.DefaultBaselineDuration, "bound of the raw disk baseline (never more bytes than the run wrote)")
	f.DurationVar(&cfg.Timeout, "timeout", scenario.DefaultTeraGenTimeout, "bound of the whole run")
	return cmd
}

// keyBenchFlags binds the flags of key-write and key-read.
func keyBenchFlags(cmd *cobra.Command, cf *clusterFlags, cfg *scenario.KeyBenchConfig, size *units.ByteSize) {
	f := cmd.Flags()
	cf.add(f)
	f.IntVar(&cfg.Keys, "keys", 1000, "number of keys")
	f.Var(size, "size", "bytes per key (0 allowed)")
	f.IntVar(&cfg.Concurrency, "concurrency", 16, "concurrent puts or gets")
	f.StringVar(&cfg.Bucket, "bucket", scenario.DefaultKeyBenchBucket, "bucket of the keys (created when missing)")
	f.StringVar(&cfg.Prefix, "prefix", "", "key name prefix (default NAME-DATE-TIME-PID/)")
	f.DurationVar(&cfg.Duration, "duration", 0, "time bound of the timed phase (0: none; --keys bounds it)")
	f.BoolVar(&cfg.NoBaseline, "no-baseline", false, "skip the raw disk baseline")
	f.DurationVar(&cfg.BaselineDuration, "baseline-duration", scenario.DefaultBaselineDuration, "bound of the raw disk baseline")
}

func runKeyBench(cmd *cobra.Command, cf *clusterFlags, cfg scenario.KeyBenchConfig, size units.ByteSize, read bool) error {
	ccfg, err := cf.resolve()
	if err != nil {
		return err
	}
	cfg.ClusterConfig = ccfg
	cfg.SizeBytes = size.Int64()
	cfg.Progress = bench.TerminalProgress()
	cfg.Logger = slog.Default()
	run := scenario.RunKeyWrite
	if read {
		run = scenario.RunKeyRead
	}
	res, err := run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	return printResult(cmd, res.Result, res)
}

func newBenchKeyWriteCmd() *cobra.Command {
	var cf clusterFlags
	var cfg scenario.KeyBenchConfig
	size := units.ByteSize(units.MiB)
	cmd := &cobra.Command{
		Use:   "key-write",
		Short: "Puts of many keys (--keys of --size) by --concurrency writers through the key client",
		Long: `Puts --keys keys of --size bytes each through the key client, --concurrency
at a time (each put: allocation, chunks written durably to 3 replicas, block
commit, key commit). Values are deterministic per key (the key-read bench
verifies the same way). ops are keys; latency is per put. Then, in the same
directory, the raw disk baseline: --concurrency writers doing pwrite of
min(--size, chunk size) + fdatasync each, appending.

Embedded server in --dir by default, or a running cluster with --meta (the
keys are deleted at the end unless --keep).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKeyBench(cmd, &cf, cfg, size, false)
		},
	}
	keyBenchFlags(cmd, &cf, &cfg, &size)
	return cmd
}

func newBenchKeyReadCmd() *cobra.Command {
	var cf clusterFlags
	var cfg scenario.KeyBenchConfig
	size := units.ByteSize(units.MiB)
	cmd := &cobra.Command{
		Use:   "key-read",
		Short: "Gets of many keys, every byte verified (the keys are written first, untimed)",
		Long: `Writes --keys keys of --size bytes (untimed), then gets each of them once,
--concurrency at a time, and compares every byte with what was written (on
top of the client's CRC32C checks per 16 KiB and of the whole value). ops are
keys; latency is per get. No baseline (reads of what was just written come
from the page cache).

Embedded server in --dir by default, or a running cluster with --meta (the
keys are deleted at the end unless --keep).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKeyBench(cmd, &cf, cfg, size, true)
		},
	}
	keyBenchFlags(cmd, &cf, &cfg, &size)
	return cmd
}

func newBenchS3Cmd() *cobra.Command {
	var cf clusterFlags
	var cfg scenario.S3BenchConfig
	size := units.ByteSize(units.MiB)
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "S3 PUTs or GETs of many objects through the S3 gateway (or any S3 --endpoint), with the key client's run of the same as baseline",
		Long: `--op put: PUTs --objects objects of --size bytes, --concurrency at a time,
with aws-sdk-go-v2 (path style, UNSIGNED-PAYLOAD, no request checksums). --op
get: writes them first (untimed), then GETs each once and compares every byte;
the GETs are a default SDK's (ChecksumMode ENABLED: the SDK verifies the
CRC32C the server answers).
ops are objects; latency is per request.

By default starts an embedded spindle server in --dir (or uses the cluster at
--meta) and an S3 gateway for it in this process; and, as the baseline, the
same operations through the key client on the same cluster (key-write or
key-read of the same size and concurrency): ratio_to_baseline is what the S3
layer costs. The objects go in --rounds rounds, each timed through S3 and
through the key client one after the other, the order alternating: the two
are compared on the same machine state (±20 % drift on a shared VM).
--endpoint measures any S3 server instead (--access-key, --secret-key; no baseline).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Endpoint == "" {
				ccfg, err := cf.resolve()
				if err != nil {
					return err
				}
				cfg.ClusterConfig = ccfg
			}
			cfg.SizeBytes, cfg.Progress = size.Int64(), bench.TerminalProgress()
			res, err := scenario.RunS3(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return printResult(cmd, res.Result, res)
		},
	}
	f := cmd.Flags()
	cf.add(f)
	f.StringVar(&cfg.Endpoint, "endpoint", "", "S3 server to measure (http://host:port or https://host:port) instead of a gateway for the embedded server")
	f.StringVar(&cfg.EndpointCA, "endpoint-ca", "", "with an https:// --endpoint: the CA certificate (PEM file) its certificate is checked against (default: the system's roots)")
	f.StringVar(&cfg.AccessKey, "access-key", "", "with --endpoint: access key")
	f.StringVar(&cfg.SecretKey, "secret-key", "", "with --endpoint: secret key")
	f.IntSliceVar(&cfg.ServerPIDs, "server-pid", nil, "with --endpoint: a server process (with its children: spindle server's meta members and datanodes) whose CPU per operation is reported, by process (repeatable)")
	f.StringVar(&cfg.Region, "region", "us-east-1", "region to sign for")
	f.StringVar(&cfg.Op, "op", "put", "put or get")
	f.IntVar(&cfg.Objects, "objects", 1000, "number of objects (operations)")
	f.Var(&size, "size", "bytes per object (0 allowed)")
	f.IntVar(&cfg.Concurrency, "concurrency", 16, "requests at once")
	f.DurationVar(&cfg.Duration, "duration", 0, "time bound of the timed phase (0: none; --objects bounds it)")
	f.StringVar(&cfg.Bucket, "bucket", scenario.DefaultKeyBenchBucket, "bucket of the objects (created when missing)")
	f.StringVar(&cfg.Prefix, "prefix", "", "object name prefix (default s3-DATE-TIME-PID/)")
	f.BoolVar(&cfg.NoBaseline, "no-baseline", false, "skip the key client's baseline run")
	f.IntVar(&cfg.Rounds, "rounds", 3, "rounds over the objects, each through S3 and the key client in alternating order (1: S3, then the baseline)")
	f.StringVar(&cfg.CPUProfileDir, "cpuprofile-dir", "", "write CPU profiles of this process (client, gateway, meta service) over the timed loops of the first round here: s3.pprof and baseline.pprof")
	return cmd
}
