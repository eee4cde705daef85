package vfs

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// testLogger makes Pebble's fatal errors visible (the default logger exits
// the process).
type testLogger struct{ t testing.TB }

func (testLogger) Infof(string, ...any)                {}
func (l testLogger) Errorf(format string, args ...any) { l.t.Logf("pebble: "+format, args...) }
func (testLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble fatal: "+format, args...))
}

func openPebble(t testing.TB, fs FS, dir string) (*pebble.DB, error) {
	return pebble.Open(dir, &pebble.Options{FS: ToPebble(fs), Logger: testLogger{t}})
}

func mustOpenPebble(t testing.TB, fs FS, dir string) *pebble.DB {
	t.Helper()
	db, err := openPebble(t, fs, dir)
	if err != nil {
		t.Fatalf("pebble.Open: %v", err)
	}
	return db
}

// pebbleGet returns the value of key, or ok=false if it is absent.
func pebbleGet(t testing.TB, db *pebble.DB, key string) (string, bool) {
	t.Helper()
	v, closer, err := db.Get([]byte(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	s := string(v)
	closeT(t, closer)
	return s, true
}

func TestPebbleOnOS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	db := mustOpenPebble(t, Default, dir)
	must(t, db.Set([]byte("a"), []byte("1"), pebble.Sync))
	must(t, db.Flush())
	must(t, db.Set([]byte("b"), []byte("2"), pebble.Sync))
	must(t, db.Close())
	db = mustOpenPebble(t, Default, dir)
	defer closeT(t, db)
	for k, want := range map[string]string{"a": "1", "b": "2"} {
		if v, ok := pebbleGet(t, db, k); !ok || v != want {
			t.Errorf("%s = %q, %v", k, v, ok)
		}
	}
}

// opRecorder counts the operations Pebble issues, by kind.
type opRecorder struct {
	mu    sync.Mutex
	kinds map[OpKind]int
}

func (r *opRecorder) record(op Op) error {
	r.mu.Lock()
	r.kinds[op.Kind]++
	r.mu.Unlock()
	return nil
}

func (r *opRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.kinds)) {
		parts = append(parts, fmt.Sprintf("%v=%d", k, r.kinds[k]))
	}
	return strings.Join(parts, " ")
}

func TestPebbleOnMemCrash(t *testing.T) {
	mem := NewMem()
	rec := &opRecorder{kinds: map[OpKind]int{}}
	mem.InjectErrors(rec.record)
	db := mustOpenPebble(t, mem, "/db")
	must(t, db.Set([]byte("synced"), []byte("1"), pebble.Sync))
	must(t, db.Flush())
	must(t, db.Set([]byte("synced2"), []byte("2"), pebble.Sync))
	must(t, db.Set([]byte("nosync"), []byte("3"), pebble.NoSync))
	crashed := mem.CrashClone(0, nil)
	must(t, db.Close())
	mem.InjectErrors(nil)
	t.Logf("pebble ops: %v", rec)
	t.Logf("files:\n%s", mem)

	db = mustOpenPebble(t, crashed, "/db")
	defer closeT(t, db)
	for k, want := range map[string]string{"synced": "1", "synced2": "2"} {
		if v, ok := pebbleGet(t, db, k); !ok || v != want {
			t.Errorf("%s = %q, %v after crash", k, v, ok)
		}
	}
	if v, ok := pebbleGet(t, db, "nosync"); ok && v != "3" {
		t.Errorf("nosync = %q", v)
	}
	must(t, db.Set([]byte("after"), []byte("4"), pebble.Sync))
}

// TestPebbleCrashLoop crashes at every mutating operation of a short Pebble
// workload in turn and checks that the crashed state opens, that every key
// whose synced Set returned before the crash point is there, and that no key
// has a wrong value. It runs once keeping only durable state, and once
// keeping a random half of the unsynced operations too.
func TestPebbleCrashLoop(t *testing.T) {
	for _, pct := range []int{0, 50} {
		t.Run(fmt.Sprintf("keep%d", pct), func(t *testing.T) { pebbleCrashLoop(t, pct) })
	}
}

func pebbleCrashLoop(t *testing.T, keepUnsyncedPercent int) {
	const keys = 20
	key := func(i int) []byte { return fmt.Appendf(nil, "key%02d", i) }
	val := func(i int) string { return fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i)) }
	var total int64
	for k := int64(1); ; k++ {
		if k > 5000 {
			t.Fatal("crash loop did not end")
		}
		mem := NewMem()
		mem.CrashAtOp(k, keepUnsyncedPercent, k)
		db := mustOpenPebble(t, mem, "/db")
		var done [keys]int64 // OpCount once Set(i) returned
		for i := range keys {
			must(t, db.Set(key(i), []byte(val(i)), pebble.Sync))
			done[i] = mem.OpCount()
			if i == 7 || i == 14 {
				must(t, db.Flush())
			}
		}
		must(t, db.Close())
		c := mem.Crashed()
		if c == nil {
			total = k - 1
			break
		}
		func() {
			db, err := openPebble(t, c, "/db")
			if err != nil {
				t.Fatalf("crash at op %d: pebble.Open: %v\n%s", k, err, c)
			}
			defer closeT(t, db)
			for i := range keys {
				v, ok := pebbleGet(t, db, string(key(i)))
				if ok && v != val(i) {
					t.Fatalf("crash at op %d: key %d = %q", k, i, v)
				}
				// The clone holds (at least the durable state of) ops 1..k-1.
				if !ok && done[i] <= k-1 {
					t.Fatalf("crash at op %d: key %d lost (its Set returned at op %d)", k, i, done[i])
				}
			}
			must(t, db.Set([]byte("after"), []byte("crash"), pebble.Sync))
		}()
	}
	t.Logf("crashed at each of %d operations", total)
	if total < 50 {
		t.Fatalf("only %d mutating operations: not exercising much", total)
	}
}

func TestPebbleAdapter(t *testing.T) {
	t.Run("OS", func(t *testing.T) { testPebbleAdapter(t, Default, t.TempDir()) })
	t.Run("Mem", func(t *testing.T) {
		fs := NewMem()
		must(t, fs.MkdirAll("/x", 0o755))
		must(t, fs.SyncDir("/"))
		testPebbleAdapter(t, fs, "/x")
	})
}

func testPebbleAdapter(t *testing.T, fs FS, dir string) {
	p := ToPebble(fs)
	if p.Unwrap() != nil {
		t.Error("Unwrap")
	}
	a, b := p.PathJoin(dir, "a"), p.PathJoin(dir, "b")
	if p.PathBase(a) != "a" || p.PathDir(a) != dir {
		t.Error("path helpers")
	}
	f, err := p.Create(a, pebblevfs.WriteCategoryUnspecified)
	must(t, err)
	_, err = f.Write([]byte("hello"))
	must(t, err)
	full, err := f.SyncTo(5)
	must(t, err)
	if !full {
		t.Error("SyncTo did not report a full sync")
	}
	must(t, f.Prefetch(0, 5))
	fi, err := f.Stat()
	must(t, err)
	if fi.Size() != 5 || fi.DeviceID() != (pebblevfs.DeviceID{}) {
		t.Errorf("Stat: %d %v", fi.Size(), fi.DeviceID())
	}
	must(t, f.Close())

	// Create makes a new inode: a hard link to the old one keeps its data.
	must(t, p.Link(a, b))
	f, err = p.Create(a, pebblevfs.WriteCategoryUnspecified)
	must(t, err)
	must(t, f.Close())
	if got := readFile(t, fs, b); got != "hello" {
		t.Fatalf("Create truncated a hard link: %q", got)
	}

	// ReuseForWrite renames and opens without truncating.
	f, err = p.ReuseForWrite(b, a, pebblevfs.WriteCategoryUnspecified)
	must(t, err)
	_, err = f.WriteAt([]byte("J"), 0)
	must(t, err)
	must(t, f.Close())
	if got := readFile(t, fs, a); got != "Jello" {
		t.Fatalf("after ReuseForWrite: %q", got)
	}
	if _, err := p.Stat(b); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old name after ReuseForWrite: %v", err)
	}
	if _, err := p.ReuseForWrite(b, a, pebblevfs.WriteCategoryUnspecified); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReuseForWrite of a missing file: %v", err)
	}

	// Open applies options (fadvise on OS files, skipped for in-memory ones).
	f, err = p.Open(a, pebblevfs.RandomReadsOption, pebblevfs.SequentialReadsOption)
	must(t, err)
	buf := make([]byte, 5)
	if n, err := f.ReadAt(buf, 0); n != 5 || err != nil {
		t.Fatalf("ReadAt: %d %v", n, err)
	}
	must(t, f.Close())
	f, err = p.OpenReadWrite(p.PathJoin(dir, "c"), pebblevfs.WriteCategoryUnspecified, pebblevfs.RandomReadsOption)
	must(t, err)
	must(t, f.Close())
	names, err := p.List(dir)
	must(t, err)
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "c"}) {
		t.Fatalf("List: %q", names)
	}
	d, err := p.OpenDir(dir)
	must(t, err)
	must(t, d.Sync())
	must(t, d.Close())
	u, err := p.GetDiskUsage(dir)
	must(t, err)
	if u.TotalBytes == 0 {
		t.Error("disk usage")
	}
	l, err := p.Lock(p.PathJoin(dir, "LOCK"))
	must(t, err)
	must(t, l.Close())
	must(t, p.MkdirAll(p.PathJoin(dir, "s", "t"), 0o755))
	must(t, p.Rename(p.PathJoin(dir, "c"), p.PathJoin(dir, "s", "c")))
	must(t, p.Remove(p.PathJoin(dir, "s", "c")))
	must(t, p.RemoveAll(p.PathJoin(dir, "s")))

	if mem, ok := fs.(*MemFS); ok {
		// SyncTo made "hello" durable and OpenDir(d).Sync() the rename onto
		// a; the "J" was never synced.
		c := mem.CrashClone(0, nil)
		if got := readFile(t, c, a); got != "hello" {
			t.Fatalf("crash clone: %q", got)
		}
	}
}
