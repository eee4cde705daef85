package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrEscapes marks a key whose path would land outside the directory it
// is read into (TreePath).
var ErrEscapes = errors.New("would land outside the directory")

// errNotBelow marks a key listed under a prefix (the raw string) that is
// not below it on a '/' boundary: not part of the tree.
var errNotBelow = errors.New("not below the prefix")

// TreePath is the file of key, listed under prefix, read into dir: dir
// joined with the key's path below the prefix, matched on '/' boundaries
// (prefix "backup" holds "backup" and "backup/…", not "backup2/x"; a
// prefix ending in '/' holds what starts with it; "" holds every key).
// The key equal to the prefix is its last segment. ErrEscapes when the
// relative path is not local (filepath.IsLocal: "..", an absolute path,
// a reserved name): the file would not be below dir; errNotBelow for a
// key outside the prefix whose rest stays local.
func TreePath(dir, prefix, key string) (string, error) {
	var rel string
	var ok bool
	switch {
	case prefix == "":
		rel, ok = key, true
	case strings.HasSuffix(prefix, "/"):
		rel, ok = strings.CutPrefix(key, prefix)
	case key == prefix:
		rel, ok = path.Base(key), true
	default:
		rel, ok = strings.CutPrefix(key, prefix+"/")
	}
	if !ok {
		rel = strings.TrimPrefix(key, prefix)
	}
	rel = strings.TrimLeft(rel, "/")
	if rel == "" {
		rel = path.Base(key)
	}
	local := filepath.FromSlash(rel)
	switch {
	case !filepath.IsLocal(local) || strings.Contains(rel, "\\"):
		return "", fmt.Errorf("key %q: %w %s (its path below the prefix is %q)", key, ErrEscapes, dir, rel)
	case !ok:
		return "", fmt.Errorf("key %q: %w %q (prefixes match whole '/' segments)", key, errNotBelow, prefix)
	}
	return filepath.Join(dir, local), nil
}

// GetTree gets the keys list gives (those under prefix, in order) into
// dir at their TreePath, each with get, once every destination passed
// checkDest (a mistake stops it before it writes anything). A key
// outside the prefix is skipped (said on errOut); a key that would land
// outside dir is skipped with a message on errOut, the others are got,
// and the command then fails (ExitFailure) saying how many were skipped.
func GetTree(errOut io.Writer, list func(fn func(key string) error) error, dir, prefix string,
	checkDest func(file string) error, get func(key, file string) error) error {
	var keys, files []string
	escaped := 0
	err := list(func(key string) error {
		file, err := TreePath(dir, prefix, key)
		switch {
		case errors.Is(err, ErrEscapes):
			escaped++
			return Printf(errOut, "skipped: %v\n", err)
		case errors.Is(err, errNotBelow):
			return Printf(errOut, "skipped: %v\n", err)
		}
		if err := checkDest(file); err != nil {
			return err
		}
		keys, files = append(keys, key), append(files, file)
		return nil
	})
	if err != nil {
		return err
	}
	for i := range keys {
		if err := os.MkdirAll(filepath.Dir(files[i]), 0o777); err != nil {
			return fmt.Errorf("after %d of %d keys: %w", i, len(keys), err)
		}
		if err := get(keys[i], files[i]); err != nil {
			return fmt.Errorf("after %d of %d keys: %w", i, len(keys), err)
		}
	}
	if escaped > 0 {
		return Exit(ExitFailure, fmt.Errorf("%d key(s) skipped: their paths would land outside %s (%d got)", escaped, dir, len(keys)))
	}
	return nil
}
