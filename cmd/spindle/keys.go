package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
)

// The key commands: put, get, ls, rm, stat, bucket, admin. Each binds its
// flags to keyclient (or, for admin, metaapi) calls; exit codes and
// messages come from keyExit (exitcode.go).

const defaultMetaAddr = "127.0.0.1:9860"

// keyEnv is what every key command has: the meta service's address.
type keyEnv struct {
	meta string
}

func (e *keyEnv) addFlags(f *pflag.FlagSet) {
	f.StringVar(&e.meta, "meta", defaultMetaAddr, "address of the meta service, host:port (env SPINDLE_META)")
}

// metaClient returns a client of the meta service.
func (e *keyEnv) metaClient() (*metaapi.Client, error) {
	mc, err := metaapi.NewClient(e.meta, metaapi.ClientOptions{})
	if err != nil {
		return nil, usageErr(fmt.Errorf("--meta: %w", err))
	}
	return mc, nil
}

// keyClient returns a key client on the meta service.
func (e *keyEnv) keyClient(o keyclient.Options) (*keyclient.Client, error) {
	mc, err := e.metaClient()
	if err != nil {
		return nil, err
	}
	kc, err := keyclient.New(mc, o)
	if err != nil {
		return nil, usageErr(err)
	}
	return kc, nil
}

// splitKey parses BUCKET/KEY.
func splitKey(arg string) (bucket, key string, err error) {
	bucket, key, ok := strings.Cut(arg, "/")
	if !ok || key == "" {
		return "", "", usageErr(fmt.Errorf("%q: want BUCKET/KEY", arg))
	}
	if err := metaapi.ValidBucket(bucket); err != nil {
		return "", "", usageErr(err)
	}
	if err := metaapi.ValidKey(key); err != nil {
		return "", "", usageErr(err)
	}
	return bucket, key, nil
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageErr(err)
		}
		return nil
	}
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(cmd, args); err != nil {
			return usageErr(err)
		}
		return nil
	}
}

func newPutCmd() *cobra.Command {
	var env keyEnv
	chunk, block := units.ByteSize(keyclient.DefaultChunkSize), units.ByteSize(keyclient.DefaultBlockSize)
	var inflight int
	var noProgress bool
	cmd := &cobra.Command{
		Use:   "put BUCKET/KEY FILE|-",
		Short: "Write a key from a file or standard input",
		Long: `Writes FILE (or standard input, "-") as BUCKET/KEY, replacing an older
version once the whole value is stored: an interrupted or failed put leaves
the key as it was. The value is sent in --chunk-size chunks, --inflight at a
time, through the pipelines the meta service allocates, in --block-size
blocks. Prints the key, its size and CRC32C on standard output.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			in, total, closeIn, err := openSource(cmd, args[1])
			if err != nil {
				return err
			}
			defer closeIn()
			kc, err := env.keyClient(keyclient.Options{ChunkSize: int(chunk), BlockSize: int64(block), InFlight: inflight})
			if err != nil {
				return err
			}
			defer kc.Close()
			start := time.Now()
			bar := startTransferProgress(cmd.ErrOrStderr(), !noProgress, "put "+args[0], total)
			res, err := kc.Put(cmd.Context(), bucket, key, in, keyclient.PutOptions{Progress: bar.set})
			bar.finish(err == nil)
			if err != nil {
				return keyExit(err, bucket, key)
			}
			took := time.Since(start)
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s\t%d bytes\tcrc32c %08x\t%d blocks\t%s\n", bucket, key, res.Key.Size, res.Key.CRC32C,
				len(res.Key.Blocks), rate(int64(res.Key.Size), took))
			return nil
		},
	}
	f := cmd.Flags()
	env.addFlags(f)
	f.Var(&chunk, "chunk-size", "bytes per chunk write")
	f.Var(&block, "block-size", "bytes per block")
	f.IntVar(&inflight, "inflight", keyclient.DefaultInFlight, "chunk writes in flight")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar (one is drawn on a terminal once a transfer takes over a second)")
	return cmd
}

// openSource opens a put's source: a file (its size known) or "-".
func openSource(cmd *cobra.Command, name string) (io.Reader, int64, func(), error) {
	if name == "-" {
		return cmd.InOrStdin(), -1, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, &exitError{code: exitNotFound, err: err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	if st.IsDir() {
		f.Close()
		return nil, 0, nil, usageErr(fmt.Errorf("%s is a directory", name))
	}
	total := int64(-1)
	if st.Mode().IsRegular() {
		total = st.Size()
	}
	return f, total, func() { f.Close() }, nil
}

func newGetCmd() *cobra.Command {
	var env keyEnv
	var offset, length int64
	var inflight int
	var noProgress bool
	cmd := &cobra.Command{
		Use:   "get BUCKET/KEY [FILE|-]",
		Short: "Read a key to a file or standard output",
		Long: `Reads BUCKET/KEY to FILE (default "-", standard output), verifying
every piece against its checksum (reading from another replica when one
fails) and the whole value against its CRC32C. A FILE is written under a
temporary name and renamed once complete: a failed get leaves no FILE
(on standard output, what was written before a failure must be discarded:
the exit status says so, 5 for corrupt data). --offset and --length read a
range (no whole-value check then).`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			dest := "-"
			if len(args) == 2 {
				dest = args[1]
			}
			kc, err := env.keyClient(keyclient.Options{ReadInFlight: inflight})
			if err != nil {
				return err
			}
			defer kc.Close()
			ctx := cmd.Context()
			ki, err := kc.Stat(ctx, bucket, key)
			if err != nil {
				return keyExit(err, bucket, key)
			}
			total := length
			if total < 0 {
				total = int64(ki.Size) - offset
			}
			out, commit, abort, err := openDest(cmd, dest)
			if err != nil {
				return err
			}
			bar := startTransferProgress(cmd.ErrOrStderr(), !noProgress && dest != "-", "get "+args[0], total)
			err = kc.ReadKey(ctx, ki, offset, length, out, keyclient.GetOptions{Progress: bar.set})
			bar.finish(err == nil)
			if err != nil {
				abort()
				return keyExit(fmt.Errorf("get %s/%s: %w", bucket, key, err), bucket, key)
			}
			return commit()
		},
	}
	f := cmd.Flags()
	env.addFlags(f)
	f.Int64Var(&offset, "offset", 0, "first byte to read")
	f.Int64Var(&length, "length", -1, "bytes to read (-1: to the end)")
	f.IntVar(&inflight, "inflight", keyclient.DefaultReadInFlight, "reads in flight")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar (one is drawn on a terminal once a transfer to a FILE takes over a second)")
	return cmd
}

// openDest opens a get's destination: standard output, or a temporary file
// next to name that commit renames to name and abort removes.
func openDest(cmd *cobra.Command, name string) (w io.Writer, commit func() error, abort func(), err error) {
	if name == "-" {
		return cmd.OutOrStdout(), func() error { return nil }, func() {}, nil
	}
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return nil, nil, nil, usageErr(fmt.Errorf("%s is a directory", name))
	}
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".spindle-*")
	if err != nil {
		return nil, nil, nil, err
	}
	commit = func() error {
		if err := f.Close(); err != nil {
			os.Remove(f.Name())
			return err
		}
		if err := os.Rename(f.Name(), name); err != nil {
			os.Remove(f.Name())
			return err
		}
		return nil
	}
	abort = func() {
		f.Close()
		os.Remove(f.Name())
	}
	return f, commit, abort, nil
}

func newLsCmd() *cobra.Command {
	var env keyEnv
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls BUCKET[/PREFIX]",
		Short: "List the keys of a bucket (those starting with PREFIX)",
		Long: `Lists the keys of BUCKET that start with PREFIX, in key order, one per
line: size in bytes, creation time (UTC) and key; --json prints one JSON
object per key.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, prefix, _ := strings.Cut(args[0], "/")
			if err := metaapi.ValidBucket(bucket); err != nil {
				return usageErr(err)
			}
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer kc.Close()
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', tabwriter.AlignRight)
			enc := json.NewEncoder(out)
			err = kc.List(cmd.Context(), bucket, prefix, func(ki metaapi.KeyInfo) error {
				if asJSON {
					return enc.Encode(ki)
				}
				_, err := fmt.Fprintf(tw, "%d\t  %s\t  %s\t\n", ki.Size, ki.Created.UTC().Format(time.RFC3339), ki.Key)
				return err
			})
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return keyExit(err, bucket, "")
			}
			return nil
		},
	}
	env.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per key")
	return cmd
}

func newRmCmd() *cobra.Command {
	var env keyEnv
	cmd := &cobra.Command{
		Use:   "rm BUCKET/KEY",
		Short: "Delete a key (its blocks are deleted on the datanodes later)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer kc.Close()
			if err := kc.Delete(cmd.Context(), bucket, key); err != nil {
				return keyExit(err, bucket, key)
			}
			return nil
		},
	}
	env.addFlags(cmd.Flags())
	return cmd
}

func newStatCmd() *cobra.Command {
	var env keyEnv
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stat BUCKET/KEY",
		Short: "Show a key's metadata: size, CRC32C, blocks and where their replicas are",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer kc.Close()
			ki, err := kc.Stat(cmd.Context(), bucket, key)
			if err != nil {
				return keyExit(err, bucket, key)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(ki)
			}
			fmt.Fprintf(out, "key:     %s/%s\nsize:    %d (%s)\ncrc32c:  %08x\ncreated: %s\nblocks:  %d\n",
				ki.Bucket, ki.Key, ki.Size, units.FormatBytes(int64(ki.Size)), ki.CRC32C, ki.Created.UTC().Format(time.RFC3339Nano), len(ki.Blocks))
			tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
			if len(ki.Blocks) > 0 {
				fmt.Fprintln(tw, "  #\tCONTAINER/BLOCK\tPIPELINE\tLENGTH\tREPLICAS")
			}
			for i, b := range ki.Blocks {
				var members []string
				for _, m := range b.Members {
					members = append(members, fmt.Sprintf("%d=%s", m.NodeID, m.Addr))
				}
				fmt.Fprintf(tw, "  %d\t%d/%d\t%d\t%d\t%s\n", i, b.Container, b.Local, b.Pipeline, b.Length, strings.Join(members, ","))
			}
			return tw.Flush()
		},
	}
	env.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the metadata as JSON")
	return cmd
}

func newBucketCmd() *cobra.Command {
	var env keyEnv
	cmd := &cobra.Command{
		Use:   "bucket create|ls|rm",
		Short: "Create, list and delete buckets",
		Long: `Buckets hold keys. Names are 3..63 characters of a-z, 0-9, '-' and '.',
starting and ending with a letter or a digit. A bucket is deleted only when
it holds no key.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return usageErr(errors.New("want bucket create|ls|rm")) },
	}
	env.addFlags(cmd.PersistentFlags())
	withBucket := func(use, short string, fn func(ctx context.Context, kc *keyclient.Client, name string, out io.Writer) error) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := metaapi.ValidBucket(args[0]); err != nil {
					return usageErr(err)
				}
				kc, err := env.keyClient(keyclient.Options{})
				if err != nil {
					return err
				}
				defer kc.Close()
				if err := fn(cmd.Context(), kc, args[0], cmd.OutOrStdout()); err != nil {
					return keyExit(err, args[0], "")
				}
				return nil
			},
		}
	}
	var asJSON bool
	ls := &cobra.Command{
		Use: "ls", Short: "List the buckets: keys, bytes, creation time", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer kc.Close()
			bs, err := kc.ListBuckets(cmd.Context())
			if err != nil {
				return keyExit(err, "", "")
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(bs)
			}
			tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKEYS\tBYTES\tCREATED")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", b.Name, b.Keys, b.Bytes, b.Created.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print the buckets as JSON")
	cmd.AddCommand(
		withBucket("create", "Create a bucket", func(ctx context.Context, kc *keyclient.Client, name string, _ io.Writer) error {
			_, err := kc.CreateBucket(ctx, name)
			return err
		}),
		ls,
		withBucket("rm", "Delete an empty bucket", func(ctx context.Context, kc *keyclient.Client, name string, _ io.Writer) error {
			return kc.DeleteBucket(ctx, name)
		}),
	)
	return cmd
}

func newAdminCmd() *cobra.Command {
	var env keyEnv
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "admin nodes|pipelines|containers|replication|safemode|container-get|user",
		Short: "Show the cluster as the meta service sees it: datanodes, pipelines, containers, re-replication, safe mode",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr(errors.New("want admin nodes|pipelines|containers|replication|safemode|container-get|user"))
		},
	}
	env.addFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	view := func(use, short string, fn func(ctx context.Context, mc *metaapi.Client, tw io.Writer) (any, error)) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: exactArgs(0),
			RunE: func(cmd *cobra.Command, _ []string) error {
				mc, err := env.metaClient()
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
				var table io.Writer = tw
				if asJSON {
					table = io.Discard
				}
				v, err := fn(cmd.Context(), mc, table)
				if err != nil {
					return keyExit(err, "", "")
				}
				if asJSON {
					return json.NewEncoder(out).Encode(v)
				}
				return tw.Flush()
			},
		}
	}
	cmd.AddCommand(
		view("nodes", "Datanodes: ID, address, health, last heartbeat, pipelines, containers, bytes used",
			func(ctx context.Context, mc *metaapi.Client, w io.Writer) (any, error) {
				ns, err := mc.Nodes(ctx)
				if err != nil {
					return nil, err
				}
				fmt.Fprintln(w, "ID\tADDR\tHEALTH\tLAST HEARTBEAT\tPIPELINES\tCONTAINERS\tUSED")
				for _, n := range ns {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%v\t%d\t%s\n", n.NodeID, n.Addr, n.Health, ago(n.LastHeartbeat), n.Pipelines, n.Containers, units.FormatBytes(int64(n.UsedBytes)))
				}
				return ns, nil
			}),
		view("pipelines", "Pipelines: ID, state, leader, members",
			func(ctx context.Context, mc *metaapi.Client, w io.Writer) (any, error) {
				ps, err := mc.Pipelines(ctx)
				if err != nil {
					return nil, err
				}
				fmt.Fprintln(w, "ID\tSTATE\tLEADER\tMEMBERS")
				for _, p := range ps {
					var members []string
					for _, m := range p.Members {
						members = append(members, fmt.Sprintf("%d=%s", m.NodeID, m.Addr))
					}
					fmt.Fprintf(w, "%d\t%s\t%d\t%s\n", p.ID, p.State, p.Leader, strings.Join(members, ","))
				}
				return ps, nil
			}),
		view("containers", "Containers: ID, pipeline, state, bytes used, blocks, BCSID, replicas (node:state@BCSID)",
			func(ctx context.Context, mc *metaapi.Client, w io.Writer) (any, error) {
				cs, err := mc.Containers(ctx)
				if err != nil {
					return nil, err
				}
				fmt.Fprintln(w, "ID\tPIPELINE\tSTATE\tUSED\tBLOCKS\tBCSID\tREPLICAS")
				for _, c := range cs {
					fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%d\t%d\t%s\n", c.ID, c.Pipeline, c.State, units.FormatBytes(int64(c.UsedBytes)), c.Blocks,
						c.BCSID, replicaList(c.ReplicaDetails))
				}
				return cs, nil
			}),
	)
	cmd.AddCommand(newAdminReplicationCmds(&env, &asJSON)...)
	cmd.AddCommand(newAdminContainerGetCmd())
	cmd.AddCommand(newAdminUserCmd(&env, &asJSON))
	return cmd
}

// replicaList formats replicas as node:state@BCSID, a replica behind the
// highest BCSID marked "(behind)".
func replicaList(rs []metaapi.ReplicaInfo) string {
	var out []string
	for _, r := range rs {
		s := fmt.Sprintf("%d:%s@%d", r.Node, r.State, r.BCSID)
		if r.Behind {
			s += "(behind)"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// ago formats a time as a duration before now.
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(100*time.Millisecond).String() + " ago"
}

// rate formats n bytes in d as MB/s.
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf("%.1f MB/s", float64(n)/1e6/d.Seconds())
}
