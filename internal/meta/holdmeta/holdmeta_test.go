package holdmeta

import (
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pvfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/spindle-store/spindle/internal/meta/lockmeta"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
)

// TestRecordBytes pins the hold record (docs/FORMAT.md §13.3) and its
// strict decoding.
func TestRecordBytes(t *testing.T) {
	h := holdapi.Hold{Until: 1_800_000_000, Compliance: true, Legal: true}
	v := Encode(h)
	if got := hex.EncodeToString(v[:10]); got != "010300d2496b00000000" || len(v) != recordBytes {
		t.Fatalf("hold record %x", v)
	}
	if got, err := Decode(v); err != nil || got != h {
		t.Fatalf("round trip %+v %v", got, err)
	}
	v[1] |= 0x80
	if _, err := Decode(v); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("a damaged record: %v", err)
	}
	if hex.EncodeToString(Key(1, 7)) != "48"+"0000000000000001"+"0000000000000007" {
		t.Fatalf("key %x", Key(1, 7))
	}
}

// TestLockChangesAndReleases: the records a lock change writes (Bypass
// only when a retention in force was shortened), and a bypassed version's
// deletion waiting until every holder acknowledged its release.
func TestLockChangesAndReleases(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: pvfs.NewMem(), Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	now := time.Unix(1_000_000, 0)
	blocks := []state.StoredBlock{{Container: 3, Local: 1}}
	written := func(old, next lockmeta.Lock) (holdapi.Hold, bool) {
		b := db.NewIndexedBatch()
		defer func() { _ = b.Close() }()
		OnLock(b, blocks, old, next, now)
		v, closer, err := b.Get(Key(3, 1))
		if errors.Is(err, pebble.ErrNotFound) {
			return holdapi.Hold{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = closer.Close() }()
		h, err := Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		return h, true
	}
	gov := lockmeta.Lock{Mode: lockmeta.Governance, Until: now.Add(time.Hour)}
	if _, ok := written(lockmeta.Lock{}, lockmeta.Lock{}); ok {
		t.Error("a version without a lock got a hold record")
	}
	if h, _ := written(lockmeta.Lock{}, gov); h != (holdapi.Hold{Until: now.Add(time.Hour).Unix()}) {
		t.Errorf("new GOVERNANCE version: %+v", h)
	}
	if h, _ := written(gov, lockmeta.Lock{Mode: lockmeta.Governance, Until: now.Add(2 * time.Hour)}); h.Bypass {
		t.Error("an extension written as a bypass")
	}
	if h, _ := written(gov, lockmeta.Lock{Mode: lockmeta.Governance, Until: now.Add(time.Minute)}); !h.Bypass {
		t.Error("a shortened GOVERNANCE retention written without Bypass")
	}
	if h, ok := written(lockmeta.Lock{Hold: true, HoldSet: true}, lockmeta.Lock{HoldSet: true}); !ok || h.Legal {
		t.Errorf("a legal hold released: %+v written %v, want a record with it off", h, ok)
	}
	hs := New(nil)
	b := db.NewBatch()
	defer func() { _ = b.Close() }()
	hs.Forget(b, blocks, gov, now) // a bypassed GOVERNANCE version
	ref := state.BlockRef{Container: 3, Local: 1}
	rel := holdapi.Hold{Until: now.Unix(), Bypass: true}
	hs.Ack(1, []holdapi.Ack{{Container: 3, Local: 1, Hold: rel}})
	if !hs.Releasing(ref, []uint64{1, 2}) {
		t.Fatal("deletion let go before holder 2 acknowledged the release")
	}
	hs.Ack(2, []holdapi.Ack{{Container: 3, Local: 1, Hold: rel}})
	if hs.Releasing(ref, []uint64{1, 2}) {
		t.Fatal("deletion still held back after every holder acknowledged the release")
	}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)      {}
func (quietLogger) Errorf(string, ...any)     {}
func (quietLogger) Fatalf(f string, a ...any) { panic(f) }
