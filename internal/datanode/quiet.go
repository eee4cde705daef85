package datanode

import "io"

// closeQuietly closes what this package drops the close error of (make
// lint's errcheck): a listener, node, demux or metrics server closed on the
// way out after another error (the one returned) or at a stop, a profile
// file nothing was written to, and a client used only to read a block's
// replica for a repair (the repair's error is the one).
func closeQuietly(c io.Closer) { _ = c.Close() }
