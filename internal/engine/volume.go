package engine

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/lograte"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Volume layout (one data directory, normally one disk):
//
//	<dir>/SPINDLE_VOLUME            identity record (see doc.go)
//	<dir>/LOCK                      flock held while an engine has the volume open
//	<dir>/meta/                     Pebble: container and block records
//	<dir>/containers/<xx>/<cid>/    one directory per container; xx = two hex digits
//	<dir>/containers/<xx>/<cid>/<local>.blk   one file per block (FILE_PER_BLOCK)
//	<dir>/tmp/import-<cid>-<random>/          staging directory of a container import
//	                                          (same layout as a container directory)
const (
	volumeIdentityFile = "SPINDLE_VOLUME"
	volumeLockFile     = "LOCK"
	volumeMetaDir      = "meta"
	volumeContainerDir = "containers"
	// volumeTmpDir holds the staging directories of container imports;
	// everything in it is removed at Open.
	volumeTmpDir = "tmp"
	// containerFanout is the number of hashed subdirectories containers are
	// spread over, so that no directory holds (and serialises creates in)
	// more than 1/256 of the containers of a volume.
	containerFanout = 256
)

// errForeignDir marks a data directory that holds files that are not a
// Spindle volume's: the engine refuses it rather than format over them.
var errForeignDir = errors.New("not a Spindle volume")

type volume struct {
	dir  string
	uuid [16]byte
	db   *pebble.DB
	lock io.Closer
	// containers counts the containers placed here; guarded by Engine.mu.
	containers int
	// space is the free-space estimate (space.go); its own lock.
	space volumeSpace
	// failed: the volume is out of use (volfail.go).
	failed atomic.Bool
	// readOnly: the volume was full at open (its metadata store is open
	// read-only; see fullAtOpen); fixed at open.
	readOnly *VolumeFailure
}

// pebbleOpenHeadroomBytes is the room the metadata store needs at open
// beyond the size of its write-ahead logs, which it flushes to tables
// then: a new WAL, MANIFEST and OPTIONS file and the tables' overhead.
const pebbleOpenHeadroomBytes = 4 << 20

// fullAtOpen says why the volume in dir has no room for its metadata store
// to open writable ("": it has): less free space than the store's logs to
// flush plus pebbleOpenHeadroomBytes. Opened writable on a full disk,
// Pebble retries the flush of its logs forever (each try a new table that
// fails with ENOSPC, an error logged each time) and its Open never returns.
func fullAtOpen(fs vfs.FS, dir string) string {
	u, err := fs.GetDiskUsage(dir)
	if err != nil {
		return "" // the open reports what is wrong
	}
	need := uint64(pebbleOpenHeadroomBytes)
	meta := filepath.Join(dir, volumeMetaDir)
	names, _ := fs.List(meta) // best effort: no list, no logs counted
	for _, n := range names {
		if filepath.Ext(n) != ".log" {
			continue
		}
		if fi, err := fs.Stat(filepath.Join(meta, n)); err == nil {
			need += uint64(fi.Size())
		}
	}
	if u.AvailBytes >= need {
		return ""
	}
	return fmt.Sprintf("full at start: %d bytes free, its metadata store needs %d to open writable; read-only until restarted with room", u.AvailBytes, need)
}

// writable refuses a write to a volume opened read-only.
func (v *volume) writable() error {
	if v.readOnly != nil {
		return fmt.Errorf("%w: volume %s is read-only: %s", ErrVolumeFull, v.dir, v.readOnly.Reason)
	}
	return nil
}

// openVolume opens (formatting on first use) the volume in dir.
func openVolume(fs vfs.FS, dir string, logger *slog.Logger) (*volume, error) {
	if err := vfs.MkdirAllDurable(fs, dir); err != nil {
		return nil, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	lockPath := filepath.Join(dir, volumeLockFile)
	_, statErr := fs.Stat(lockPath)
	lockExisted := statErr == nil
	lock, err := fs.Lock(lockPath)
	if err != nil {
		return nil, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	v := &volume{dir: dir, lock: lock}
	ok := false
	defer func() {
		if !ok {
			_ = v.close() // best effort: the open's error is returned
		}
	}()
	rec, err := readVolumeIdentity(fs, dir)
	if errors.Is(err, os.ErrNotExist) {
		rec, err = formatVolume(fs, dir, logger)
		if errors.Is(err, errForeignDir) && !lockExisted {
			// Leave someone else's directory as we found it.
			_ = v.close() // best effort, as the Remove: err is returned
			_ = fs.Remove(lockPath)
		}
	}
	if err != nil {
		return nil, err
	}
	v.uuid = rec.UUID
	opts := pebbleOptions(fs, dir, logger)
	if why := fullAtOpen(fs, dir); why != "" {
		v.readOnly = &VolumeFailure{Dir: dir, Reason: why, At: time.Now()}
		opts.ReadOnly = true
	}
	db, err := pebble.Open(filepath.Join(dir, volumeMetaDir), opts)
	if err != nil {
		return nil, fmt.Errorf("engine: volume %s: open metadata store: %w", dir, err)
	}
	v.db = db
	ok = true
	return v, nil
}

func readVolumeIdentity(fs vfs.FS, dir string) (volumeRecord, error) {
	path := filepath.Join(dir, volumeIdentityFile)
	f, err := fs.Open(path)
	if err != nil {
		return volumeRecord{}, err
	}
	defer func() { _ = f.Close() }() // read-only
	buf := make([]byte, volumeRecordSize+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: read identity: %w", dir, err)
	}
	rec, err := decodeVolumeRecord(buf[:n])
	if err != nil {
		return rec, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	return rec, nil
}

// formatVolume lays out a new volume. The identity file is written last,
// through a temporary name, file sync, rename and directory sync: a volume
// with an identity file is complete, and a crash before it leaves a
// directory that the next open formats again.
func formatVolume(fs vfs.FS, dir string, logger *slog.Logger) (volumeRecord, error) {
	names, err := fs.List(dir)
	if err != nil {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	for _, n := range names {
		switch n {
		case volumeLockFile, volumeMetaDir, volumeContainerDir, volumeTmpDir, volumeIdentityFile + ".tmp":
		case "lost+found": // the root of a freshly made ext4 filesystem
		default:
			return volumeRecord{}, fmt.Errorf("engine: volume %s: %w and not empty (found %q)", dir, errForeignDir, n)
		}
	}
	// A half-formatted volume holds no data: start it again.
	for _, n := range []string{volumeMetaDir, volumeContainerDir, volumeTmpDir} {
		if err := fs.RemoveAll(filepath.Join(dir, n)); err != nil {
			return volumeRecord{}, fmt.Errorf("engine: volume %s: %w", dir, err)
		}
	}
	// Pebble creates files in meta/ and syncs meta/, but not the entry of
	// meta/ itself: create it here; the sync of the volume directory below,
	// before the identity file is written, makes it durable.
	if err := fs.MkdirAll(filepath.Join(dir, volumeMetaDir), 0o755); err != nil {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	// The metadata store is created (and closed) before the identity file
	// exists, so that a crash while Pebble creates its files leaves a volume
	// that is formatted again, never one with a half-made store.
	db, err := pebble.Open(filepath.Join(dir, volumeMetaDir), pebbleOptions(fs, dir, logger))
	if err != nil {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: create metadata store: %w", dir, err)
	}
	if err := db.Close(); err != nil {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: create metadata store: %w", dir, err)
	}
	cdir := filepath.Join(dir, volumeContainerDir)
	// The containerFanout hashed subdirectories are made on demand by
	// createContainerOnDisk.
	if err := fs.MkdirAll(cdir, 0o755); err != nil {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	if err := fs.SyncDir(cdir); err != nil {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	// The entries of meta/ and containers/ must be durable before the
	// identity file can be: a volume with an identity is taken as complete,
	// and its layout is not rebuilt on open.
	if err := fs.SyncDir(dir); err != nil {
		return volumeRecord{}, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	rec := volumeRecord{FormatVersion: volumeFormatVersion, CreatedUnixMs: uint64(time.Now().UnixMilli())}
	if _, err := rand.Read(rec.UUID[:]); err != nil {
		return rec, err
	}
	tmp := filepath.Join(dir, volumeIdentityFile+".tmp")
	f, err := fs.Create(tmp)
	if err != nil {
		return rec, fmt.Errorf("engine: volume %s: %w", dir, err)
	}
	_, err = f.WriteAt(encodeVolumeRecord(rec), 0)
	if err == nil {
		err = f.SyncData()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, filepath.Join(dir, volumeIdentityFile))
	}
	if err == nil {
		err = fs.SyncDir(dir)
	}
	if err != nil {
		return rec, fmt.Errorf("engine: volume %s: write identity: %w", dir, err)
	}
	return rec, nil
}

func (v *volume) close() error {
	var err error
	if v.db != nil && !v.failed.Load() {
		err = v.db.Close()
		v.db = nil
	}
	if v.lock != nil {
		if lerr := v.lock.Close(); err == nil {
			err = lerr
		}
		v.lock = nil
	}
	return err
}

// containerDir is where container id lives on volume v.
func (v *volume) containerDir(id ContainerID) string { return containerDirIn(v.dir, id) }

// containerDirIn is where container id lives on the volume in dir.
func containerDirIn(dir string, id ContainerID) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(uint64(id) >> (8 * i))
	}
	sub := fmt.Sprintf("%02x", CRC32C(b[:])%containerFanout)
	return filepath.Join(dir, volumeContainerDir, sub, fmt.Sprintf("%d", uint64(id)))
}

func blockFileName(local uint64) string { return fmt.Sprintf("%016x.blk", local) }

// BlockFilePath is where block b's file is on the volume in dir (the
// layout of docs/FORMAT.md), for what must reach the bytes on disk
// without the engine: the chaos bench's bit flips, damage in tests.
func BlockFilePath(dir string, b BlockID) string {
	return filepath.Join(containerDirIn(dir, b.Container), blockFileName(b.Local))
}

// FlipBlockByte XORs the byte at off of block b's file on the volume in
// dir with x (non-zero) and fsyncs it: bit rot on disk, behind the engine's
// back, for the chaos bench and the tests of damage, scrubbing and repair.
func FlipBlockByte(dir string, b BlockID, off int64, x byte) (err error) {
	path := BlockFilePath(dir, b)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("engine: flip a byte: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("engine: flip a byte: %w", cerr)
		}
	}()
	one := []byte{0}
	if _, err := f.ReadAt(one, off); err != nil {
		return fmt.Errorf("engine: flip a byte: read %s at %d: %w", path, off, err)
	}
	one[0] ^= x
	if _, err := f.WriteAt(one, off); err != nil {
		return fmt.Errorf("engine: flip a byte: write %s at %d: %w", path, off, err)
	}
	return f.Sync()
}

func pebbleOptions(fs vfs.FS, dir string, logger *slog.Logger) *pebble.Options {
	return &pebble.Options{
		FS:     vfs.ToPebble(fs),
		Logger: pebbleLogger{l: logger.With("volume", dir), rate: lograte.New(lograte.DefaultInterval, nil)},
	}
}

// pebbleLogger routes Pebble's logs to slog. Its errors are rate-limited
// (lograte: one line a minute per message, digits aside, with the count
// held back): a store that cannot flush (a full disk) retries at once,
// thousands of times a second, each failure an error. Pebble calls Fatalf
// on unrecoverable errors; the default would exit the process, this panics
// so that the failure carries a stack and tests see it.
type pebbleLogger struct {
	l    *slog.Logger
	rate *lograte.Limiter
}

func (p pebbleLogger) Infof(format string, args ...interface{}) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...interface{}) {
	p.rate.Log(p.l, slog.LevelError, fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Fatalf(format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic("pebble: " + msg)
}
