package readyfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ready")
	if _, _, err := Read(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := Write(p, "127.0.0.1:4567"); err != nil {
		t.Fatal(err)
	}
	addr, pid, err := Read(p)
	if err != nil || addr != "127.0.0.1:4567" || pid != os.Getpid() {
		t.Errorf("got %q %d %v", addr, pid, err)
	}
	for _, bad := range []string{"127.0.0.1:4567\n", "a\nb\n", "a\n-3\n", "a\n1\nextra\n"} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Read(p); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
