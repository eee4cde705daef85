package demo

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDemoSmall(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := Run(context.Background(), Config{Dir: dir, DataBytes: 16 << 20, Writers: 2, BenchDuration: 200 * time.Millisecond, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"summary", "read back", "reopen + read back", "close + scan containers", "chunk-write 1.0 KiB x16"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Fatalf("demo left %d entries behind", len(left))
	}
}
