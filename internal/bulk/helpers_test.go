package bulk

import (
	"errors"
	"io"
	"net"
	"testing"

	"github.com/spindle-store/spindle/internal/engine"
)

// closeT closes what a test is done with and fails the test on a Close
// error, but net.ErrClosed: a connection the demux, the server or the test
// itself closed first.
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
}

// stopDemux closes d, waits for its goroutines (the bulk handlers run in
// them, so none reports after the test) and closes s when there is one.
func stopDemux(t testing.TB, d *Demux, s *Server) {
	t.Helper()
	closeT(t, d)
	d.Wait()
	if s != nil {
		s.Close()
	}
}

// abortInto aborts im after a failed copy (nil: the Sink was never made)
// and joins the error of its Abort, a staging directory left behind, to
// the copy's.
func abortInto(err error, im *engine.Importer) error {
	if im == nil {
		return err
	}
	return errors.Join(err, im.Abort())
}
