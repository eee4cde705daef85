package bulk

import "io"

// closeQuietly closes what this package drops the close error of (make
// lint's errcheck): a connection refused, evicted, being shut down or done
// with (what an export sends is flushed, and checked, before; a fetch has
// read and checked its end record), a listener whose Accept already
// failed, or a block file or export read from, whose reads' errors are the
// ones that matter.
func closeQuietly(c io.Closer) { _ = c.Close() }
