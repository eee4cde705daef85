package vfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOSFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := Default.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, f)
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	of, ok := OSFile(f)
	if !ok || of == nil {
		t.Fatalf("OSFile of an OS file: %v, %v", of, ok)
	}
	if of.Name() != p || of.Fd() != f.Fd() {
		t.Fatalf("OSFile returned %s fd %d, want %s fd %d", of.Name(), of.Fd(), p, f.Fd())
	}
	buf := make([]byte, 5)
	if _, err := of.ReadAt(buf, 0); err != nil || string(buf) != "hello" {
		t.Fatalf("read through the *os.File: %q, %v", buf, err)
	}

	m := NewMem()
	mf, err := m.Create("/f")
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, mf)
	if of, ok := OSFile(mf); ok || of != nil {
		t.Fatalf("OSFile of a MemFS file: %v, %v", of, ok)
	}
}

// TestWriteFileAtomicPerm: a secret written with 0600 is created 0600 (never
// readable by others, not even between create and rename), replaces an old
// file whole, and leaves no temporary file.
func TestWriteFileAtomicPerm(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(path+".tmp", []byte("leftover"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"first", "second"} {
		if err := WriteFileAtomicPerm(Default, path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, %v; want 0600", st.Mode().Perm(), err)
		}
		if got, _ := os.ReadFile(path); string(got) != data {
			t.Fatalf("read %q, want %q", got, data)
		}
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
}
