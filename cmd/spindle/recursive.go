package main

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// put --recursive and get --recursive: a directory tree to keys under a
// prefix, and back. Every name is checked before the first byte moves (a
// file whose key would be invalid, an existing output file without
// --force), so that a mistake stops the command before it stores or
// writes anything; a failure later leaves the keys or files done so far.

// splitPrefix parses BUCKET[/PREFIX].
func splitPrefix(arg string) (bucket, prefix string, err error) {
	bucket, prefix, _ = strings.Cut(arg, "/")
	if err := metaapi.ValidBucket(bucket); err != nil {
		return "", "", cli.UsageErr(err)
	}
	return bucket, prefix, nil
}

// keyUnder is the key of rel (a slash-separated relative path) under
// prefix: prefix/rel, or rel when prefix is empty or ends with "/".
func keyUnder(prefix, rel string) string {
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		return prefix + rel
	}
	return prefix + "/" + rel
}

// treeFiles lists the regular files under dir with their keys under
// prefix, in walk order; what is not a regular file is reported on
// stderr and skipped.
func treeFiles(cmd *cobra.Command, dir, prefix string) (files, keys []string, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return printf(cmd.ErrOrStderr(), "skipped %s: not a regular file\n", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		key := keyUnder(prefix, filepath.ToSlash(rel))
		if err := metaapi.ValidKey(key); err != nil {
			return cli.UsageErr(fmt.Errorf("%s: %w", p, err))
		}
		files, keys = append(files, p), append(keys, key)
		return nil
	})
	if err != nil {
		if _, ok := err.(*cli.ExitError); !ok {
			err = fmt.Errorf("reading %s: %w", dir, err)
		}
		return nil, nil, err
	}
	return files, keys, nil
}

// putTree puts every regular file under dir as bucket/prefix/<its path>.
func putTree(cmd *cobra.Command, kc *keyclient.Client, bucket, prefix, dir string, put func(bucket, key, file string) error) error {
	files, keys, err := treeFiles(cmd, dir, prefix)
	if err != nil {
		return err
	}
	for i := range files {
		if err := put(bucket, keys[i], files[i]); err != nil {
			return fmt.Errorf("after %d of %d files: %w", i, len(files), err)
		}
	}
	return nil
}

// getTree gets every key of bucket under prefix into dir, at the key's
// path below the prefix (cli.GetTree: a key whose path would leave dir is
// skipped, and the command fails).
func getTree(cmd *cobra.Command, kc *keyclient.Client, bucket, prefix, dir string, force bool, get func(bucket, key, file string) error) error {
	return cli.GetTree(cmd.ErrOrStderr(), func(fn func(string) error) error {
		err := kc.List(cmd.Context(), bucket, prefix, func(ki metaapi.KeyInfo) error { return fn(ki.Key) })
		if _, ok := err.(*cli.ExitError); err != nil && !ok {
			return cli.KeyExit(err, bucket, "")
		}
		return err
	}, dir, prefix, func(file string) error { return checkDest(file, force) }, func(key, file string) error { return get(bucket, key, file) })
}
