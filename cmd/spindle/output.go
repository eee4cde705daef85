package main

import (
	"fmt"
	"io"
)

// A command's output that cannot be written (a closed pipe, a full disk
// behind a redirect) fails the command (make lint's errcheck): a line is
// written by printf, which returns the error; several go through a
// bufio.Writer whose Flush the command returns.

// printf writes to w and returns the write's error.
func printf(w io.Writer, format string, args ...any) error {
	_, err := fmt.Fprintf(w, format, args...)
	return err
}

// closeQuietly closes what a command only read from, or a key client,
// whose Close always returns nil (keyclient.Client.Close).
func closeQuietly(c io.Closer) { _ = c.Close() }
