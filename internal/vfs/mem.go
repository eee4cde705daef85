package vfs

// MemFS data structures and invariants.
//
// Every file and directory is an *inode; a name is an entry in a directory
// inode's map, so hard links are two entries pointing at one inode. All state
// of a MemFS (inodes, open descriptors, locks, counters) is guarded by the
// single mutex MemFS.mu; every operation holds it for its whole duration, so
// each operation is atomic with respect to CrashClone.
//
// File inodes:
//   - data is the current contents; synced is the durable contents.
//   - pending lists the writes and truncates applied to data since the last
//     Sync/SyncData, oldest first, each with a private copy of its bytes.
//     Invariant: applying pending, in order, to synced yields data. A sync
//     applies pending to synced (O(bytes written since the last sync)) and
//     empties it.
//
// Directory inodes:
//   - children is the current name -> inode map; durable is the map a crash
//     keeps at least.
//   - dpending lists the directory operations (dirOp) that touch this
//     directory and have not yet been folded into durable, oldest first. A
//     dirOp is a list of edits (set name -> inode, or remove name if it still
//     names that inode); a rename has two edits, one per directory, and a
//     cross-directory rename sits in both directories' dpending lists.
//   - An edit is marked synced when its directory is synced; a dirOp is
//     durable when all of its edits are synced (so a cross-directory rename is
//     durable only once both directories have been synced since it).
//   - Invariant: durable is the result of applying the longest durable prefix
//     of dpending, and applying all of dpending in order to durable yields
//     children. The durable view of a directory (what CrashClone(0) keeps) is
//     durable plus the durable dirOps of dpending applied in order; a dirOp
//     stays in dpending behind an earlier non-durable one (a cross-directory
//     rename waiting for the other directory).
//   - When a directory leaves the tree (Remove, RemoveAll, Rename over it) its
//     side of pending cross-directory renames counts as synced, since it can
//     no longer be synced by path (see dirRemoved).
//   - RemoveAll records one removal per entry, deepest first, like rm -r; each
//     is durable when its own directory is synced.
//
// A crash clone is built from the root by taking, for each directory, durable
// plus the durable (or randomly kept) dirOps of dpending, and for each file,
// synced plus the kept fileOps of pending; inodes are cloned once each, so
// hard links survive. Everything in a clone is durable.
//
// Every recorded fileOp and dirOp carries a sequence number from MemFS.seq, so
// that CrashClone with a percentage draws its random choices in the original
// order of the operations, deterministically for a given rng.

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrInjected is a convenient error for MemFS.InjectErrors callbacks to
// return.
var ErrInjected = errors.New("vfs: injected fault")

// OpKind identifies a MemFS operation, for error injection.
type OpKind int

// Operation kinds seen by an InjectErrors callback.
const (
	OpCreate        OpKind = iota + 1 // FS.Create
	OpOpen                            // FS.Open
	OpOpenReadWrite                   // FS.OpenReadWrite
	OpOpenDir                         // FS.OpenDir
	OpRead                            // File.Read, File.ReadAt
	OpWrite                           // File.Write, File.WriteAt
	OpSync                            // File.Sync of a regular file
	OpSyncData                        // File.SyncData of a regular file
	OpTruncate                        // File.Truncate
	OpPreallocate                     // File.Preallocate
	OpFileStat                        // File.Stat
	OpSyncDir                         // FS.SyncDir, and File.Sync/SyncData of a directory
	OpMkdirAll                        // FS.MkdirAll
	OpRemove                          // FS.Remove
	OpRemoveAll                       // FS.RemoveAll
	OpRename                          // FS.Rename (Path is the old name, NewPath the new)
	OpLink                            // FS.Link (Path is the old name, NewPath the new)
	OpList                            // FS.List
	OpStat                            // FS.Stat
	OpLock                            // FS.Lock
	OpGetDiskUsage                    // FS.GetDiskUsage
)

var opKindNames = [...]string{
	OpCreate:        "create",
	OpOpen:          "open",
	OpOpenReadWrite: "openreadwrite",
	OpOpenDir:       "opendir",
	OpRead:          "read",
	OpWrite:         "write",
	OpSync:          "sync",
	OpSyncData:      "syncdata",
	OpTruncate:      "truncate",
	OpPreallocate:   "preallocate",
	OpFileStat:      "fstat",
	OpSyncDir:       "syncdir",
	OpMkdirAll:      "mkdirall",
	OpRemove:        "remove",
	OpRemoveAll:     "removeall",
	OpRename:        "rename",
	OpLink:          "link",
	OpList:          "list",
	OpStat:          "stat",
	OpLock:          "lock",
	OpGetDiskUsage:  "getdiskusage",
}

func (k OpKind) String() string {
	if k > 0 && int(k) < len(opKindNames) {
		return opKindNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op describes an operation about to be performed, for error injection.
// Path is the cleaned absolute path (for file operations, the path the file
// was opened with). Offset and Length describe the byte range of reads,
// writes and preallocations, and the new size of truncates (Offset); for a
// Write or Read the offset is the descriptor's current offset.
type Op struct {
	Kind           OpKind
	Path           string
	Offset, Length int64
	// NewPath is the new name for OpRename and OpLink; empty otherwise.
	NewPath string
}

// MemFS is an in-memory FS that models what a crash keeps; see the package
// documentation. Create one with NewMem.
type MemFS struct {
	mu       sync.Mutex
	root     *inode
	nextID   uint64
	seq      int64 // sequence number of the last recorded fileOp/dirOp
	ops      int64 // mutating operations so far
	locks    map[string]bool
	injector atomic.Pointer[func(Op) error]
	// diskUsage, when set, is what GetDiskUsage reports (SetDiskUsage).
	diskUsage atomic.Pointer[DiskUsage]

	crashAt    int64 // OpCount value at which to crash; 0 when not armed
	crashPct   int
	crashSeed  int64
	crashClone *MemFS
}

var _ FS = (*MemFS)(nil)

// NewMem returns an empty MemFS holding only the root directory "/" (which is
// durable).
func NewMem() *MemFS {
	fs := &MemFS{locks: make(map[string]bool)}
	fs.root = fs.newInode(true)
	return fs
}

type inode struct {
	id    uint64
	isDir bool

	// Regular files.
	data    []byte
	synced  []byte
	pending []fileOp

	// Directories.
	children map[string]*inode
	durable  map[string]*inode
	dpending []*dirOp
}

type fileOp struct {
	seq      int64
	truncate bool
	off      int64 // write offset, or new size for a truncate
	data     []byte
}

type dirEdit struct {
	dir    *inode
	name   string
	node   *inode
	remove bool // remove name if it names node; otherwise set name -> node
	synced bool
}

type dirOp struct {
	seq   int64
	edits []dirEdit
}

func (op *dirOp) isDurable() bool {
	for i := range op.edits {
		if !op.edits[i].synced {
			return false
		}
	}
	return true
}

// applyTo applies op's edits that belong to directory dir to the map m.
func (op *dirOp) applyTo(dir *inode, m map[string]*inode) {
	for i := range op.edits {
		e := &op.edits[i]
		if e.dir != dir {
			continue
		}
		if e.remove {
			if m[e.name] == e.node {
				delete(m, e.name)
			}
		} else {
			m[e.name] = e.node
		}
	}
}

func (fs *MemFS) newInode(isDir bool) *inode {
	fs.nextID++
	n := &inode{id: fs.nextID, isDir: isDir}
	if isDir {
		n.children = make(map[string]*inode)
		n.durable = make(map[string]*inode)
	}
	return n
}

// writeBuf writes p at off into b, growing it (zero-filled) as needed.
func writeBuf(b []byte, off int64, p []byte) []byte {
	end := int(off) + len(p)
	if end > len(b) {
		old := len(b)
		b = slices.Grow(b, end-old)[:end]
		if int(off) > old {
			clear(b[old:off])
		}
	}
	copy(b[off:], p)
	return b
}

// truncBuf sets the length of b to size, zero-filling any growth.
func truncBuf(b []byte, size int64) []byte {
	if int(size) <= len(b) {
		return b[:size]
	}
	old := len(b)
	b = slices.Grow(b, int(size)-old)[:size]
	clear(b[old:])
	return b
}

func (op *fileOp) apply(b []byte) []byte {
	if op.truncate {
		return truncBuf(b, op.off)
	}
	return writeBuf(b, op.off, op.data)
}

// --- recording mutations (fs.mu held) ---

func (fs *MemFS) nextSeq() int64 {
	fs.seq++
	return fs.seq
}

func (fs *MemFS) fileWrite(n *inode, off int64, p []byte) {
	if len(p) == 0 {
		return
	}
	n.data = writeBuf(n.data, off, p)
	n.pending = append(n.pending, fileOp{seq: fs.nextSeq(), off: off, data: slices.Clone(p)})
}

func (fs *MemFS) fileTruncate(n *inode, size int64) {
	n.data = truncBuf(n.data, size)
	n.pending = append(n.pending, fileOp{seq: fs.nextSeq(), truncate: true, off: size})
}

func syncFile(n *inode) {
	for i := range n.pending {
		n.synced = n.pending[i].apply(n.synced)
	}
	clear(n.pending) // drop references to the copied bytes
	n.pending = n.pending[:0]
}

// recordDirOp applies edits to the current children and records them.
func (fs *MemFS) recordDirOp(edits ...dirEdit) {
	op := &dirOp{seq: fs.nextSeq(), edits: edits}
	var prev *inode
	for _, e := range edits {
		if e.remove {
			delete(e.dir.children, e.name)
		} else {
			e.dir.children[e.name] = e.node
		}
		if e.dir != prev {
			e.dir.dpending = append(e.dir.dpending, op)
			prev = e.dir
		}
	}
}

func (fs *MemFS) addEntry(dir *inode, name string, n *inode) {
	fs.recordDirOp(dirEdit{dir: dir, name: name, node: n})
}

func (fs *MemFS) removeEntry(dir *inode, name string) {
	fs.recordDirOp(dirEdit{dir: dir, name: name, node: dir.children[name], remove: true})
}

// fold moves the durable prefix of dir.dpending into dir.durable.
func fold(dir *inode) {
	k := 0
	for k < len(dir.dpending) && dir.dpending[k].isDurable() {
		dir.dpending[k].applyTo(dir, dir.durable)
		k++
	}
	if k > 0 {
		n := copy(dir.dpending, dir.dpending[k:])
		clear(dir.dpending[n:])
		dir.dpending = dir.dpending[:n]
	}
}

func syncDir(dir *inode) {
	var others []*inode
	for _, op := range dir.dpending {
		for i := range op.edits {
			e := &op.edits[i]
			if e.dir == dir {
				e.synced = true
			} else {
				others = append(others, e.dir)
			}
		}
	}
	fold(dir)
	for _, o := range others {
		fold(o)
	}
}

// dirRemoved is called when directory n leaves the tree (Remove, RemoveAll,
// or a Rename over it). It can no longer be synced by path, so its side of
// every pending cross-directory rename is marked synced, as if it had been:
// otherwise such a rename could never become durable in the other directory.
// (n's own entry operations stay pending; they matter only to a crash that
// keeps n, and n was empty when removed.)
func dirRemoved(n *inode) {
	var others []*inode
	for _, op := range n.dpending {
		cross := false
		for i := range op.edits {
			if op.edits[i].dir != n {
				cross = true
				others = append(others, op.edits[i].dir)
			}
		}
		if !cross {
			continue
		}
		for i := range op.edits {
			if op.edits[i].dir == n {
				op.edits[i].synced = true
			}
		}
	}
	fold(n)
	for _, o := range others {
		fold(o)
	}
}

// mutation counts a mutating operation that is about to be applied, and takes
// the armed crash clone just before the k-th one.
func (fs *MemFS) mutation() {
	fs.ops++
	if fs.crashAt != 0 && fs.ops == fs.crashAt {
		fs.crashAt = 0
		fs.crashClone = fs.crashCloneLocked(fs.crashPct, rand.New(rand.NewSource(fs.crashSeed)))
	}
}

// inject runs the error injector, if any. It is called without fs.mu held so
// that the callback may use the FS.
func (fs *MemFS) inject(op Op) error {
	if f := fs.injector.Load(); f != nil {
		return (*f)(op)
	}
	return nil
}

// --- paths ---

func cleanPath(name string) string {
	if !strings.HasPrefix(name, "/") {
		name = "/" + name
	}
	return path.Clean(name)
}

// lookup resolves a cleaned path (fs.mu held).
func (fs *MemFS) lookup(p string) (*inode, error) {
	n := fs.root
	if p == "/" {
		return n, nil
	}
	for _, c := range strings.Split(p[1:], "/") {
		if !n.isDir {
			return nil, syscall.ENOTDIR
		}
		next := n.children[c]
		if next == nil {
			return nil, syscall.ENOENT
		}
		n = next
	}
	return n, nil
}

// lookupParent resolves the directory holding cleaned path p, and returns the
// base name. For the root, it returns the root and "".
func (fs *MemFS) lookupParent(p string) (*inode, string, error) {
	if p == "/" {
		return fs.root, "", nil
	}
	dir, err := fs.lookup(path.Dir(p))
	if err != nil {
		return nil, "", err
	}
	if !dir.isDir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, path.Base(p), nil
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// --- FS ---

func (fs *MemFS) newFile(n *inode, p string, read, write bool) *memFile {
	return &memFile{fs: fs, n: n, path: p, read: read, write: write}
}

// Create implements FS.
func (fs *MemFS) Create(name string) (File, error) {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpCreate, Path: p}); err != nil {
		return nil, pathErr("open", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.lookupParent(p)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if base == "" {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	n := dir.children[base]
	if n != nil && n.isDir {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	fs.mutation()
	if n == nil {
		n = fs.newInode(false)
		fs.addEntry(dir, base, n)
	} else {
		fs.fileTruncate(n, 0)
	}
	return fs.newFile(n, p, true, true), nil
}

// Open implements FS. The file is read-only; a directory may be opened too.
func (fs *MemFS) Open(name string) (File, error) {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpOpen, Path: p}); err != nil {
		return nil, pathErr("open", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(p)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return fs.newFile(n, p, true, false), nil
}

// OpenReadWrite implements FS.
func (fs *MemFS) OpenReadWrite(name string, create bool) (File, error) {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpOpenReadWrite, Path: p}); err != nil {
		return nil, pathErr("open", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.openOrCreate(p, create)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return fs.newFile(n, p, true, true), nil
}

// openOrCreate finds the regular file p, creating it when create is set
// (fs.mu held).
func (fs *MemFS) openOrCreate(p string, create bool) (*inode, error) {
	dir, base, err := fs.lookupParent(p)
	if err != nil {
		return nil, err
	}
	if base == "" {
		return nil, syscall.EISDIR
	}
	n := dir.children[base]
	switch {
	case n != nil && n.isDir:
		return nil, syscall.EISDIR
	case n != nil:
		return n, nil
	case !create:
		return nil, syscall.ENOENT
	}
	fs.mutation()
	n = fs.newInode(false)
	fs.addEntry(dir, base, n)
	return n, nil
}

// OpenDir implements FS.
func (fs *MemFS) OpenDir(name string) (File, error) {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpOpenDir, Path: p}); err != nil {
		return nil, pathErr("open", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(p)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if !n.isDir {
		return nil, pathErr("open", name, syscall.ENOTDIR)
	}
	return fs.newFile(n, p, true, false), nil
}

// SyncDir implements FS.
func (fs *MemFS) SyncDir(dir string) error {
	p := cleanPath(dir)
	if err := fs.inject(Op{Kind: OpSyncDir, Path: p}); err != nil {
		return pathErr("fsync", dir, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(p)
	if err != nil {
		return pathErr("open", dir, err)
	}
	if !n.isDir {
		return pathErr("open", dir, syscall.ENOTDIR)
	}
	fs.mutation()
	syncDir(n)
	return nil
}

// MkdirAll implements FS. perm is ignored.
func (fs *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	p := cleanPath(dir)
	if err := fs.inject(Op{Kind: OpMkdirAll, Path: p}); err != nil {
		return pathErr("mkdir", dir, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	// Validate first so that a failing MkdirAll changes nothing.
	n := fs.root
	var missing []string
	if p != "/" {
		parts := strings.Split(p[1:], "/")
		for i, c := range parts {
			next := n.children[c]
			if next == nil {
				missing = parts[i:]
				break
			}
			if !next.isDir {
				return pathErr("mkdir", dir, syscall.ENOTDIR)
			}
			n = next
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fs.mutation()
	for _, c := range missing {
		d := fs.newInode(true)
		fs.addEntry(n, c, d)
		n = d
	}
	return nil
}

// Remove implements FS.
func (fs *MemFS) Remove(name string) error {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpRemove, Path: p}); err != nil {
		return pathErr("remove", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.lookupParent(p)
	if err != nil {
		return pathErr("remove", name, err)
	}
	if base == "" {
		return pathErr("remove", name, syscall.EBUSY)
	}
	n := dir.children[base]
	if n == nil {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.isDir && len(n.children) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	fs.mutation()
	fs.removeEntry(dir, base)
	if n.isDir {
		dirRemoved(n)
	}
	return nil
}

// RemoveAll implements FS. Like rm -r, it records the removal of every entry
// below name (each durable when its own directory is synced) and then of name
// itself; it counts as one mutating operation.
func (fs *MemFS) RemoveAll(name string) error {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpRemoveAll, Path: p}); err != nil {
		return pathErr("RemoveAll", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if p == "/" {
		return pathErr("RemoveAll", name, syscall.EINVAL)
	}
	dir, base, err := fs.lookupParent(p)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return pathErr("RemoveAll", name, err)
	}
	if dir.children[base] == nil {
		return nil
	}
	fs.mutation()
	fs.removeTree(dir, base, make(map[*inode]bool))
	return nil
}

func (fs *MemFS) removeTree(dir *inode, name string, seen map[*inode]bool) {
	n := dir.children[name]
	if n.isDir && !seen[n] {
		seen[n] = true
		for _, c := range slices.Sorted(maps.Keys(n.children)) {
			fs.removeTree(n, c, seen)
		}
	}
	fs.removeEntry(dir, name)
	if n.isDir {
		dirRemoved(n)
	}
}

// Rename implements FS.
func (fs *MemFS) Rename(oldname, newname string) error {
	op, np := cleanPath(oldname), cleanPath(newname)
	lerr := func(err error) error {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	if err := fs.inject(Op{Kind: OpRename, Path: op, NewPath: np}); err != nil {
		return lerr(err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	odir, obase, err := fs.lookupParent(op)
	if err != nil {
		return lerr(err)
	}
	ndir, nbase, err := fs.lookupParent(np)
	if err != nil {
		return lerr(err)
	}
	if obase == "" || nbase == "" {
		return lerr(syscall.EBUSY)
	}
	n := odir.children[obase]
	if n == nil {
		return lerr(syscall.ENOENT)
	}
	existing := ndir.children[nbase]
	if existing == n {
		return nil // same name, or two links to one inode: a no-op
	}
	if n.isDir {
		if existing != nil && !existing.isDir {
			return lerr(syscall.ENOTDIR)
		}
		if existing != nil && len(existing.children) > 0 {
			return lerr(syscall.ENOTEMPTY)
		}
		if strings.HasPrefix(np, op+"/") {
			return lerr(syscall.EINVAL)
		}
	} else if existing != nil && existing.isDir {
		return lerr(syscall.EISDIR)
	}
	fs.mutation()
	fs.recordDirOp(
		dirEdit{dir: odir, name: obase, node: n, remove: true},
		dirEdit{dir: ndir, name: nbase, node: n},
	)
	if existing != nil && existing.isDir {
		dirRemoved(existing)
	}
	return nil
}

// Link implements FS.
func (fs *MemFS) Link(oldname, newname string) error {
	op, np := cleanPath(oldname), cleanPath(newname)
	lerr := func(err error) error {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	if err := fs.inject(Op{Kind: OpLink, Path: op, NewPath: np}); err != nil {
		return lerr(err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(op)
	if err != nil {
		return lerr(err)
	}
	if n.isDir {
		return lerr(syscall.EPERM)
	}
	ndir, nbase, err := fs.lookupParent(np)
	if err != nil {
		return lerr(err)
	}
	if nbase == "" || ndir.children[nbase] != nil {
		return lerr(syscall.EEXIST)
	}
	fs.mutation()
	fs.addEntry(ndir, nbase, n)
	return nil
}

// List implements FS.
func (fs *MemFS) List(dir string) ([]string, error) {
	p := cleanPath(dir)
	if err := fs.inject(Op{Kind: OpList, Path: p}); err != nil {
		return nil, pathErr("open", dir, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(p)
	if err != nil {
		return nil, pathErr("open", dir, err)
	}
	if !n.isDir {
		return nil, pathErr("readdirent", dir, syscall.ENOTDIR)
	}
	names := make([]string, 0, len(n.children))
	for c := range n.children {
		names = append(names, c)
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (fs *MemFS) Stat(name string) (os.FileInfo, error) {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpStat, Path: p}); err != nil {
		return nil, pathErr("stat", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(p)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return newFileInfo(n, p), nil
}

type memLock struct {
	fs   *MemFS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.locks, l.name)
		l.fs.mu.Unlock()
	})
	return nil
}

// Lock implements FS. The lock is held in memory, per cleaned path; the file
// is created if missing (which counts as a mutating operation).
func (fs *MemFS) Lock(name string) (io.Closer, error) {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpLock, Path: p}); err != nil {
		return nil, pathErr("lock", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.locks[p] {
		return nil, fmt.Errorf("vfs: lock %s: already held: %w", name, syscall.EAGAIN)
	}
	if _, err := fs.openOrCreate(p, true); err != nil {
		return nil, pathErr("open", name, err)
	}
	fs.locks[p] = true
	return &memLock{fs: fs, name: p}, nil
}

// GetDiskUsage implements FS; it reports fixed sizes (1 TiB total, half of it
// available) for any existing path.
func (fs *MemFS) GetDiskUsage(name string) (DiskUsage, error) {
	p := cleanPath(name)
	if err := fs.inject(Op{Kind: OpGetDiskUsage, Path: p}); err != nil {
		return DiskUsage{}, pathErr("statfs", name, err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, err := fs.lookup(p); err != nil {
		return DiskUsage{}, pathErr("statfs", name, err)
	}
	if u := fs.diskUsage.Load(); u != nil {
		return *u, nil
	}
	const tib = 1 << 40
	return DiskUsage{AvailBytes: tib / 2, TotalBytes: tib, UsedBytes: tib / 2}, nil
}

// SetDiskUsage makes GetDiskUsage report u from now on (a nearly full
// disk, say); nil restores the fixed default. It changes nothing else:
// writes still succeed (inject ENOSPC with InjectErrors for that).
func (fs *MemFS) SetDiskUsage(u *DiskUsage) { fs.diskUsage.Store(u) }

// --- crash simulation and fault injection ---

// OpCount returns the number of mutating operations applied since the MemFS
// was created (see CrashAtOp for which operations count).
func (fs *MemFS) OpCount() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.ops
}

// CrashAtOp arms a crash trigger: counting mutating operations from 1 after
// this call, just before the k-th one is applied the FS stores
// CrashClone(keepUnsyncedPercent, rand.New(rand.NewSource(seed))), which
// Crashed then returns. The running FS is not disturbed: the k-th and later
// operations proceed normally. Arming clears any stored clone; k <= 0 only
// disarms.
//
// Mutating operations: File.Write, WriteAt, Sync, SyncData, Truncate (on
// files; Sync/SyncData of a directory counts as a directory sync); Create;
// OpenReadWrite and Lock when they create the file; MkdirAll when it creates
// a directory; Remove; RemoveAll when something is there; Rename and Link
// (except a rename onto the same inode, a no-op); SyncDir. Operations that
// fail (including injected failures) are not counted.
func (fs *MemFS) CrashAtOp(k int64, keepUnsyncedPercent int, seed int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashClone = nil
	fs.crashAt = 0
	if k > 0 {
		fs.crashAt = fs.ops + k
		fs.crashPct = keepUnsyncedPercent
		fs.crashSeed = seed
	}
}

// Disarm cancels the crash trigger armed with CrashAtOp if it has not fired
// yet and reports whether it had fired; unlike CrashAtOp(0, …), it keeps a
// clone already taken (Crashed still returns it), so that a test ending its
// workload cannot lose a crash that fired just before.
func (fs *MemFS) Disarm() (fired bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashAt = 0
	return fs.crashClone != nil
}

// Crashed returns the clone taken by the trigger armed with CrashAtOp, or nil
// if the k-th operation has not happened.
func (fs *MemFS) Crashed() *MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashClone
}

// InjectErrors installs f, called before every operation (without the
// MemFS's lock held, so f may use the FS; f must be safe for concurrent use
// if the FS is used concurrently). When f returns a non-nil error the
// operation fails with it (wrapped in *os.PathError or *os.LinkError) and
// changes nothing. nil removes the injector.
func (fs *MemFS) InjectErrors(f func(op Op) error) {
	if f == nil {
		fs.injector.Store(nil)
		return
	}
	fs.injector.Store(&f)
}

// CrashClone returns a new, independent MemFS holding what a crash at this
// moment could leave: the durable state plus, when keepUnsyncedPercent > 0,
// each unsynced file write or truncate kept with that probability, and a
// prefix of the unsynced directory entry operations (a rename as a whole):
// each is kept with that probability until the first one lost, after which
// none is (namespace changes reach the disk in order, as a journaling
// filesystem commits them). Draws come from rng in the order the operations
// happened, and kept operations are applied in that order. At 0 it
// holds exactly the durable state; at 100 it equals the current state. rng
// may be nil when the percentage is 0 or at least 100. Everything in the
// clone is durable; it has no open files, locks, injector or crash trigger,
// and its OpCount starts at 0.
func (fs *MemFS) CrashClone(keepUnsyncedPercent int, rng *rand.Rand) *MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashCloneLocked(keepUnsyncedPercent, rng)
}

func (fs *MemFS) crashCloneLocked(pct int, rng *rand.Rand) *MemFS {
	// kept reports whether the unsynced operation with a sequence number is
	// kept.
	var kept func(seq int64) bool
	switch {
	case pct <= 0:
		kept = func(int64) bool { return false }
	case pct >= 100:
		kept = func(int64) bool { return true }
	default:
		if rng == nil {
			rng = rand.New(rand.NewSource(0))
		}
		// Collect the unsynced operations of every inode the durable or
		// current state can reach, and draw for them in sequence order.
		var seqs, dirSeqs []int64
		seen := map[*inode]bool{fs.root: true}
		stack := []*inode{fs.root}
		visit := func(n *inode) {
			if !seen[n] {
				seen[n] = true
				stack = append(stack, n)
			}
		}
		dirOps := map[*dirOp]bool{}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for i := range n.pending {
				seqs = append(seqs, n.pending[i].seq)
			}
			for _, c := range n.durable {
				visit(c)
			}
			for _, op := range n.dpending {
				for i := range op.edits {
					visit(op.edits[i].node)
				}
				if !op.isDurable() && !dirOps[op] {
					dirOps[op] = true
					dirSeqs = append(dirSeqs, op.seq)
				}
			}
		}
		slices.Sort(seqs)
		slices.Sort(dirSeqs)
		keep := make(map[int64]bool)
		// File data: each unsynced write kept or lost on its own, as
		// dirty pages are written back in any order.
		for _, s := range seqs {
			if rng.Intn(100) < pct {
				keep[s] = true
			}
		}
		// Namespace operations: a prefix, in the order they happened, as
		// a journaling filesystem (ext4, XFS) commits its metadata: a
		// later create, rename or remove is never durable while an
		// earlier one is lost. (Pebble relies on this too: it writes a new
		// MANIFEST and then a marker naming it before one directory sync.)
		for _, s := range dirSeqs {
			if rng.Intn(100) >= pct {
				break
			}
			keep[s] = true
		}
		kept = func(seq int64) bool { return keep[seq] }
	}

	memo := make(map[*inode]*inode)
	var clone func(n *inode) *inode
	clone = func(n *inode) *inode {
		if c := memo[n]; c != nil {
			return c
		}
		c := &inode{id: n.id, isDir: n.isDir}
		memo[n] = c
		if !n.isDir {
			b := slices.Clone(n.synced)
			for i := range n.pending {
				if kept(n.pending[i].seq) {
					b = n.pending[i].apply(b)
				}
			}
			c.data = b
			c.synced = slices.Clone(b)
			return c
		}
		m := maps.Clone(n.durable)
		for _, op := range n.dpending {
			if op.isDurable() || kept(op.seq) {
				op.applyTo(n, m)
			}
		}
		c.children = make(map[string]*inode, len(m))
		for name, child := range m {
			c.children[name] = clone(child)
		}
		c.durable = maps.Clone(c.children)
		return c
	}
	return &MemFS{
		root:   clone(fs.root),
		nextID: fs.nextID,
		locks:  make(map[string]bool),
	}
}

// String describes the current tree, one line per entry, for debugging.
func (fs *MemFS) String() string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var b strings.Builder
	seen := map[*inode]bool{}
	var dump func(n *inode, p string)
	dump = func(n *inode, p string) {
		if !n.isDir {
			fmt.Fprintf(&b, "%s (%d bytes, %d synced, %d unsynced ops)\n", p, len(n.data), len(n.synced), len(n.pending))
			return
		}
		fmt.Fprintf(&b, "%s/ (%d entries, %d unsynced ops)\n", strings.TrimSuffix(p, "/"), len(n.children), len(n.dpending))
		if seen[n] {
			return
		}
		seen[n] = true
		for _, c := range slices.Sorted(maps.Keys(n.children)) {
			dump(n.children[c], path.Join(p, c))
		}
	}
	dump(fs.root, "/")
	return b.String()
}

// --- File ---

type memFile struct {
	fs          *MemFS
	n           *inode
	path        string // cleaned path the file was opened with
	pos         int64  // offset for Read/Write; guarded by fs.mu
	read, write bool
	closed      bool // guarded by fs.mu
}

var _ File = (*memFile)(nil)

func (f *memFile) check(op string) error {
	if f.closed {
		return pathErr(op, f.path, os.ErrClosed)
	}
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("close"); err != nil {
		return err
	}
	f.closed = true
	return nil
}

func (f *memFile) readLocked(p []byte, off int64) (int, error) {
	if f.n.isDir {
		return 0, pathErr("read", f.path, syscall.EISDIR)
	}
	if !f.read {
		return 0, pathErr("read", f.path, syscall.EBADF)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	return copy(p, f.n.data[off:]), nil
}

func (f *memFile) Read(p []byte) (int, error) {
	if f.fs.injector.Load() != nil {
		f.fs.mu.Lock()
		off := f.pos
		f.fs.mu.Unlock()
		if err := f.fs.inject(Op{Kind: OpRead, Path: f.path, Offset: off, Length: int64(len(p))}); err != nil {
			return 0, pathErr("read", f.path, err)
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read"); err != nil {
		return 0, err
	}
	n, err := f.readLocked(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.inject(Op{Kind: OpRead, Path: f.path, Offset: off, Length: int64(len(p))}); err != nil {
		return 0, pathErr("read", f.path, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("readat", f.path, errors.New("negative offset"))
	}
	n, err := f.readLocked(p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

func (f *memFile) writeLocked(p []byte, off int64) (int, error) {
	if err := f.check("write"); err != nil {
		return 0, err
	}
	if !f.write {
		return 0, pathErr("write", f.path, syscall.EBADF)
	}
	f.fs.mutation()
	f.fs.fileWrite(f.n, off, p)
	return len(p), nil
}

func (f *memFile) Write(p []byte) (int, error) {
	if f.fs.injector.Load() != nil {
		f.fs.mu.Lock()
		off := f.pos
		f.fs.mu.Unlock()
		if err := f.fs.inject(Op{Kind: OpWrite, Path: f.path, Offset: off, Length: int64(len(p))}); err != nil {
			return 0, pathErr("write", f.path, err)
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	n, err := f.writeLocked(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.inject(Op{Kind: OpWrite, Path: f.path, Offset: off, Length: int64(len(p))}); err != nil {
		return 0, pathErr("write", f.path, err)
	}
	if off < 0 {
		return 0, pathErr("writeat", f.path, errors.New("negative offset"))
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.writeLocked(p, off)
}

func (f *memFile) sync(kind OpKind) error {
	name := "fsync"
	if f.n.isDir {
		kind = OpSyncDir
	} else if kind == OpSyncData {
		name = "fdatasync"
	}
	if err := f.fs.inject(Op{Kind: kind, Path: f.path}); err != nil {
		return pathErr(name, f.path, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(name); err != nil {
		return err
	}
	f.fs.mutation()
	if f.n.isDir {
		syncDir(f.n)
	} else {
		syncFile(f.n)
	}
	return nil
}

// Sync makes the inode's current contents durable, whichever descriptor is
// used; on a directory it makes the directory's entries durable.
func (f *memFile) Sync() error { return f.sync(OpSync) }

// SyncData is Sync: the model has no metadata apart from the contents.
func (f *memFile) SyncData() error { return f.sync(OpSyncData) }

func (f *memFile) Truncate(size int64) error {
	if err := f.fs.inject(Op{Kind: OpTruncate, Path: f.path, Offset: size}); err != nil {
		return pathErr("truncate", f.path, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate"); err != nil {
		return err
	}
	if f.n.isDir || !f.write {
		return pathErr("truncate", f.path, syscall.EINVAL)
	}
	if size < 0 {
		return pathErr("truncate", f.path, syscall.EINVAL)
	}
	f.fs.mutation()
	f.fs.fileTruncate(f.n, size)
	return nil
}

// Preallocate is a no-op (it changes nothing a crash could observe and is not
// a counted mutation).
func (f *memFile) Preallocate(offset, lengthBytes int64) error {
	if err := f.fs.inject(Op{Kind: OpPreallocate, Path: f.path, Offset: offset, Length: lengthBytes}); err != nil {
		return pathErr("fallocate", f.path, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.check("fallocate")
}

func (f *memFile) Stat() (os.FileInfo, error) {
	if err := f.fs.inject(Op{Kind: OpFileStat, Path: f.path}); err != nil {
		return nil, pathErr("stat", f.path, err)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat"); err != nil {
		return nil, err
	}
	return newFileInfo(f.n, f.path), nil
}

func (f *memFile) Fd() uintptr { return InvalidFd }

// --- FileInfo ---

type memFileInfo struct {
	name  string
	size  int64
	isDir bool
}

func newFileInfo(n *inode, p string) memFileInfo {
	fi := memFileInfo{name: path.Base(p), isDir: n.isDir}
	if !n.isDir {
		fi.size = int64(len(n.data))
	}
	return fi
}

func (fi memFileInfo) Name() string { return fi.name }
func (fi memFileInfo) Size() int64  { return fi.size }
func (fi memFileInfo) Mode() os.FileMode {
	if fi.isDir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (fi memFileInfo) ModTime() time.Time { return time.Time{} }
func (fi memFileInfo) IsDir() bool        { return fi.isDir }
func (fi memFileInfo) Sys() any           { return nil }
