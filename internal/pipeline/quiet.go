package pipeline

import "io"

// closeQuietly closes a connection whose close error tells nothing to act
// on (make lint's errcheck): the node or peer is stopping, its write
// failed (the error logged), its frame was bad or its caller refused (the
// client sees the connection go), or its client does not read.
func closeQuietly(c io.Closer) { _ = c.Close() }
