package scenario

import (
	"fmt"
	"io"
	"log/slog"
	"os"
)

// The errors this package drops on purpose (make lint's errcheck), each
// helper saying why.

// closeQuietly closes what a benchmark drops the close error of: a
// connection, listener or server at the end of a measurement, after its
// error or on its cancellation (what was measured was counted and checked
// by then); a file only read, or a log the child writes through its own
// descriptor; a client whose Close always returns nil (keyclient.Client).
func closeQuietly(c io.Closer) { _ = c.Close() }

// progressf writes a progress line: no benchmark fails for one lost.
func progressf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }

// removeScratch removes a directory a run made for itself, at its end,
// after its result or error: one that stays is logged, not a failure.
func removeScratch(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		slog.Warn("scenario: removing a scratch directory", "dir", dir, "err", err)
	}
}
