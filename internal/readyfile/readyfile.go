// Package readyfile is the ready file of Spindle's processes (`spindle
// datanode`, `meta`, `server` with --ready-file): written once the process
// serves, read by whoever started it (tests, benches, the embedded server).
//
// Format: "ADDR\nPID\n" — the address the process serves on and its pid.
// Invariants: the file is written atomically and durably
// (vfs.WriteFileAtomic), so a reader sees it whole or not at all; a read is
// bounded (MaxBytes) and strict (two fields, a positive pid).
//
// Concurrency: plain functions, no shared state.
package readyfile

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spindle-store/spindle/internal/vfs"
)

// MaxBytes bounds what Read reads of a ready file.
const MaxBytes = 4096

// Write writes "ADDR\nPID\n" (this process's pid) to path atomically.
func Write(path, addr string) error {
	if err := vfs.WriteFileAtomic(vfs.Default, path, fmt.Appendf(nil, "%s\n%d\n", addr, os.Getpid())); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// Read reads a ready file: the address and the pid. A missing file is an
// error wrapping os.ErrNotExist.
func Read(path string) (addr string, pid int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }() // read-only
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes))
	if err != nil {
		return "", 0, fmt.Errorf("ready file %s: %w", path, err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return "", 0, fmt.Errorf("ready file %s: %q, want \"ADDR\\nPID\\n\"", path, b)
	}
	pid, err = strconv.Atoi(fields[1])
	if err != nil || pid <= 0 {
		return "", 0, fmt.Errorf("ready file %s: bad pid %q", path, fields[1])
	}
	return fields[0], pid, nil
}
