package ecmeta

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
	"github.com/spindle-store/spindle/internal/vfs"
)

// TestScanBounded: the pass over the keys that learns the containers'
// buckets visits at most ScanPage keys per step (the meta lock is held
// for one step), ends with what a whole scan finds (current and
// noncurrent versions), starts again only after ScanEvery, and a container
// is eligible only once seen CLOSED before a complete pass started.
func TestScanBounded(t *testing.T) {
	db, err := state.OpenStore(vfs.Default, t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	b := db.NewBatch()
	want := map[uint64][]string{}
	add := func(k []byte, bucket string, cids ...uint64) {
		rec := state.KeyRecord{Size: uint64(len(cids))}
		for _, c := range cids {
			rec.Blocks = append(rec.Blocks, state.StoredBlock{Container: c, Local: 1, Length: 1})
			if !slices.Contains(want[c], bucket) {
				want[c] = append(want[c], bucket)
			}
		}
		state.Set(b, k, rec.Encode())
	}
	for i := range 1000 {
		add(state.ObjectKey("a", fmt.Sprintf("k%04d", i)), "a", uint64(i%7+1))
	}
	add(state.ObjectKey("b", "x"), "b", 3)
	add(append(verrec.KeyPrefix("c"), "old"...), "c", 5, 9)
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	st := &state.State{Store: &state.Store{DB: db}}
	m := &Manager{st: st, closed: map[uint64]time.Time{}}
	defer func(p int) { ScanPage = p }(ScanPage)
	ScanPage = 64
	now := time.Unix(1000, 0)
	if m.eligible(3, now) {
		t.Fatal("eligible before any pass")
	}
	steps := 0
	for m.buckets == nil {
		n, err := m.scanStepLocked(now.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if n > ScanPage {
			t.Fatalf("a step visited %d keys, at most %d", n, ScanPage)
		}
		if steps++; steps > 100 {
			t.Fatal("the pass does not end")
		}
	}
	if steps < 1002/64 {
		t.Fatalf("%d steps for 1002 keys of pages of 64", steps)
	}
	for c, bs := range want {
		if got := m.buckets[c]; !slices.Equal(got, bs) {
			t.Fatalf("container %d: buckets %v, want %v", c, got, bs)
		}
	}
	if len(m.buckets) != len(want) {
		t.Fatalf("%d containers, want %d", len(m.buckets), len(want))
	}
	if !m.eligible(3, now.Add(2*time.Second)) || m.eligible(4, now.Add(2*time.Second)) {
		t.Fatal("3 seen CLOSED before the pass is eligible; 4, first seen after it, is not")
	}
	if n, _ := m.scanStepLocked(now.Add(2 * time.Second)); n != 0 || m.scan != nil {
		t.Fatal("a new pass before ScanEvery")
	}
	if n, _ := m.scanStepLocked(now.Add(time.Second + ScanEvery)); n != ScanPage || m.scan == nil {
		t.Fatalf("no new pass after ScanEvery (%d keys)", n)
	}
}
