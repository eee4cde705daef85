package client

import "io"

// closeQuietly closes a transport connection whose close error tells
// nothing to act on (make lint's errcheck): it is broken, dropped, or the
// Client closing; every call on it returned (or returns) its own error.
func closeQuietly(c io.Closer) { _ = c.Close() }
