package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/lograte"
	"github.com/spindle-store/spindle/internal/vfs"
)

func TestWriteReadReopen(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			var fs vfs.FS = vfs.NewMem()
			dirs := []string{"/vol1", "/vol2"}
			if name == "os" {
				fs = vfs.Default
				d := t.TempDir()
				dirs = []string{filepath.Join(d, "a"), filepath.Join(d, "b")}
			}
			open := func() *Engine {
				return openMem(t, fs, func(c *Config) { c.DataDirs = dirs })
			}
			e := open()
			for id := ContainerID(1); id <= 4; id++ {
				mustNo(t, e.CreateContainer(id))
			}
			// Containers spread over both volumes.
			vols := map[string]int{}
			for _, ci := range e.ListContainers() {
				vols[ci.Volume]++
			}
			if len(vols) != 2 {
				t.Fatalf("containers on %d volumes, want 2: %v", len(vols), vols)
			}
			b := BlockID{Container: 3, Local: 7}
			bd := writeBlock(t, e, b, 1000, 4096, 1, 3000)
			mustNo(t, e.PutBlock(bd, 0))
			// More chunks after a PutBlock, then a second PutBlock.
			ch, err := writeChunk(e, b, bd.Length, 2500)
			mustNo(t, err)
			bd.Chunks = append(bd.Chunks, ch)
			bd.Length += 2500
			// Pending (uncommitted) chunks are readable.
			checkBlock(t, e, b, bd.Length)
			mustNo(t, e.PutBlock(bd, 0))
			mustNo(t, e.Sync())
			// Ranged reads across chunk and piece boundaries.
			for _, r := range [][2]uint64{{0, 1}, {999, 2}, {1000, 4096}, {5095, 2}, {513, 6000}, {bd.Length - 1, 1}} {
				got, err := e.ReadChunk(b, r[0], r[1], nil)
				mustNo(t, err)
				if string(got) != string(content(b, r[0], int(r[1]))) {
					t.Fatalf("range %v: wrong bytes", r)
				}
			}
			_, err = e.ReadChunk(b, bd.Length-1, 2, nil)
			wantErr(t, err, ErrNotFound)
			mustNo(t, e.Close())

			e = open()
			defer closeT(t, e)
			got, err := e.GetBlock(b)
			mustNo(t, err)
			if got.Length != bd.Length || len(got.Chunks) != len(bd.Chunks) {
				t.Fatalf("reopened block: length %d chunks %d, want %d %d", got.Length, len(got.Chunks), bd.Length, len(bd.Chunks))
			}
			checkBlock(t, e, b, bd.Length)
			ci, err := e.Container(3)
			mustNo(t, err)
			if ci.UsedBytes != bd.Length || ci.State != StateOpen {
				t.Fatalf("container after reopen: %+v", ci)
			}
			// Writing continues where the committed block ends.
			_, err = writeChunk(e, b, bd.Length, 100)
			mustNo(t, err)
		})
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs, func(c *Config) { c.MaxContainerSizeBytes = 10_000 })
	// Close succeeds after the force delete below of an OPEN container
	// written to: its directory, dirty and then removed, is no longer
	// synced (it failed with "engine failed: open /vol2/containers/c4/2:
	// no such file or directory" and poisoned the engine).
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close after a force delete: %v", err)
		}
	}()
	mustNo(t, e.CreateContainer(1))
	mustNo(t, e.CreateContainer(2))
	b := BlockID{Container: 1, Local: 1}
	bd := writeBlock(t, e, b, 1000, 1000)
	used := func() uint64 {
		ci, err := e.Container(1)
		mustNo(t, err)
		return ci.UsedBytes
	}
	before := used()

	data := content(b, 2000, 1000)
	sums := ComputeChecksums(nil, data, testBPC)
	bad := append([]uint32(nil), sums...)
	bad[1] ^= 1
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"checksum mismatch", e.WriteChunk(b, 2000, data, testBPC, bad), ErrChecksumMismatch},
		{"too few checksums", e.WriteChunk(b, 2000, data, testBPC, sums[:1]), ErrInvalid},
		{"bad bytes per checksum", e.WriteChunk(b, 2000, data, 7, sums), ErrInvalid},
		{"other bytes per checksum in block", e.WriteChunk(b, 2000, data, 1024, ComputeChecksums(nil, data, 1024)), ErrInvalid},
		{"empty chunk", e.WriteChunk(b, 2000, nil, testBPC, nil), ErrInvalid},
		{"hole", e.WriteChunk(b, 2001, data, testBPC, sums), ErrHole},
		{"overlap", e.WriteChunk(b, 500, data, testBPC, sums), ErrOverlap},
		{"overlap at chunk start, other data", e.WriteChunk(b, 1000, data, testBPC, sums), ErrOverlap},
		{"past max size", e.WriteChunk(b, 2000, content(b, 2000, 9000), testBPC, ComputeChecksums(nil, content(b, 2000, 9000), testBPC)), ErrContainerFull},
		{"missing container", e.WriteChunk(BlockID{Container: 99, Local: 1}, 0, data, testBPC, sums), ErrNotFound},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), "container") {
			t.Errorf("%s: error %v should name the container", c.name, c.err)
		}
		wantErr(t, c.err, c.want)
	}
	if used() != before {
		t.Fatalf("used bytes changed from %d to %d by rejected writes", before, used())
	}
	// The mismatch error names the offset of the bad piece.
	if err := cases[0].err; !strings.Contains(err.Error(), "offset 2512") {
		t.Fatalf("mismatch error %q should name offset 2512", err)
	}
	// An identical replay of a chunk is accepted and changes nothing.
	_, err := writeChunk(e, b, 1000, 1000)
	mustNo(t, err)

	// PutBlock that does not match what was written.
	lying := *bd
	lying.Chunks = cloneChunks(bd.Chunks)
	lying.Chunks[1].Checksums[0] ^= 1
	wantErr(t, e.PutBlock(&lying, 0), ErrInvalid)
	tooLong := *bd
	tooLong.Chunks = append(cloneChunks(bd.Chunks), ChunkInfo{Offset: 2000, Length: 10, Checksums: []uint32{0}})
	tooLong.Length = 2010
	// A chunk range it names is not here: not found (a pipeline tells a
	// diverged replica by it).
	wantErr(t, e.PutBlock(&tooLong, 0), ErrNotFound)
	gappy := *bd
	gappy.Chunks = cloneChunks(bd.Chunks)
	gappy.Chunks[1].Offset = 1001
	wantErr(t, e.PutBlock(&gappy, 0), ErrHole)
	_, err = e.GetBlock(b)
	wantErr(t, err, ErrNotFound)

	mustNo(t, e.PutBlock(bd, 0))
	mustNo(t, e.PutBlock(bd, 0)) // idempotent
	shrink := *bd
	shrink.Chunks = bd.Chunks[:1]
	shrink.Length = 1000
	wantErr(t, e.PutBlock(&shrink, 0), ErrInvalid)

	// Reads of what does not exist.
	_, err = e.ReadChunk(BlockID{Container: 1, Local: 42}, 0, 1, nil)
	wantErr(t, err, ErrNotFound)
	_, err = e.GetBlock(BlockID{Container: 1, Local: 42})
	wantErr(t, err, ErrNotFound)
	wantErr(t, e.DeleteBlock(BlockID{Container: 1, Local: 42}), ErrNotFound)
	wantErr(t, e.CreateContainer(1), ErrExists)

	// A CLOSED container takes no writes and no puts, and stays readable.
	mustNo(t, e.CloseContainer(1))
	mustNo(t, e.CloseContainer(1))
	_, err = writeChunk(e, BlockID{Container: 1, Local: 2}, 0, 10)
	wantErr(t, err, ErrNotOpen)
	wantErr(t, e.PutBlock(bd, 0), ErrNotOpen)
	checkBlock(t, e, b, bd.Length)
	ci, _ := e.Container(1)
	if ci.State != StateClosed {
		t.Fatalf("state %s, want CLOSED", ci.State)
	}
	// An OPEN container with data is deleted only with force.
	writeBlock(t, e, BlockID{Container: 2, Local: 1}, 10)
	wantErr(t, e.DeleteContainer(2, false), ErrInvalid)
	mustNo(t, e.DeleteContainer(2, true))
	_, err = e.Container(2)
	wantErr(t, err, ErrNotFound)
}

func TestCorruptMetadataRecord(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs, func(c *Config) { c.DataDirs = []string{"/vol1"} })
	mustNo(t, e.CreateContainer(1))
	mustNo(t, e.CreateContainer(2))
	for _, id := range []ContainerID{1, 2} {
		for local := uint64(1); local <= 3; local++ {
			b := BlockID{Container: id, Local: local}
			mustNo(t, e.PutBlock(writeBlock(t, e, b, 700, 700), 0))
		}
	}
	mustNo(t, e.Close())

	// Flip a byte in one block record of container 1, behind the engine.
	db, err := pebble.Open("/vol1/meta", &pebble.Options{FS: vfs.ToPebble(fs), Logger: pebbleLogger{l: quietLogger, rate: lograte.New(0, nil)}})
	mustNo(t, err)
	key := blockKey(BlockID{Container: 1, Local: 2})
	val, closer, err := db.Get(key)
	mustNo(t, err)
	damaged := append([]byte(nil), val...)
	closeT(t, closer)
	damaged[25] ^= 0x40
	mustNo(t, db.Set(key, damaged, pebble.Sync))
	mustNo(t, db.Close())

	e = openMem(t, fs, func(c *Config) { c.DataDirs = []string{"/vol1"} })
	defer func() { closeT(t, e) }() // the engine reopened last
	c1, _ := e.Container(1)
	c2, _ := e.Container(2)
	if c1.State != StateUnhealthy || !strings.Contains(c1.Reason, "block 2") {
		t.Fatalf("container 1: %+v, want UNHEALTHY naming block 2", c1)
	}
	if c2.State != StateOpen {
		t.Fatalf("container 2: %s, want OPEN", c2.State)
	}
	_, err = e.GetBlock(BlockID{Container: 1, Local: 2})
	wantErr(t, err, ErrCorrupt)
	checkBlock(t, e, BlockID{Container: 1, Local: 1}, 1400) // undamaged blocks still read
	for local := uint64(1); local <= 3; local++ {
		checkBlock(t, e, BlockID{Container: 2, Local: local}, 1400)
	}
	_, err = writeChunk(e, BlockID{Container: 1, Local: 9}, 0, 10)
	wantErr(t, err, ErrNotOpen)
	// The state survives a restart.
	mustNo(t, e.Close())
	e = openMem(t, fs, func(c *Config) { c.DataDirs = []string{"/vol1"} })
	if c, _ := e.Container(1); c.State != StateUnhealthy {
		t.Fatalf("after restart: %s", c.State)
	}
}

func TestCorruptDataDetected(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(5))
	mustNo(t, e.CreateContainer(6))
	b := BlockID{Container: 5, Local: 1}
	mustNo(t, e.PutBlock(writeBlock(t, e, b, 2000, 2000), 0))
	other := BlockID{Container: 6, Local: 1}
	mustNo(t, e.PutBlock(writeBlock(t, e, other, 2000), 0))
	mustNo(t, e.Sync())

	ci, _ := e.Container(5)
	path := filepath.Join(ci.Dir, blockFileName(1))
	f, err := fs.OpenReadWrite(path, false)
	mustNo(t, err)
	_, err = f.WriteAt([]byte{0xFF ^ content(b, 2600, 1)[0]}, 2600)
	mustNo(t, err)
	closeT(t, f)

	// Reads away from the damage succeed; reads over it fail naming the piece.
	_, err = e.ReadChunk(b, 0, 2000, nil)
	mustNo(t, err)
	_, err = e.ReadChunk(b, 2590, 20, nil)
	wantErr(t, err, ErrCorrupt)
	if !strings.Contains(err.Error(), "container 5 block 1 offset 2512") {
		t.Fatalf("error %q should name container 5 block 1 offset 2512", err)
	}
	res, err := e.ScanContainer(5)
	mustNo(t, err)
	if len(res.Damage) != 1 || !strings.Contains(res.Damage[0], "offset 2512") {
		t.Fatalf("scan: %+v", res)
	}
	if ci, _ := e.Container(5); ci.State != StateUnhealthy {
		t.Fatalf("state %s, want UNHEALTHY", ci.State)
	}
	res, err = e.ScanContainer(6)
	mustNo(t, err)
	if len(res.Damage) != 0 || res.Blocks != 1 || res.Bytes != 2000 {
		t.Fatalf("scan of healthy container: %+v", res)
	}
	if ci, _ := e.Container(6); ci.State != StateOpen {
		t.Fatalf("healthy container state %s", ci.State)
	}
	// A truncated block file is damage too.
	ci, _ = e.Container(6)
	f, err = fs.OpenReadWrite(filepath.Join(ci.Dir, blockFileName(1)), false)
	mustNo(t, err)
	mustNo(t, f.Truncate(1000))
	closeT(t, f)
	_, err = e.ReadChunk(other, 0, 2000, nil)
	wantErr(t, err, ErrCorrupt)
}

func TestListAndDeleteBlocks(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	for local := uint64(1); local <= 25; local++ {
		mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: local}, int(local)), 0))
	}
	var all []uint64
	after, first := uint64(0), true
	for pages := 0; pages < 10; pages++ {
		page, err := e.ListBlocks(1, after, first, 10)
		mustNo(t, err)
		for _, bd := range page {
			all = append(all, bd.ID.Local)
		}
		if len(page) < 10 {
			break
		}
		first, after = false, page[len(page)-1].ID.Local
	}
	if len(all) != 25 || all[0] != 1 || all[24] != 25 {
		t.Fatalf("listed %v", all)
	}
	mustNo(t, e.DeleteBlock(BlockID{Container: 1, Local: 5}))
	_, err := e.GetBlock(BlockID{Container: 1, Local: 5})
	wantErr(t, err, ErrNotFound)
	ci, _ := e.Container(1)
	if ci.UsedBytes != 25*26/2-5 {
		t.Fatalf("used %d after delete", ci.UsedBytes)
	}
	if _, err := fs.Stat(filepath.Join(ci.Dir, blockFileName(5))); err == nil {
		t.Fatal("block file still there after DeleteBlock")
	}
	// The local ID can be written again from scratch.
	mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: 5}, 50), 0))
	checkBlock(t, e, BlockID{Container: 1, Local: 5}, 50)
}

// TestConcurrentWritersGroupCommit: many writers, each write followed by a
// Sync, interleaved as the scheduler likes; after the last Sync returns, a
// crash keeps every write. That concurrent Syncs share rounds is asserted,
// deterministically, by TestGroupCommitAmortises.
func TestConcurrentWritersGroupCommit(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1))
	mustNo(t, e.CreateContainer(2))
	const writers, chunks, size = 16, 20, 600
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			b := BlockID{Container: ContainerID(1 + w%2), Local: uint64(w)}
			bd := &BlockData{ID: b, BytesPerChecksum: testBPC}
			for i := 0; i < chunks; i++ {
				ch, err := writeChunk(e, b, bd.Length, size)
				if err == nil {
					err = e.Sync()
				}
				if err != nil {
					errs <- err
					return
				}
				bd.Chunks = append(bd.Chunks, ch)
				bd.Length += size
			}
			if err := e.PutBlock(bd, 0); err != nil {
				errs <- err
				return
			}
			errs <- e.Sync()
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		mustNo(t, err)
	}
	st := e.SyncStats()
	if st.Rounds == 0 || st.FileSyncs == 0 || st.MetaSyncs == 0 {
		t.Fatalf("sync stats %+v", st)
	}
	crashed := fs.CrashClone(0, nil)
	mustNo(t, e.Close())
	e2 := openMem(t, crashed)
	defer closeT(t, e2)
	for w := 0; w < writers; w++ {
		checkBlock(t, e2, BlockID{Container: ContainerID(1 + w%2), Local: uint64(w)}, chunks*size)
	}
}

// TestSyncFailureIsSticky: after an fdatasync error nothing more is
// acknowledged, because the kernel may have dropped the dirty pages.
func TestSyncFailureIsSticky(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeFailedT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	_, err := writeChunk(e, b, 0, 100)
	mustNo(t, err)
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpSyncData && strings.HasSuffix(op.Path, ".blk") {
			return vfs.ErrInjected
		}
		return nil
	})
	err = e.Sync()
	wantErr(t, err, ErrFailed)
	wantErr(t, err, vfs.ErrInjected)
	fs.InjectErrors(nil)
	_, err = writeChunk(e, b, 100, 100)
	wantErr(t, err, ErrFailed)
	wantErr(t, e.Sync(), ErrFailed)
	wantErr(t, e.CreateContainer(2), ErrFailed)
}

func TestFileCacheBounded(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs, func(c *Config) { c.OpenFilesMax = 4 })
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	for local := uint64(1); local <= 20; local++ {
		mustNo(t, e.PutBlock(writeBlock(t, e, BlockID{Container: 1, Local: local}, 100), 0))
	}
	mustNo(t, e.Sync())
	e.files.mu.Lock()
	n := e.files.lru.Len()
	e.files.mu.Unlock()
	if n > 4 {
		t.Fatalf("%d files cached, bound 4", n)
	}
	for local := uint64(1); local <= 20; local++ {
		checkBlock(t, e, BlockID{Container: 1, Local: local}, 100)
	}
}

func TestVolumeChecks(t *testing.T) {
	fs := vfs.NewMem()
	mustNo(t, fs.MkdirAll("/junk", 0o755))
	f, err := fs.Create("/junk/file.txt")
	mustNo(t, err)
	closeT(t, f)
	_, err = Open(Config{DataDirs: []string{"/junk"}, FS: fs, Logger: quietLogger})
	if err == nil || !strings.Contains(err.Error(), "not a Spindle volume") {
		t.Fatalf("open of a foreign directory: %v", err)
	}
	if names, _ := fs.List("/junk"); len(names) != 1 {
		t.Fatalf("a refused directory was changed: %v", names)
	}
	// The root of a fresh ext4 filesystem holds lost+found: that is a
	// usable volume.
	mustNo(t, fs.MkdirAll("/disk/lost+found", 0o755))
	ed := openMem(t, fs, func(c *Config) { c.DataDirs = []string{"/disk"} })
	mustNo(t, ed.Close())
	e := openMem(t, fs, func(c *Config) { c.DataDirs = []string{"/v"} })
	_, err = Open(Config{DataDirs: []string{"/v"}, FS: fs, Logger: quietLogger})
	if err == nil {
		t.Fatal("a second engine opened a volume in use")
	}
	mustNo(t, e.Close())
	// A damaged identity file is refused, not reformatted.
	f, err = fs.OpenReadWrite("/v/"+volumeIdentityFile, false)
	mustNo(t, err)
	_, err = f.WriteAt([]byte{'X'}, 0)
	mustNo(t, err)
	closeT(t, f)
	_, err = Open(Config{DataDirs: []string{"/v"}, FS: fs, Logger: quietLogger})
	wantErr(t, err, ErrCorrupt)
	_, err = Open(Config{FS: fs})
	wantErr(t, err, ErrInvalid)
}

func ExampleEngine() {
	fs := vfs.NewMem()
	e, _ := Open(Config{DataDirs: []string{"/data"}, FS: fs, Logger: quietLogger})
	defer func() {
		if err := e.Close(); err != nil {
			fmt.Println(err)
		}
	}()
	_ = e.CreateContainer(1)
	b := BlockID{Container: 1, Local: 1}
	data := []byte("hello, durable world")
	sums := ComputeChecksums(nil, data, DefaultBytesPerChecksum)
	_ = e.WriteChunk(b, 0, data, DefaultBytesPerChecksum, sums)
	_ = e.PutBlock(&BlockData{ID: b, Length: uint64(len(data)), BytesPerChecksum: DefaultBytesPerChecksum,
		Chunks: []ChunkInfo{{Offset: 0, Length: uint64(len(data)), Checksums: sums}}}, 0)
	_ = e.Sync() // one fdatasync per touched file, one metadata sync
	got, _ := e.ReadChunk(b, 7, 7, nil)
	fmt.Println(string(got))
	// Output: durable
}

// TestEverySyncFailureIsSticky: a directory fsync failing in a container
// create is the same failure as a data fdatasync failing: nothing more is
// acknowledged.
func TestEverySyncFailureIsSticky(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeFailedT(t, e)
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpSyncDir && strings.Contains(op.Path, "/containers/") {
			return vfs.ErrInjected
		}
		return nil
	})
	wantErr(t, e.CreateContainer(1), ErrFailed)
	fs.InjectErrors(nil)
	wantErr(t, e.CreateContainer(2), ErrFailed)
	wantErr(t, e.Sync(), ErrFailed)
	if _, err := e.Container(1); err == nil {
		t.Fatal("a container whose create failed is listed")
	}
}

// TestCloseFailureLeavesContainerOpen: memory says what disk says.
func TestCloseFailureLeavesContainerOpen(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeFailedT(t, e)
	mustNo(t, e.CreateContainer(1))
	_, err := writeChunk(e, BlockID{Container: 1, Local: 1}, 0, 100)
	mustNo(t, err)
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpSyncData && strings.HasSuffix(op.Path, ".blk") {
			return vfs.ErrInjected
		}
		return nil
	})
	wantErr(t, e.CloseContainer(1), ErrFailed)
	if ci, _ := e.Container(1); ci.State != StateOpen {
		t.Fatalf("state %s after a failed close, want OPEN", ci.State)
	}
}

// TestDeleteBlockBlocksUse: while a delete is between its record sync and
// its unlink, the block can be neither written nor read; afterwards its
// local ID starts afresh.
func TestDeleteBlockBlocksUse(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	mustNo(t, e.PutBlock(writeBlock(t, e, b, 300), 0))
	var during []error
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpRemove && strings.HasSuffix(op.Path, blockFileName(1)) {
			_, rerr := e.ReadChunk(b, 0, 10, nil)
			_, werr := writeChunk(e, b, 0, 10)
			during = append(during, rerr, werr)
		}
		return nil
	})
	mustNo(t, e.DeleteBlock(b))
	fs.InjectErrors(nil)
	if len(during) != 2 {
		t.Fatalf("unlink of the block file not seen (%d)", len(during))
	}
	for _, err := range during {
		wantErr(t, err, ErrNotFound)
	}
	mustNo(t, e.PutBlock(writeBlock(t, e, b, 200), 0))
	checkBlock(t, e, b, 200)
}

// TestCloseKeepsUnhealthyVerdict: a container found damaged while a close
// syncs is not closed as healthy.
func TestCloseKeepsUnhealthyVerdict(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	_, err := writeChunk(e, BlockID{Container: 1, Local: 1}, 0, 100)
	mustNo(t, err)
	c, _ := e.lookup(1)
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpSyncData && strings.HasSuffix(op.Path, ".blk") {
			fs.InjectErrors(nil)
			mustNo(t, e.setUnhealthy(c, "damage found by a concurrent scan"))
		}
		return nil
	})
	wantErr(t, e.CloseContainer(1), ErrNotOpen)
	if ci, _ := e.Container(1); ci.State != StateUnhealthy {
		t.Fatalf("state %s, want UNHEALTHY", ci.State)
	}
}

// TestMissingFileOfDeletedBlockIsNotDamage: a read or scan that looked a
// block up before a DeleteBlock and finds its file gone reports not found,
// and does not mark the container UNHEALTHY; a missing file of a block that
// still exists is damage.
func TestMissingFileOfDeletedBlockIsNotDamage(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	gone, kept := BlockID{Container: 1, Local: 1}, BlockID{Container: 1, Local: 2}
	mustNo(t, e.PutBlock(writeBlock(t, e, gone, 100), 0))
	mustNo(t, e.PutBlock(writeBlock(t, e, kept, 100), 0))
	mustNo(t, e.DeleteBlock(gone))
	c, _ := e.lookup(1)
	wantErr(t, e.missingFile(c, gone, os.ErrNotExist), ErrNotFound)
	if ci, _ := e.Container(1); ci.State != StateOpen {
		t.Fatalf("state %s after a deleted block's file was missed", ci.State)
	}
	wantErr(t, e.missingFile(c, kept, os.ErrNotExist), ErrCorrupt)
	if ci, _ := e.Container(1); ci.State != StateUnhealthy {
		t.Fatalf("state %s after an existing block's file was missing", ci.State)
	}
}

// WriteVerifiedChunk trusts the caller's verification (it does not compute
// the CRC32C again: bytes that do not match are written as given) and
// checks everything else as WriteChunk does.
func TestWriteVerifiedChunk(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	data := content(b, 0, 1000)
	sums := ComputeChecksums(nil, data, testBPC)
	bad := append([]uint32(nil), sums...)
	bad[0] ^= 1
	wantErr(t, e.WriteChunk(b, 0, data, testBPC, bad), ErrChecksumMismatch)
	wantErr(t, e.WriteVerifiedChunk(b, 0, data, testBPC, sums[:0]), ErrInvalid)
	wantErr(t, e.WriteVerifiedChunk(b, 1, data, testBPC, sums), ErrHole)
	mustNo(t, e.WriteVerifiedChunk(b, 0, data, testBPC, sums))
	wantErr(t, e.WriteVerifiedChunk(b, 0, data, testBPC, bad), ErrOverlap)
	mustNo(t, e.Sync())
	got, err := e.ReadChunk(b, 0, 1000, nil)
	mustNo(t, err)
	if !bytes.Equal(got, data) {
		t.Fatal("read back other bytes than written")
	}
	// Not verified again: the caller's word is taken (a pipeline leader
	// verified the bytes when they arrived).
	c2 := content(b, 1000, 1000)
	mustNo(t, e.WriteVerifiedChunk(b, 1000, c2, testBPC, bad))
}

// TestFailedPwriteBreaksTheBlock: a chunk whose pwrite fails is not
// written, and its block takes no more writes and no put (the file may
// hold part of it): the error names the failed write. Other blocks go on.
func TestFailedPwriteBreaksTheBlock(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	bd := writeBlock(t, e, b, 1000)
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && strings.HasSuffix(op.Path, ".blk") {
			return vfs.ErrInjected
		}
		return nil
	})
	_, err := writeChunk(e, b, 1000, 1000)
	wantErr(t, err, vfs.ErrInjected)
	fs.InjectErrors(nil)
	_, err = writeChunk(e, b, 1000, 1000)
	if err == nil || !strings.Contains(err.Error(), "earlier write at offset 1000 failed") {
		t.Fatalf("a write after the failed one: %v, want the block broken", err)
	}
	wantErr(t, e.PutBlock(bd, 3), vfs.ErrInjected)
	if _, err := e.CheckWrite(b, 1000, 1000, testBPC, ComputeChecksums(nil, content(b, 1000, 1000), testBPC)); err == nil {
		t.Fatal("CheckWrite of a broken block: nil")
	}
	other := writeBlock(t, e, BlockID{Container: 1, Local: 2}, 500)
	mustNo(t, e.PutBlock(other, 4))
}

// TestFailedPreadIsAnError: a read whose pread fails returns the error,
// not bytes, and nothing is marked.
func TestFailedPreadIsAnError(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{Container: 1, Local: 1}
	mustNo(t, e.PutBlock(writeBlock(t, e, b, 1000), 2))
	mustNo(t, e.Sync())
	fs.InjectErrors(func(op vfs.Op) error {
		if op.Kind == vfs.OpRead && strings.HasSuffix(op.Path, ".blk") {
			return vfs.ErrInjected
		}
		return nil
	})
	if data, err := e.ReadChunk(b, 0, 1000, nil); err == nil {
		t.Fatalf("a failed pread returned %d bytes", len(data))
	}
	fs.InjectErrors(nil)
	got, err := e.ReadChunk(b, 0, 1000, nil)
	if err != nil || !bytes.Equal(got, content(b, 0, 1000)) {
		t.Fatalf("read after the fault: %v", err)
	}
	if ci, _ := e.Container(1); ci.State != StateOpen {
		t.Fatalf("container %s after a failed read, want OPEN (an I/O error is not damage)", ci.State)
	}
}
