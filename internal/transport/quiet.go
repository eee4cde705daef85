package transport

import (
	"io"
	"time"
)

// The errors this package drops on purpose (make lint's errcheck), each
// with its reason.

// closeQuietly closes a connection or listener whose close error tells
// nothing to act on: it is being shut down, or has already failed with the
// error that is reported; a frame sent on it was written, and checked,
// before.
func closeQuietly(c io.Closer) { _ = c.Close() }

// setReadDeadline sets src's read deadline, dropping the error: setting a
// deadline fails only on a closed connection, whose next Read then fails
// with the error to report.
func setReadDeadline(src readDeadliner, t time.Time) { _ = src.SetReadDeadline(t) }
