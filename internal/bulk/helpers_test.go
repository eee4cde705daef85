package bulk

import (
	"errors"
	"testing"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/engine"
)

// stopDemux closes d, waits for its goroutines (the bulk handlers run in
// them, so none reports after the test) and closes s when there is one.
func stopDemux(t testing.TB, d *Demux, s *Server) {
	t.Helper()
	testutil.CloseT(t, d)
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
