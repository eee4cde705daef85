package chaos

import (
	"io"
	"log/slog"
)

// closeQuietly closes a probe's or the replica check's client.Client,
// whose Close always returns nil (make lint's errcheck).
func closeQuietly(c io.Closer) { _ = c.Close() }

// warnIf logs the error of a cleanup after the run: the run has its result
// by then, but what was left behind (a directory, a mount, a namespace, a
// log's last bytes) is said.
func warnIf(what string, err error) {
	if err != nil {
		slog.Warn("chaos: "+what, "err", err)
	}
}
