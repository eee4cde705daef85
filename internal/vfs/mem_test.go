package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
)

// snapshot describes the visible tree of fs: path -> contents for files,
// "<dir>" for directories.
func snapshot(t *testing.T, fs FS) map[string]string {
	t.Helper()
	m := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		names, err := fs.List(dir)
		must(t, err)
		for _, n := range names {
			p := path.Join(dir, n)
			fi, err := fs.Stat(p)
			must(t, err)
			if fi.IsDir() {
				m[p] = "<dir>"
				walk(p)
				continue
			}
			m[p] = readFile(t, fs, p)
		}
	}
	walk("/")
	return m
}

func showSnapshot(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s=%q ", k, m[k])
	}
	return b.String()
}

func wantSnapshot(t *testing.T, what string, fs FS, want map[string]string) {
	t.Helper()
	if got := snapshot(t, fs); !maps.Equal(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", what, showSnapshot(got), showSnapshot(want))
	}
}

func crash(fs *MemFS) *MemFS { return fs.CrashClone(0, nil) }

func writeAt(t *testing.T, f File, s string, off int64) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func TestMemUnsyncedDataLost(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/d", 0o755))
	must(t, fs.SyncDir("/"))
	f, err := fs.Create("/d/f")
	must(t, err)
	must(t, fs.SyncDir("/d"))
	wantSnapshot(t, "created, nothing written", crash(fs), map[string]string{"/d": "<dir>", "/d/f": ""})

	writeAt(t, f, "synced", 0)
	wantSnapshot(t, "written, not synced", crash(fs), map[string]string{"/d": "<dir>", "/d/f": ""})
	must(t, f.SyncData())
	writeAt(t, f, "+unsynced", 6)
	must(t, f.Truncate(3)) // unsynced too
	wantSnapshot(t, "after SyncData", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "synced"})
	wantSnapshot(t, "current", fs, map[string]string{"/d": "<dir>", "/d/f": "syn"})
	must(t, f.Sync())
	wantSnapshot(t, "after Sync", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "syn"})
	must(t, f.Close())

	// The clone is independent of the original.
	c := crash(fs)
	writeFile(t, c, "/d/f", "changed")
	if got := readFile(t, fs, "/d/f"); got != "syn" {
		t.Fatalf("original changed through clone: %q", got)
	}
}

func TestMemSyncThroughAnyDescriptor(t *testing.T) {
	fs := NewMem()
	w, err := fs.Create("/f")
	must(t, err)
	must(t, fs.SyncDir("/"))
	writeAt(t, w, "data", 0)
	r, err := fs.Open("/f")
	must(t, err)
	must(t, r.Sync()) // a read-only descriptor of the same inode
	wantSnapshot(t, "synced via other fd", crash(fs), map[string]string{"/f": "data"})
	// And through a hard link.
	must(t, fs.Link("/f", "/g"))
	writeAt(t, w, "DATA", 0)
	g, err := fs.OpenReadWrite("/g", false)
	must(t, err)
	must(t, g.SyncData())
	wantSnapshot(t, "link not dir-synced", crash(fs), map[string]string{"/f": "DATA"})
	must(t, fs.SyncDir("/"))
	wantSnapshot(t, "link dir-synced", crash(fs), map[string]string{"/f": "DATA", "/g": "DATA"})
	for _, f := range []File{w, r, g} {
		must(t, f.Close())
	}
	// Hard links survive the clone as one inode.
	c := crash(fs)
	cf, err := c.OpenReadWrite("/f", false)
	must(t, err)
	writeAt(t, cf, "x", 0)
	must(t, cf.Close())
	if got := readFile(t, c, "/g"); got != "xATA" {
		t.Fatalf("clone lost hard link: /g = %q", got)
	}
}

func TestMemCreateNeedsDirSync(t *testing.T) {
	fs := NewMem()
	writeFile(t, fs, "/f", "hello")
	f, err := fs.OpenReadWrite("/f", false)
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
	wantSnapshot(t, "data synced, dir not", crash(fs), map[string]string{})
	must(t, fs.SyncDir("/"))
	wantSnapshot(t, "dir synced", crash(fs), map[string]string{"/f": "hello"})

	// Each created directory needs its parent synced.
	must(t, fs.MkdirAll("/a/b/c", 0o755))
	must(t, fs.SyncDir("/a"))
	must(t, fs.SyncDir("/a/b"))
	wantSnapshot(t, "root not synced", crash(fs), map[string]string{"/f": "hello"})
	must(t, fs.SyncDir("/"))
	wantSnapshot(t, "all synced", crash(fs), map[string]string{
		"/f": "hello", "/a": "<dir>", "/a/b": "<dir>", "/a/b/c": "<dir>",
	})

	// Remove is not durable until the directory is synced either.
	must(t, fs.Remove("/f"))
	wantSnapshot(t, "remove not synced", crash(fs), map[string]string{
		"/f": "hello", "/a": "<dir>", "/a/b": "<dir>", "/a/b/c": "<dir>",
	})
	d, err := fs.OpenDir("/")
	must(t, err)
	must(t, d.Sync())
	must(t, d.Close())
	wantSnapshot(t, "remove synced via OpenDir", crash(fs), map[string]string{
		"/a": "<dir>", "/a/b": "<dir>", "/a/b/c": "<dir>",
	})
}

func TestMemRenameDurability(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/d", 0o755))
	must(t, fs.SyncDir("/"))
	writeFile(t, fs, "/d/f", "old")
	writeFile(t, fs, "/d/tmp", "new")
	for _, n := range []string{"/d/f", "/d/tmp"} {
		f, err := fs.Open(n)
		must(t, err)
		must(t, f.SyncData())
		must(t, f.Close())
	}
	must(t, fs.SyncDir("/d"))
	must(t, fs.Rename("/d/tmp", "/d/f"))
	wantSnapshot(t, "rename not synced", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "old", "/d/tmp": "new"})
	must(t, fs.SyncDir("/d"))
	wantSnapshot(t, "rename synced", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "new"})

	// Across directories, both directories must be synced; the rename is
	// atomic.
	must(t, fs.MkdirAll("/e", 0o755))
	must(t, fs.SyncDir("/"))
	must(t, fs.Rename("/d/f", "/e/g"))
	must(t, fs.SyncDir("/d"))
	wantSnapshot(t, "source synced", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "new", "/e": "<dir>"})
	// Later operations in the source directory are durable, but they stay
	// ordered after the rename.
	writeFile(t, fs, "/d/f", "newer")
	f, err := fs.Open("/d/f")
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
	must(t, fs.SyncDir("/d"))
	wantSnapshot(t, "source synced twice", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "newer", "/e": "<dir>"})
	must(t, fs.SyncDir("/e"))
	wantSnapshot(t, "both synced", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "newer", "/e": "<dir>", "/e/g": "new"})

	// Target synced first, then source.
	must(t, fs.Rename("/e/g", "/d/h"))
	must(t, fs.SyncDir("/d"))
	wantSnapshot(t, "target synced", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "newer", "/e": "<dir>", "/e/g": "new"})
	must(t, fs.SyncDir("/e"))
	wantSnapshot(t, "both synced again", crash(fs), map[string]string{"/d": "<dir>", "/d/f": "newer", "/d/h": "new", "/e": "<dir>"})
}

func TestMemRemoveAllDurability(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/d/e", 0o755))
	writeFile(t, fs, "/d/x", "")
	must(t, fs.SyncDir("/"))
	must(t, fs.SyncDir("/d"))
	all := map[string]string{"/d": "<dir>", "/d/e": "<dir>", "/d/x": ""}
	wantSnapshot(t, "before", crash(fs), all)
	before := fs.OpCount()
	must(t, fs.RemoveAll("/d"))
	if n := fs.OpCount() - before; n != 1 {
		t.Fatalf("RemoveAll counted %d ops", n)
	}
	wantSnapshot(t, "nothing synced", crash(fs), all)
	must(t, fs.SyncDir("/"))
	wantSnapshot(t, "root synced", crash(fs), map[string]string{})
}

func TestMemPaths(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("a/b", 0o755))
	writeFile(t, fs, "a/b/../b/./f", "x")
	if got := readFile(t, fs, "/a/b/f"); got != "x" {
		t.Fatalf("got %q", got)
	}
	for _, root := range []string{"", ".", "/", "/..", "a/.."} {
		names, err := fs.List(root)
		must(t, err)
		if !slices.Equal(names, []string{"a"}) {
			t.Errorf("List(%q) = %q", root, names)
		}
	}
	fi, err := fs.Stat("/")
	must(t, err)
	if !fi.IsDir() {
		t.Error("root is not a dir")
	}
	if err := fs.Remove("/"); err == nil {
		t.Error("Remove(/) succeeded")
	}
	if err := fs.RemoveAll("/"); err == nil {
		t.Error("RemoveAll(/) succeeded")
	}
	if _, err := fs.Open("/a/b/f/g"); err == nil {
		t.Error("Open below a file succeeded")
	}
	if err := fs.Rename("/a", "/a/b/c"); err == nil {
		t.Error("Rename of a directory into itself succeeded")
	}
	f, err := fs.Open("/a")
	must(t, err)
	if _, err := f.Read(make([]byte, 1)); err == nil {
		t.Error("Read of a directory succeeded")
	}
	must(t, f.Close())
	if f.Fd() != InvalidFd {
		t.Error("Fd")
	}
}

func TestMemOpCount(t *testing.T) {
	fs := NewMem()
	steps := []struct {
		name string
		ops  int64
		fn   func() error
	}{
		{"mkdir", 1, func() error { return fs.MkdirAll("/a/b/c", 0o755) }},
		{"mkdir existing", 0, func() error { return fs.MkdirAll("/a/b", 0o755) }},
		{"create", 1, func() error { _, err := fs.Create("/a/f"); return err }},
		{"openrw existing", 0, func() error { _, err := fs.OpenReadWrite("/a/f", true); return err }},
		{"openrw create", 1, func() error { _, err := fs.OpenReadWrite("/a/g", true); return err }},
		{"failing remove", 0, func() error {
			if fs.Remove("/nope") == nil {
				return errors.New("succeeded")
			}
			return nil
		}},
		{"removeall missing", 0, func() error { return fs.RemoveAll("/nope") }},
		{"write+sync+truncate+prealloc", 5, func() error {
			f, err := fs.OpenReadWrite("/a/f", false)
			if err != nil {
				return err
			}
			defer closeT(t, f)
			_, werr := f.Write([]byte("x"))
			_, waerr := f.WriteAt([]byte("y"), 5)
			return errors.Join(werr, waerr, f.Sync(), f.SyncData(), f.Preallocate(0, 100), f.Truncate(1))
		}},
		{"link+rename+remove", 3, func() error {
			if err := fs.Link("/a/f", "/a/h"); err != nil {
				return err
			}
			if err := fs.Rename("/a/h", "/a/i"); err != nil {
				return err
			}
			return fs.Remove("/a/i")
		}},
		{"syncdir x2", 2, func() error {
			d, err := fs.OpenDir("/a")
			if err != nil {
				return err
			}
			defer closeT(t, d)
			if err := d.Sync(); err != nil {
				return err
			}
			return fs.SyncDir("/")
		}},
		{"lock creates", 1, func() error { _, err := fs.Lock("/LOCK"); return err }},
		{"reads", 0, func() error {
			_, err := fs.List("/a")
			if err == nil {
				_, err = fs.Stat("/a/f")
			}
			if err == nil {
				readFile(t, fs, "/a/f")
			}
			return err
		}},
	}
	for _, s := range steps {
		before := fs.OpCount()
		if err := s.fn(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := fs.OpCount() - before; got != s.ops {
			t.Errorf("%s: counted %d ops, want %d", s.name, got, s.ops)
		}
	}
}

// crashSeq is a deterministic sequence of single mutating operations, with
// the durable state expected just before each.
func crashSeq(t *testing.T, fs *MemFS) []func() {
	var f File
	return []func(){
		func() { must(t, fs.MkdirAll("/d", 0o755)) },
		func() { must(t, fs.SyncDir("/")) },
		func() { var err error; f, err = fs.Create("/d/f"); must(t, err) },
		func() { writeAt(t, f, "one", 0) },
		func() { must(t, f.SyncData()) },
		func() { must(t, fs.SyncDir("/d")) },
		func() { writeAt(t, f, "two", 3) },
		func() { must(t, f.Sync()) },
		func() { must(t, fs.Rename("/d/f", "/d/g")) },
		func() { must(t, fs.SyncDir("/d")) },
		func() { must(t, f.Truncate(2)) },
		func() { must(t, f.Sync()) },
		func() { must(t, fs.Remove("/d/g")) },
		func() { must(t, fs.SyncDir("/d")) },
	}
}

var crashSeqWant = []map[string]string{
	{},              // before MkdirAll
	{},              // before SyncDir /
	{"/d": "<dir>"}, // before Create
	{"/d": "<dir>"},
	{"/d": "<dir>"},
	{"/d": "<dir>"}, // before SyncDir /d (data synced)
	{"/d": "<dir>", "/d/f": "one"},
	{"/d": "<dir>", "/d/f": "one"},
	{"/d": "<dir>", "/d/f": "onetwo"}, // before Rename
	{"/d": "<dir>", "/d/f": "onetwo"},
	{"/d": "<dir>", "/d/g": "onetwo"}, // before Truncate
	{"/d": "<dir>", "/d/g": "onetwo"},
	{"/d": "<dir>", "/d/g": "on"}, // before Remove
	{"/d": "<dir>", "/d/g": "on"},
}

func TestMemCrashAtOp(t *testing.T) {
	// The sequence is one mutating op per step.
	ref := NewMem()
	for i, step := range crashSeq(t, ref) {
		wantSnapshot(t, fmt.Sprintf("reference before step %d", i), crash(ref), crashSeqWant[i])
		before := ref.OpCount()
		step()
		if ref.OpCount() != before+1 {
			t.Fatalf("step %d counted %d ops", i, ref.OpCount()-before)
		}
	}
	wantSnapshot(t, "reference at end", crash(ref), map[string]string{"/d": "<dir>"})

	for k := int64(1); k <= int64(len(crashSeqWant))+1; k++ {
		fs := NewMem()
		// Some operations before arming are not counted towards k.
		must(t, fs.MkdirAll("/pre", 0o755))
		must(t, fs.Remove("/pre"))
		fs.CrashAtOp(k, 0, 1)
		if fs.Crashed() != nil {
			t.Fatal("Crashed before crashing")
		}
		for _, step := range crashSeq(t, fs) {
			step()
		}
		c := fs.Crashed()
		if k > int64(len(crashSeqWant)) {
			if c != nil {
				t.Fatalf("k=%d: crashed past the last op", k)
			}
			continue
		}
		if c == nil {
			t.Fatalf("k=%d: no crash", k)
		}
		wantSnapshot(t, fmt.Sprintf("crash at op %d", k), c, crashSeqWant[k-1])
		// The running FS was not disturbed.
		wantSnapshot(t, "running FS", fs, map[string]string{"/d": "<dir>"})
	}
}

// TestMemDisarm: Disarm before the k-th operation cancels the trigger
// (nothing fires later); after it, it reports the crash and keeps its
// clone.
func TestMemDisarm(t *testing.T) {
	fs := NewMem()
	fs.CrashAtOp(2, 0, 1)
	must(t, fs.MkdirAll("/a", 0o755))
	if fs.Disarm() {
		t.Fatal("Disarm after 1 of 2 operations: fired")
	}
	must(t, fs.MkdirAll("/b", 0o755))
	if fs.Crashed() != nil || fs.Disarm() {
		t.Fatal("a disarmed trigger fired")
	}
	fs.CrashAtOp(1, 0, 1)
	must(t, fs.MkdirAll("/c", 0o755))
	if !fs.Disarm() || fs.Crashed() == nil {
		t.Fatal("Disarm after the crash: the crash or its clone lost")
	}
}

// randomOps applies n random operations with random syncs to fs, under
// /r; it keeps going through expected errors.
func randomOps(t *testing.T, fs *MemFS, rng *rand.Rand, n int) {
	dirs := []string{"/r", "/r/a", "/r/b"}
	for _, d := range dirs {
		must(t, fs.MkdirAll(d, 0o755))
	}
	name := func() string { return dirs[rng.Intn(len(dirs))] + "/" + string(rune('p'+rng.Intn(5))) }
	for range n {
		switch rng.Intn(10) {
		case 0, 1, 2:
			f, err := fs.OpenReadWrite(name(), true)
			if err != nil {
				continue // a directory name
			}
			b := bytes.Repeat([]byte{byte('A' + rng.Intn(26))}, 1+rng.Intn(20))
			writeAt(t, f, string(b), int64(rng.Intn(30)))
			if rng.Intn(2) == 0 {
				must(t, f.Truncate(int64(rng.Intn(40))))
			}
			if rng.Intn(3) == 0 {
				must(t, f.SyncData())
			}
			must(t, f.Close())
		case 3:
			_ = fs.Rename(name(), name())
		case 4:
			_ = fs.Link(name(), name())
		case 5:
			_ = fs.Remove(name())
		case 6:
			_ = fs.SyncDir(dirs[rng.Intn(len(dirs))])
		case 7:
			_, _ = fs.Create(name())
		case 8:
			_ = fs.MkdirAll(name()+"/sub", 0o755)
		case 9:
			_ = fs.RemoveAll(name())
		}
	}
}

func TestMemCrashClone100IsCurrent(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		fs := NewMem()
		rng := rand.New(rand.NewSource(seed))
		for range 10 {
			randomOps(t, fs, rng, 20)
			cur := snapshot(t, fs)
			wantSnapshot(t, fmt.Sprintf("seed %d: CrashClone(100)", seed), fs.CrashClone(100, nil), cur)
			// Everything in a clone is durable.
			c := fs.CrashClone(rng.Intn(101), rng)
			wantSnapshot(t, "crash of a clone", crash(c), snapshot(t, c))
		}
		// After syncing every directory and file, the durable state is the
		// current one.
		cur := snapshot(t, fs)
		must(t, fs.SyncDir("/"))
		for p, v := range cur {
			if v == "<dir>" {
				must(t, fs.SyncDir(p))
			} else {
				f, err := fs.Open(p)
				must(t, err)
				must(t, f.Sync())
				must(t, f.Close())
			}
		}
		wantSnapshot(t, fmt.Sprintf("seed %d: all synced", seed), crash(fs), cur)
	}
}

func TestMemCrashClonePartial(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/d", 0o755))
	must(t, fs.SyncDir("/"))
	f, err := fs.Create("/d/f")
	must(t, err)
	must(t, fs.SyncDir("/d"))
	const chunks, size = 64, 8
	for _, i := range rand.New(rand.NewSource(7)).Perm(chunks) {
		writeAt(t, f, strings.Repeat(string(rune('0'+i%64)), size), int64(i*size))
	}
	for i := range 20 {
		writeFile(t, fs, fmt.Sprintf("/d/n%02d", i), "")
	}
	must(t, f.Close())

	c := fs.CrashClone(50, rand.New(rand.NewSource(42)))
	data := []byte(readFile(t, c, "/d/f"))
	if len(data)%size != 0 || len(data) > chunks*size {
		t.Fatalf("clone size %d", len(data))
	}
	kept := 0
	for i := 0; i < len(data); i += size {
		chunk := data[i : i+size]
		switch {
		case bytes.Equal(chunk, make([]byte, size)):
			if i == len(data)-size {
				t.Fatalf("last chunk %d not written, yet the file extends to it", i/size)
			}
		case bytes.Equal(chunk, bytes.Repeat([]byte{byte('0' + (i/size)%64)}, size)):
			kept++
		default:
			t.Fatalf("torn write at chunk %d: %q", i/size, chunk)
		}
	}
	names, err := c.List("/d")
	must(t, err)
	t.Logf("kept %d/%d writes, %d/21 entries", kept, chunks, len(names))
	if kept == 0 || kept == chunks || len(names) <= 1 || len(names) == 21 {
		t.Fatalf("not an in-between state: %d writes, %d entries", kept, len(names))
	}
	// Same seed, same clone.
	if !maps.Equal(snapshot(t, c), snapshot(t, fs.CrashClone(50, rand.New(rand.NewSource(42))))) {
		t.Fatal("CrashClone is not deterministic for a seed")
	}
}

func TestMemCrashCloneKeepsOrder(t *testing.T) {
	// Overlapping unsynced writes are applied in their original order: the
	// clone holds the last kept one. The draws are made in operation order,
	// so the expectation can be computed from the same seed.
	fs := NewMem()
	f, err := fs.Create("/f")
	must(t, err)
	must(t, fs.SyncDir("/"))
	must(t, f.Sync())
	const n = 30
	for i := range n {
		writeAt(t, f, string(rune('a'+i%26))+string(rune('A'+i%26)), 0)
	}
	for seed := int64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		want := ""
		for i := range n {
			if rng.Intn(100) < 50 {
				want = string(rune('a'+i%26)) + string(rune('A'+i%26))
			}
		}
		c := fs.CrashClone(50, rand.New(rand.NewSource(seed)))
		if got := readFile(t, c, "/f"); got != want {
			t.Fatalf("seed %d: got %q want %q", seed, got, want)
		}
	}
}

func TestMemCrashAtOpPartialDeterministic(t *testing.T) {
	run := func() map[string]string {
		fs := NewMem()
		fs.CrashAtOp(150, 50, 99)
		randomOps(t, fs, rand.New(rand.NewSource(3)), 200)
		c := fs.Crashed()
		if c == nil {
			t.Fatal("no crash")
		}
		return snapshot(t, c)
	}
	if a, b := run(), run(); !maps.Equal(a, b) {
		t.Fatalf("not deterministic:\n%s\n%s", showSnapshot(a), showSnapshot(b))
	}
}

func TestMemInjectErrors(t *testing.T) {
	fs := NewMem()
	f, err := fs.Create("/f")
	must(t, err)
	must(t, fs.SyncDir("/"))
	writeAt(t, f, "data", 0)

	var seen []Op
	fs.InjectErrors(func(op Op) error {
		seen = append(seen, op)
		if op.Kind == OpSyncData {
			return ErrInjected
		}
		return nil
	})
	before := fs.OpCount()
	err = f.SyncData()
	if !errors.Is(err, ErrInjected) {
		t.Fatalf("SyncData: %v", err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Path != "/f" {
		t.Fatalf("not a PathError for /f: %#v", err)
	}
	if fs.OpCount() != before {
		t.Fatal("failed op counted")
	}
	wantSnapshot(t, "after failed SyncData", crash(fs), map[string]string{"/f": ""})
	if len(seen) != 1 || seen[0] != (Op{Kind: OpSyncData, Path: "/f"}) {
		t.Fatalf("seen %+v", seen)
	}

	// Writes, reads, renames, creates fail and change nothing.
	fs.InjectErrors(func(op Op) error {
		switch op.Kind {
		case OpWrite, OpRead, OpRename, OpCreate, OpSyncDir:
			return ErrInjected
		}
		return nil
	})
	if _, err := f.WriteAt([]byte("XXXX"), 0); !errors.Is(err, ErrInjected) {
		t.Fatalf("WriteAt: %v", err)
	}
	if _, err := f.ReadAt(make([]byte, 4), 0); !errors.Is(err, ErrInjected) {
		t.Fatalf("ReadAt: %v", err)
	}
	if err := fs.Rename("/f", "/g"); !errors.Is(err, ErrInjected) {
		t.Fatalf("Rename: %v", err)
	}
	if _, err := fs.Create("/h"); !errors.Is(err, ErrInjected) {
		t.Fatalf("Create: %v", err)
	}
	d, err := fs.OpenDir("/")
	must(t, err)
	if err := d.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("dir Sync: %v", err)
	}
	must(t, d.Close())
	fs.InjectErrors(nil)
	wantSnapshot(t, "after failed ops", fs, map[string]string{"/f": "data"})
	must(t, f.SyncData())
	wantSnapshot(t, "after SyncData", crash(fs), map[string]string{"/f": "data"})

	// The injector sees offsets and new paths, and may call into the FS.
	seen = nil
	fs.InjectErrors(func(op Op) error {
		_ = fs.OpCount() // takes the FS's lock
		seen = append(seen, op)
		return nil
	})
	_, err = f.Write([]byte("abc"))
	must(t, err)
	must(t, fs.Rename("/f", "/g"))
	fs.InjectErrors(nil)
	want := []Op{{Kind: OpWrite, Path: "/f", Offset: 0, Length: 3}, {Kind: OpRename, Path: "/f", NewPath: "/g"}}
	if !slices.Equal(seen, want) {
		t.Fatalf("seen %+v want %+v", seen, want)
	}
	must(t, f.Close())
}

func TestMemConcurrent(t *testing.T) {
	fs := NewMem()
	must(t, fs.MkdirAll("/w", 0o755))
	must(t, fs.MkdirAll("/m", 0o755))
	const writers, rounds = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			f, err := fs.Create(fmt.Sprintf("/w/%d", w))
			if err != nil {
				t.Error(err)
				return
			}
			defer closeT(t, f)
			buf := make([]byte, 16)
			for i := range rounds {
				for j := range buf {
					buf[j] = byte(i)
				}
				if _, err := f.WriteAt(buf, int64(i*16)); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 0 {
					if err := f.SyncData(); err != nil {
						t.Error(err)
					}
				}
				if _, err := f.ReadAt(buf, int64(i*16)); err != nil || buf[0] != byte(i) {
					t.Errorf("read back: %v %d", err, buf[0])
				}
			}
		})
	}
	// Two writers to disjoint ranges of one file.
	shared, err := fs.Create("/w/shared")
	must(t, err)
	for w := range 2 {
		wg.Go(func() {
			for i := range rounds {
				if _, err := shared.WriteAt([]byte{byte(w + 1)}, int64(2*i+w)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range rounds {
			name := fmt.Sprintf("/m/%d", i%7)
			if f, err := fs.Create(name); err == nil {
				closeT(t, f)
			}
			_ = fs.Rename(name, "/m/x")
			_ = fs.SyncDir("/m")
			_, _ = fs.List("/m")
		}
	})
	wg.Go(func() {
		for i := range 50 {
			c := fs.CrashClone(i%101, rand.New(rand.NewSource(int64(i))))
			_, _ = c.List("/w")
		}
	})
	wg.Wait()
	must(t, shared.Close())
	for w := range writers {
		got := readFile(t, fs, fmt.Sprintf("/w/%d", w))
		if len(got) != rounds*16 {
			t.Fatalf("writer %d: %d bytes", w, len(got))
		}
	}
	if got := readFile(t, fs, "/w/shared"); got != strings.Repeat("\x01\x02", rounds) {
		t.Fatalf("shared: %q", got)
	}
}

// TestCrashCloneNamespacePrefix: unsynced creates survive a crash as an
// in-order prefix (a journaling filesystem's guarantee), never "c without b".
func TestCrashCloneNamespacePrefix(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	order := []string{"a", "b", "c", "d"}
	for _, n := range order {
		f, err := fs.Create("/d/" + n)
		if err != nil {
			t.Fatal(err)
		}
		closeT(t, f)
	}
	seen := map[int]bool{}
	for seed := int64(0); seed < 200; seed++ {
		clone := fs.CrashClone(50, rand.New(rand.NewSource(seed)))
		names, err := clone.List("/d")
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range names {
			if n != order[i] {
				t.Fatalf("seed %d: %v is not a prefix of %v", seed, names, order)
			}
		}
		seen[len(names)] = true
	}
	if len(seen) < 3 {
		t.Fatalf("prefix lengths seen %v: the draw is not random", seen)
	}
}

// TestMkdirAllDurable: every directory it creates survives a crash.
func TestMkdirAllDurable(t *testing.T) {
	fs := NewMem()
	if err := MkdirAllDurable(fs, "/a/b/c"); err != nil {
		t.Fatal(err)
	}
	img := fs.CrashClone(0, nil)
	if st, err := img.Stat("/a/b/c"); err != nil || !st.IsDir() {
		t.Fatalf("after a crash: %v %v", st, err)
	}
	// A plain MkdirAll is not durable: the model must show the difference.
	if err := fs.MkdirAll("/x/y", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.CrashClone(0, nil).Stat("/x"); err == nil {
		t.Fatal("an unsynced mkdir survived a strict crash")
	}
}
