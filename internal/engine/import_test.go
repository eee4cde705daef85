package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// noLeftovers asserts that the engine's volumes hold no staging directory
// and no container directory without a container of the engine behind it.
func noLeftovers(e *Engine, fs vfs.FS) error {
	byDir := map[string]bool{}
	for _, ci := range e.ListContainers() {
		byDir[ci.Dir] = true
	}
	for _, v := range e.Volumes() {
		names, err := fs.List(filepath.Join(v, volumeTmpDir))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if len(names) > 0 {
			return fmt.Errorf("volume %s: leftovers in tmp/: %v", v, names)
		}
		root := filepath.Join(v, volumeContainerDir)
		subs, err := fs.List(root)
		if err != nil {
			return err
		}
		for _, s := range subs {
			names, err := fs.List(filepath.Join(root, s))
			if err != nil {
				return err
			}
			for _, n := range names {
				if p := filepath.Join(root, s, n); !byDir[p] {
					return fmt.Errorf("orphan container directory %s", p)
				}
			}
		}
	}
	return nil
}

func TestImportRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bufLen int
	}{
		{"buffer-1MiB", ImportBufferBytes},
		{"buffer-3-pieces", 3 * testBPC}, // many rounds per chunk, chunk tails mid-buffer
		{"buffer-below-one-piece", testBPC / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := openMem(t, vfs.NewMem())
			defer closeT(t, src)
			buildClosed(t, src, 9)
			dfs := vfs.NewMem()
			dst := openMem(t, dfs)
			defer closeT(t, dst)
			var vol string
			err := copyContainer(src, dst, 9, 0, func(im *Importer) {
				im.buf = make([]byte, tc.bufLen)
				vol = im.Volume()
			})
			mustNo(t, err)
			if vol != "/vol1" {
				t.Fatalf("import on %s, want the first of two empty volumes", vol)
			}
			checkSameContainer(t, src, dst, 9)
			if ci, _ := dst.Container(9); ci.Volume != "/vol1" || ci.Dir != dst.vols[0].containerDir(9) {
				t.Fatalf("imported container at %s on %s", ci.Dir, ci.Volume)
			}
			mustNo(t, noLeftovers(dst, dfs))
		})
	}
}

func TestImportPicksEmptierVolumeAndSurvivesCrash(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	buildClosed(t, src, 9)
	dfs := vfs.NewMem()
	dst := openMem(t, dfs)
	mustNo(t, dst.CreateContainer(1)) // on /vol1
	var vol string
	mustNo(t, copyContainer(src, dst, 9, 0, func(im *Importer) { vol = im.Volume() }))
	if vol != "/vol2" {
		t.Fatalf("import on %s, want /vol2 (fewer containers)", vol)
	}
	// Commit returned: a crash now (nothing unsynced kept) must keep it.
	img := dfs.CrashClone(0, nil)
	mustNo(t, dst.Close())
	again := openMem(t, img)
	defer closeT(t, again)
	checkSameContainer(t, src, again, 9)
	mustNo(t, noLeftovers(again, img))
	if ci, _ := again.Container(1); ci.State != StateOpen {
		t.Fatalf("container 1 is %s", ci.State)
	}
}

func TestImportCorruptSourceByte(t *testing.T) {
	sfs := vfs.NewMem()
	src := openMem(t, sfs)
	defer closeT(t, src)
	all := buildClosed(t, src, 9)
	victim := all[1] // chunks of 600001, 700003, 1536 bytes
	ci, err := src.Container(9)
	mustNo(t, err)
	f, err := sfs.OpenReadWrite(filepath.Join(ci.Dir, blockFileName(victim.ID.Local)), false)
	mustNo(t, err)
	const at = 600_001 + 2*testBPC + 7 // third piece of the second chunk
	b := []byte{0}
	_, err = f.ReadAt(b, at)
	mustNo(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, at)
	mustNo(t, err)
	mustNo(t, f.Close())

	dfs := vfs.NewMem()
	dst := openMem(t, dfs)
	defer closeT(t, dst)
	x, err := src.ExportContainer(9) // the source does not verify
	mustNo(t, err)
	defer closeT(t, x)
	im, err := dst.ImportContainer(9, 0, 0)
	mustNo(t, err)
	err = feedImport(x, im)
	wantErr(t, err, ErrCorrupt)
	if want := fmt.Sprintf("container 9 block %d offset %d", victim.ID.Local, 600_001+2*testBPC); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %q", err, want)
	}
	// Failed: every later call says so.
	if err2 := im.AddBlock(all[2], bytes.NewReader(nil)); err2 != err {
		t.Fatalf("AddBlock after a failure: %v", err2)
	}
	if err2 := im.Commit(); err2 != err {
		t.Fatalf("Commit after a failure: %v", err2)
	}
	mustNo(t, im.Abort())
	if _, err := dst.Container(9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("container after an aborted import: %v", err)
	}
	mustNo(t, noLeftovers(dst, dfs))
	if names, _ := dfs.List("/vol1/tmp"); len(names) != 0 {
		t.Fatalf("staging left: %v", names)
	}
	// The ID is free again.
	im2, err := dst.ImportContainer(9, 0, 0)
	mustNo(t, err)
	mustNo(t, im2.Abort())
}

func TestImportShortReader(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	all := buildClosed(t, src, 9)
	dst := openMem(t, vfs.NewMem())
	defer closeT(t, dst)
	for _, cut := range []int{0, 1, 700} {
		im, err := dst.ImportContainer(9, 0, 0)
		mustNo(t, err)
		bd := all[0]
		data := content(bd.ID, 0, int(bd.Length))
		err = im.AddBlock(bd, bytes.NewReader(data[:len(data)-cut-1]))
		wantErr(t, err, io.ErrUnexpectedEOF)
		wantErr(t, im.Commit(), io.ErrUnexpectedEOF)
		mustNo(t, im.Abort())
	}
	im, err := dst.ImportContainer(9, 0, 0)
	mustNo(t, err)
	wantErr(t, im.AddBlock(all[0], bytes.NewReader(nil)), io.ErrUnexpectedEOF)
	mustNo(t, im.Abort())
}

func TestImportExistingContainer(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	buildClosed(t, src, 9)
	dst := openMem(t, vfs.NewMem())
	defer closeT(t, dst)
	mustNo(t, dst.CreateContainer(5))
	_, err := dst.ImportContainer(5, 0, 0)
	wantErr(t, err, ErrExists)
	mustNo(t, copyContainer(src, dst, 9, 0, nil))
	_, err = dst.ImportContainer(9, 0, 0)
	wantErr(t, err, ErrExists)
	wantErr(t, dst.CreateContainer(9), ErrExists)
}

func TestImportSameIDTwice(t *testing.T) {
	dfs := vfs.NewMem()
	dst := openMem(t, dfs)
	defer closeT(t, dst)
	im, err := dst.ImportContainer(7, 0, 0)
	mustNo(t, err)
	_, err = dst.ImportContainer(7, 0, 0)
	wantErr(t, err, ErrExists)
	wantErr(t, dst.CreateContainer(7), ErrExists)
	// Another ID is free, and goes to the other volume.
	im8, err := dst.ImportContainer(8, 0, 0)
	mustNo(t, err)
	if im.Volume() == im8.Volume() {
		t.Fatalf("two imports on %s, want them spread", im.Volume())
	}
	mustNo(t, im8.Abort())
	mustNo(t, im.Abort())
	mustNo(t, dst.CreateContainer(7))
	mustNo(t, noLeftovers(dst, dfs))
}

func TestImportAbortIdempotent(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	all := buildClosed(t, src, 9)
	dfs := vfs.NewMem()
	dst := openMem(t, dfs)
	defer closeT(t, dst)
	im, err := dst.ImportContainer(9, 0, 0)
	mustNo(t, err)
	mustNo(t, im.AddBlock(all[0], bytes.NewReader(content(all[0].ID, 0, int(all[0].Length)))))
	mustNo(t, im.Abort())
	mustNo(t, im.Abort())
	wantErr(t, im.Commit(), ErrInvalid)
	mustNo(t, noLeftovers(dst, dfs))

	// After a successful Commit, Abort changes nothing.
	x, err := src.ExportContainer(9)
	mustNo(t, err)
	defer closeT(t, x)
	im, err = dst.ImportContainer(9, 0, x.Info().BCSID)
	mustNo(t, err)
	mustNo(t, feedImport(x, im))
	mustNo(t, im.Commit()) // a second Commit is a no-op too
	mustNo(t, im.Abort())
	mustNo(t, im.Abort())
	checkSameContainer(t, src, dst, 9)
	mustNo(t, noLeftovers(dst, dfs))
}

func TestImportMaxSize(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	all := buildClosed(t, src, 9)
	dst := openMem(t, vfs.NewMem())
	defer closeT(t, dst)
	b0, b3 := all[0], all[3] // 2536 and 5000 bytes
	im, err := dst.ImportContainer(9, b0.Length+b3.Length-1, 0)
	mustNo(t, err)
	mustNo(t, im.AddBlock(b0, bytes.NewReader(content(b0.ID, 0, int(b0.Length)))))
	wantErr(t, im.AddBlock(b3, bytes.NewReader(content(b3.ID, 0, int(b3.Length)))), ErrContainerFull)
	mustNo(t, im.Abort())

	im, err = dst.ImportContainer(9, b0.Length+b3.Length, 0)
	mustNo(t, err)
	mustNo(t, im.AddBlock(b0, bytes.NewReader(content(b0.ID, 0, int(b0.Length)))))
	mustNo(t, im.AddBlock(b3, bytes.NewReader(content(b3.ID, 0, int(b3.Length)))))
	if im.Blocks() != 2 || im.Bytes() != b0.Length+b3.Length {
		t.Fatalf("importer counts %d blocks, %d bytes", im.Blocks(), im.Bytes())
	}
	mustNo(t, im.Commit())
	if ci, _ := dst.Container(9); ci.MaxSizeBytes != b0.Length+b3.Length || ci.UsedBytes != ci.MaxSizeBytes {
		t.Fatalf("imported container %+v", ci)
	}
}

func TestImportRefusesBadBlocks(t *testing.T) {
	dst := openMem(t, vfs.NewMem())
	defer closeT(t, dst)
	mk := func(c ContainerID, local uint64, sizes ...int) (*BlockData, io.Reader) {
		bd := &BlockData{ID: BlockID{Container: c, Local: local}, BytesPerChecksum: testBPC}
		for _, n := range sizes {
			data := content(bd.ID, bd.Length, n)
			bd.Chunks = append(bd.Chunks, ChunkInfo{Offset: bd.Length, Length: uint64(n), Checksums: ComputeChecksums(nil, data, testBPC)})
			bd.Length += uint64(n)
		}
		return bd, bytes.NewReader(content(bd.ID, 0, int(bd.Length)))
	}
	for _, tc := range []struct {
		name string
		run  func(im *Importer) error
		want error
	}{
		{"other container", func(im *Importer) error { return im.AddBlock(mk(4, 1, 100)) }, ErrInvalid},
		{"local IDs not ascending", func(im *Importer) error {
			mustNo(t, im.AddBlock(mk(3, 5, 100)))
			return im.AddBlock(mk(3, 5, 100))
		}, ErrInvalid},
		{"hole between chunks", func(im *Importer) error {
			bd, r := mk(3, 1, 100, 100)
			bd.Chunks[1].Offset++
			return im.AddBlock(bd, r)
		}, ErrHole},
		{"length disagrees with chunks", func(im *Importer) error {
			bd, r := mk(3, 1, 100)
			bd.Length++
			return im.AddBlock(bd, r)
		}, ErrInvalid},
		{"checksum count", func(im *Importer) error {
			bd, r := mk(3, 1, 1000)
			bd.Chunks[0].Checksums = bd.Chunks[0].Checksums[:1]
			return im.AddBlock(bd, r)
		}, ErrInvalid},
		{"wrong bytes", func(im *Importer) error {
			bd, _ := mk(3, 1, 1000)
			return im.AddBlock(bd, bytes.NewReader(make([]byte, 1000)))
		}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im, err := dst.ImportContainer(3, 0, 0)
			mustNo(t, err)
			err = tc.run(im)
			wantErr(t, err, tc.want)
			wantErr(t, im.Commit(), tc.want)
			mustNo(t, im.Abort())
		})
	}
}

func TestImportedContainerReopenAndDelete(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	buildClosed(t, src, 9)
	dfs := vfs.NewMem()
	dst := openMem(t, dfs)
	mustNo(t, copyContainer(src, dst, 9, 0, nil))
	mustNo(t, dst.Close())
	dst = openMem(t, dfs)
	checkSameContainer(t, src, dst, 9)
	dir := dst.vols[0].containerDir(9)
	mustNo(t, dst.DeleteContainer(9, false))
	if _, err := dst.Container(9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted imported container: %v", err)
	}
	if _, err := dfs.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory of the deleted container: %v", err)
	}
	mustNo(t, dst.Close())
	dst = openMem(t, dfs.CrashClone(0, nil))
	defer closeT(t, dst)
	if n := len(dst.ListContainers()); n != 0 {
		t.Fatalf("%d containers after the delete and a crash", n)
	}
	// And it can be imported again.
	mustNo(t, copyContainer(src, dst, 9, 0, nil))
	checkSameContainer(t, src, dst, 9)
}

// TestOpenSweepsLeftovers: Open removes staging directories and container
// directories without a record on their volume, durably, and leaves alone
// the directories of containers with a record (even an undecodable one) and
// names that are not container IDs.
func TestOpenSweepsLeftovers(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1)) // on /vol1
	mustNo(t, e.CreateContainer(2)) // on /vol2
	bd := writeBlock(t, e, BlockID{Container: 1, Local: 1}, 1000)
	mustNo(t, e.PutBlock(bd, 0))
	v1, v2 := e.vols[0], e.vols[1]
	mustNo(t, e.Close())

	mkfile := func(path string) {
		t.Helper()
		mustNo(t, vfs.MkdirAllDurable(fs, filepath.Dir(path)))
		f, err := fs.Create(path)
		mustNo(t, err)
		_, err = f.WriteAt([]byte("x"), 0)
		mustNo(t, err)
		mustNo(t, f.Sync())
		mustNo(t, f.Close())
		mustNo(t, fs.SyncDir(filepath.Dir(path)))
	}
	staging := filepath.Join("/vol1", volumeTmpDir, "import-5-0011223344556677")
	mkfile(filepath.Join(staging, blockFileName(1)))
	orphan := v1.containerDir(55)
	mkfile(filepath.Join(orphan, blockFileName(1)))
	wrongVol := v2.containerDir(1) // container 1 lives on /vol1
	mkfile(filepath.Join(wrongVol, blockFileName(1)))
	odd := filepath.Join(filepath.Dir(v1.containerDir(1)), "notes")
	mkfile(filepath.Join(odd, "x"))
	padded := filepath.Join(filepath.Dir(v1.containerDir(1)), "01")
	mkfile(filepath.Join(padded, "x"))

	e = openMem(t, fs)
	img := fs.CrashClone(0, nil) // the sweep is durable when Open returns
	mustNo(t, e.Close())
	for _, fsys := range []*vfs.MemFS{fs, img} {
		for _, gone := range []string{staging, orphan, wrongVol} {
			if _, err := fsys.Stat(gone); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s after Open: %v", gone, err)
			}
		}
		for _, kept := range []string{odd, padded, v1.containerDir(1), v2.containerDir(2)} {
			if _, err := fsys.Stat(kept); err != nil {
				t.Fatalf("%s removed by Open: %v", kept, err)
			}
		}
	}
	e = openMem(t, img)
	defer closeT(t, e)
	checkBlock(t, e, bd.ID, bd.Length)
}

// TestImportOnOS runs a round trip on the OS filesystem, feeding the import
// from the exported *os.File as a re-replication source would.
func TestImportOnOS(t *testing.T) {
	src, err := Open(Config{DataDirs: []string{t.TempDir()}, Logger: quietLogger})
	mustNo(t, err)
	defer closeT(t, src)
	buildClosed(t, src, 9)
	dst, err := Open(Config{DataDirs: []string{t.TempDir(), t.TempDir()}, Logger: quietLogger})
	mustNo(t, err)
	defer closeT(t, dst)
	x, err := src.ExportContainer(9)
	mustNo(t, err)
	defer closeT(t, x)
	im, err := dst.ImportContainer(9, 0, x.Info().BCSID)
	mustNo(t, err)
	for {
		bd, f, err := x.Next()
		if err == io.EOF {
			break
		}
		mustNo(t, err)
		var r io.Reader = f
		if of, ok := vfs.OSFile(f); ok {
			r = of
		} else if bd.Length > 0 {
			t.Fatalf("block %v: not an OS file", bd.ID)
		}
		mustNo(t, im.AddBlock(bd, r))
		closeT(t, f)
	}
	mustNo(t, im.Commit())
	checkSameContainer(t, src, dst, 9)
	mustNo(t, noLeftovers(dst, vfs.Default))
}

// BenchmarkImport imports a 64 MiB container of 4 MiB blocks (1 MiB chunks,
// 16 KiB checksum pieces) from memory into a volume on t.TempDir, Commit
// included (fdatasync of every file, renames, one Pebble commit).
func BenchmarkImport(b *testing.B) {
	const (
		containerBytes = 64 << 20
		blockBytes     = 4 << 20
		chunkBytes     = 1 << 20
		bpc            = DefaultBytesPerChecksum
	)
	e, err := Open(Config{DataDirs: []string{b.TempDir()}, Logger: quietLogger})
	mustNo(b, err)
	defer closeT(b, e)
	data := make([]byte, blockBytes)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	var chunks []ChunkInfo
	for off := 0; off < blockBytes; off += chunkBytes {
		chunks = append(chunks, ChunkInfo{Offset: uint64(off), Length: chunkBytes, Checksums: ComputeChecksums(nil, data[off:off+chunkBytes], bpc)})
	}
	b.SetBytes(containerBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ContainerID(i + 1)
		im, err := e.ImportContainer(id, 0, 0)
		mustNo(b, err)
		for local := uint64(1); local <= containerBytes/blockBytes; local++ {
			bd := &BlockData{ID: BlockID{Container: id, Local: local}, Length: blockBytes, BytesPerChecksum: bpc, Chunks: chunks}
			mustNo(b, im.AddBlock(bd, bytes.NewReader(data)))
		}
		mustNo(b, im.Commit())
		b.StopTimer()
		mustNo(b, e.DeleteContainer(id, false))
		b.StartTimer()
	}
}

// TestConcurrentImports runs imports of different containers at once, into
// one engine, while another goroutine lists containers: each import lands
// whole, they spread over the volumes, and no listing shows a container
// before its Commit (run with -race).
func TestConcurrentImports(t *testing.T) {
	src := openMem(t, vfs.NewMem())
	defer closeT(t, src)
	ids := []ContainerID{10, 11, 12, 13}
	for _, id := range ids {
		buildClosed(t, src, id)
	}
	dfs := vfs.NewMem()
	dst := openMem(t, dfs)
	defer closeT(t, dst)
	stop := make(chan struct{})
	listErr := make(chan error, 1)
	go func() {
		defer close(listErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, ci := range dst.ListContainers() {
				if ci.State != StateClosed || ci.UsedBytes == 0 {
					listErr <- fmt.Errorf("listed during import: %+v", ci)
					return
				}
			}
		}
	}()
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errs <- copyContainer(src, dst, id, 0, nil) }()
	}
	for range ids {
		mustNo(t, <-errs)
	}
	close(stop)
	mustNo(t, <-listErr)
	perVol := map[string]int{}
	for _, id := range ids {
		checkSameContainer(t, src, dst, id)
		ci, _ := dst.Container(id)
		perVol[ci.Volume]++
	}
	if perVol["/vol1"] != 2 || perVol["/vol2"] != 2 {
		t.Fatalf("containers per volume: %v", perVol)
	}
	mustNo(t, noLeftovers(dst, dfs))
}
