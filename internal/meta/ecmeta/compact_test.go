package ecmeta

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// TestCompactPolicy: which EC containers are compacted, in which order
// and how many — pure, no sockets.
func TestCompactPolicy(t *testing.T) {
	p := CompactPolicy{Below: 0.5, MinBytes: 100}
	for _, c := range []struct {
		logical, live uint64
		want          bool
	}{
		{1000, 1000, false}, // nothing deleted
		{1000, 500, false},  // at the threshold, not under it
		{1000, 499, true},   // under it, 501 bytes to free
		{1000, 0, true},     // everything deleted
		{150, 60, false},    // under it, but 90 bytes to free: under MinBytes
		{200, 99, true},     // 101 to free
		{0, 0, false},       // empty
		{100, 200, false},   // more live than logical: not believed
	} {
		if got := p.Wants(c.logical, c.live); got != c.want {
			t.Errorf("Wants(%d logical, %d live) = %v, want %v", c.logical, c.live, got, c.want)
		}
	}
	if (CompactPolicy{Below: 0, MinBytes: 1}).Wants(1000, 0) {
		t.Error("Below 0 compacts")
	}
	if (CompactPolicy{Below: 0.5}).Wants(10, 4) != true {
		t.Error("MinBytes 0 (any byte) does not compact 6 of 10 freed")
	}
	for _, below := range []float64{-0.1, 1, 1.5} {
		if (CompactPolicy{Below: below}).Validate() == nil {
			t.Errorf("Below %v accepted", below)
		}
	}
	var f fraction
	if f.Set("0.3") != nil || f != 0.3 || f.Set("1") == nil || f.Set("x") == nil || f != 0.3 {
		t.Errorf("--ec-compact-below: %v", f)
	}
	cands := []compactCandidate{
		{Container: 1, Logical: 1000, Live: 900}, // not wanted
		{Container: 2, Logical: 1000, Live: 400}, // frees 600
		{Container: 3, Logical: 5000, Live: 100}, // frees 4900
		{Container: 4, Logical: 1000, Live: 400}, // frees 600 (after 2: ID order)
		{Container: 5, Logical: 120, Live: 0},    // frees 120
		{Container: 6, Logical: 90, Live: 0},     // frees 90: under MinBytes
	}
	if got := pickCompactions(cands, p, 10); !slices.Equal(got, []uint64{3, 2, 4, 5}) {
		t.Errorf("pick: %v, want [3 2 4 5]", got)
	}
	if got := pickCompactions(cands, p, 2); !slices.Equal(got, []uint64{3, 2}) {
		t.Errorf("pick 2: %v, want [3 2]", got)
	}
	if got := pickCompactions(cands, CompactPolicy{}, 10); len(got) != 0 {
		t.Errorf("pick with compaction off: %v", got)
	}
}

// TestCompactRetryPause: a failed compaction's container waits, longer
// at each failure in a row, up to CompactRetryMax.
func TestCompactRetryPause(t *testing.T) {
	c := compactions{fails: map[uint64]failure{}}
	now := time.Unix(1000, 0)
	var pauses []time.Duration
	for range 12 {
		_, p := c.failedAt(7, now)
		pauses = append(pauses, p)
	}
	if pauses[0] != CompactRetryFirst || pauses[1] != 2*CompactRetryFirst || pauses[11] != CompactRetryMax || c.failed != 12 {
		t.Fatalf("pauses %v, failed %d", pauses, c.failed)
	}
	if !c.fails[7].next.Equal(now.Add(CompactRetryMax)) {
		t.Fatalf("next %v", c.fails[7].next)
	}
}

// TestLiveBlocks: the live blocks are the record's without a pending
// deletion.
func TestLiveBlocks(t *testing.T) {
	st := &state.State{Deletes: map[uint64]map[uint64]*state.PendingDelete{9: {2: {}, 5: {}}}}
	l := &layoutMem{logical: 60, blocks: []ecapi.Block{{Local: 1, Length: 10}, {Local: 2, Offset: 10, Length: 20}, {Local: 3, Offset: 30, Length: 30}}}
	keep, live := liveBlocks(st, 9, l)
	if live != 40 || fmt.Sprint(keep) != fmt.Sprint([]ecapi.Block{{Local: 1, Length: 10}, {Local: 3, Offset: 30, Length: 30}}) {
		t.Fatalf("live %d, keep %v", live, keep)
	}
	if _, live := liveBlocks(st, 8, l); live != 60 {
		t.Fatalf("another container's deletions counted: live %d", live)
	}
}

// TestRecordGenerations: a record of generation 0 encodes as version 1,
// byte for byte as before generations; a later one as version 2, read
// back with its generation; version 2 of generation 0 is refused.
func TestRecordGenerations(t *testing.T) {
	r := Record{Container: 7, Converted: time.UnixMilli(1234), Policy: "rs-3-2", Logical: 30, Nodes: []uint64{1, 2, 3, 4, 5},
		Blocks: []ecapi.Block{{Local: 1, Offset: 0, Length: 10, CRC32C: 9}, {Local: 3, Offset: 10, Length: 20, CRC32C: 8}}}
	if b := r.Encode(); b[0] != 1 || len(b) != 1+8+8+2+6+8+2+40+4+56+4 {
		t.Fatalf("generation 0: version %d, %d bytes", b[0], len(b))
	}
	r.Generation = 3
	b := r.Encode()
	got, err := DecodeRecord(b)
	if b[0] != 2 || err != nil || fmt.Sprint(got) != fmt.Sprint(r) {
		t.Fatalf("generation 3: version %d, %+v, %v", b[0], got, err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		if _, err := DecodeRecord(c); !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
}
