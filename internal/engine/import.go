package engine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/vfs"
)

// ImportBufferBytes is the size of an Importer's one copy buffer (rounded
// down to a multiple of a block's bytes per checksum, and raised to one
// piece when a piece is larger): the memory of an import, whatever the size
// of the container or of its blocks.
const ImportBufferBytes = 1 << 20

// importDirPrefix starts the name of every staging directory in a volume's
// tmp/ directory: tmp/import-<cid>-<16 hex digits>.
const importDirPrefix = "import-"

// Importer builds a CLOSED container from a stream of blocks (the target of
// a re-replication) in a staging directory of one volume, and makes it
// visible atomically and durably at Commit: after a crash at any point the
// container is either absent (no directory, no records) or present with
// every block verified. See ImportContainer.
//
// An Importer is used by one goroutine at a time. Between ImportContainer
// and Commit or Abort the container ID is reserved: CreateContainer and a
// second ImportContainer of it fail with ErrExists. Close the engine only
// after every Importer has committed or aborted.
type Importer struct {
	e            *Engine
	id           ContainerID
	vol          *volume
	staging      string
	maxSizeBytes uint64
	created      uint64
	bcsid        uint64

	buf     []byte
	records []importedBlock // in local ID order
	bytes   uint64
	blocks  int

	err       error // sticky: the importer failed and must be aborted
	committed bool
	released  bool // the reservation of the ID is given back (Commit or Abort)
	removed   bool // the staging directory is gone (Commit's rename or Abort)

	// hookBeforeMetaCommit, when set (tests only), runs just before the
	// Pebble commit that is the import's commit point.
	hookBeforeMetaCommit func()
}

// importedBlock is one block added to an import: its encoded record, and
// whether it has a file (a block of length 0 has none).
type importedBlock struct {
	local   uint64
	record  []byte
	hasFile bool
}

// ImportContainer starts building container id, in state CLOSED, in a
// staging directory <volume>/tmp/import-<id>-<random> on the volume with
// the fewest containers (the first of them on a tie). It fails with
// ErrExists when the engine has the container (in any state) or an import
// of it is in progress. maxSizeBytes bounds the container (0: the engine's
// MaxContainerSizeBytes); bcsid is its block commit sequence ID (the
// source's ContainerInfo.BCSID), which the imported container keeps.
func (e *Engine) ImportContainer(id ContainerID, maxSizeBytes, bcsid uint64) (*Importer, error) {
	if err := e.check(); err != nil {
		return nil, containerErr("import", id, err)
	}
	if maxSizeBytes == 0 {
		maxSizeBytes = e.cfg.MaxContainerSizeBytes
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, containerErr("import", id, err)
	}
	e.mu.Lock()
	if e.containers[id] != nil {
		e.mu.Unlock()
		return nil, containerErr("import", id, ErrExists)
	}
	if _, ok := e.importing[id]; ok {
		e.mu.Unlock()
		return nil, containerErr("import", id, fmt.Errorf("%w: an import of it is in progress", ErrExists))
	}
	var v *volume
	for _, w := range e.vols {
		if !w.failed.Load() && (v == nil || w.containers < v.containers) {
			v = w
		}
	}
	if v == nil {
		e.mu.Unlock()
		return nil, containerErr("import", id, fmt.Errorf("%w: every volume failed", ErrFailed))
	}
	e.importing[id] = struct{}{}
	v.containers++ // counted from now on, so that parallel imports spread
	e.mu.Unlock()

	im := &Importer{
		e:            e,
		id:           id,
		vol:          v,
		staging:      filepath.Join(v.dir, volumeTmpDir, fmt.Sprintf("%s%d-%s", importDirPrefix, uint64(id), hex.EncodeToString(suffix[:]))),
		maxSizeBytes: maxSizeBytes,
		created:      uint64(time.Now().UnixMilli()),
		bcsid:        bcsid,
		buf:          make([]byte, ImportBufferBytes),
	}
	// tmp/ is made durable once (later imports find it: one stat); the
	// staging directory's own entry need not be, Commit renames it away.
	err := vfs.MkdirAllDurable(e.fs, filepath.Join(v.dir, volumeTmpDir))
	if err == nil {
		err = e.fs.MkdirAll(im.staging, 0o755)
	}
	if err != nil {
		im.release()
		_ = e.fs.RemoveAll(im.staging)
		return nil, containerErr("import", id, err)
	}
	return im, nil
}

// Bytes returns the block bytes added so far.
func (im *Importer) Bytes() uint64 { return im.bytes }

// Blocks returns the number of blocks added so far.
func (im *Importer) Blocks() int { return im.blocks }

// Volume returns the data directory the container is being built on.
func (im *Importer) Volume() string { return im.vol.dir }

// AddBlock reads exactly bd.Length bytes from r into the block's file in
// the staging directory, verifying every BytesPerChecksum piece against
// bd's checksums as it reads, before it writes it. bd is validated as
// PutBlock validates it; it must belong to the container, local IDs must
// ascend strictly from call to call, and the block must fit in what remains
// of the container's maximum size (else ErrContainerFull). A checksum
// mismatch is an error wrapping ErrCorrupt naming container, block and
// offset; a stream that ends early wraps io.ErrUnexpectedEOF. After any
// error the importer is failed: every later call returns that error, and
// the caller must Abort.
func (im *Importer) AddBlock(bd *BlockData, r io.Reader) error {
	if im.err != nil {
		return im.err
	}
	if im.released {
		return containerErr("import", im.id, fmt.Errorf("%w: import already committed", ErrInvalid))
	}
	if err := im.addBlock(bd, r); err != nil {
		im.err = err
		return err
	}
	return nil
}

func (im *Importer) addBlock(bd *BlockData, r io.Reader) error {
	b := bd.ID
	if err := im.e.check(); err != nil {
		return blockErr("import", b, err)
	}
	if b.Container != im.id {
		return blockErr("import", b, fmt.Errorf("%w: block of container %d in the import of container %d", ErrInvalid, b.Container, im.id))
	}
	if err := validateBlockData(bd); err != nil {
		return blockErr("import", b, err)
	}
	if im.blocks > 0 && b.Local <= im.records[len(im.records)-1].local {
		return blockErr("import", b, fmt.Errorf("%w: local IDs must ascend: %d after %d", ErrInvalid, b.Local, im.records[len(im.records)-1].local))
	}
	if bd.Length > im.maxSizeBytes-im.bytes {
		return blockErr("import", b, fmt.Errorf("%w: %d bytes imported + %d > max %d", ErrContainerFull, im.bytes, bd.Length, im.maxSizeBytes))
	}
	if bd.Length > 0 {
		f, err := im.e.fs.Create(filepath.Join(im.staging, blockFileName(b.Local)))
		if err != nil {
			return blockErr("import", b, err)
		}
		err = im.copyBlock(bd, r, f)
		if cerr := f.Close(); err == nil && cerr != nil {
			err = blockErr("import", b, cerr)
		}
		if err != nil {
			return err
		}
	}
	im.records = append(im.records, importedBlock{local: b.Local, record: encodeBlockRecord(bd), hasFile: bd.Length > 0})
	im.bytes += bd.Length
	im.blocks++
	return nil
}

// copyBlock copies bd.Length bytes from r to f through the importer's
// buffer: each round reads as many whole checksum pieces as fit (pieces
// start at each chunk's first byte, so a round ends at a piece boundary),
// verifies them, then writes them with one pwrite.
func (im *Importer) copyBlock(bd *BlockData, r io.Reader, f vfs.File) error {
	bpc := uint64(bd.BytesPerChecksum)
	if uint64(len(im.buf)) < bpc {
		im.buf = make([]byte, bpc) // a piece larger than the buffer: one piece per round
	}
	room := uint64(len(im.buf)) / bpc * bpc
	ci, co := 0, uint64(0) // next byte to read: chunk index, offset in that chunk
	var pos uint64         // next byte to read: offset in the block
	for pos < bd.Length {
		// Plan the round: whole chunk tails, then whole pieces of the
		// chunk that does not fit.
		endCi, endCo, span := ci, co, uint64(0)
		for endCi < len(bd.Chunks) {
			rest := bd.Chunks[endCi].Length - endCo
			if span+rest <= room {
				span += rest
				endCi, endCo = endCi+1, 0
				continue
			}
			take := (room - span) / bpc * bpc
			span += take
			endCo += take
			break
		}
		buf := im.buf[:span]
		if n, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = fmt.Errorf("%w: stream ended after %d of %d bytes", io.ErrUnexpectedEOF, pos+uint64(n), bd.Length)
			}
			return blockOffErr("import", bd.ID, pos+uint64(n), err)
		}
		for at := uint64(0); at < span; {
			ch := &bd.Chunks[ci]
			n := min(ch.Length-co, span-at)
			if bad := VerifyPieces(buf[at:at+n], ch.Checksums[co/bpc:], bd.BytesPerChecksum); bad >= 0 {
				off := ch.Offset + co + uint64(bad)*bpc
				return blockOffErr("import", bd.ID, off, fmt.Errorf("%w: checksum mismatch in the %d bytes at offset %d", ErrCorrupt, min(bpc, ch.Offset+ch.Length-off), off))
			}
			at += n
			if co += n; co == ch.Length {
				ci, co = ci+1, 0
			}
		}
		if _, err := f.WriteAt(buf, int64(pos)); err != nil {
			return blockOffErr("import", bd.ID, pos, err)
		}
		pos += span
	}
	return nil
}

// Commit makes the container visible, atomically and durably:
//
//  1. fdatasync every block file (up to Config.SyncWorkers in parallel);
//  2. fsync the staging directory (the block files' names);
//  3. make the container's hashed parent directory, fsync containers/;
//  4. rename the staging directory to the container's directory (removing a
//     leftover directory of that name first), fsync both parents;
//  5. one synced Pebble batch: the CLOSED container record (with the BCSID
//     given to ImportContainer) and every block record. This is the commit
//     point;
//  6. insert the container in the engine's map: ListContainers, GetBlock and
//     ReadChunk see it.
//
// A failure before step 5 leaves the container absent (the engine is failed
// when a sync of a shared directory failed); the caller must Abort. Open
// removes whatever a crash left before step 5 (docs/CRASH_SAFETY.md,
// "Container import").
func (im *Importer) Commit() error {
	if im.err != nil {
		return im.err
	}
	if im.committed {
		return nil
	}
	if im.released {
		return containerErr("import", im.id, fmt.Errorf("%w: import aborted", ErrInvalid))
	}
	if err := im.commit(); err != nil {
		im.err = containerErr("import commit", im.id, err)
		return im.err
	}
	return nil
}

func (im *Importer) commit() error {
	e, v := im.e, im.vol
	if err := e.check(); err != nil {
		return err
	}
	if err := im.syncFiles(); err != nil {
		return err
	}
	if err := e.fs.SyncDir(im.staging); err != nil {
		return err
	}
	final := v.containerDir(im.id)
	parent := filepath.Dir(final)
	if err := e.fs.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	// Always, not only when MkdirAll made the parent: a concurrent
	// CreateContainer may have made it and not yet synced its entry.
	if err := e.fs.SyncDir(filepath.Dir(parent)); err != nil {
		return e.commit.poison(err)
	}
	// A directory without a record at the final name (a create that failed
	// in this process; Open sweeps those of a crash) belongs to nothing.
	if err := e.fs.RemoveAll(final); err != nil {
		return err
	}
	if err := e.fs.Rename(im.staging, final); err != nil {
		return err
	}
	im.removed = true
	// The rename is durable once both directories are synced; the Pebble
	// commit must not become durable before it.
	err := e.fs.SyncDir(parent)
	if err == nil {
		err = e.fs.SyncDir(filepath.Join(v.dir, volumeTmpDir))
	}
	if err != nil {
		perr := e.commit.poison(err)
		if rerr := e.fs.RemoveAll(final); rerr != nil {
			e.log.Error("engine: could not remove the directory of a failed import", "container", im.id, "dir", final, "err", rerr)
		}
		return perr
	}
	if im.hookBeforeMetaCommit != nil {
		im.hookBeforeMetaCommit()
	}
	batch := v.db.NewBatch()
	for i := range im.records {
		rb := &im.records[i]
		if err := batch.Set(blockKey(BlockID{Container: im.id, Local: rb.local}), rb.record, nil); err != nil {
			_ = batch.Close() // frees the batch; err is the error
			return err
		}
	}
	rec := containerRecord{ID: im.id, State: StateClosed, MaxSizeBytes: im.maxSizeBytes, CreatedUnixMs: im.created, BCSID: im.bcsid}
	if err := batch.Set(containerKey(im.id), encodeContainerRecord(rec), nil); err != nil {
		_ = batch.Close() // frees the batch; err is the error
		return err
	}
	err = batch.Commit(pebble.Sync)
	_ = batch.Close() // frees the batch; Commit's error is err
	if err != nil {
		// The batch may be durable or not: the directory stays, and Open
		// decides by the records (no record: the directory is swept).
		return e.commit.poison(err)
	}
	c := newContainer(im.id, v)
	c.state, c.maxSizeBytes, c.created, c.usedBytes, c.bcsid = StateClosed, im.maxSizeBytes, im.created, im.bytes, im.bcsid
	// Nothing of an earlier container of this ID may linger in the caches.
	e.files.dropContainer(im.id)
	e.records.dropContainer(im.id)
	e.mu.Lock()
	delete(e.importing, im.id)
	e.containers[im.id] = c
	e.mu.Unlock()
	im.released, im.committed = true, true
	im.records = nil
	return nil
}

// syncFiles fdatasyncs every block file of the staging directory, up to
// Config.SyncWorkers at a time.
func (im *Importer) syncFiles() error {
	var paths []string
	for i := range im.records {
		if im.records[i].hasFile {
			paths = append(paths, filepath.Join(im.staging, blockFileName(im.records[i].local)))
		}
	}
	return parallelEach(len(paths), im.e.cfg.SyncWorkers, func(i int) error { return syncFileData(im.e.fs, paths[i]) })
}

func syncFileData(fs vfs.FS, path string) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	err = f.SyncData()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Abort gives up the import: it removes the staging directory and releases
// the container ID. It is idempotent, and a no-op after a successful Commit.
func (im *Importer) Abort() error {
	if im.committed {
		return nil
	}
	if im.err == nil {
		im.err = containerErr("import", im.id, fmt.Errorf("%w: import aborted", ErrInvalid))
	}
	im.records = nil
	var err error
	if !im.removed {
		if err = im.e.fs.RemoveAll(im.staging); err == nil {
			im.removed = true
		}
	}
	im.release()
	if err != nil {
		return containerErr("import abort", im.id, err)
	}
	return nil
}

// release gives the container ID and the volume's count back, once.
func (im *Importer) release() {
	if im.released {
		return
	}
	im.released = true
	e := im.e
	e.mu.Lock()
	delete(e.importing, im.id)
	im.vol.containers--
	e.mu.Unlock()
}

// sweepVolume removes, at Open, what interrupted imports and creates left
// on v: every entry of tmp/ (staging directories), and every container
// directory that has no container record in v's store (an import that
// crashed between its rename and its Pebble commit, a create that crashed
// between its mkdir and its record). A directory of a container with a
// record, however damaged, is never removed. Names under containers/ that
// are not canonical decimal container IDs are left alone (and logged).
// Removals are made durable (parents synced) before Open returns.
func (e *Engine) sweepVolume(v *volume) error {
	tmp := filepath.Join(v.dir, volumeTmpDir)
	names, err := e.fs.List(tmp)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("engine: volume %s: sweep: %w", v.dir, err)
	}
	for _, n := range names {
		p := filepath.Join(tmp, n)
		e.log.Info("engine: removing the staging directory of an interrupted import", "path", p)
		if err := e.fs.RemoveAll(p); err != nil {
			return fmt.Errorf("engine: volume %s: sweep: %w", v.dir, err)
		}
	}
	if len(names) > 0 {
		if err := e.fs.SyncDir(tmp); err != nil {
			return fmt.Errorf("engine: volume %s: sweep: %w", v.dir, err)
		}
	}
	root := filepath.Join(v.dir, volumeContainerDir)
	subs, err := e.fs.List(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("engine: volume %s: sweep: %w", v.dir, err)
	}
	for _, sub := range subs {
		sd := filepath.Join(root, sub)
		names, err := e.fs.List(sd)
		if err != nil {
			e.log.Warn("engine: sweep: cannot list a containers subdirectory; left alone", "path", sd, "err", err)
			continue
		}
		removed := false
		for _, n := range names {
			p := filepath.Join(sd, n)
			id, perr := strconv.ParseUint(n, 10, 64)
			if perr != nil || strconv.FormatUint(id, 10) != n {
				e.log.Warn("engine: sweep: unknown entry under containers/ left alone", "path", p)
				continue
			}
			e.mu.RLock()
			c := e.containers[ContainerID(id)]
			e.mu.RUnlock()
			if c != nil && c.vol == v && c.dir == p {
				continue
			}
			e.log.Info("engine: removing a container directory without a container record (interrupted import or create)", "path", p)
			if err := e.fs.RemoveAll(p); err != nil {
				return fmt.Errorf("engine: volume %s: sweep: %w", v.dir, err)
			}
			removed = true
		}
		if removed {
			if err := e.fs.SyncDir(sd); err != nil {
				return fmt.Errorf("engine: volume %s: sweep: %w", v.dir, err)
			}
		}
	}
	return nil
}
