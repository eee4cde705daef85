package engine

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/vfs"
)

// testBlocks is the layout of the containers the export and import tests
// copy: local ID → chunk sizes. Block 4 is larger than ImportBufferBytes and
// its chunks do not end on piece boundaries; block 7 is empty (no file).
var testBlocks = []struct {
	local  uint64
	chunks []int
}{
	{1, []int{700, 1536, 300}},
	{4, []int{600_001, 700_003, 3 * testBPC}},
	{7, nil},
	{9, []int{5000}},
	{12, []int{testBPC, 1}},
}

// buildClosed creates container id on e with testBlocks, commits every
// block, syncs and closes the container.
func buildClosed(t testing.TB, e *Engine, id ContainerID) []*BlockData {
	t.Helper()
	mustNo(t, e.CreateContainer(id))
	var out []*BlockData
	for _, tb := range testBlocks {
		bd := writeBlock(t, e, BlockID{Container: id, Local: tb.local}, tb.chunks...)
		mustNo(t, e.PutBlock(bd, 100+tb.local))
		out = append(out, bd)
	}
	mustNo(t, e.Sync())
	mustNo(t, e.CloseContainer(id))
	return out
}

// copyContainer exports container id from src and imports it into dst,
// reading each block file through its vfs.File (MemFS files have no
// *os.File). The import is aborted on error.
func copyContainer(src, dst *Engine, id ContainerID, maxSizeBytes uint64, tune func(*Importer)) (err error) {
	x, err := src.ExportContainer(id)
	if err != nil {
		return err
	}
	defer closeInto(&err, x)
	im, err := dst.ImportContainer(id, maxSizeBytes, x.Info().BCSID)
	if err != nil {
		return err
	}
	if tune != nil {
		tune(im)
	}
	if err := feedImport(x, im); err != nil {
		if aerr := im.Abort(); aerr != nil {
			return fmt.Errorf("%w (abort: %v)", err, aerr)
		}
		return err
	}
	return nil
}

func feedImport(x *Export, im *Importer) error {
	for {
		bd, f, err := x.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		err = im.AddBlock(bd, f)
		if cerr := f.Close(); err == nil {
			err = cerr // AddBlock's own error is returned as is: tests compare it
		}
		if err != nil {
			return err
		}
	}
	return im.Commit()
}

// checkSameContainer asserts that dst holds container id exactly as src:
// CLOSED, the same block records, the same bytes (ReadChunk verifies every
// checksum on the way).
func checkSameContainer(t testing.TB, src, dst *Engine, id ContainerID) {
	t.Helper()
	if err := sameContainer(src, dst, id); err != nil {
		t.Fatal(err)
	}
}

func sameContainer(src, dst *Engine, id ContainerID) error {
	si, err := src.Container(id)
	if err != nil {
		return err
	}
	di, err := dst.Container(id)
	if err != nil {
		return fmt.Errorf("imported container: %w", err)
	}
	if di.State != StateClosed || di.UsedBytes != si.UsedBytes || di.MaxSizeBytes != si.MaxSizeBytes || di.BCSID != si.BCSID {
		return fmt.Errorf("imported container %+v, source %+v", di, si)
	}
	sb, err := src.ListBlocks(id, 0, true, 0)
	if err != nil {
		return err
	}
	db, err := dst.ListBlocks(id, 0, true, 0)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(sb, db) {
		return fmt.Errorf("imported block records differ from the source's")
	}
	for _, bd := range sb {
		got, err := dst.GetBlock(bd.ID)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(got, bd) {
			return fmt.Errorf("GetBlock %v: %+v, source %+v", bd.ID, got, bd)
		}
		if bd.Length == 0 {
			continue
		}
		data, err := dst.ReadChunk(bd.ID, 0, bd.Length, nil)
		if err != nil {
			return fmt.Errorf("read imported block: %w", err)
		}
		if string(data) != string(content(bd.ID, 0, int(bd.Length))) {
			return fmt.Errorf("imported block %v: wrong bytes", bd.ID)
		}
	}
	return nil
}

func TestExportListsClosedContainer(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	want := buildClosed(t, e, 3)
	x, err := e.ExportContainer(3)
	mustNo(t, err)
	var used uint64
	for _, bd := range want {
		used += bd.Length
	}
	if info := x.Info(); info.ID != 3 || info.State != StateClosed || info.UsedBytes != used {
		t.Fatalf("export info %+v, want CLOSED with %d bytes", info, used)
	}
	x.pageSize = 2 // several pages
	for i := 0; ; i++ {
		bd, f, err := x.Next()
		if err == io.EOF {
			if i != len(want) {
				t.Fatalf("export ended after %d blocks, want %d", i, len(want))
			}
			break
		}
		mustNo(t, err)
		if i >= len(want) {
			t.Fatalf("block %d: %+v, want %d blocks", i, bd, len(want))
		}
		if rec, err := e.GetBlock(want[i].ID); err != nil || !reflect.DeepEqual(bd, rec) {
			t.Fatalf("block %d: %+v, committed %+v (%v)", i, bd, rec, err)
		}
		got, err := io.ReadAll(io.LimitReader(f, int64(bd.Length)))
		mustNo(t, err)
		if string(got) != string(content(bd.ID, 0, int(bd.Length))) {
			t.Fatalf("block %v: wrong bytes from the exported file", bd.ID)
		}
		if _, ok := vfs.OSFile(f); ok {
			t.Fatalf("a MemFS block file claims to be an OS file")
		}
		mustNo(t, f.Close())
	}
	if _, _, err := x.Next(); err != io.EOF {
		t.Fatalf("Next after the end: %v", err)
	}
	mustNo(t, x.Close())
	mustNo(t, x.Close())
	if _, _, err := x.Next(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestExportOnOSGivesOSFiles(t *testing.T) {
	e, err := Open(Config{DataDirs: []string{t.TempDir()}, Logger: quietLogger})
	mustNo(t, err)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	bd := writeBlock(t, e, BlockID{Container: 1, Local: 1}, 4096)
	mustNo(t, e.PutBlock(bd, 0))
	mustNo(t, e.CloseContainer(1))
	x, err := e.ExportContainer(1)
	mustNo(t, err)
	defer closeT(t, x)
	_, f, err := x.Next()
	mustNo(t, err)
	defer closeT(t, f)
	of, ok := vfs.OSFile(f)
	if !ok {
		t.Fatalf("block file of the OS filesystem is not an *os.File")
	}
	got, err := io.ReadAll(of)
	mustNo(t, err)
	if string(got) != string(content(bd.ID, 0, 4096)) {
		t.Fatalf("wrong bytes through the *os.File")
	}
}

func TestExportRefusesOpenAndMissing(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	_, err := e.ExportContainer(1)
	wantErr(t, err, ErrNotClosed)
	_, err = e.ExportContainer(2)
	wantErr(t, err, ErrNotFound)
}

func TestExportSkipsDeletedBlocks(t *testing.T) {
	e := openMem(t, vfs.NewMem())
	defer closeT(t, e)
	all := buildClosed(t, e, 5)
	x, err := e.ExportContainer(5)
	mustNo(t, err)
	defer closeT(t, x)
	x.pageSize = 2
	bd, f, err := x.Next()
	mustNo(t, err)
	closeT(t, f)
	if bd.ID.Local != all[0].ID.Local {
		t.Fatalf("first block %v", bd.ID)
	}
	// all[1] is in the page already read; all[3] in a later page.
	mustNo(t, e.DeleteBlock(all[1].ID))
	mustNo(t, e.DeleteBlock(all[3].ID))
	var got []uint64
	for {
		bd, f, err := x.Next()
		if err == io.EOF {
			break
		}
		mustNo(t, err)
		closeT(t, f)
		got = append(got, bd.ID.Local)
	}
	if want := []uint64{all[2].ID.Local, all[4].ID.Local}; !reflect.DeepEqual(got, want) {
		t.Fatalf("blocks after the deletes: %v, want %v", got, want)
	}
}

func TestExportDamagedBlockFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(fs *vfs.MemFS, path string) error
	}{
		{"missing", func(fs *vfs.MemFS, path string) error { return fs.Remove(path) }},
		{"short", func(fs *vfs.MemFS, path string) error {
			f, err := fs.OpenReadWrite(path, false)
			if err != nil {
				return err
			}
			defer closeT(t, f)
			return f.Truncate(100)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			e := openMem(t, fs)
			defer closeT(t, e)
			all := buildClosed(t, e, 6)
			ci, err := e.Container(6)
			mustNo(t, err)
			victim := all[1].ID
			mustNo(t, tc.damage(fs, filepath.Join(ci.Dir, blockFileName(victim.Local))))
			x, err := e.ExportContainer(6)
			mustNo(t, err)
			defer closeT(t, x)
			_, f, err := x.Next()
			mustNo(t, err)
			closeT(t, f)
			_, _, err = x.Next()
			wantErr(t, err, ErrCorrupt)
			if !strings.Contains(err.Error(), fmt.Sprintf("container 6 block %d", victim.Local)) {
				t.Fatalf("error does not name the block: %v", err)
			}
			// CLOSED: the block is marked damaged, the container stays
			// CLOSED (its other blocks are good).
			if ci, _ := e.Container(6); ci.State != StateClosed || !reflect.DeepEqual(ci.DamagedBlocks, []uint64{victim.Local}) {
				t.Fatalf("container %s damaged %v after a damaged block file, want CLOSED with block %d damaged", ci.State, ci.DamagedBlocks, victim.Local)
			}
		})
	}
}
