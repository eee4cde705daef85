package datanode

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spindle-store/spindle/internal/datanode/holds"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
)

// TestHeldBlockDeletionRefused: the delete_blocks a node runs on its own
// replica (the entry point the meta service's block GC reaches on a
// pipeline nobody serves; a served one reaches the same engine
// DeleteBlock from the raft apply) refuses a block an object lock holds —
// retention not expired, legal hold on — without acknowledging it,
// counted; deletes it once the retention expired (injected clock) or the
// legal hold is released; and a replica holding a held block is not
// deleted (delete_container). The holds are kept through a hold_blocks
// command and acknowledged, and survive a reopen. Fails with the engine's
// DeleteGuard not set (the held blocks are deleted and acknowledged).
func TestHeldBlockDeletionRefused(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	hs, err := holds.Open(nil, holds.Dir(dir), clock, log)
	if err != nil {
		t.Fatal(err)
	}
	guard := &lockGuard{}
	e, err := engine.Open(engine.Config{DataDirs: []string{filepath.Join(dir, "data")}, Logger: log, DeleteGuard: guard.check})
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, e)
	if err := e.DeleteBlock(engine.BlockID{Container: 1, Local: 1}); !errors.Is(err, holds.ErrHeld) {
		t.Fatalf("a delete before the holds are loaded: %v, want refused", err)
	}
	guard.s.Store(hs)
	if err := e.CreateContainer(7); err != nil {
		t.Fatal(err)
	}
	for l := uint64(1); l <= 4; l++ {
		b := engine.BlockID{Container: 7, Local: l}
		data := make([]byte, 100)
		sums := engine.ComputeChecksums(nil, data, 512)
		if err := e.WriteChunk(b, 0, data, 512, sums); err != nil {
			t.Fatal(err)
		}
		if err := e.PutBlock(&engine.BlockData{ID: b, Length: 100, BytesPerChecksum: 512, Chunks: []engine.ChunkInfo{{Length: 100, Checksums: sums}}}, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.CloseContainer(7); err != nil {
		t.Fatal(err)
	}
	h := &heartbeater{eng: e, log: log, deleted: newReportQueue[metaapi.BlockRef](maxPendingAcks), holds: hs,
		held: newReportQueue[holdapi.Ack](maxPendingHoldAcks), proposals: make(chan struct{}, 1)}
	// Block 1: COMPLIANCE for an hour; 2: a legal hold; 3: GOVERNANCE for
	// a day; 4: none.
	hour := holdapi.Hold{Until: now.Add(time.Hour).Unix(), Compliance: true}
	legal := holdapi.Hold{Legal: true}
	gov := holdapi.Hold{Until: now.Add(24 * time.Hour).Unix()}
	hold := func(blocks []uint64, hd holdapi.Hold) metaapi.Command {
		return metaapi.Command{Kind: holdapi.Kind, Container: 7, Blocks: blocks, Hold: &hd}
	}
	h.hold([]metaapi.Command{hold([]uint64{1}, hour), {Kind: metaapi.CmdDeleteBlocks}, hold([]uint64{2}, legal), hold([]uint64{3}, gov)})
	if acks := h.held.take(100); len(acks) != 3 || acks[0] != (holdapi.Ack{Container: 7, Local: 1, Hold: hour}) || acks[2].Hold != gov {
		t.Fatalf("hold acknowledgements %v, want 3, the first for block 1", acks)
	}
	// A shorter COMPLIANCE date, or a GOVERNANCE one without Bypass, does
	// not shorten the hold.
	short := holdapi.Hold{Until: now.Add(time.Minute).Unix(), Compliance: true, Bypass: true}
	shortGov := holdapi.Hold{Until: now.Add(time.Minute).Unix()}
	h.hold([]metaapi.Command{hold([]uint64{1}, short), hold([]uint64{3}, shortGov)})
	present := func(l uint64) bool {
		_, err := e.GetBlock(engine.BlockID{Container: 7, Local: l})
		return err == nil
	}
	del := func(blocks ...uint64) []metaapi.BlockRef {
		h.local(metaapi.Command{Kind: metaapi.CmdDeleteBlocks, Container: 7, Blocks: blocks})
		return h.deleted.take(100)
	}
	refused := func() float64 { return testutil.ToFloat64(hs.Collectors()[0]) }
	if acked := del(1, 2, 3, 4); len(acked) != 1 || acked[0].Local != 4 {
		t.Fatalf("deletion of blocks 1-4 acknowledged %v, want only block 4 (1-3 held)", acked)
	}
	for l, want := range map[uint64]bool{1: true, 2: true, 3: true, 4: false} {
		if present(l) != want {
			t.Fatalf("block %d present %v, want %v", l, !want, want)
		}
	}
	if got := refused(); got != 3 {
		t.Fatalf("spindle_datanode_locked_deletes_refused_total %v, want 3", got)
	}
	// A whole replica holding held blocks is not deleted either.
	h.deleteReplica(metaapi.Command{Kind: metaapi.CmdDeleteContainer, Container: 7})
	if _, err := e.Container(7); err != nil {
		t.Fatalf("replica deleted under holds: %v", err)
	}
	// The holds survive a reopen (durable before acknowledged).
	reopened, err := holds.Open(nil, holds.Dir(dir), clock, log)
	if err != nil {
		t.Fatal(err)
	}
	if reopened.Held() != 3 {
		t.Fatalf("%d holds after a reopen, want 3", reopened.Held())
	}
	guard.s.Store(reopened)
	h.holds = reopened
	// An hour on, block 1's retention ended; the legal hold is released
	// by the meta service; GOVERNANCE shortened with Bypass.
	now = now.Add(time.Hour + time.Second)
	h.hold([]metaapi.Command{hold([]uint64{2}, holdapi.Hold{}), hold([]uint64{3}, holdapi.Hold{Until: now.Unix(), Bypass: true})})
	if acked := del(1, 2, 3); len(acked) != 3 {
		t.Fatalf("deletion after the holds ended acknowledged %v, want blocks 1-3", acked)
	}
	for l := uint64(1); l <= 3; l++ {
		if present(l) {
			t.Fatalf("block %d still present after its hold ended", l)
		}
	}
	if reopened.Held() != 0 {
		t.Fatalf("%d holds kept after they ended, want 0 (dropped lazily)", reopened.Held())
	}
}
