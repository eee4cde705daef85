package engine

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

const testBPC = 512

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// content returns the deterministic bytes of block b at [off, off+n): every
// test writes and expects these, so a read of the wrong place shows.
func content(b BlockID, off uint64, n int) []byte {
	out := make([]byte, n)
	seed := uint64(b.Container)*1_000_003 + b.Local*7919
	for i := range out {
		x := seed + off + uint64(i)
		x ^= x >> 7
		x *= 0x9E3779B97F4A7C15
		out[i] = byte(x >> 56)
	}
	return out
}

func openMem(t testing.TB, fs vfs.FS, mutate ...func(*Config)) *Engine {
	t.Helper()
	cfg := Config{DataDirs: []string{"/vol1", "/vol2"}, FS: fs, Logger: quietLogger}
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return e
}

// writeChunk writes content(b, off, n) at off.
func writeChunk(e *Engine, b BlockID, off uint64, n int) (ChunkInfo, error) {
	data := content(b, off, n)
	sums := ComputeChecksums(nil, data, testBPC)
	err := e.WriteChunk(b, off, data, testBPC, sums)
	return ChunkInfo{Offset: off, Length: uint64(n), Checksums: sums}, err
}

// writeBlock writes chunks of the given sizes and returns the BlockData
// describing them.
func writeBlock(t testing.TB, e *Engine, b BlockID, sizes ...int) *BlockData {
	t.Helper()
	bd := &BlockData{ID: b, BytesPerChecksum: testBPC}
	for _, n := range sizes {
		ch, err := writeChunk(e, b, bd.Length, n)
		if err != nil {
			t.Fatalf("write chunk: %v", err)
		}
		bd.Chunks = append(bd.Chunks, ch)
		bd.Length += uint64(n)
	}
	return bd
}

func mustNo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

// readAll reads block b whole and compares with content.
func checkBlock(t testing.TB, e *Engine, b BlockID, length uint64) {
	t.Helper()
	got, err := e.ReadChunk(b, 0, length, nil)
	if err != nil {
		t.Fatalf("read block %v: %v", b, err)
	}
	want := content(b, 0, int(length))
	if string(got) != string(want) {
		t.Fatalf("block %v: wrong bytes", b)
	}
}

// skipCrashLoopIfShort skips a crash-at-every-operation loop under -short.
// The loops drive the engine from one goroutine, thousands of times, and
// take most of the package's time; `make test` runs them in full, then
// runs the package again under the race detector with -short, where they
// would add half a minute and nothing for the detector to watch.
func skipCrashLoopIfShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("crash loop: single-goroutine and long; runs without -short")
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

// closeFailedT closes an engine a test made fail: its Close must say so.
func closeFailedT(t testing.TB, e *Engine) {
	t.Helper()
	if err := e.Close(); !errors.Is(err, ErrFailed) {
		t.Errorf("Close of the failed engine: %v, want ErrFailed", err)
	}
}

// closeInto closes c at the end of a check that returns an error (a
// function without a t) and joins its Close error to the one returned.
func closeInto(err *error, c io.Closer) {
	*err = errors.Join(*err, c.Close())
}
