package vfs

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// conformance cases run against both implementations; each gets a fresh,
// empty directory dir on fs.
var conformance = []struct {
	name string
	fn   func(t *testing.T, fs FS, dir string)
}{
	{"CreateWriteRead", testCreateWriteRead},
	{"ReadAtEOF", testReadAtEOF},
	{"Offsets", testOffsets},
	{"CreateTruncatesOpenReadWriteDoesNot", testCreateTruncates},
	{"OpenIsReadOnly", testOpenIsReadOnly},
	{"ListSorted", testListSorted},
	{"RenameReplaces", testRenameReplaces},
	{"Remove", testRemove},
	{"RemoveAll", testRemoveAll},
	{"Link", testLink},
	{"Stat", testStat},
	{"Truncate", testTruncate},
	{"Lock", testLock},
	{"NotExist", testNotExist},
	{"MkdirAll", testMkdirAll},
	{"Syncs", testSyncs},
	{"Misc", testMisc},
}

func TestConformance(t *testing.T) {
	for _, c := range conformance {
		t.Run("OS/"+c.name, func(t *testing.T) {
			c.fn(t, Default, t.TempDir())
		})
		t.Run("Mem/"+c.name, func(t *testing.T) {
			fs := NewMem()
			dir := "/tmp/" + c.name
			if err := fs.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			c.fn(t, fs, dir)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, fs FS, name, data string) {
	t.Helper()
	f, err := fs.Create(name)
	must(t, err)
	if n, err := f.Write([]byte(data)); err != nil || n != len(data) {
		t.Fatalf("write %s: %d, %v", name, n, err)
	}
	must(t, f.Close())
}

func readFile(t *testing.T, fs FS, name string) string {
	t.Helper()
	f, err := fs.Open(name)
	must(t, err)
	defer closeT(t, f)
	b, err := io.ReadAll(f)
	must(t, err)
	return string(b)
}

func wantNotExist(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: got %v, want not-exist", what, err)
	}
}

func testCreateWriteRead(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	writeFile(t, fs, name, "hello world")
	if got := readFile(t, fs, name); got != "hello world" {
		t.Fatalf("read %q", got)
	}
	f, err := fs.Open(name)
	must(t, err)
	defer closeT(t, f)
	buf := make([]byte, 5)
	n, err := f.Read(buf)
	if n != 5 || err != nil || string(buf) != "hello" {
		t.Fatalf("Read: %d %v %q", n, err, buf)
	}
	n, err = f.Read(make([]byte, 100))
	if n != 6 || err != nil {
		t.Fatalf("Read rest: %d %v", n, err)
	}
	n, err = f.Read(buf)
	if n != 0 || err != io.EOF {
		t.Fatalf("Read at EOF: %d %v", n, err)
	}
}

func testReadAtEOF(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	writeFile(t, fs, name, "0123456789")
	f, err := fs.Open(name)
	must(t, err)
	defer closeT(t, f)
	buf := make([]byte, 5)
	if n, err := f.ReadAt(buf, 2); n != 5 || err != nil || string(buf) != "23456" {
		t.Errorf("ReadAt inside: %d %v %q", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 5); n != 5 || err != nil || string(buf) != "56789" {
		t.Errorf("ReadAt to end: %d %v %q", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 8); n != 2 || err != io.EOF || string(buf[:2]) != "89" {
		t.Errorf("ReadAt across EOF: %d %v", n, err)
	}
	if n, err := f.ReadAt(buf, 10); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at EOF: %d %v", n, err)
	}
	if n, err := f.ReadAt(buf, 100); n != 0 || err != io.EOF {
		t.Errorf("ReadAt past EOF: %d %v", n, err)
	}
}

func testOffsets(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	f, err := fs.Create(name)
	must(t, err)
	_, err = f.Write([]byte("aaaa"))
	must(t, err)
	// WriteAt does not move the offset used by Write.
	_, err = f.WriteAt([]byte("ZZ"), 10)
	must(t, err)
	_, err = f.Write([]byte("bb"))
	must(t, err)
	must(t, f.Close())
	want := "aaaabb\x00\x00\x00\x00ZZ"
	if got := readFile(t, fs, name); got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	// Each descriptor has its own offset.
	f1, err := fs.Open(name)
	must(t, err)
	defer closeT(t, f1)
	f2, err := fs.Open(name)
	must(t, err)
	defer closeT(t, f2)
	b1, b2 := make([]byte, 3), make([]byte, 3)
	_, err = f1.Read(b1)
	must(t, err)
	_, err = f1.Read(b1)
	must(t, err)
	_, err = f2.Read(b2)
	must(t, err)
	if string(b1) != "abb" || string(b2) != "aaa" {
		t.Fatalf("per-descriptor offsets: %q %q", b1, b2)
	}
}

func testCreateTruncates(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	writeFile(t, fs, name, "hello")
	f, err := fs.OpenReadWrite(name, true)
	must(t, err)
	_, err = f.WriteAt([]byte("J"), 0)
	must(t, err)
	must(t, f.Close())
	if got := readFile(t, fs, name); got != "Jello" {
		t.Fatalf("OpenReadWrite: %q", got)
	}
	f, err = fs.OpenReadWrite(name, false)
	must(t, err)
	must(t, f.Close())
	writeFile(t, fs, name, "x")
	if got := readFile(t, fs, name); got != "x" {
		t.Fatalf("Create: %q", got)
	}
	// OpenReadWrite with create makes an empty file.
	f, err = fs.OpenReadWrite(filepath.Join(dir, "new"), true)
	must(t, err)
	must(t, f.Close())
	if got := readFile(t, fs, filepath.Join(dir, "new")); got != "" {
		t.Fatalf("new: %q", got)
	}
}

func testOpenIsReadOnly(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	writeFile(t, fs, name, "hello")
	f, err := fs.Open(name)
	must(t, err)
	defer closeT(t, f)
	if _, err := f.Write([]byte("x")); err == nil {
		t.Error("Write on Open()ed file succeeded")
	}
	if _, err := f.WriteAt([]byte("x"), 0); err == nil {
		t.Error("WriteAt on Open()ed file succeeded")
	}
	if err := f.Truncate(0); err == nil {
		t.Error("Truncate on Open()ed file succeeded")
	}
	if got := readFile(t, fs, name); got != "hello" {
		t.Fatalf("contents changed: %q", got)
	}
}

func testListSorted(t *testing.T, fs FS, dir string) {
	for _, n := range []string{"c", "a", "b"} {
		writeFile(t, fs, filepath.Join(dir, n), n)
	}
	must(t, fs.MkdirAll(filepath.Join(dir, "d", "e"), 0o755))
	got, err := fs.List(dir)
	must(t, err)
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	got, err = fs.List(filepath.Join(dir, "d", "e"))
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("List empty = %q", got)
	}
	if _, err := fs.List(filepath.Join(dir, "a")); err == nil {
		t.Error("List of a file succeeded")
	}
}

func testRenameReplaces(t *testing.T, fs FS, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, fs, a, "A")
	writeFile(t, fs, b, "B")
	must(t, fs.Rename(a, b))
	if got := readFile(t, fs, b); got != "A" {
		t.Fatalf("b = %q", got)
	}
	_, err := fs.Stat(a)
	wantNotExist(t, "stat renamed-away", err)
	// Across directories.
	must(t, fs.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	c := filepath.Join(dir, "sub", "c")
	must(t, fs.Rename(b, c))
	if got := readFile(t, fs, c); got != "A" {
		t.Fatalf("c = %q", got)
	}
	// An open descriptor follows the inode.
	f, err := fs.Open(c)
	must(t, err)
	defer closeT(t, f)
	must(t, fs.Rename(c, a))
	buf := make([]byte, 1)
	if n, err := f.ReadAt(buf, 0); n != 1 || err != nil || buf[0] != 'A' {
		t.Fatalf("read through renamed descriptor: %d %v", n, err)
	}
	wantNotExist(t, "rename missing", fs.Rename(filepath.Join(dir, "nope"), b))
	wantNotExist(t, "rename into missing dir", fs.Rename(a, filepath.Join(dir, "nodir", "x")))
}

func testRemove(t *testing.T, fs FS, dir string) {
	a := filepath.Join(dir, "a")
	writeFile(t, fs, a, "A")
	must(t, fs.Remove(a))
	_, err := fs.Stat(a)
	wantNotExist(t, "stat removed", err)
	wantNotExist(t, "remove missing", fs.Remove(a))

	d := filepath.Join(dir, "d")
	must(t, fs.MkdirAll(d, 0o755))
	writeFile(t, fs, filepath.Join(d, "x"), "x")
	if err := fs.Remove(d); err == nil {
		t.Fatal("Remove of a non-empty directory succeeded")
	}
	must(t, fs.Remove(filepath.Join(d, "x")))
	must(t, fs.Remove(d))
	_, err = fs.Stat(d)
	wantNotExist(t, "stat removed dir", err)

	// A removed file stays readable through an open descriptor.
	writeFile(t, fs, a, "still here")
	f, err := fs.Open(a)
	must(t, err)
	defer closeT(t, f)
	must(t, fs.Remove(a))
	b, err := io.ReadAll(f)
	must(t, err)
	if string(b) != "still here" {
		t.Fatalf("read removed: %q", b)
	}
}

func testRemoveAll(t *testing.T, fs FS, dir string) {
	must(t, fs.RemoveAll(filepath.Join(dir, "missing")))
	must(t, fs.RemoveAll(filepath.Join(dir, "missing", "deeper")))
	d := filepath.Join(dir, "d")
	must(t, fs.MkdirAll(filepath.Join(d, "e", "f"), 0o755))
	writeFile(t, fs, filepath.Join(d, "x"), "x")
	writeFile(t, fs, filepath.Join(d, "e", "y"), "y")
	must(t, fs.RemoveAll(d))
	_, err := fs.Stat(d)
	wantNotExist(t, "stat after RemoveAll", err)
	names, err := fs.List(dir)
	must(t, err)
	if len(names) != 0 {
		t.Fatalf("left: %q", names)
	}
	// RemoveAll of a plain file.
	writeFile(t, fs, filepath.Join(dir, "f"), "f")
	must(t, fs.RemoveAll(filepath.Join(dir, "f")))
	_, err = fs.Stat(filepath.Join(dir, "f"))
	wantNotExist(t, "stat after RemoveAll of a file", err)
}

func testLink(t *testing.T, fs FS, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, fs, a, "A")
	must(t, fs.Link(a, b))
	// Both names are the same inode.
	f, err := fs.OpenReadWrite(a, false)
	must(t, err)
	_, err = f.WriteAt([]byte("Z"), 1)
	must(t, err)
	must(t, f.Close())
	if got := readFile(t, fs, b); got != "AZ" {
		t.Fatalf("b = %q", got)
	}
	if err := fs.Link(a, b); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Link onto existing: %v, want exist", err)
	}
	wantNotExist(t, "link missing", fs.Link(filepath.Join(dir, "nope"), filepath.Join(dir, "c")))
	must(t, fs.Remove(a))
	if got := readFile(t, fs, b); got != "AZ" {
		t.Fatalf("b after removing a = %q", got)
	}
}

func testStat(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	writeFile(t, fs, name, "12345")
	fi, err := fs.Stat(name)
	must(t, err)
	if fi.Name() != "f" || fi.Size() != 5 || fi.IsDir() || fi.Mode().IsDir() || !fi.Mode().IsRegular() {
		t.Errorf("file stat: %q %d %v %v", fi.Name(), fi.Size(), fi.IsDir(), fi.Mode())
	}
	fi, err = fs.Stat(dir)
	must(t, err)
	if fi.Name() != filepath.Base(dir) || !fi.IsDir() || fi.Mode()&os.ModeDir == 0 {
		t.Errorf("dir stat: %q %v %v", fi.Name(), fi.IsDir(), fi.Mode())
	}
	f, err := fs.OpenReadWrite(name, false)
	must(t, err)
	defer closeT(t, f)
	_, err = f.WriteAt([]byte("678"), 5)
	must(t, err)
	fi, err = f.Stat()
	must(t, err)
	if fi.Size() != 8 || fi.Name() != "f" {
		t.Errorf("File.Stat: %q %d", fi.Name(), fi.Size())
	}
	fi, err = fs.Stat(name)
	must(t, err)
	if fi.Size() != 8 {
		t.Errorf("Stat after write: %d", fi.Size())
	}
}

func testTruncate(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	writeFile(t, fs, name, "hello world")
	f, err := fs.OpenReadWrite(name, false)
	must(t, err)
	must(t, f.Truncate(5))
	if got := readFile(t, fs, name); got != "hello" {
		t.Fatalf("shrunk: %q", got)
	}
	must(t, f.Truncate(8))
	if got := readFile(t, fs, name); got != "hello\x00\x00\x00" {
		t.Fatalf("grown: %q", got)
	}
	// Growth after a shrink must not resurrect the old bytes.
	must(t, f.Truncate(2))
	must(t, f.Truncate(4))
	if got := readFile(t, fs, name); got != "he\x00\x00" {
		t.Fatalf("shrunk then grown: %q", got)
	}
	must(t, f.Close())
}

func testLock(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "LOCK")
	l, err := fs.Lock(name)
	must(t, err)
	if _, err := fs.Stat(name); err != nil {
		t.Fatalf("lock file not created: %v", err)
	}
	if l2, err := fs.Lock(name); err == nil {
		closeT(t, l2)
		t.Fatal("second Lock succeeded")
	}
	must(t, l.Close())
	l, err = fs.Lock(name)
	must(t, err)
	must(t, l.Close())
	if _, err := fs.Lock(filepath.Join(dir, "nodir", "LOCK")); err == nil {
		t.Fatal("Lock in a missing directory succeeded")
	}
}

func testNotExist(t *testing.T, fs FS, dir string) {
	missing := filepath.Join(dir, "missing")
	inMissing := filepath.Join(dir, "nodir", "f")
	_, err := fs.Open(missing)
	wantNotExist(t, "Open", err)
	_, err = fs.Stat(missing)
	wantNotExist(t, "Stat", err)
	_, err = fs.OpenReadWrite(missing, false)
	wantNotExist(t, "OpenReadWrite no create", err)
	_, err = fs.OpenDir(missing)
	wantNotExist(t, "OpenDir", err)
	_, err = fs.List(missing)
	wantNotExist(t, "List", err)
	wantNotExist(t, "Remove", fs.Remove(missing))
	wantNotExist(t, "SyncDir", fs.SyncDir(missing))
	_, err = fs.Create(inMissing)
	wantNotExist(t, "Create in missing dir", err)
	_, err = fs.OpenReadWrite(inMissing, true)
	wantNotExist(t, "OpenReadWrite create in missing dir", err)
	var pe *os.PathError
	if _, err := fs.Open(missing); !errors.As(err, &pe) {
		t.Errorf("Open error %T is not *os.PathError", err)
	}
	if names, _ := fs.List(dir); len(names) != 0 {
		t.Errorf("failed operations left %q", names)
	}
}

func testMkdirAll(t *testing.T, fs FS, dir string) {
	d := filepath.Join(dir, "a", "b", "c")
	must(t, fs.MkdirAll(d, 0o755))
	must(t, fs.MkdirAll(d, 0o755))
	fi, err := fs.Stat(filepath.Join(dir, "a", "b"))
	must(t, err)
	if !fi.IsDir() {
		t.Fatal("not a dir")
	}
	writeFile(t, fs, filepath.Join(dir, "file"), "x")
	if err := fs.MkdirAll(filepath.Join(dir, "file", "sub"), 0o755); err == nil {
		t.Fatal("MkdirAll below a file succeeded")
	}
	if _, err := fs.Create(d); err == nil {
		t.Fatal("Create of a directory succeeded")
	}
	if _, err := fs.OpenDir(filepath.Join(dir, "file")); err == nil {
		t.Fatal("OpenDir of a file succeeded")
	}
}

func testSyncs(t *testing.T, fs FS, dir string) {
	name := filepath.Join(dir, "f")
	f, err := fs.Create(name)
	must(t, err)
	_, err = f.Write([]byte("data"))
	must(t, err)
	must(t, f.Preallocate(0, 4096))
	must(t, f.SyncData())
	must(t, f.Sync())
	must(t, f.Close())
	must(t, fs.SyncDir(dir))
	d, err := fs.OpenDir(dir)
	must(t, err)
	must(t, d.Sync())
	must(t, d.Close())
	fi, err := fs.Stat(name)
	must(t, err)
	if fi.Size() != 4 {
		t.Fatalf("size after Preallocate = %d", fi.Size())
	}
}

func testMisc(t *testing.T, fs FS, dir string) {
	u, err := fs.GetDiskUsage(dir)
	must(t, err)
	if u.TotalBytes == 0 || u.AvailBytes > u.TotalBytes {
		t.Errorf("disk usage %+v", u)
	}
	name := filepath.Join(dir, "f")
	writeFile(t, fs, name, "x")
	f, err := fs.Open(name)
	must(t, err)
	must(t, f.Close())
	if err := f.Close(); err == nil {
		t.Error("double Close succeeded")
	}
	if _, err := f.ReadAt(make([]byte, 1), 0); err == nil {
		t.Error("ReadAt after Close succeeded")
	}
	// Empty reads and writes.
	f, err = fs.OpenReadWrite(name, false)
	must(t, err)
	defer closeT(t, f)
	if n, err := f.ReadAt(nil, 0); n != 0 || err != nil {
		t.Errorf("empty ReadAt: %d %v", n, err)
	}
	if n, err := f.Write(nil); n != 0 || err != nil {
		t.Errorf("empty Write: %d %v", n, err)
	}
	var buf bytes.Buffer
	_, err = io.Copy(&buf, f)
	must(t, err)
	if buf.String() != "x" {
		t.Errorf("copy: %q", buf.String())
	}
}

// TestWriteFileAtomic: the file is replaced whole; after a crash right
// after the call (only synced state survives) the new contents are there,
// and no temporary file is left.
func TestWriteFileAtomic(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"first", "second, longer"} {
		if err := WriteFileAtomic(fs, "/d/f", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	after := fs.CrashClone(0, rand.New(rand.NewSource(1)))
	f, err := after.Open("/d/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	closeT(t, f)
	if string(b) != "second, longer" {
		t.Fatalf("after a crash: %q", b)
	}
	if names, _ := after.List("/d"); len(names) != 1 {
		t.Fatalf("directory holds %v", names)
	}
}

// closeT closes c and fails the test on an error: a Close that fails is a
// bug of the code under test (make lint's errcheck).
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
