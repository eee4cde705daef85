package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/vfs"
)

// Engine is a datanode's storage engine over a set of volumes.
type Engine struct {
	cfg     Config
	fs      vfs.FS
	log     *slog.Logger
	vols    []*volume
	files   *fileCache
	commit  *committer
	records *recordCache
	dirs    *dirCache
	closed  atomic.Bool

	mu         sync.RWMutex // guards containers, importing and volume.containers
	containers map[ContainerID]*container
	// importing holds the IDs of containers being imported (ImportContainer
	// until Commit or Abort): reserved, like an ID in containers.
	importing map[ContainerID]struct{}
	// failedVols: the volumes out of use (volfail.go).
	failedVols []VolumeFailure
}

// container is the in-memory state of one container.
type container struct {
	id  ContainerID
	vol *volume
	dir string

	mu           sync.Mutex // guards everything below
	state        ContainerState
	maxSizeBytes uint64
	created      uint64
	usedBytes    uint64
	reason       string
	// bcsid is the block commit sequence ID: the sequence of the last
	// PutBlock applied (BCSID in the container record; see PutBlock).
	bcsid uint64
	// busy names a transition in progress ("being created", "being
	// closed"); a busy container takes no writes or puts.
	busy   string
	blocks map[uint64]*blockState // blocks with chunks written since their last PutBlock
	// deleting holds blocks whose record delete is being synced and whose
	// file is about to be unlinked: no write, put or read may use them.
	deleting map[uint64]struct{}
	// damaged: blocks of this CLOSED container whose bytes failed their
	// checksums, with the first error (damage.go; in the volume's store too).
	damaged map[uint64]string
	// gone: blocks a committed DeleteBlock not applied here yet will delete,
	// by the index of that entry (gone.go; in the volume's store, synced).
	gone map[uint64]uint64
}

// writableLocked says whether c takes writes and puts. c.mu must be held.
func (c *container) writableLocked() error {
	if c.state != StateOpen {
		return fmt.Errorf("%w: state %s", ErrNotOpen, c.state)
	}
	if c.busy != "" {
		return fmt.Errorf("%w: %s", ErrNotOpen, c.busy)
	}
	return c.vol.writable()
}

// empty says whether bs holds nothing: no committed length, no chunk
// written or pending, no failure — the state blockStateLocked makes for a
// block that has no record yet.
func (bs *blockState) empty() bool {
	return bs.committedLen == 0 && bs.nextOffset == 0 && len(bs.pending) == 0 && bs.broken == nil
}

func newContainer(id ContainerID, v *volume) *container {
	return &container{id: id, vol: v, dir: v.containerDir(id),
		blocks: make(map[uint64]*blockState), deleting: make(map[uint64]struct{})}
}

// blockState tracks a block that is being written: its committed length and
// the chunks written after it. Chunks are contiguous: the next chunk must
// start at nextOffset (or replay an identical chunk).
type blockState struct {
	committedLen uint64
	bpc          uint32 // bytes per checksum of every chunk of the block; 0 until the first
	nextOffset   uint64
	// pending are the chunks written past committedLen, in offset order,
	// and sums their checksums, one after another (pendingChunk.sumsAt).
	// Neither holds a pointer, so the collector never scans them: a 64
	// MiB block of 1 KiB chunks queues 65,536 of them, and a slice of
	// ChunkInfo (one checksum slice allocated per chunk) cost a small
	// allocation per write and a scan of every entry in every GC cycle.
	// sums is only ever appended to, or replaced by a copy when committed
	// chunks are trimmed (commitPutLocked): the checksum slices handed
	// out (pendingSums, capped at their length) stay valid and unchanged.
	pending []pendingChunk
	sums    []uint32
	broken  error // a write to the file failed: the block takes no more puts
}

type pendingChunk struct {
	offset, length uint64
	seq            uint64 // committer sequence of the write, valid when done (0 for a logged one)
	sumsAt, nsums  uint32 // its checksums: blockState.sums[sumsAt:sumsAt+nsums]
	done           bool   // pwrite completed
	// logged: written by WriteLoggedChunk (its file is synced when
	// promoted, not by the round of seq).
	logged bool
}

// pendingSums returns the checksums of bs.pending[i], capped at their
// length (an append by the caller copies them).
func (bs *blockState) pendingSums(i int) []uint32 {
	p := &bs.pending[i]
	return bs.sums[p.sumsAt : p.sumsAt+p.nsums : p.sumsAt+p.nsums]
}

// pendingInfo returns bs.pending[i] as a ChunkInfo (its checksums shared,
// see pendingSums).
func (bs *blockState) pendingInfo(i int) ChunkInfo {
	p := &bs.pending[i]
	return ChunkInfo{Offset: p.offset, Length: p.length, Checksums: bs.pendingSums(i)}
}

// addPending queues a chunk written at offset. Both slices double when
// full: append grows a large slice by a quarter, which copied a block's
// list of small chunks about five times over as it grew (2 % of a
// datanode's CPU at 1 KiB writes).
func (bs *blockState) addPending(offset, length uint64, checksums []uint32, logged bool) {
	if len(bs.pending) == cap(bs.pending) {
		bs.pending = slices.Grow(bs.pending, max(len(bs.pending), 16))
	}
	if len(bs.sums)+len(checksums) > cap(bs.sums) {
		bs.sums = slices.Grow(bs.sums, max(len(bs.sums), len(checksums), 16))
	}
	bs.pending = append(bs.pending, pendingChunk{offset: offset, length: length,
		sumsAt: uint32(len(bs.sums)), nsums: uint32(len(checksums)), logged: logged})
	bs.sums = append(bs.sums, checksums...)
}

// trimPending drops the first n pending chunks (committed). The remaining
// checksums move to a new array: the old one may be shared (pendingSums).
func (bs *blockState) trimPending(n int) {
	if n == 0 {
		return
	}
	if n == len(bs.pending) {
		bs.pending, bs.sums = bs.pending[:0], nil
		return
	}
	at := bs.pending[n].sumsAt
	bs.pending = slices.Delete(bs.pending, 0, n)
	for i := range bs.pending {
		bs.pending[i].sumsAt -= at
	}
	bs.sums = slices.Clone(bs.sums[at:])
}

// Open opens the engine over cfg.DataDirs, formatting new volumes, loading
// every container and finishing interrupted deletions.
func Open(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if len(cfg.DataDirs) == 0 {
		return nil, fmt.Errorf("engine: open: %w: no data directories", ErrInvalid)
	}
	e := &Engine{
		cfg:        cfg,
		fs:         cfg.FS,
		log:        cfg.Logger,
		files:      newFileCache(cfg.FS, cfg.OpenFilesMax),
		records:    newRecordCache(cfg.BlockRecordCacheMax),
		dirs:       newDirCache(cfg.FS, cfg.OpenFilesMax),
		containers: make(map[ContainerID]*container),
		importing:  make(map[ContainerID]struct{}),
	}
	e.commit = newCommitter(cfg.SyncWorkers,
		func(bf *blockFile) error {
			if err := bf.flushWriteBehind(true, false); err != nil {
				return err
			}
			return bf.f.SyncData()
		},
		e.dirs.sync,
		func(v *volume) error {
			if v.readOnly != nil {
				return nil // nothing written: every write was refused
			}
			return v.db.LogData(nil, pebble.Sync)
		})
	seen := map[[16]byte]string{}
	// tolerate leaves out a volume that fails to open or load while fewer
	// than FailedVolumesTolerated have (volfail.go); a directory that is
	// not a Spindle volume, or a volume given twice, is always refused.
	tolerate := func(d string, err error) bool {
		if (cfg.FailedVolumesTolerated >= 0 && len(e.failedVols) >= cfg.FailedVolumesTolerated) || errors.Is(err, errForeignDir) || errors.Is(err, ErrInvalid) {
			return false
		}
		e.failedVols = append(e.failedVols, VolumeFailure{Dir: d, Reason: err.Error(), At: time.Now()})
		e.log.Error("engine: volume failed at open; left out (tolerated)", "volume", d, "err", err,
			"failed", len(e.failedVols), "tolerated", cfg.FailedVolumesTolerated)
		return true
	}
	for _, d := range cfg.DataDirs {
		d = filepath.Clean(d)
		v, err := openVolume(e.fs, d, e.log)
		if err != nil {
			if tolerate(d, err) {
				continue
			}
			e.closeVolumes()
			return nil, err
		}
		e.vols = append(e.vols, v)
		if other, dup := seen[v.uuid]; dup {
			e.closeVolumes()
			return nil, fmt.Errorf("engine: open: %w: %s and %s are the same volume", ErrInvalid, other, d)
		}
		seen[v.uuid] = d
	}
	for i := 0; i < len(e.vols); i++ {
		v := e.vols[i]
		if err := e.loadVolume(v); err != nil {
			if tolerate(v.dir, err) {
				e.mu.Lock()
				for id, c := range e.containers {
					if c.vol == v {
						delete(e.containers, id)
					}
				}
				e.mu.Unlock()
				_ = v.close() // best effort: the volume failed and is left out, as tolerate said
				e.vols = slices.Delete(e.vols, i, i+1)
				i--
				continue
			}
			e.closeVolumes()
			return nil, err
		}
	}
	if len(e.vols) == 0 {
		return nil, fmt.Errorf("engine: open: every data directory failed: %s", e.failedVols[len(e.failedVols)-1].Reason)
	}
	// After every volume is loaded: the sweep keeps exactly the container
	// directories that have a record (import.go).
	for _, v := range e.vols {
		if err := e.sweepVolume(v); err != nil {
			e.closeVolumes()
			return nil, err
		}
	}
	for _, v := range e.vols {
		if v.readOnly != nil {
			e.log.Error("engine: volume is full: opened read-only: it serves reads of what it holds and refuses every write until the datanode restarts with room on it",
				"volume", v.dir, "reason", v.readOnly.Reason, "containers", v.containers)
			continue
		}
		if !e.hasRoom(v, 1) {
			e.log.Warn("engine: volume is full: it serves reads and takes no new writes until space is freed or a volume added",
				"volume", v.dir, "avail_bytes", v.space.avail, "reserve_bytes", v.space.reserve)
		}
	}
	return e, nil
}

func (e *Engine) closeVolumes() {
	for _, v := range e.vols {
		_ = v.close()
	}
}

// loadVolume reads every container record of v, and for each container the
// lengths of its blocks. A record that does not decode marks its container
// UNHEALTHY; other containers are unaffected.
func (e *Engine) loadVolume(v *volume) error {
	it, err := v.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyPrefixContainer}, UpperBound: []byte{keyPrefixContainer + 1}})
	if err != nil {
		return fmt.Errorf("engine: volume %s: %w", v.dir, err)
	}
	var deleting []*container
	for it.First(); it.Valid(); it.Next() {
		id, ok := decodeContainerKey(it.Key())
		if !ok {
			e.log.Error("engine: unknown key in container key space", "volume", v.dir, "key", fmt.Sprintf("%x", it.Key()))
			continue
		}
		c := newContainer(id, v)
		rec, derr := decodeContainerRecord(it.Value())
		if derr == nil && rec.ID != id {
			derr = fmt.Errorf("%w: record of container %d stored under key of %d", ErrCorrupt, rec.ID, id)
		}
		if derr != nil {
			c.state, c.reason = StateUnhealthy, "container record: "+derr.Error()
			c.maxSizeBytes = e.cfg.MaxContainerSizeBytes
		} else {
			c.state, c.maxSizeBytes, c.created, c.bcsid = rec.State, rec.MaxSizeBytes, rec.CreatedUnixMs, rec.BCSID
		}
		if other := e.containers[id]; other != nil {
			_ = it.Close() // the corruption is the error to report
			return fmt.Errorf("engine: open: %w: container %d is on volumes %s and %s", ErrCorrupt, id, other.vol.dir, v.dir)
		}
		e.containers[id] = c
		v.containers++
		if c.state == StateDeleting {
			deleting = append(deleting, c)
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("engine: volume %s: %w", v.dir, err)
	}
	for _, c := range e.containers {
		if c.vol != v || c.state == StateDeleting {
			continue
		}
		used, err := e.sumBlocks(c)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				return err
			}
			e.log.Error("engine: damaged container", "container", c.id, "err", err)
			if merr := e.setUnhealthy(c, err.Error()); merr != nil {
				return merr
			}
		}
		c.usedBytes = used
	}
	if err := e.loadMarks(v); err != nil { // damage.go
		return err
	}
	if err := e.loadGone(v); err != nil { // gone.go
		return err
	}
	for _, c := range deleting {
		if v.readOnly != nil {
			e.log.Warn("engine: interrupted delete left for a restart with room (volume read-only)", "container", c.id)
			continue
		}
		e.log.Info("engine: finishing interrupted delete", "container", c.id)
		if err := e.finishDelete(c); err != nil {
			return err
		}
	}
	return nil
}

// sumBlocks adds up the lengths of c's blocks, decoding (and so checking)
// every block record.
func (e *Engine) sumBlocks(c *container) (uint64, error) {
	lo, hi := blockKeyRange(c.id)
	it, err := c.vol.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, containerErr("load", c.id, err)
	}
	// Close returns the iteration's error, which it.Error() below already
	// returned: nothing more to report.
	defer func() { _ = it.Close() }()
	var used uint64
	for it.First(); it.Valid(); it.Next() {
		bid, _ := decodeBlockKey(it.Key())
		bd, err := decodeBlockRecord(it.Value())
		if err == nil && bd.ID != bid {
			err = fmt.Errorf("%w: record of block %d/%d stored under key of %d/%d", ErrCorrupt, bd.ID.Container, bd.ID.Local, bid.Container, bid.Local)
		}
		if err != nil {
			return used, blockErr("load", bid, err)
		}
		used += bd.Length
	}
	return used, it.Error()
}

// Close makes everything written durable and closes the engine.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return ErrClosed
	}
	// Logged writes too: a clean close leaves nothing to replay.
	e.commit.promoteLogged(nil)
	err := e.commit.sync(e.commit.current())
	e.files.closeAll()
	e.dirs.close()
	for _, v := range e.vols {
		if cerr := v.close(); err == nil {
			err = cerr
		}
	}
	return err
}

func (e *Engine) check() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.commit.failure()
}

// Sync makes durable every write, PutBlock and DeleteBlock that returned
// before Sync was called. Concurrent callers share sync rounds.
func (e *Engine) Sync() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.commit.sync(e.commit.current())
}

// SyncLogged makes durable every logged write (WriteLoggedChunk,
// ReplayLoggedChunk) that returned before it was called, and everything
// Sync would: the checkpoint a log runs before it forgets the entries
// holding those chunks' bytes. Concurrent callers share sync rounds.
func (e *Engine) SyncLogged() error {
	if e.closed.Load() {
		return ErrClosed
	}
	e.commit.promoteLogged(nil)
	return e.commit.sync(e.commit.current())
}

// SyncLoggedBlocks makes durable the logged writes to the blocks in ids
// that returned before it was called (one sync round for all of them, its
// fdatasyncs in parallel when slow), so that PutBlocks of those blocks
// that follow find their data durable. Other logged writes stay unsynced.
func (e *Engine) SyncLoggedBlocks(ids map[BlockID]struct{}) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if len(ids) == 0 {
		return nil
	}
	seq := e.commit.promoteLogged(func(id BlockID) bool { _, ok := ids[id]; return ok })
	return e.commit.sync(seq)
}

// LoggedFiles counts the block files holding logged writes that no sync
// has covered yet; each keeps its descriptor open until one does.
func (e *Engine) LoggedFiles() int { return e.commit.loggedFiles() }

// SyncStats reports the group commit's work so far.
func (e *Engine) SyncStats() CommitStats { return e.commit.stats() }

// Volumes returns the data directories in use.
func (e *Engine) Volumes() []string {
	out := make([]string, len(e.vols))
	for i, v := range e.vols {
		out[i] = v.dir
	}
	return out
}

func (e *Engine) lookup(id ContainerID) (*container, error) {
	e.mu.RLock()
	c := e.containers[id]
	e.mu.RUnlock()
	if c == nil {
		return nil, fmt.Errorf("%w: container %d", ErrNotFound, id)
	}
	return c, nil
}

// CreateContainer creates an OPEN container on the volume holding the fewest
// containers. It is durable when CreateContainer returns.
func (e *Engine) CreateContainer(id ContainerID) error {
	if err := e.check(); err != nil {
		return containerErr("create", id, err)
	}
	e.mu.Lock()
	if e.containers[id] != nil {
		e.mu.Unlock()
		return containerErr("create", id, ErrExists)
	}
	if _, ok := e.importing[id]; ok {
		e.mu.Unlock()
		return containerErr("create", id, fmt.Errorf("%w: being imported", ErrExists))
	}
	// The volume holding the fewest containers, among those with room
	// for a block file above their reserve.
	var v *volume
	for _, w := range e.vols {
		if (v == nil || w.containers < v.containers) && e.hasRoom(w, MinReservedBytes) {
			v = w
		}
	}
	if v == nil {
		e.mu.Unlock()
		return containerErr("create", id, fmt.Errorf("%w: no volume has room above its reserve", ErrVolumeFull))
	}
	c := newContainer(id, v)
	c.state, c.busy = StateOpen, "being created"
	c.maxSizeBytes, c.created = e.cfg.MaxContainerSizeBytes, uint64(time.Now().UnixMilli())
	e.containers[id] = c
	v.containers++
	e.mu.Unlock()

	err := e.createContainerOnDisk(c)
	if err != nil {
		e.mu.Lock()
		delete(e.containers, id)
		v.containers--
		e.mu.Unlock()
		return containerErr("create", id, err)
	}
	c.mu.Lock()
	c.busy = ""
	c.mu.Unlock()
	return nil
}

// createContainerOnDisk: directory first (and its entry synced), then the
// record with a synced Pebble commit. A crash in between leaves a directory
// without a record, which the next Open removes (sweepVolume); the record
// never exists without its directory.
func (e *Engine) createContainerOnDisk(c *container) error {
	if err := e.fs.RemoveAll(c.dir); err != nil { // leftovers of a crashed create
		return err
	}
	if err := e.fs.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	// The hashed subdirectory is made by the first container that hashes
	// to it (volumes are formatted without them: 256 mkdirs and 512 stats
	// at start-up for nothing), so both entries are synced: the
	// container's in its subdirectory, the subdirectory's in containers/.
	if err := e.fs.SyncDir(filepath.Dir(c.dir)); err != nil {
		return e.commit.poison(err)
	}
	if err := e.fs.SyncDir(filepath.Dir(filepath.Dir(c.dir))); err != nil {
		return e.commit.poison(err)
	}
	if err := c.vol.db.Set(containerKey(c.id), encodeContainerRecord(c.record(StateOpen, c.bcsid)), pebble.Sync); err != nil {
		return e.commit.poison(err)
	}
	return nil
}

// record is c's container record with state s and BCSID bcsid. c.mu must
// be held (or c not yet shared).
func (c *container) record(s ContainerState, bcsid uint64) containerRecord {
	return containerRecord{ID: c.id, State: s, MaxSizeBytes: c.maxSizeBytes, CreatedUnixMs: c.created, BCSID: bcsid}
}

// persistStateLocked writes c's state durably (with its BCSID: the record
// always carries the latest). c.mu must be held.
func (e *Engine) persistStateLocked(c *container, s ContainerState) error {
	if err := c.vol.writable(); err != nil {
		return containerErr("persist state", c.id, err)
	}
	if err := c.vol.db.Set(containerKey(c.id), encodeContainerRecord(c.record(s, c.bcsid)), pebble.Sync); err != nil {
		return containerErr("persist state", c.id, e.commit.poison(err))
	}
	c.state = s
	return nil
}

// MarkUnhealthy marks a container UNHEALTHY (durably) for reason: its
// replica here can no longer be trusted to hold what its pipeline
// committed (a write or an apply that failed on this replica only). It
// refuses every write and put from then on; reads of committed blocks
// still work, and the meta service has it copied elsewhere and deleted
// here. Marking an UNHEALTHY or DELETING container is a no-op.
func (e *Engine) MarkUnhealthy(id ContainerID, reason string) error {
	c, err := e.lookup(id)
	if err != nil {
		return containerErr("mark unhealthy", id, err)
	}
	return e.setUnhealthy(c, reason)
}

func (e *Engine) setUnhealthy(c *container, reason string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return e.markUnhealthyLocked(c, reason)
}

func (e *Engine) markUnhealthyLocked(c *container, reason string) error {
	if c.state == StateUnhealthy || c.state == StateDeleting {
		return nil
	}
	e.log.Error("engine: container marked UNHEALTHY", "container", c.id, "reason", reason)
	c.reason = reason
	c.blocks = make(map[uint64]*blockState)
	if c.vol.readOnly != nil {
		// Not stored: the volume takes no write. UNHEALTHY until the
		// restart, which finds the damage again.
		c.state = StateUnhealthy
		return nil
	}
	return e.persistStateLocked(c, StateUnhealthy)
}

// CloseContainer makes every write to the container durable and moves it to
// CLOSED. Chunks written after their block's last PutBlock are not part of
// the closed container. Closing a CLOSED container is a no-op.
func (e *Engine) CloseContainer(id ContainerID) error {
	if err := e.check(); err != nil {
		return containerErr("close", id, err)
	}
	c, err := e.lookup(id)
	if err != nil {
		return containerErr("close", id, err)
	}
	c.mu.Lock()
	if c.state == StateClosed && c.busy == "" {
		c.mu.Unlock()
		return nil
	}
	if err := c.writableLocked(); err != nil {
		c.mu.Unlock()
		return containerErr("close", id, err)
	}
	c.busy = "being closed" // no more writes or puts from here on
	c.mu.Unlock()
	err = e.Sync()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.state != StateOpen {
		// Marked UNHEALTHY (by a read or a scan) while we synced: that
		// verdict stands; a damaged container is not closed as healthy.
		err = fmt.Errorf("%w: became %s while closing", ErrNotOpen, c.state)
	}
	if err == nil {
		err = e.persistStateLocked(c, StateClosed)
	}
	c.busy = ""
	if err != nil {
		return containerErr("close", id, err) // still OPEN, in memory as on disk
	}
	for local, bs := range c.blocks {
		c.usedBytes -= bs.nextOffset - bs.committedLen
		delete(c.blocks, local)
	}
	return nil
}

// DeleteContainer removes a container and all its blocks. An OPEN container
// with blocks is deleted only with force.
func (e *Engine) DeleteContainer(id ContainerID, force bool) error {
	if err := e.check(); err != nil {
		return containerErr("delete", id, err)
	}
	c, err := e.lookup(id)
	if err != nil {
		return containerErr("delete", id, err)
	}
	c.mu.Lock()
	if c.busy != "" {
		b := c.busy
		c.mu.Unlock()
		return containerErr("delete", id, fmt.Errorf("%w: %s", ErrNotOpen, b))
	}
	if c.state == StateOpen && c.usedBytes > 0 && !force {
		c.mu.Unlock()
		return containerErr("delete", id, fmt.Errorf("%w: OPEN container holds %d bytes; force to delete", ErrInvalid, c.usedBytes))
	}
	err = e.persistStateLocked(c, StateDeleting)
	c.blocks = make(map[uint64]*blockState)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return e.finishDelete(c)
}

// finishDelete removes a DELETING container: files, directory, then its
// records. Each step is idempotent, so recovery repeats it after a crash.
func (e *Engine) finishDelete(c *container) error {
	if err := c.vol.writable(); err != nil {
		return containerErr("delete", c.id, err)
	}
	e.files.dropContainer(c.id)
	e.records.dropContainer(c.id)
	e.dirs.drop(c.dir)
	e.commit.forgetDir(c.dir)
	if err := e.fs.RemoveAll(c.dir); err != nil {
		return containerErr("delete", c.id, err)
	}
	if err := e.fs.SyncDir(filepath.Dir(c.dir)); err != nil {
		return containerErr("delete", c.id, e.commit.poison(err))
	}
	b := c.vol.db.NewBatch()
	lo, hi := blockKeyRange(c.id)
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return containerErr("delete", c.id, err)
	}
	for _, prefix := range []byte{keyPrefixDamage, keyPrefixGone} {
		mlo, mhi := markKeyRange(prefix, c.id)
		if err := b.DeleteRange(mlo, mhi, nil); err != nil {
			return containerErr("delete", c.id, err)
		}
	}
	if err := b.Delete(containerKey(c.id), nil); err != nil {
		return containerErr("delete", c.id, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return containerErr("delete", c.id, e.commit.poison(err))
	}
	e.mu.Lock()
	if e.containers[c.id] == c {
		delete(e.containers, c.id)
		c.vol.containers--
	}
	e.mu.Unlock()
	return nil
}

func (c *container) infoLocked() ContainerInfo {
	info := ContainerInfo{ID: c.id, State: c.state, Volume: c.vol.dir, Dir: c.dir,
		MaxSizeBytes: c.maxSizeBytes, UsedBytes: c.usedBytes, Reason: c.reason, BCSID: c.bcsid}
	if len(c.damaged) > 0 {
		info.DamagedBlocks = slices.Sorted(maps.Keys(c.damaged))
	}
	return info
}

// Container returns a snapshot of container id.
func (e *Engine) Container(id ContainerID) (ContainerInfo, error) {
	c, err := e.lookup(id)
	if err != nil {
		return ContainerInfo{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.infoLocked(), nil
}

// ListContainers returns every container, by ID.
func (e *Engine) ListContainers() []ContainerInfo {
	e.mu.RLock()
	cs := make([]*container, 0, len(e.containers))
	for _, c := range e.containers {
		cs = append(cs, c)
	}
	e.mu.RUnlock()
	out := make([]ContainerInfo, 0, len(cs))
	for _, c := range cs {
		c.mu.Lock()
		if c.busy != "being created" {
			out = append(out, c.infoLocked())
		}
		c.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// blockStateLocked returns the write state of block local, building it from
// the committed record if there is one. c.mu must be held.
func (e *Engine) blockStateLocked(c *container, local uint64) (*blockState, error) {
	if bs := c.blocks[local]; bs != nil {
		return bs, nil
	}
	if _, ok := c.deleting[local]; ok {
		return nil, fmt.Errorf("%w: block %d is being deleted", ErrNotFound, local)
	}
	bs := &blockState{}
	bd, err := e.loadBlock(c, BlockID{Container: c.id, Local: local})
	switch {
	case err == nil:
		bs.committedLen, bs.nextOffset = bd.Length, bd.Length
		if len(bd.Chunks) > 0 {
			bs.bpc = bd.BytesPerChecksum
		}
	case errors.Is(err, ErrNotFound):
	default:
		return nil, err
	}
	c.blocks[local] = bs
	return bs, nil
}

// loadBlock returns block b's committed record (cached, shared: callers must
// not modify it).
func (e *Engine) loadBlock(c *container, b BlockID) (*BlockData, error) {
	if bd := e.records.get(b); bd != nil {
		return bd, nil
	}
	val, closer, err := c.vol.db.Get(blockKey(b))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("%w: block %d/%d", ErrNotFound, b.Container, b.Local)
	}
	if err != nil {
		return nil, err
	}
	bd, derr := decodeBlockRecord(val)
	_ = closer.Close() // releases val; a Get's closer has no error
	if derr == nil && bd.ID != b {
		derr = fmt.Errorf("%w: record of block %d/%d stored under key of %d/%d", ErrCorrupt, bd.ID.Container, bd.ID.Local, b.Container, b.Local)
	}
	if derr != nil {
		return nil, derr
	}
	e.records.put(bd)
	return bd, nil
}

func (e *Engine) blockPath(c *container, local uint64) string {
	return filepath.Join(c.dir, blockFileName(local))
}

// WriteChunk verifies data against checksums (CRC32C of every
// bytesPerChecksum piece) and writes it at offset of block b with one
// pwrite into the block's cached open file. The write is durable after the
// next Sync. Chunks are appended contiguously: offset must be the end of the
// block's written data, or the offset of an identical earlier chunk (a
// replay, which succeeds without writing). Nothing changes on error.
func (e *Engine) WriteChunk(b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, checksums []uint32) error {
	return e.writeChunk(b, offset, data, bytesPerChecksum, checksums, writeNew)
}

// WriteVerifiedChunk is WriteChunk for bytes the caller has verified
// against checksums itself (VerifyPieces found no bad piece) and has not
// changed since: the engine does not compute their CRC32C a second time.
// Everything else (the arguments' shape, the block's state, the room) is
// checked as by WriteChunk. A pipeline leader verifies a client's chunk
// when it arrives, before proposing it, and writes it with this: one
// CRC32C pass per chunk on the leader, not two.
func (e *Engine) WriteVerifiedChunk(b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, checksums []uint32) error {
	return e.writeChunk(b, offset, data, bytesPerChecksum, checksums, writeVerified)
}

// WriteLoggedChunk is WriteChunk (WriteVerifiedChunk when verified) for a
// chunk whose bytes a durable log also holds (a pipeline's small chunk
// carried in its raft entry): the write is not made durable by Sync, only
// by SyncLogged, by SyncLoggedBlocks naming its block, by a PutBlock
// covering it (which syncs its file before committing the record) or by
// Close. Reads see it at once. The caller keeps the log's copy until one of
// those returned (or replays it with ReplayLoggedChunk after a restart).
func (e *Engine) WriteLoggedChunk(b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, checksums []uint32, verified bool) error {
	mode := writeNew
	if verified {
		mode = writeVerified
	}
	return e.writeChunk(b, offset, data, bytesPerChecksum, checksums, mode|writeLogged)
}

// WriteReplicatedChunk is WriteChunk for a chunk a pipeline's log holds
// (WriteVerifiedChunk when verified, WriteLoggedChunk when logged) with
// one difference: the container's maximum size is not checked. Its log's
// leader decided there is room (CheckRoom) before proposing it, and every
// replica stores what the log says; the volume's free space is still
// checked (a full disk is this replica's failure, not the log's).
func (e *Engine) WriteReplicatedChunk(b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, checksums []uint32, verified, logged bool) error {
	mode := writeNew
	if verified {
		mode = writeVerified
	}
	if logged {
		mode |= writeLogged
	}
	return e.writeChunk(b, offset, data, bytesPerChecksum, checksums, mode|writeAnyRoom)
}

// ReplayLoggedChunk writes again, after a restart, a chunk a log holds with
// its bytes (WriteLoggedChunk before the restart): whatever survived of the
// first write is overwritten with the log's bytes (verified here), as a
// logged write. It differs from WriteLoggedChunk in one way: a block file
// left holding bytes is not truncated when the block's first chunk is
// replayed, since later chunks of the block, made durable before the
// restart, may be in it (they are adopted next). An identical chunk
// already known (committed by a PutBlock, or replayed already) is a
// replay that writes nothing.
func (e *Engine) ReplayLoggedChunk(b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, checksums []uint32) error {
	return e.writeChunk(b, offset, data, bytesPerChecksum, checksums, writeReplay|writeLogged)
}

// writeMode says where a writeChunk's bytes come from, and (writeLogged)
// how they are made durable.
type writeMode uint8

const (
	writeNew      writeMode = iota // a client's bytes: verified here
	writeVerified                  // a client's bytes the caller verified
	writeAdopt                     // bytes read back from the block file: verified here, not admitted or written anew
	writeReplay                    // bytes from a log, after a restart: verified here, not admitted, a leftover file kept
	// writeLogged (a flag on the modes above): a durable log holds the
	// bytes; their file is synced when promoted, not by Sync.
	writeLogged writeMode = 0x80
	// writeAnyRoom (a flag): the container's maximum size is not checked
	// (a replicated chunk: its log's leader decided, CheckRoom). Adopted
	// and replayed chunks are never checked either: they were written.
	writeAnyRoom writeMode = 0x40
)

// AdoptChunk registers a chunk whose bytes are already in the block file at
// offset: written (and made durable) before a restart by a WriteChunk that a
// replicated log still holds, but past the block's last PutBlock, so the
// engine's recovery did not see it (it rebuilds a block from its record).
// The bytes are read back and verified against checksums; the chunk is then
// pending exactly as if WriteChunk had just written it (the bytes are written
// again, unchanged, and covered by the next Sync). A chunk already known
// (an identical one at offset) is accepted as a replay; a chunk whose bytes
// are missing or do not match is an error and changes nothing.
func (e *Engine) AdoptChunk(b BlockID, offset, length uint64, bytesPerChecksum uint32, checksums []uint32) error {
	if err := e.check(); err != nil {
		return blockOffErr("adopt chunk", b, offset, err)
	}
	if err := checkChunkArgs(length, bytesPerChecksum, checksums); err != nil {
		return blockOffErr("adopt chunk", b, offset, err)
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return blockOffErr("adopt chunk", b, offset, err)
	}
	c.mu.Lock()
	bs, err := e.blockStateLocked(c, b.Local)
	if err == nil && offset < bs.nextOffset {
		err = e.replayLocked(c, b, bs, offset, length, checksums)
		c.mu.Unlock()
		if err != nil {
			return blockOffErr("adopt chunk", b, offset, err)
		}
		return nil
	}
	path := e.blockPath(c, b.Local)
	c.mu.Unlock()
	if err != nil {
		return blockOffErr("adopt chunk", b, offset, err)
	}
	bf, _, err := e.files.acquire(b, path, false)
	if err != nil {
		return blockOffErr("adopt chunk", b, offset, fmt.Errorf("%w: block file: %v", ErrNotFound, err))
	}
	if err := bf.flushWriteBehind(false, false); err != nil {
		bf.release()
		return blockOffErr("adopt chunk", b, offset, err)
	}
	data := make([]byte, length)
	n, rerr := bf.f.ReadAt(data, int64(offset))
	bf.release()
	if uint64(n) != length {
		return blockOffErr("adopt chunk", b, offset, fmt.Errorf("%w: only %d of %d bytes in the file (%v)", ErrNotFound, n, length, rerr))
	}
	return e.writeChunk(b, offset, data, bytesPerChecksum, checksums, writeAdopt)
}

// CheckWrite answers, without the chunk's bytes, what WriteReplicatedChunk
// of this chunk would do now: stored is true when an identical chunk is
// already at offset (it would accept it as a replay without writing); err
// is the refusal it would return for a reason that does not depend on the
// bytes (an invalid request, a container not OPEN or not found, a hole, an
// overlap, a broken block; not the container's room, which is its log
// leader's decision); (false, nil) means it would write it. A pipeline
// follower asks it for a replicated chunk whose bytes its leader could not
// send (see pipeline's writeMissing). Nothing is written; like a
// WriteChunk, it may load the block's state into memory.
func (e *Engine) CheckWrite(b BlockID, offset, length uint64, bytesPerChecksum uint32, checksums []uint32) (stored bool, err error) {
	if err := e.check(); err != nil {
		return false, blockOffErr("check write", b, offset, err)
	}
	if err := checkChunkArgs(length, bytesPerChecksum, checksums); err != nil {
		return false, blockOffErr("check write", b, offset, err)
	}
	c, err := e.lookup(b.Container)
	if err != nil {
		return false, blockOffErr("check write", b, offset, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.writableLocked(); err != nil {
		return false, blockOffErr("check write", b, offset, err)
	}
	bs, err := e.blockStateLocked(c, b.Local)
	if err != nil {
		return false, blockOffErr("check write", b, offset, err)
	}
	if bs.broken != nil {
		return false, blockOffErr("check write", b, offset, bs.broken)
	}
	if bs.bpc != 0 && bs.bpc != bytesPerChecksum {
		return false, blockOffErr("check write", b, offset, fmt.Errorf("%w: bytes per checksum %d, block uses %d", ErrInvalid, bytesPerChecksum, bs.bpc))
	}
	if offset != bs.nextOffset {
		if err := e.replayLocked(c, b, bs, offset, length, checksums); err != nil {
			return false, blockOffErr("check write", b, offset, err)
		}
		return true, nil
	}
	return false, nil
}

// CheckRoom says whether a chunk of length bytes may go to container id
// now: ErrNotOpen for a CLOSED one (a chunk the log would refuse on every
// replica: proposed, it would reach a follower caught up later without
// its bytes, which the leader never stored, and fail it), ErrContainerFull
// if it does not fit, nil for a container not here (a pipeline's first
// write creates it). A pipeline's leader asks it before it proposes a
// chunk, and is the only one to decide the room: its replicas write what
// the log says (WriteReplicatedChunk), their counts of the container's
// bytes can differ (chunks never committed are forgotten at a restart),
// and one refusing a chunk the others store would acknowledge an entry it
// does not hold. Chunks in flight are not counted: a container can pass
// its maximum by what a pipeline has in flight (its leader's budget).
func (e *Engine) CheckRoom(id ContainerID, length uint64) error {
	c, err := e.lookup(id)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == StateClosed {
		return containerErr("check room", id, fmt.Errorf("%w: state %s", ErrNotOpen, c.state))
	}
	if c.usedBytes+length > c.maxSizeBytes {
		return containerErr("check room", id, fmt.Errorf("%w: %d bytes used + %d > max %d", ErrContainerFull, c.usedBytes, length, c.maxSizeBytes))
	}
	return nil
}

func (e *Engine) writeChunk(b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, checksums []uint32, mode writeMode) error {
	if err := e.check(); err != nil {
		return blockOffErr("write chunk", b, offset, err)
	}
	if err := checkChunkArgs(uint64(len(data)), bytesPerChecksum, checksums); err != nil {
		return blockOffErr("write chunk", b, offset, err)
	}
	logged, anyRoom := mode&writeLogged != 0, mode&writeAnyRoom != 0
	mode &^= writeLogged | writeAnyRoom
	if mode != writeVerified {
		if bad := VerifyPieces(data, checksums, bytesPerChecksum); bad >= 0 {
			return blockOffErr("write chunk", b, offset+uint64(bad)*uint64(bytesPerChecksum), ErrChecksumMismatch)
		}
	}
	adopt := mode == writeAdopt || mode == writeReplay
	anyRoom = anyRoom || adopt
	c, err := e.lookup(b.Container)
	if err != nil {
		return blockOffErr("write chunk", b, offset, err)
	}
	length := uint64(len(data))
	if !adopt {
		// (an adopted chunk's bytes are on the disk already)
		if err := e.admitWrite(c.vol, length); err != nil {
			return blockOffErr("write chunk", b, offset, err)
		}
	}

	c.mu.Lock()
	if err := c.writableLocked(); err != nil {
		c.mu.Unlock()
		return blockOffErr("write chunk", b, offset, err)
	}
	bs, err := e.blockStateLocked(c, b.Local)
	if err != nil {
		c.mu.Unlock()
		return blockOffErr("write chunk", b, offset, err)
	}
	if bs.broken != nil {
		c.mu.Unlock()
		return blockOffErr("write chunk", b, offset, bs.broken)
	}
	if bs.bpc != 0 && bs.bpc != bytesPerChecksum {
		c.mu.Unlock()
		return blockOffErr("write chunk", b, offset, fmt.Errorf("%w: bytes per checksum %d, block uses %d", ErrInvalid, bytesPerChecksum, bs.bpc))
	}
	if offset != bs.nextOffset {
		err := e.replayLocked(c, b, bs, offset, length, checksums)
		c.mu.Unlock()
		if err != nil {
			return blockOffErr("write chunk", b, offset, err)
		}
		return nil
	}
	if !anyRoom && c.usedBytes+length > c.maxSizeBytes {
		used, max := c.usedBytes, c.maxSizeBytes
		c.mu.Unlock()
		return blockOffErr("write chunk", b, offset, fmt.Errorf("%w: %d bytes used + %d > max %d", ErrContainerFull, used, length, max))
	}
	newBlockFile := bs.nextOffset == 0
	// The path is built only when the file is not open already (most
	// chunks of a block find it in the cache).
	bf, created := e.files.cached(b), false
	if bf == nil {
		bf, created, err = e.files.acquire(b, e.blockPath(c, b.Local), newBlockFile)
	}
	if err != nil {
		c.mu.Unlock()
		return blockOffErr("write chunk", b, offset, err)
	}
	if newBlockFile && !created && !adopt {
		// A file left by a write that was never committed (a crash before
		// PutBlock, or a failed write): its bytes mean nothing.
		if err := bf.f.Truncate(0); err != nil {
			c.mu.Unlock()
			bf.release()
			return blockOffErr("write chunk", b, offset, err)
		}
	}
	bs.addPending(offset, length, checksums, logged)
	bs.nextOffset += length
	bs.bpc = bytesPerChecksum
	c.usedBytes += length
	c.mu.Unlock()
	if created {
		e.commit.markDir(c.dir)
	}

	var werr error
	if logged {
		werr = bf.writeLogged(data, int64(offset))
	} else {
		_, werr = bf.f.WriteAt(data, int64(offset))
	}
	var seq uint64
	if werr == nil {
		if logged {
			e.commit.markLogged(bf)
		} else {
			seq = e.commit.markFile(bf)
		}
	}
	bf.release()

	c.mu.Lock()
	defer c.mu.Unlock()
	// PutBlock cannot have committed past this chunk (it is not done), but
	// it may have committed earlier chunks meanwhile, which moves this
	// chunk's entry down the pending list: find it by its offset. The
	// block's state is gone if the block was deleted or the container
	// closed, marked UNHEALTHY or deleted during the pwrite.
	idx := -1
	if cur := c.blocks[b.Local]; cur == bs {
		for j := len(bs.pending) - 1; j >= 0; j-- {
			if bs.pending[j].offset == offset {
				idx = j
				break
			}
		}
	}
	if idx < 0 {
		if werr != nil {
			return blockOffErr("write chunk", b, offset, werr)
		}
		// The container was closed, marked UNHEALTHY or deleted, or the
		// block deleted, while the bytes went to the file: they belong
		// to nothing now, so the write did not happen.
		return blockOffErr("write chunk", b, offset, fmt.Errorf("%w: container or block changed during the write", ErrNotOpen))
	}
	if werr != nil {
		bs.broken = fmt.Errorf("earlier write at offset %d failed: %w", offset, werr)
		return blockOffErr("write chunk", b, offset, werr)
	}
	bs.pending[idx].done = true
	bs.pending[idx].seq = seq
	return nil
}

func checkChunkArgs(length uint64, bpc uint32, checksums []uint32) error {
	if length == 0 {
		return fmt.Errorf("%w: empty chunk", ErrInvalid)
	}
	if length > MaxChunkSizeBytes {
		return fmt.Errorf("%w: chunk of %d bytes exceeds %d", ErrInvalid, length, MaxChunkSizeBytes)
	}
	if err := validBytesPerChecksum(bpc); err != nil {
		return err
	}
	if want := PieceCount(length, bpc); len(checksums) != want {
		return fmt.Errorf("%w: %d checksums for %d bytes at %d bytes per checksum, want %d", ErrInvalid, len(checksums), length, bpc, want)
	}
	return nil
}

// replayLocked accepts a write at an offset before the end of the block when
// it is an identical replay of one chunk already written.
func (e *Engine) replayLocked(c *container, b BlockID, bs *blockState, offset, length uint64, sums []uint32) error {
	if offset > bs.nextOffset {
		return fmt.Errorf("%w: block has %d bytes", ErrHole, bs.nextOffset)
	}
	var have *ChunkInfo
	if offset >= bs.committedLen {
		for i := range bs.pending {
			if bs.pending[i].offset == offset {
				if !bs.pending[i].done {
					return fmt.Errorf("%w: the same chunk is being written", ErrOverlap)
				}
				ci := bs.pendingInfo(i)
				have = &ci
				break
			}
		}
	} else {
		bd, err := e.loadBlock(c, b)
		if err != nil {
			return err
		}
		if i := findChunk(bd.Chunks, offset); i >= 0 && bd.Chunks[i].Offset == offset {
			have = &bd.Chunks[i]
		}
	}
	if have == nil || have.Length != length || !slices.Equal(have.Checksums, sums) {
		return fmt.Errorf("%w: block has %d bytes", ErrOverlap, bs.nextOffset)
	}
	return nil
}

// findChunk returns the index of the chunk holding offset, or -1.
func findChunk(chunks []ChunkInfo, offset uint64) int {
	i := sort.Search(len(chunks), func(i int) bool { return chunks[i].Offset+chunks[i].Length > offset })
	if i < len(chunks) && chunks[i].Offset <= offset {
		return i
	}
	return -1
}

// CheckChunkArgs reports whether a chunk write of length bytes with these
// checksums is well-formed (ErrInvalid otherwise), as WriteChunk checks it
// first: what can be refused from a request's header alone, before its
// bytes are read.
func CheckChunkArgs(length uint64, bytesPerChecksum uint32, checksums []uint32) error {
	return checkChunkArgs(length, bytesPerChecksum, checksums)
}
