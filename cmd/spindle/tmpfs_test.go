package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestAllTmpfs: the datanode leaves chunks out of its raft log by default
// only when every data directory is on tmpfs; none, or one that cannot be
// read, is not.
func TestAllTmpfs(t *testing.T) {
	if allTmpfs(nil) || allTmpfs([]string{"/nonexistent/spindle"}) {
		t.Fatal("no directory, or a missing one, counted as tmpfs")
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm here")
	}
	if !allTmpfs([]string{"/dev/shm"}) {
		t.Fatal("/dev/shm not counted as tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Statfs(dir, &st); err == nil && st.Type != unix.TMPFS_MAGIC && allTmpfs([]string{"/dev/shm", dir}) {
		t.Fatalf("%s is not tmpfs, yet counted with /dev/shm as all tmpfs", dir)
	}
}
