// Package powerfs is a crashable disk for power-loss tests: a vfs.MemFS
// that loses power when its armed crash trigger fires (MemFS.CrashAtOp)
// or when Cut is called. What the disk keeps is the image taken then
// (Image); the node using it is frozen from that moment: every mutating
// operation from the one that finds the power gone on — the k-th itself
// included, although the running MemFS applied it — blocks until the test
// releases the disk (Release), so that nothing the node does after the
// image was taken is made durable, returns, or is acknowledged. (An image
// alone would not ensure that: the node would run on between the image
// and its Close, and could acknowledge what the image lacks. Failing the
// operations instead would make raft loops and Pebble panic, ending the
// test binary.) Reads go on: they make nothing durable, and tests sample
// the nodes' state with them.
//
// Invariant: an operation applied before the image is in it (if synced)
// whatever it returns; one applied after it is frozen, because its check
// after the operation sees the power gone (the image and that check are
// ordered by the MemFS's lock, or, for Cut, by off being set before the
// image).
//
// Only tests use it (the pipeline's and the replicated meta service's
// crash loops). Concurrency: an FS is safe for concurrent use; OnCrash
// runs once, in the goroutine whose operation (or Dead call) first saw
// the power gone, and must not block on the disk.
package powerfs

import (
	"io"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"

	"github.com/spindle-store/spindle/internal/vfs"
)

// FS is a disk that can lose power; see the package comment.
type FS struct {
	mem *vfs.MemFS
	off atomic.Bool
	// died is closed when the power goes; released, by Release; cutDone,
	// when Cut has taken its image.
	died, released, cutDone   chan struct{}
	dieOnce, relOnce, cutOnce sync.Once
	// OnCrash, when set (before the disk is used), runs once, when the
	// armed trigger has fired or Cut was called; Dead returns true only
	// once it has run.
	OnCrash func()
	cutImg  *vfs.MemFS // the image taken by Cut
}

var _ vfs.FS = (*FS)(nil)

// New returns a powered disk over mem (arm it with mem.CrashAtOp).
func New(mem *vfs.MemFS) *FS {
	return &FS{mem: mem, died: make(chan struct{}), released: make(chan struct{}), cutDone: make(chan struct{})}
}

// Mem is the running MemFS under the disk.
func (p *FS) Mem() *vfs.MemFS { return p.mem }

// Died is closed when the disk loses power (OnCrash may still be running:
// call Dead to wait for it).
func (p *FS) Died() <-chan struct{} { return p.died }

// Dead reports whether the disk has lost power. When it has, the
// consequences of the loss (OnCrash) are complete when it returns.
func (p *FS) Dead() bool {
	if !p.off.Load() && p.mem.Crashed() == nil {
		return false
	}
	p.off.Store(true)
	p.dieOnce.Do(p.die)
	return true
}

func (p *FS) die() {
	close(p.died)
	if p.OnCrash != nil {
		p.OnCrash()
	}
}

// Cut takes the power away now: what the disk keeps is CrashClone(pct) of
// this moment. Only the first Cut counts; a disk is cut or armed, not
// both.
func (p *FS) Cut(pct int, seed int64) {
	p.cutOnce.Do(func() {
		p.off.Store(true) // before the image: see the package comment
		p.cutImg = p.mem.CrashClone(pct, rand.New(rand.NewSource(seed)))
		close(p.cutDone)
		p.dieOnce.Do(p.die)
	})
}

// Image is what the disk kept when it lost power (nil: it has power).
func (p *FS) Image() *vfs.MemFS {
	if img := p.mem.Crashed(); img != nil {
		return img
	}
	if !p.off.Load() {
		return nil
	}
	<-p.cutDone
	return p.cutImg
}

// Release lets the frozen operations go on (on the running MemFS, which
// nobody reads any more), so that the dead node's goroutines end.
func (p *FS) Release() { p.relOnce.Do(func() { close(p.released) }) }

// powered runs a mutating op if the disk has power; otherwise, or if the
// power went during it, it blocks until the disk is released.
func powered[T any](p *FS, op func() (T, error)) (T, error) {
	if p.Dead() {
		<-p.released
	}
	v, err := op()
	if p.Dead() {
		<-p.released
	}
	return v, err
}

func powered0(p *FS, op func() error) error {
	_, err := powered(p, func() (struct{}, error) { return struct{}{}, op() })
	return err
}

func (p *FS) file(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{p: p, f: f}, nil
}

// Create implements vfs.FS.
func (p *FS) Create(name string) (vfs.File, error) {
	return p.file(powered(p, func() (vfs.File, error) { return p.mem.Create(name) }))
}

// Open implements vfs.FS.
func (p *FS) Open(name string) (vfs.File, error) { return p.file(p.mem.Open(name)) }

// OpenReadWrite implements vfs.FS.
func (p *FS) OpenReadWrite(name string, create bool) (vfs.File, error) {
	return p.file(powered(p, func() (vfs.File, error) { return p.mem.OpenReadWrite(name, create) }))
}

// OpenDir implements vfs.FS.
func (p *FS) OpenDir(name string) (vfs.File, error) { return p.file(p.mem.OpenDir(name)) }

// SyncDir implements vfs.FS.
func (p *FS) SyncDir(dir string) error {
	return powered0(p, func() error { return p.mem.SyncDir(dir) })
}

// MkdirAll implements vfs.FS.
func (p *FS) MkdirAll(dir string, perm os.FileMode) error {
	return powered0(p, func() error { return p.mem.MkdirAll(dir, perm) })
}

// Remove implements vfs.FS.
func (p *FS) Remove(name string) error {
	return powered0(p, func() error { return p.mem.Remove(name) })
}

// RemoveAll implements vfs.FS.
func (p *FS) RemoveAll(name string) error {
	return powered0(p, func() error { return p.mem.RemoveAll(name) })
}

// Rename implements vfs.FS.
func (p *FS) Rename(o, n string) error {
	return powered0(p, func() error { return p.mem.Rename(o, n) })
}

// Link implements vfs.FS.
func (p *FS) Link(o, n string) error {
	return powered0(p, func() error { return p.mem.Link(o, n) })
}

// List implements vfs.FS.
func (p *FS) List(dir string) ([]string, error) { return p.mem.List(dir) }

// Stat implements vfs.FS.
func (p *FS) Stat(name string) (os.FileInfo, error) { return p.mem.Stat(name) }

// Lock implements vfs.FS.
func (p *FS) Lock(name string) (io.Closer, error) {
	return powered(p, func() (io.Closer, error) { return p.mem.Lock(name) })
}

// GetDiskUsage implements vfs.FS.
func (p *FS) GetDiskUsage(dir string) (vfs.DiskUsage, error) { return p.mem.GetDiskUsage(dir) }

type file struct {
	p *FS
	f vfs.File
}

func (f *file) Read(b []byte) (int, error)              { return f.f.Read(b) }
func (f *file) ReadAt(b []byte, off int64) (int, error) { return f.f.ReadAt(b, off) }

func (f *file) Write(b []byte) (int, error) {
	return powered(f.p, func() (int, error) { return f.f.Write(b) })
}

func (f *file) WriteAt(b []byte, off int64) (int, error) {
	return powered(f.p, func() (int, error) { return f.f.WriteAt(b, off) })
}

func (f *file) Close() error    { return f.f.Close() }
func (f *file) Sync() error     { return powered0(f.p, f.f.Sync) }
func (f *file) SyncData() error { return powered0(f.p, f.f.SyncData) }

func (f *file) Truncate(size int64) error {
	return powered0(f.p, func() error { return f.f.Truncate(size) })
}

func (f *file) Preallocate(off, n int64) error {
	return powered0(f.p, func() error { return f.f.Preallocate(off, n) })
}

func (f *file) Stat() (os.FileInfo, error) { return f.f.Stat() }
func (f *file) Fd() uintptr                { return f.f.Fd() }
