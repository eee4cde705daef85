package bench

import "io"

// closeQuietly closes what a measurement drops the close error of (make
// lint's errcheck): files it read, or wrote only to be removed after (their
// bytes are not kept); listeners and loopback connections at the end of a
// measurement, after its error, or on its cancellation (each byte sent is
// counted by the receiver, which is what is checked).
func closeQuietly(c io.Closer) { _ = c.Close() }
