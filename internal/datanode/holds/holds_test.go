package holds

import (
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// TestHoldsFileBytes pins the holds file format (docs/FORMAT.md §11.5).
func TestHoldsFileBytes(t *testing.T) {
	got := hex.EncodeToString(encode(map[uint64]holdapi.Hold{
		3: {Until: 1_800_000_000, Compliance: true},
		9: {Legal: true},
	}))
	const want = "01" + "02000000" +
		"0300000000000000" + "00d2496b00000000" + "01" +
		"0900000000000000" + "0000000000000000" + "02" +
		"86450ee0" // CRC32C
	if got != want {
		t.Fatalf("holds file %s, want %s", got, want)
	}
	m, err := decode(encode(map[uint64]holdapi.Hold{3: {Until: 5, Legal: true}}))
	if err != nil || m[3] != (holdapi.Hold{Until: 5, Legal: true}) {
		t.Fatalf("round trip: %v %v", m, err)
	}
}

// TestOpenRefusesACorruptFile: a holds file that does not decode fails
// Open (fail closed); a leftover temporary file is ignored.
func TestOpenRefusesACorruptFile(t *testing.T) {
	dir := t.TempDir()
	now := func() time.Time { return time.Unix(1_000, 0) }
	q := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(nil, dir, now, q)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(4, []Entry{{1, holdapi.Hold{Until: 2_000}}, {2, holdapi.Hold{Until: 2_000}}}); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(vfs.Default, filepath.Join(dir, "4.holds.tmp"), []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(nil, dir, now, q); err != nil || s.Held() != 2 || !errors.Is(s.Check(4, 2), ErrHeld) {
		t.Fatalf("reopen: %v, %d held", err, s.Held())
	}
	if err := vfs.WriteFileAtomic(vfs.Default, filepath.Join(dir, "4.holds"), []byte("junk-junk-junk")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(nil, dir, now, q); !errors.Is(err, errCorrupt) {
		t.Fatalf("open over a corrupt holds file: %v, want refused", err)
	}
}

// TestHoldsSurviveACrashAtEveryOperation: a power loss at each filesystem
// operation of a run of Apply calls (half the unsynced writes kept at
// random) leaves a holds directory that opens, and that keeps, at least,
// every hold an Apply that returned before the crash made (durable before
// acknowledged).
func TestHoldsSurviveACrashAtEveryOperation(t *testing.T) {
	q := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := func() time.Time { return time.Unix(1_000, 0) }
	type step struct {
		c       uint64
		entries []Entry
	}
	steps := []step{
		{1, []Entry{{1, holdapi.Hold{Until: 2_000}}}},
		{1, []Entry{{2, holdapi.Hold{Legal: true}}}},
		{2, []Entry{{5, holdapi.Hold{Until: 3_000, Compliance: true}}}},
		{1, []Entry{{1, holdapi.Hold{Until: 4_000}}, {3, holdapi.Hold{Until: 5_000}}}},
	}
	for k := int64(1); ; k++ {
		fs := vfs.NewMem()
		if err := fs.MkdirAll("/log", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fs.SyncDir("/"); err != nil {
			t.Fatal(err)
		}
		fs.CrashAtOp(k, 50, k)
		want := map[uint64]map[uint64]holdapi.Hold{}
		s, err := Open(fs, Dir("/log"), now, q)
		for _, st := range steps {
			if err != nil {
				break
			}
			err = s.Apply(st.c, st.entries)
			if fs.Crashed() == nil && err == nil { // returned before the crash: must be kept
				for _, e := range st.entries {
					if want[st.c] == nil {
						want[st.c] = map[uint64]holdapi.Hold{}
					}
					want[st.c][e.Local] = holdapi.Merge(want[st.c][e.Local], e.Hold)
				}
			}
		}
		if err != nil {
			t.Fatalf("crash at op %d: %v", k, err)
		}
		img := fs.Crashed()
		if img == nil {
			if k < 5 {
				t.Fatalf("the run took only %d operations", k)
			}
			t.Logf("crashed at each of %d operations", k-1)
			return // past the last operation: every point tried
		}
		got, err := Open(img, Dir("/log"), now, q)
		if err != nil {
			t.Fatalf("crash at op %d: reopen: %v", k, err)
		}
		for c, m := range want {
			for l, h := range m {
				if g := got.byC[c][l]; g.Until < h.Until || (h.Legal && !g.Legal) || (h.Compliance && !g.Compliance) {
					t.Fatalf("crash at op %d: container %d block %d holds %+v, want at least %+v (acknowledged)", k, c, l, g, h)
				}
			}
		}
	}
}
