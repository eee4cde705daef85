package engine

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/vfs"
)

// flipMem flips one byte of block b's file in fs.
func flipMem(t *testing.T, fs *vfs.MemFS, e *Engine, b BlockID, at int64) {
	t.Helper()
	ci, err := e.Container(b.Container)
	mustNo(t, err)
	f, err := fs.OpenReadWrite(filepath.Join(ci.Dir, blockFileName(b.Local)), false)
	mustNo(t, err)
	defer closeT(t, f)
	var one [1]byte
	_, err = f.ReadAt(one[:], at)
	mustNo(t, err)
	one[0] ^= 0xff
	_, err = f.WriteAt(one[:], at)
	mustNo(t, err)
}

// TestClosedContainerDamageIsPerBlock: a bit flip in a CLOSED container
// marks that block damaged, not the container; its other blocks read;
// RepairBlock from good bytes clears the mark and the block reads again;
// a deleted block's mark goes with it. In an OPEN container the same flip
// still marks the container UNHEALTHY.
func TestClosedContainerDamageIsPerBlock(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	defer closeT(t, e)
	mustNo(t, e.CreateContainer(1))
	b1, b2, b3 := BlockID{1, 1}, BlockID{1, 2}, BlockID{1, 3}
	bd1 := writeBlock(t, e, b1, 3000, 1000)
	mustNo(t, e.PutBlock(bd1, 0))
	mustNo(t, e.PutBlock(writeBlock(t, e, b2, 2000), 0))
	mustNo(t, e.PutBlock(writeBlock(t, e, b3, 2000), 0))
	mustNo(t, e.Sync())
	mustNo(t, e.CloseContainer(1))
	good := append(content(b1, 0, 3000), content(b1, 3000, 1000)...)

	flipMem(t, fs, e, b1, 3500)
	flipMem(t, fs, e, b3, 10)
	// The scrub finds both without a read.
	var paced uint64
	for _, b := range []BlockID{b1, b2, b3} {
		bd, err := e.GetBlock(b)
		mustNo(t, err)
		err = e.ScrubBlock(bd, func(n uint64) error { paced += n; return nil })
		if (b == b2) != (err == nil) {
			t.Fatalf("scrub of %v: %v", b, err)
		}
		if err != nil {
			wantErr(t, err, ErrCorrupt)
		}
	}
	if paced != 4000+2000+2000 {
		t.Fatalf("paced %d bytes", paced)
	}
	ci, _ := e.Container(1)
	if ci.State != StateClosed || !reflect.DeepEqual(ci.DamagedBlocks, []uint64{1, 3}) {
		t.Fatalf("after the scrub: %s damaged %v, want CLOSED with 1 and 3", ci.State, ci.DamagedBlocks)
	}
	if _, err := e.ReadChunk(b2, 0, 2000, nil); err != nil {
		t.Fatalf("undamaged block of a damaged container: %v", err)
	}
	if _, err := e.ReadChunk(b1, 3000, 1000, nil); err == nil {
		t.Fatal("damaged bytes read")
	}
	// A repair with the wrong bytes fails and changes nothing.
	bad := bytes.Clone(good)
	bad[10] ^= 1
	wantErr(t, e.RepairBlock(bd1, bytes.NewReader(bad)), ErrCorrupt)
	// A record that differs is refused.
	other := *bd1
	other.Length--
	wantErr(t, e.RepairBlock(&other, bytes.NewReader(good)), ErrInvalid)
	mustNo(t, e.RepairBlock(bd1, bytes.NewReader(good)))
	got, err := e.ReadChunk(b1, 0, 4000, nil)
	mustNo(t, err)
	if !bytes.Equal(got, good) {
		t.Fatal("repaired block reads other bytes")
	}
	if d, _ := e.DamagedBlocks(1); !reflect.DeepEqual(d, []uint64{3}) {
		t.Fatalf("damaged after the repair: %v, want [3]", d)
	}
	if names, _ := fs.List(ci.Dir); len(names) != 3 {
		t.Fatalf("container directory after repairs: %v", names)
	}
	mustNo(t, e.DeleteBlock(b3))
	if ci, _ := e.Container(1); len(ci.DamagedBlocks) != 0 || ci.State != StateClosed {
		t.Fatalf("after deleting the damaged block: %s damaged %v", ci.State, ci.DamagedBlocks)
	}

	// OPEN: the container is UNHEALTHY.
	mustNo(t, e.CreateContainer(2))
	b := BlockID{2, 1}
	mustNo(t, e.PutBlock(writeBlock(t, e, b, 2000), 0))
	mustNo(t, e.Sync())
	flipMem(t, fs, e, b, 5)
	_, err = e.ReadChunk(b, 0, 2000, nil)
	wantErr(t, err, ErrCorrupt)
	if ci, _ := e.Container(2); ci.State != StateUnhealthy {
		t.Fatalf("OPEN container after damage: %s, want UNHEALTHY", ci.State)
	}
}

// TestDamageMarksPersist: a damage mark survives a reopen; a scrub that
// finds the block whole (a mark left by a crash after its repair) clears
// it, and the clearing survives a reopen too; a deleted container's marks
// go with it.
func TestDamageMarksPersist(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs)
	mustNo(t, e.CreateContainer(1))
	b := BlockID{1, 1}
	bd := writeBlock(t, e, b, 3000)
	mustNo(t, e.PutBlock(bd, 0))
	mustNo(t, e.Sync())
	mustNo(t, e.CloseContainer(1))
	good := content(b, 0, 3000)
	flipMem(t, fs, e, b, 10)
	_, err := e.ReadChunk(b, 0, 3000, nil)
	wantErr(t, err, ErrCorrupt)
	mustNo(t, e.Sync())
	mustNo(t, e.Close())

	e = openMem(t, fs)
	if d, _ := e.DamagedBlocks(1); !reflect.DeepEqual(d, []uint64{1}) {
		t.Fatalf("after a reopen: damaged %v, want [1]", d)
	}
	// Fix the bytes behind the engine's back, as a repair whose mark
	// deletion a crash undid would leave them.
	ci, _ := e.Container(1)
	f, err := fs.OpenReadWrite(filepath.Join(ci.Dir, blockFileName(1)), false)
	mustNo(t, err)
	_, err = f.WriteAt(good, 0)
	mustNo(t, err)
	closeT(t, f)
	mustNo(t, e.ScrubBlock(bd, nil))
	if d, _ := e.DamagedBlocks(1); len(d) != 0 {
		t.Fatalf("a whole block scrubbed: still damaged %v", d)
	}
	mustNo(t, e.Sync())
	mustNo(t, e.Close())
	e = openMem(t, fs)
	if d, _ := e.DamagedBlocks(1); len(d) != 0 {
		t.Fatalf("after a reopen: the cleared mark is back: %v", d)
	}
	// A mark of a deleted container goes with it.
	flipMem(t, fs, e, b, 20)
	wantErr(t, e.ScrubBlock(bd, nil), ErrCorrupt)
	mustNo(t, e.DeleteContainer(1, false))
	mustNo(t, e.Close())
	e = openMem(t, fs)
	defer closeT(t, e)
	for _, v := range e.vols {
		it, err := v.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyPrefixDamage}, UpperBound: []byte{keyPrefixDamage + 1}})
		mustNo(t, err)
		if it.First() {
			t.Errorf("volume %s: a damage mark of a deleted container is left: %x", v.dir, it.Key())
		}
		mustNo(t, it.Close())
	}
}
