package vfs

import (
	"path/filepath"
	"testing"
)

func TestOSFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := Default.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
	defer mf.Close()
	if of, ok := OSFile(mf); ok || of != nil {
		t.Fatalf("OSFile of a MemFS file: %v, %v", of, ok)
	}
}
