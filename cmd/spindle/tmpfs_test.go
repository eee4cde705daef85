package main

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAllTmpfs: the datanode leaves chunks out of its raft log by default
// only when every data directory is on tmpfs, and writes no zeros ahead in
// a log directory on tmpfs; no directory is not all tmpfs. A directory not
// made yet is where its nearest existing parent is (the datanode creates
// it there).
func TestAllTmpfs(t *testing.T) {
	if allTmpfs(nil) {
		t.Fatal("no directory counted as all tmpfs")
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm here")
	}
	if !allTmpfs([]string{"/dev/shm"}) {
		t.Fatal("/dev/shm not counted as tmpfs")
	}
	if !allTmpfs([]string{"/dev/shm/spindle-test-not-made/dn1"}) {
		t.Fatal("a directory to be made under /dev/shm not counted as tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Statfs(dir, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is on tmpfs too", dir)
	}
	if allTmpfs([]string{"/dev/shm", dir}) {
		t.Fatalf("%s is not tmpfs, yet counted with /dev/shm as all tmpfs", dir)
	}
	if allTmpfs([]string{filepath.Join(dir, "not-made", "dn1")}) {
		t.Fatalf("a directory to be made under %s counted as tmpfs", dir)
	}
}
