package state

import (
	"errors"
	"testing"
	"time"
)

// A CLOSED pipeline whose every member was removed for good has no
// member: it decodes; an OPEN one without members is corrupt. The
// OpRemoved operational state decodes; the one past it does not.
func TestRemovedRecords(t *testing.T) {
	closed := PipelineRecord{ID: 2, State: PipelineClosed, Created: t0, Closed: t0.Add(time.Minute)}
	got, err := DecodePipeline(closed.Encode())
	if err != nil || got.ID != 2 || len(got.Members) != 0 {
		t.Fatalf("CLOSED pipeline without members: %+v, %v", got, err)
	}
	open := PipelineRecord{ID: 3, State: PipelineOpen, Created: t0}
	if _, err := DecodePipeline(open.Encode()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("OPEN pipeline without members: %v, want ErrCorrupt", err)
	}
	o := OpState{State: OpRemoved, Since: t0}
	if got, err := decodeOpState(o.Encode()); err != nil || got.State != OpRemoved || !got.Since.Equal(t0) {
		t.Fatalf("removed state: %+v, %v", got, err)
	}
	if o.Name() != "REMOVED" {
		t.Fatalf("removed state's name: %s", o.Name())
	}
	o.State++
	if _, err := decodeOpState(o.Encode()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("state past OpRemoved: %v, want ErrCorrupt", err)
	}
}
