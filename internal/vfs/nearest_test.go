package vfs

import (
	"path/filepath"
	"testing"
)

// TestNearestExisting: a path that exists is itself; one not made yet is
// its nearest existing parent.
func TestNearestExisting(t *testing.T) {
	dir := t.TempDir()
	if got := NearestExisting(dir); got != dir {
		t.Fatalf("NearestExisting(%s) = %s", dir, got)
	}
	if got := NearestExisting(filepath.Join(dir, "not", "made", "yet") + "/"); got != dir {
		t.Fatalf("NearestExisting of a path under %s not made yet = %s", dir, got)
	}
	if got := NearestExisting("/"); got != "/" {
		t.Fatalf("NearestExisting(/) = %s", got)
	}
}
