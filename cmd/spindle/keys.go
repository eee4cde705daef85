package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/units"
)

// The key commands: put, get, ls, rm, stat, bucket, admin. Each binds its
// flags to keyclient (or, for admin, metaapi) calls; exit codes and
// messages come from cli.KeyExit (exitcode.go).

const defaultMetaAddr = "127.0.0.1:9860"

// keyEnv is what every key command has: the meta service's address and
// how to reach it (TLS flags or a local server's client profile).
type keyEnv struct {
	meta string
	tls  tlsFlags
	// adminTokenFile: the admin bearer token of a plaintext cluster.
	adminTokenFile string
}

func (e *keyEnv) addFlags(f *pflag.FlagSet) {
	f.StringVar(&e.meta, "meta", defaultMetaAddr, "address of the meta service, host:port, or of every member of a replicated one, comma-separated (env SPINDLE_META)")
	e.tls.add(f)
	f.StringVar(&e.adminTokenFile, "admin-token-file", "", adminTokenHelp)
}

// clientTLS is the TLS settings of the command's connections (meta service
// and datanodes).
func (e *keyEnv) clientTLS() (*tlsconf.Settings, error) { return e.tls.client(e.meta) }

// metaClient returns a client of the meta service.
func (e *keyEnv) metaClient() (*metaapi.Client, error) {
	return e.metaClientOpts(metaapi.ClientOptions{})
}

// metaClientOpts returns a client of the meta service at e.meta with o
// (its TLS set from the flags).
func (e *keyEnv) metaClientOpts(o metaapi.ClientOptions) (*metaapi.Client, error) {
	return e.metaClientAt(e.meta, o)
}

// metaClientAt returns a client of the meta service at addr (one of
// e.meta's) with o, its TLS set from the flags.
func (e *keyEnv) metaClientAt(addr string, o metaapi.ClientOptions) (*metaapi.Client, error) {
	sec, err := e.clientTLS()
	if err != nil {
		return nil, err
	}
	o.TLS = sec
	if e.adminTokenFile != "" && !sec.Enabled() {
		if o.AdminToken, err = readAdminToken(e.adminTokenFile); err != nil {
			return nil, err
		}
	}
	mc, err := metaapi.NewClient(addr, o)
	if err != nil {
		return nil, cli.UsageErr(fmt.Errorf("--meta: %w", err))
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
		return nil, cli.UsageErr(err)
	}
	return kc, nil
}

// splitKey parses BUCKET/KEY.
func splitKey(arg string) (bucket, key string, err error) {
	bucket, key, ok := strings.Cut(arg, "/")
	if !ok || key == "" {
		return "", "", cli.UsageErr(fmt.Errorf("%q: want BUCKET/KEY", arg))
	}
	if err := metaapi.ValidBucket(bucket); err != nil {
		return "", "", cli.UsageErr(err)
	}
	if err := metaapi.ValidKey(key); err != nil {
		return "", "", cli.UsageErr(err)
	}
	return bucket, key, nil
}

func newPutCmd() *cobra.Command {
	var env keyEnv
	chunk, block := units.ByteSize(keyclient.DefaultChunkSize), units.ByteSize(keyclient.DefaultBlockSize)
	var inflight int
	var noProgress, recursive bool
	size := units.ByteSize(-1)
	cmd := &cobra.Command{
		Use:   "put BUCKET/KEY FILE|-  |  put --recursive BUCKET[/PREFIX] DIR",
		Short: "Write a key from a file or standard input",
		Long: `Writes FILE (or standard input, "-") as BUCKET/KEY, replacing an older
version once the whole value is stored: an interrupted or failed put leaves
the key as it was. The value is sent in --chunk-size chunks, --inflight at a
time, through the pipelines the meta service allocates, in --block-size
blocks. Prints the key, its size and CRC32C on standard output. --size N
says how many bytes the value has: an input that ends before N bytes, or
goes on past them, fails the put and leaves the key as it was (for "-", a
pipe cut short is then never stored as the value). --recursive puts every
regular file under the directory DIR as BUCKET/PREFIX/<its path below DIR>,
checking every key's name before the first put.`,
		Args: cli.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("size") && (size < 0 || recursive) {
				return cli.UsageErr(fmt.Errorf("--size %d: want 0 or more bytes, for one file", size))
			}
			var kc *keyclient.Client
			put := func(bucket, key, file string) error {
				in, total, closeIn, err := openSource(cmd, file)
				if err != nil {
					return err
				}
				defer closeIn()
				if size >= 0 {
					if total >= 0 && total != size.Int64() {
						return cli.UsageErr(fmt.Errorf("%s has %d bytes, --size says %d", file, total, size.Int64()))
					}
					in, total = &exactReader{r: in, want: size.Int64()}, size.Int64()
				}
				start := time.Now()
				bar := startTransferProgress(cmd.ErrOrStderr(), !noProgress, "put "+bucket+"/"+key, total)
				res, err := kc.Put(cmd.Context(), bucket, key, in, keyclient.PutOptions{Progress: bar.set, SizeHintBytes: total})
				bar.finish(err == nil)
				if errors.Is(err, errSizeMismatch) {
					return cli.UsageErr(fmt.Errorf("%w (nothing stored)", err))
				}
				if err != nil {
					return cli.KeyExit(err, bucket, key)
				}
				took := time.Since(start)
				return printf(cmd.OutOrStdout(), "%s/%s\t%d bytes\tcrc32c %08x\t%d blocks\t%s\n", bucket, key, res.Key.Size, res.Key.CRC32C,
					len(res.Key.Blocks), rate(int64(res.Key.Size), took))
			}
			connect := func() (err error) {
				kc, err = env.keyClient(keyclient.Options{ChunkSize: int(chunk), BlockSize: int64(block), InFlight: inflight})
				return err
			}
			if recursive {
				bucket, prefix, err := splitPrefix(args[0])
				if err != nil {
					return err
				}
				if st, err := os.Stat(args[1]); err != nil {
					return cli.Exit(cli.ExitNotFound, err)
				} else if !st.IsDir() {
					return cli.UsageErr(fmt.Errorf("--recursive: %s is not a directory", args[1]))
				}
				if err := connect(); err != nil {
					return err
				}
				defer closeQuietly(kc)
				return putTree(cmd, kc, bucket, prefix, args[1], put)
			}
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			if err := connect(); err != nil {
				return err
			}
			defer closeQuietly(kc)
			return put(bucket, key, args[1])
		},
	}
	f := cmd.Flags()
	env.addFlags(f)
	f.Var(&chunk, "chunk-size", "bytes per chunk write")
	f.Var(&block, "block-size", "bytes per block")
	f.IntVar(&inflight, "inflight", keyclient.DefaultInFlight, "chunk writes in flight")
	f.Var(&size, "size", "bytes the value has: a shorter or longer input fails the put (default: whatever the input holds)")
	f.Lookup("size").DefValue = "" // not "-1": no size unless one is given
	f.BoolVarP(&recursive, "recursive", "r", false, "FILE is a directory: put every file under it as BUCKET/PREFIX/<its path>")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar (one is drawn on a terminal once a transfer takes over a second)")
	return cmd
}

// errSizeMismatch is an input whose length is not the --size it was given.
var errSizeMismatch = errors.New("input size differs from --size")

// exactReader passes want bytes of r through and fails, instead of ending,
// when r ends before them or holds more: the key client then abandons the
// put, and the key stays as it was.
type exactReader struct {
	r    io.Reader
	want int64
	read int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.read == e.want {
		// Past the end: a probe byte tells whether the input goes on.
		var probe [1]byte
		n, err := io.ReadFull(e.r, probe[:])
		if n > 0 {
			return 0, fmt.Errorf("%w: the input goes on past --size %d bytes", errSizeMismatch, e.want)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, io.EOF
		}
		return 0, err
	}
	if rest := e.want - e.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := e.r.Read(p)
	e.read += int64(n)
	if err == io.EOF && e.read < e.want {
		return n, fmt.Errorf("%w: the input ended after %d of --size %d bytes", errSizeMismatch, e.read, e.want)
	}
	if err == io.EOF {
		err = nil // the end is decided above, on the next call
	}
	return n, err
}

// openSource opens a put's source: a file (its size known) or "-".
func openSource(cmd *cobra.Command, name string) (io.Reader, int64, func(), error) {
	if name == "-" {
		return cmd.InOrStdin(), -1, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, cli.Exit(cli.ExitNotFound, err)
	}
	st, err := f.Stat()
	if err != nil {
		closeQuietly(f) // read-only
		return nil, 0, nil, err
	}
	if st.IsDir() {
		closeQuietly(f)
		return nil, 0, nil, cli.UsageErr(fmt.Errorf("%s is a directory: use --recursive to put the files under it", name))
	}
	total := int64(-1)
	if st.Mode().IsRegular() {
		total = st.Size()
	}
	return f, total, func() { closeQuietly(f) }, nil
}

func newGetCmd() *cobra.Command {
	var env keyEnv
	var offset, length int64
	var inflight int
	var noProgress, force, recursive bool
	cmd := &cobra.Command{
		Use:   "get BUCKET/KEY [FILE|-]  |  get --recursive BUCKET[/PREFIX] DIR",
		Short: "Read a key to a file or standard output",
		Long: `Reads BUCKET/KEY to FILE (default "-", standard output), verifying
every piece against its checksum (reading from another replica when one
fails) and the whole value against its CRC32C. A FILE is written under a
temporary name and renamed once complete: a failed get leaves no FILE
(on standard output, what was written before a failure must be discarded:
the exit status says so, 5 for corrupt data). An existing FILE is replaced
only with --force when a person runs get (standard input and error on a
terminal); a script's get replaces it, as cp does. A new FILE gets the permissions the umask leaves (0644
usually). --offset and --length read a range (no whole-value check then); a
range that runs past the end of the value gives the bytes that exist, as S3
does, and an --offset past the end is a usage error. --recursive gets every
key under BUCKET/PREFIX into the directory DIR, at its path below PREFIX
(creating directories), after checking that no file would be replaced
without --force.`,
		Args: cli.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if offset < 0 {
				return cli.UsageErr(fmt.Errorf("--offset %d: want 0 or more", offset))
			}
			if length < -1 {
				return cli.UsageErr(fmt.Errorf("--length %d: want 0 or more, or -1 for the rest of the value", length))
			}
			if recursive && (len(args) != 2 || args[1] == "-" || offset != 0 || length != -1) {
				return cli.UsageErr(errors.New("--recursive: want BUCKET[/PREFIX] DIR, without --offset or --length"))
			}
			// An existing file is replaced with --force, or when no
			// person is at the command (a script): see interactive.
			replace := force || !interactive(cmd)
			var kc *keyclient.Client
			ctx := cmd.Context()
			get := func(bucket, key, dest string) error {
				out, commit, abort, err := openDest(cmd, dest, replace)
				if err != nil {
					return err
				}
				// The key client looks the key up (again, if the version
				// it found is replaced before a byte is read) and clips a
				// range past the end to what exists, as S3 does.
				var bar *transferProgress
				opts := keyclient.GetOptions{ClipRange: true, Looked: func(ki metaapi.KeyInfo) {
					if bar == nil && uint64(offset) <= ki.Size {
						n := length
						if rest := int64(ki.Size) - offset; n < 0 || n > rest {
							n = rest
						}
						bar = startTransferProgress(cmd.ErrOrStderr(), !noProgress && dest != "-", "get "+bucket+"/"+key, n)
					}
				}}
				opts.Progress = func(done int64) {
					if bar != nil {
						bar.set(done)
					}
				}
				ki, err := kc.GetRange(ctx, bucket, key, offset, length, out, opts)
				if bar != nil {
					bar.finish(err == nil)
				}
				if err != nil {
					abort()
					if errors.Is(err, keyclient.ErrRange) {
						return cli.Exit(cli.ExitUsage, fmt.Errorf("get %s/%s: --offset %d is past the end of the %d-byte value", bucket, key, offset, ki.Size))
					}
					return cli.KeyExit(err, bucket, key)
				}
				return commit()
			}
			connect := func() (err error) {
				kc, err = env.keyClient(keyclient.Options{ReadInFlight: inflight})
				return err
			}
			if recursive {
				bucket, prefix, err := splitPrefix(args[0])
				if err != nil {
					return err
				}
				if st, err := os.Stat(args[1]); err == nil && !st.IsDir() {
					return cli.UsageErr(fmt.Errorf("--recursive: %s is not a directory", args[1]))
				}
				if err := connect(); err != nil {
					return err
				}
				defer closeQuietly(kc)
				return getTree(cmd, kc, bucket, prefix, args[1], replace, get)
			}
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			dest := "-"
			if len(args) == 2 {
				dest = args[1]
			}
			if err := checkDest(dest, replace); err != nil {
				return err
			}
			if err := connect(); err != nil {
				return err
			}
			defer closeQuietly(kc)
			return get(bucket, key, dest)
		},
	}
	f := cmd.Flags()
	env.addFlags(f)
	f.Int64Var(&offset, "offset", 0, "first byte to read")
	f.Int64Var(&length, "length", -1, "bytes to read (-1: to the end)")
	f.IntVar(&inflight, "inflight", keyclient.DefaultReadInFlight, "reads in flight")
	f.BoolVar(&force, "force", false, "replace FILE when it exists")
	f.BoolVarP(&recursive, "recursive", "r", false, "get every key under BUCKET[/PREFIX] into the directory FILE, at its path below PREFIX")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar (one is drawn on a terminal once a transfer to a FILE takes over a second)")
	cli.AddVersions(cmd, cli.Env{MetaClient: env.metaClient}) // --version-id
	return cmd
}

// interactive says whether a person is at the command: its standard input
// and standard error are terminals (a variable: tests set it). A script —
// the shared acceptance checks among them, which get keys into the same
// file again and again — is not: there get replaces an existing FILE, as
// cp and aws s3 cp do; a person is asked for --force.
var interactive = func(cmd *cobra.Command) bool {
	return stdinIsTerminal(cmd) && cmd.ErrOrStderr() == io.Writer(os.Stderr) && bench.StderrIsTerminal()
}

// checkDest refuses, before anything is read, a destination that is a
// directory or, without force, a file that exists.
func checkDest(name string, force bool) error {
	if name == "-" {
		return nil
	}
	st, err := os.Stat(name)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("output file: %w", err)
	case st.IsDir():
		return cli.UsageErr(fmt.Errorf("%s is a directory", name))
	case !force:
		return cli.UsageErr(fmt.Errorf("%s exists: use --force to replace it", name))
	}
	return nil
}

// maxTempNameTries bounds the names openDest tries for its temporary file.
const maxTempNameTries = 100

// openDest opens a get's destination: standard output, or a temporary file
// next to name that commit moves to name and abort removes. The temporary
// file is created with mode 0666, which the kernel reduces by the umask, as
// for any file a command creates. Without force commit refuses to replace a
// name that appeared meanwhile (a hard link fails on an existing name).
func openDest(cmd *cobra.Command, name string, force bool) (w io.Writer, commit func() error, abort func(), err error) {
	if name == "-" {
		return cmd.OutOrStdout(), func() error { return nil }, func() {}, nil
	}
	var f *os.File
	for try := 0; ; try++ {
		tmp := filepath.Join(filepath.Dir(name), fmt.Sprintf(".%s.spindle-%d", filepath.Base(name), rand.Uint32()))
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || try >= maxTempNameTries {
			return nil, nil, nil, fmt.Errorf("output file: %w", err)
		}
	}
	commit = func() error {
		if err := f.Close(); err != nil {
			_ = os.Remove(f.Name()) // best effort: err is the error
			return err
		}
		if force {
			err = os.Rename(f.Name(), name)
		} else if err = os.Link(f.Name(), name); errors.Is(err, fs.ErrExist) {
			err = cli.UsageErr(fmt.Errorf("%s appeared while reading: use --force to replace it", name))
		} else if err != nil { // a filesystem without hard links
			if _, serr := os.Lstat(name); serr == nil {
				err = cli.UsageErr(fmt.Errorf("%s appeared while reading: use --force to replace it", name))
			} else {
				err = os.Rename(f.Name(), name)
			}
		}
		// After a link or a failure; gone after a rename. Best effort: the
		// output is in place (or err says why not), a temporary file stays.
		_ = os.Remove(f.Name())
		return err
	}
	abort = func() { // after a failure, its error the one: best effort
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	return f, commit, abort, nil
}

func newLsCmd() *cobra.Command {
	var env keyEnv
	var asJSON bool
	var maxKeys int
	var startAfter string
	cmd := &cobra.Command{
		Use:   "ls BUCKET[/PREFIX]",
		Short: "List the keys of a bucket (those starting with PREFIX)",
		Long: `Lists the keys of BUCKET that start with PREFIX, in key order, one per
line: creation time (UTC), size in bytes and key, as aws s3 ls does; --json
prints one JSON object per key. --max N stops after N keys and, when more
follow, says on standard error how to list the next ones: --start-after
KEY lists the keys after KEY.`,
		Args: cli.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, prefix, _ := strings.Cut(args[0], "/")
			if err := metaapi.ValidBucket(bucket); err != nil {
				return cli.UsageErr(err)
			}
			if maxKeys < 0 {
				return cli.UsageErr(fmt.Errorf("--max %d: want 0 (every key) or more", maxKeys))
			}
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer closeQuietly(kc)
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			n, last, more, err := listKeys(cmd.Context(), kc, bucket, prefix, startAfter, maxKeys, func(ki metaapi.KeyInfo) error {
				if asJSON {
					return enc.Encode(ki)
				}
				_, err := fmt.Fprintf(out, "%s %12d %s\n", ki.Created.UTC().Format("2006-01-02 15:04:05"), ki.Size, ki.Key)
				return err
			})
			if err != nil {
				return cli.KeyExit(err, bucket, "")
			}
			if more {
				return printf(cmd.ErrOrStderr(), "%d listed, more follow: spindle ls %s --max %d --start-after %q\n", n, args[0], maxKeys, last)
			}
			return nil
		},
	}
	env.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per key")
	cmd.Flags().IntVar(&maxKeys, "max", 0, "list at most this many keys (0: every key)")
	cmd.Flags().StringVar(&startAfter, "start-after", "", "list the keys after this one (the full key, PREFIX included)")
	cli.AddVersions(cmd, cli.Env{MetaClient: env.metaClient}) // --versions
	return cmd
}

// listKeys calls fn for the keys of bucket that start with prefix and come
// after startAfter, in key order, at most maxKeys of them (0: all). It
// returns how many it listed, the last one, and whether more follow.
func listKeys(ctx context.Context, kc *keyclient.Client, bucket, prefix, startAfter string, maxKeys int, fn func(metaapi.KeyInfo) error) (n int, last string, more bool, err error) {
	after := startAfter
	for range keyclient.MaxListPages {
		limit := keyclient.ListPageSize
		if maxKeys > 0 {
			limit = min(limit, maxKeys-n)
		}
		kl, err := kc.ListPage(ctx, bucket, prefix, after, limit)
		if err != nil {
			return n, last, false, err
		}
		for _, k := range kl.Keys {
			if err := fn(k); err != nil {
				return n, last, false, err
			}
			n++
			last = k.Key
		}
		if kl.Next == "" {
			return n, last, false, nil
		}
		if kl.Next <= after {
			return n, last, false, fmt.Errorf("list %s/%s: meta service returned page cursor %q after %q: not advancing", bucket, prefix, kl.Next, after)
		}
		if maxKeys > 0 && n >= maxKeys {
			return n, last, true, nil
		}
		after = kl.Next
	}
	return n, last, false, fmt.Errorf("list %s/%s: more than %d pages", bucket, prefix, keyclient.MaxListPages)
}

func newRmCmd() *cobra.Command {
	var env keyEnv
	cmd := &cobra.Command{
		Use:   "rm BUCKET/KEY",
		Short: "Delete a key (its blocks are deleted on the datanodes later)",
		Args:  cli.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer closeQuietly(kc)
			if err := kc.Delete(cmd.Context(), bucket, key); err != nil {
				return cli.KeyExit(err, bucket, key)
			}
			return nil
		},
	}
	env.addFlags(cmd.Flags())
	return cli.WithVersionDelete(cmd, cli.Env{MetaClient: env.metaClient}) // --version-id (S3 versions, object lock)
}

func newStatCmd() *cobra.Command {
	var env keyEnv
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stat BUCKET/KEY",
		Short: "Show a key's metadata: size, CRC32C, blocks and where their replicas are",
		Args:  cli.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, err := splitKey(args[0])
			if err != nil {
				return err
			}
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer closeQuietly(kc)
			ki, err := kc.Stat(cmd.Context(), bucket, key)
			if err != nil {
				return cli.KeyExit(err, bucket, key)
			}
			out := cmd.OutOrStdout()
			inline := len(ki.Inline) > 0
			ki.Inline = nil // stat describes the value, it does not print it
			if asJSON {
				return json.NewEncoder(out).Encode(ki)
			}
			bw := bufio.NewWriter(out) // Flush, returned, has the first write error
			fmt.Fprintf(bw, "key:     %s/%s\nsize:    %d (%s)\ncrc32c:  %08x\ncreated: %s\nblocks:  %d\n",
				ki.Bucket, ki.Key, ki.Size, units.FormatBytes(int64(ki.Size)), ki.CRC32C, ki.Created.UTC().Format(time.RFC3339Nano), len(ki.Blocks))
			if inline {
				fmt.Fprintln(bw, "stored:  inline, in the key's record in the meta service")
			}
			tw := tabwriter.NewWriter(bw, 0, 8, 2, ' ', 0)
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
			if err := tw.Flush(); err != nil {
				return err
			}
			return bw.Flush()
		},
	}
	env.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the metadata as JSON")
	return cmd
}

func newBucketCmd() *cobra.Command {
	var env keyEnv
	cmd := &cobra.Command{
		Use:   "bucket create|ls|rm|versioning",
		Short: "Create, list and delete buckets",
		Long: `Buckets hold keys. Names are 3..63 characters of a-z, 0-9, '-' and '.',
starting and ending with a letter or a digit. A bucket is deleted only when
it holds no key, or with rm --force, which deletes its keys first.`,
		Args: cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.UsageErr(errors.New("want bucket create|ls|rm|versioning"))
		},
	}
	env.addFlags(cmd.PersistentFlags())
	withBucket := func(use, short string, fn func(ctx context.Context, kc *keyclient.Client, name string, out io.Writer) error) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: cli.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := metaapi.ValidBucket(args[0]); err != nil {
					return cli.UsageErr(err)
				}
				kc, err := env.keyClient(keyclient.Options{})
				if err != nil {
					return err
				}
				defer closeQuietly(kc)
				if err := fn(cmd.Context(), kc, args[0], cmd.OutOrStdout()); err != nil {
					return cli.KeyExit(err, args[0], "")
				}
				return nil
			},
		}
	}
	var asJSON bool
	ls := &cobra.Command{
		Use: "ls", Short: "List the buckets: keys, bytes, creation time", Args: cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			kc, err := env.keyClient(keyclient.Options{})
			if err != nil {
				return err
			}
			defer closeQuietly(kc)
			bs, err := kc.ListBuckets(cmd.Context())
			if err != nil {
				return cli.KeyExit(err, "", "")
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
		newBucketRmCmd(&env),
		cli.BucketVersioningCmd(cli.Env{MetaClient: env.metaClient}),
	)
	return cli.WithObjectLock(cli.WithEC(cmd, cli.Env{MetaClient: env.metaClient}), cli.Env{MetaClient: env.metaClient}) // set-ec, get-ec, ec-default, create --ec; object-lock, retention, legal-hold, create --object-lock
}

func newAdminCmd() *cobra.Command {
	var env keyEnv
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "admin nodes|pipelines|containers|replication|safemode|container-get|meta|user|grant|revoke-grant|grants|damaged|datanode|join-token|cert",
		Short: "Show the cluster as the meta service sees it: datanodes, pipelines, containers, re-replication, safe mode, the meta service's members, S3 users, damaged blocks and keys; back up the meta store; decommission datanodes",
		Args:  cli.ExactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.UsageErr(errors.New("want admin nodes|pipelines|containers|replication|safemode|container-get|meta|user|grant|revoke-grant|grants|damaged|datanode|join-token|cert"))
		},
	}
	env.addFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	view := func(use, short string, fn func(ctx context.Context, mc *metaapi.Client, tw *tabwriter.Writer) (any, error)) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: cli.ExactArgs(0),
			RunE: func(cmd *cobra.Command, _ []string) error {
				mc, err := env.metaClient()
				if err != nil {
					return err
				}
				if !mc.TLS().Enabled() {
					if err := printf(cmd.ErrOrStderr(), "INSECURE: plaintext connection to the meta service at %s (--insecure, no TLS)\n", env.meta); err != nil {
						return err
					}
				}
				out := cmd.OutOrStdout()
				tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
				table := tw
				if asJSON {
					table = tabwriter.NewWriter(io.Discard, 0, 8, 2, ' ', 0)
				}
				v, err := fn(cmd.Context(), mc, table)
				if err != nil {
					return cli.KeyExit(err, "", "")
				}
				if asJSON {
					return json.NewEncoder(out).Encode(v)
				}
				return tw.Flush()
			},
		}
	}
	cmd.AddCommand(
		view("nodes", "Datanodes: ID, address, health, last heartbeat, pipelines, containers, bytes used (replicas + EC shards); the raw and logical bytes",
			func(ctx context.Context, mc *metaapi.Client, w *tabwriter.Writer) (any, error) {
				ns, err := mc.Nodes(ctx)
				if err != nil {
					return nil, err
				}
				shards := cli.ECNodeSpace(ctx, mc, w) // the raw and logical bytes; each node's EC shards
				fmt.Fprintln(w, "ID\tADDR\tHEALTH\tSTATE\tLAST HEARTBEAT\tPIPELINES\tCONTAINERS\tUSED\tAVAILABLE\tMETRICS")
				for _, n := range ns {
					avail := "-"
					if n.CapacityBytes > 0 {
						avail = fmt.Sprintf("%s of %s%s", units.FormatBytes(int64(n.AvailableBytes)), units.FormatBytes(int64(n.CapacityBytes)), map[bool]string{true: " FULL"}[n.Full])
					}
					metrics := n.MetricsURL
					if metrics == "" {
						metrics = "-"
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%v\t%d\t%s\t%s\t%s\n", n.NodeID, n.Addr, n.Health, nodeState(n), ago(n.LastHeartbeat), n.Pipelines, n.Containers, units.FormatBytes(int64(n.UsedBytes))+shards[n.NodeID], avail, metrics)
				}
				return ns, nil
			}),
		view("pipelines", "Pipelines: ID, state, leader, members",
			func(ctx context.Context, mc *metaapi.Client, w *tabwriter.Writer) (any, error) {
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
		view("containers", "Containers: ID, pipeline, state, bytes used, blocks, BCSID, replicas (node:state@BCSID, node:DEAD missing, UNDER-REPLICATED) or EC policy and shards",
			func(ctx context.Context, mc *metaapi.Client, w *tabwriter.Writer) (any, error) {
				cs, err := mc.Containers(ctx)
				if err != nil {
					return nil, err
				}
				fmt.Fprintln(w, "ID\tPIPELINE\tSTATE\tUSED\tBLOCKS\tBCSID\tREPLICAS")
				ecs := cli.ECNotes(ctx, mc) // erasure-coded ones: policy, shards
				for _, c := range cs {
					fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%d\t%d\t%s\n", c.ID, c.Pipeline, c.State, units.FormatBytes(int64(c.UsedBytes)), c.Blocks, c.BCSID, cli.ECOrReplicas(ecs[c.ID], replicaList(c)))
				}
				return cs, nil
			}),
	)
	cmd.AddCommand(newAdminReplicationCmds(&env, &asJSON)...)
	cmd.AddCommand(newAdminMetaCmd(&env, &asJSON), newAdminContainerGetCmd(&env))
	cmd.AddCommand(cli.AdminUserCmd(cli.Env{MetaClient: env.metaClient, JSON: &asJSON}))
	cmd.AddCommand(cli.AdminKEKCmd(cli.Env{MetaClient: env.metaClient, JSON: &asJSON}), cli.AdminLifecycleCmd(cli.Env{MetaClient: env.metaClient, JSON: &asJSON}))
	cmd.AddCommand(cli.AdminGrantCmds(cli.Env{MetaClient: env.metaClient, JSON: &asJSON})...)
	cmd.AddCommand(cli.AdminJoinTokenCmd(cli.Env{MetaClient: env.metaClient, JSON: &asJSON}), cli.AdminCertCmd(cli.Env{MetaClient: env.metaClient, JSON: &asJSON}))
	cmd.AddCommand(newAdminOpsCmds(&env, &asJSON)...)
	return cmd
}

// replicaList formats replicas as node:state@BCSID, a replica behind the
// highest BCSID marked "(behind)", then the missing ones (a DEAD member of
// an OPEN container's pipeline) as node:DEAD, and "UNDER-REPLICATED".
func replicaList(c metaapi.ContainerInfo) string {
	var out []string
	for _, r := range c.ReplicaDetails {
		s := fmt.Sprintf("%d:%s@%d", r.Node, r.State, r.BCSID)
		if r.Behind {
			s += "(behind)"
		}
		out = append(out, s)
	}
	for _, id := range c.Missing {
		out = append(out, fmt.Sprintf("%d:DEAD", id))
	}
	if c.UnderReplicated {
		out = append(out, "UNDER-REPLICATED")
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
