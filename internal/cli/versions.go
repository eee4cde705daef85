package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// AddVersions gives the key commands ls and get their S3 versions flags
// (issue 35): `spindle ls --versions` lists every version and delete
// marker, `spindle get --version-id ID` reads one version. Called with
// the command (by its name) once it is built; without the flag the
// command runs as before.
func AddVersions(cmd *cobra.Command, env Env) {
	orig := cmd.RunE
	switch cmd.Name() {
	case "ls":
		var on bool
		cmd.Flags().BoolVar(&on, "versions", false, "list every version and delete marker of the keys (S3 versioning), newest first within a key")
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if !on {
				return orig(c, args)
			}
			return lsVersions(c, env, args[0])
		}
	case "get":
		var vid string
		cmd.Flags().StringVar(&vid, "version-id", "", "read this version of the key (S3 versioning; \"null\": the null version)")
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if vid == "" {
				return orig(c, args)
			}
			return getVersion(c, env, args, vid)
		}
	}
}

// lsVersions prints a bucket's versions under a prefix: time, size,
// version ID, "latest" and "marker" columns, key; --json a JSON object
// each (versionapi.Version).
func lsVersions(cmd *cobra.Command, env Env, arg string) error {
	bucket, prefix, _ := strings.Cut(arg, "/")
	if err := metaapi.ValidBucket(bucket); err != nil {
		return UsageErr(err)
	}
	asJSON, _ := cmd.Flags().GetBool("json")
	out := cmd.OutOrStdout()
	enc := json.NewEncoder(out)
	return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
		o := versionapi.ListOptions{Prefix: prefix}
		for range keyclient.MaxListPages {
			l, err := versionapi.ListVersions(ctx, mc, bucket, o)
			if err != nil {
				return KeyExit(err, bucket, "")
			}
			for _, v := range l.Versions {
				if asJSON {
					if err := enc.Encode(v); err != nil {
						return err
					}
					continue
				}
				latest, marker := "-", "-"
				if v.IsLatest {
					latest = "latest"
				}
				if v.DeleteMarker {
					marker = "marker"
				}
				if err := Printf(out, "%s %12d %-16s %-6s %-6s %s\n", v.Created.UTC().Format("2006-01-02 15:04:05"), v.Size, v.VersionID, latest, marker, v.Key); err != nil {
					return err
				}
			}
			if !l.Truncated {
				return nil
			}
			o.KeyMarker, o.VersionIDMarker = l.NextKeyMarker, l.NextVersionIDMarker
		}
		return fmt.Errorf("ls --versions %s: more than %d pages", arg, keyclient.MaxListPages)
	})
}

// getVersion reads one version of BUCKET/KEY to FILE or standard output
// ("-", the default), verified as get verifies; a FILE is written under a
// temporary name and renamed once complete, an existing one replaced only
// with --force.
func getVersion(cmd *cobra.Command, env Env, args []string, vid string) error {
	bucket, key, _ := strings.Cut(args[0], "/")
	if metaapi.ValidBucket(bucket) != nil || metaapi.ValidKey(key) != nil {
		return UsageErr(fmt.Errorf("%q: want BUCKET/KEY", args[0]))
	}
	dest := "-"
	if len(args) > 1 {
		dest = args[1]
	}
	for _, f := range []string{"recursive", "offset", "length"} {
		if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
			return UsageErr(fmt.Errorf("--version-id reads a whole version: not with --%s", f))
		}
	}
	if force, _ := cmd.Flags().GetBool("force"); dest != "-" && !force {
		if _, err := os.Stat(dest); err == nil {
			return UsageErr(fmt.Errorf("%s exists: --force replaces it", dest))
		}
	}
	return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
		v, err := versionapi.Get(ctx, mc, versionapi.Ref{Bucket: bucket, Key: key, VersionID: vid})
		if errors.Is(err, metaapi.ErrInvalid) {
			return UsageErr(err)
		}
		if err != nil {
			return KeyExit(err, bucket, key)
		}
		if v.DeleteMarker {
			return Exit(ExitNotFound, fmt.Errorf("get %s/%s: version %s is a delete marker", bucket, key, vid))
		}
		kc, err := keyclient.New(mc, keyclient.Options{})
		if err != nil {
			return UsageErr(err)
		}
		defer func() { _ = kc.Close() }() // nothing buffered for a read
		read := func(w io.Writer) error {
			return kc.ReadKey(ctx, v.KeyInfo, 0, int64(v.Size), w, keyclient.GetOptions{})
		}
		if dest == "-" {
			return KeyExit(read(cmd.OutOrStdout()), bucket, key)
		}
		return KeyExit(writeFile(dest, read), bucket, key)
	})
}

// writeFile writes path through fill under a temporary name in its
// directory, synced and renamed into place; on an error nothing is left.
func writeFile(path string, fill func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()           // the write's error is the one to report
			_ = os.Remove(f.Name()) // best effort: a leftover temporary file
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// BucketVersioningCmd is `spindle bucket versioning NAME [enable|suspend]`:
// shows a bucket's S3 versioning state, or sets it.
func BucketVersioningCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "versioning NAME [enable|suspend]",
		Short: "Show or set a bucket's S3 versioning (enable, suspend)",
		Long: `Without a state, prints the bucket's versioning: Enabled, Suspended, or
"never versioned". enable keeps every version of every key from then on
(an overwrite or a delete makes a new version, a delete a delete marker:
spindle ls --versions lists them, spindle get --version-id reads one);
suspend makes new writes the key's null version again, keeping the
versions there are. A versioned bucket cannot become never versioned.`,
		Args: RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket := args[0]
			if err := metaapi.ValidBucket(bucket); err != nil {
				return UsageErr(err)
			}
			status := ""
			if len(args) == 2 {
				switch args[1] {
				case "enable":
					status = versionapi.Enabled
				case "suspend":
					status = versionapi.Suspended
				default:
					return UsageErr(fmt.Errorf("%q: want enable or suspend", args[1]))
				}
			}
			return env.WithMeta(cmd.Context(), func(ctx context.Context, mc *metaapi.Client) error {
				if status != "" {
					return KeyExit(versionapi.SetState(ctx, mc, bucket, status), bucket, "")
				}
				st, err := versionapi.GetState(ctx, mc, bucket)
				if err != nil {
					return KeyExit(err, bucket, "")
				}
				return Printf(cmd.OutOrStdout(), "%s\n", cmp.Or(st, "never versioned"))
			})
		},
	}
}

// DeleteVersions deletes every version of every key of bucket (its keys,
// in a bucket never versioned: their null versions), and returns how many
// it deleted. bucket rm --force drains a bucket with it.
func DeleteVersions(ctx context.Context, env Env, bucket string) (n int, err error) {
	err = env.WithMeta(ctx, func(ctx context.Context, mc *metaapi.Client) error {
		for range keyclient.MaxListPages {
			l, err := versionapi.ListVersions(ctx, mc, bucket, versionapi.ListOptions{})
			if err != nil {
				return err
			}
			for _, v := range l.Versions {
				if _, err := versionapi.Delete(ctx, mc, versionapi.Ref{Bucket: bucket, Key: v.Key, VersionID: v.VersionID}); err != nil {
					return fmt.Errorf("%s version %s: %w", v.Key, v.VersionID, err)
				}
				n++
			}
			if len(l.Versions) == 0 {
				return nil
			}
		}
		return fmt.Errorf("more than %d pages of versions", keyclient.MaxListPages)
	})
	return n, err
}
