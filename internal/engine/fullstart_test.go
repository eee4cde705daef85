package engine

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// lineLog is a slog logger whose lines the test counts.
type lineLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lineLog) lines(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ln := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(ln, substr) {
			n++
		}
	}
	return n
}

// fillFullVolume writes a CLOSED container (1, three blocks) and an OPEN
// one (2, one block) on /vol1 and closes the engine, leaving records in
// the metadata store's WAL for the next open to flush.
func fillFullVolume(t *testing.T, fs *vfs.MemFS) {
	t.Helper()
	e := openMem(t, fs, func(c *Config) { c.DataDirs = []string{"/vol1"} })
	for _, id := range []ContainerID{1, 2} {
		mustNo(t, e.CreateContainer(id))
	}
	for local := uint64(1); local <= 3; local++ {
		b := BlockID{Container: 1, Local: local}
		mustNo(t, e.PutBlock(writeBlock(t, e, b, 700, 700), local))
	}
	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 2, Local: 1}, 700), 1))
	mustNo(t, e.CloseContainer(1))
	mustNo(t, e.Close())
}

// TestPebbleBackgroundErrorsRateLimited: the metadata store's flush at
// open fails with ENOSPC 2,000 times (each a new table, as on a full
// disk) before it succeeds; its background errors write one log line
// (the rate limiter's interval is a minute), not 2,000. Without the
// limit (pebbleLogger.Errorf logging each) the test sees 2,000 lines.
func TestPebbleBackgroundErrorsRateLimited(t *testing.T) {
	fs := vfs.NewMem()
	fillFullVolume(t, fs)
	const failures = 2000
	var failed atomic.Int64
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpCreate && strings.HasSuffix(op.Path, ".sst") && failed.Add(1) <= failures {
			return syscall.ENOSPC
		}
		return nil
	})
	ll := &lineLog{}
	e := openMem(t, fs, func(c *Config) {
		c.DataDirs = []string{"/vol1"}
		c.Logger = slog.New(slog.NewTextHandler(ll, nil))
	})
	defer closeT(t, e)
	if failed.Load() < failures {
		t.Fatalf("only %d table creates failed, want %d", failed.Load(), failures)
	}
	if n := ll.lines("background error"); n < 1 || n > 2 {
		t.Fatalf("%d log lines of background errors for %d failed flushes, want 1 (at most one a minute)", n, failures)
	}
	checkBlock(t, e, BlockID{Container: 1, Local: 2}, 1400)
}

// TestFullVolumeAtOpenIsReadOnly: a volume with no free space at open
// (statfs says 0 bytes, every write fails with ENOSPC) opens read-only
// without writing anything: it says so once, serves reads of its CLOSED
// container, refuses writes, puts, closes and deletes with ErrVolumeFull,
// takes no new container, counts as full, and the engine stays healthy.
func TestFullVolumeAtOpenIsReadOnly(t *testing.T) {
	fs := vfs.NewMem()
	fillFullVolume(t, fs)
	fs.SetDiskUsage(&vfs.DiskUsage{TotalBytes: 64 << 20, AvailBytes: 0, UsedBytes: 64 << 20})
	var writes atomic.Int64
	fs.InjectErrors(func(op vfs.Op) error {
		switch op.Kind {
		case vfs.OpWrite, vfs.OpCreate, vfs.OpPreallocate:
			if !strings.Contains(op.Path, "/LOCK") {
				writes.Add(1)
				return syscall.ENOSPC
			}
		}
		return nil
	})
	ll := &lineLog{}
	e := openMem(t, fs, func(c *Config) {
		c.DataDirs = []string{"/vol1"}
		c.Logger = slog.New(slog.NewTextHandler(ll, nil))
	})
	defer closeT(t, e)
	if n := writes.Load(); n != 0 {
		t.Fatalf("the open tried %d writes on the full volume", n)
	}
	if n := ll.lines("opened read-only"); n != 1 {
		t.Fatalf("%d log lines say the volume is read-only, want 1:\n%s", n, ll.buf.String())
	}
	ro := e.ReadOnlyVolumes()
	if len(ro) != 1 || ro[0].Dir != "/vol1" || ro[0].Containers != 2 || !strings.Contains(ro[0].Reason, "full at start") {
		t.Fatalf("ReadOnlyVolumes = %+v", ro)
	}
	checkBlock(t, e, BlockID{Container: 1, Local: 2}, 1400)
	_, err := writeChunk(e, BlockID{Container: 2, Local: 1}, 700, 100)
	wantErr(t, err, ErrVolumeFull)
	b21 := BlockID{Container: 2, Local: 1}
	sums := ComputeChecksums(nil, content(b21, 0, 700), testBPC)
	wantErr(t, e.PutBlock(&BlockData{ID: b21, Length: 700, BytesPerChecksum: testBPC, Chunks: []ChunkInfo{{Offset: 0, Length: 700, Checksums: sums}}}, 2), ErrVolumeFull)
	wantErr(t, e.CloseContainer(2), ErrVolumeFull)
	wantErr(t, e.DeleteContainer(1, false), ErrVolumeFull)
	wantErr(t, e.CreateContainer(3), ErrVolumeFull)
	mustNo(t, e.MarkUnhealthy(2, "test"))
	if c, err := e.Container(2); err != nil || c.State != StateUnhealthy {
		t.Fatalf("container 2 after MarkUnhealthy: %+v %v", c, err)
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("%d writes tried on the read-only volume", n)
	}
	// The probe's write fails with ENOSPC: a full volume, not a failed one.
	if failed := e.CheckVolumes(); len(failed) != 0 {
		t.Fatalf("the probe failed the full volume: %+v", failed)
	}
	sp, err := e.Space()
	mustNo(t, err)
	if sp.FullVolumes != 1 || sp.AvailableBytes != 0 {
		t.Fatalf("Space = %+v, want one full volume, nothing available", sp)
	}
	mustNo(t, e.Sync())
	if err := e.check(); errors.Is(err, ErrFailed) {
		t.Fatalf("the engine failed: %v", err)
	}
}
