package cli

import (
	"errors"
	"path/filepath"
	"testing"
)

// TreePath keeps every key's file below dir: prefixes match on '/'
// boundaries, a relative path that is not local is ErrEscapes (issue 32
// item 5: prefix "backup", key "backup../x" used to land in dir's parent).
func TestTreePath(t *testing.T) {
	dir := "/restore/out"
	for _, c := range []struct {
		prefix, key, want string
		err               error
	}{
		{"", "a/b", "/restore/out/a/b", nil},
		{"backup", "backup/a", "/restore/out/a", nil},
		{"backup", "backup", "/restore/out/backup", nil},
		{"backup/", "backup/a/b", "/restore/out/a/b", nil},
		{"backup/", "backup//a", "/restore/out/a", nil},
		{"backup", "backup../x", "", ErrEscapes},
		{"backup", "backup..", "", ErrEscapes},
		{"back", "backup../x", "", errNotBelow},
		{"backup", "backup2/x", "", errNotBelow},
		{"b", "b/..x", "/restore/out/..x", nil},
	} {
		got, err := TreePath(dir, c.prefix, c.key)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("TreePath(%q, %q): %q, %v; want %q, %v", c.prefix, c.key, got, err, c.want, c.err)
		}
		if err == nil {
			if rel, rerr := filepath.Rel(dir, got); rerr != nil || !filepath.IsLocal(rel) {
				t.Errorf("TreePath(%q, %q) = %q: not below %s", c.prefix, c.key, got, dir)
			}
		}
	}
}
