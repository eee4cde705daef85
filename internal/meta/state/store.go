package state

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/spindle-store/spindle/internal/vfs"
)

// bloomBitsPerKey sizes the store's Bloom filters (1 % false positives).
const bloomBitsPerKey = 10

// openStore opens (creating if needed) the Pebble store in dir/pebble,
// every file operation through fs. Pebble syncs the entries of its own
// directory, not the directories above it: dir and its missing parents are
// created durably and dir is synced once the store exists, so that a power
// loss right after the first acknowledged commit keeps the store.
func OpenStore(fs vfs.FS, dir string, log *slog.Logger) (*pebble.DB, error) {
	if err := vfs.MkdirAllDurable(fs, dir); err != nil {
		return nil, err
	}
	if err := finishStoreInstall(fs, dir); err != nil { // snapshot.go
		return nil, err
	}
	cache := pebble.NewCache(storeCacheBytes)
	defer cache.Unref() // the DB holds its own reference
	opts := &pebble.Options{FS: vfs.ToPebble(fs), Logger: PebbleLogger{log}, Cache: cache, MemTableSize: storeMemTableBytes}
	// Bloom filters: a key commit looks its key up under s.mu, and a new
	// key is a miss that would otherwise read a block of every sstable
	// level (21 µs of the lock per commit in bench meta without them, 8 %
	// of its CPU; 15 µs with them).
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
	}
	// Inline values (ARCHITECTURE §18) go to blob files, written once at
	// flush: compactions move their keys and references, not their bytes
	// (Pebble's value separation, as WiscKey). Without it, compactions
	// rewrote every 4 KiB value level after level: 35 % of all CPU of
	// bench key-write 4 KiB x 32, flushes another 9 %. A store opened
	// by a build without this is ratcheted to FormatValueSeparation (one
	// way; any build on Pebble v2.1 reads it).
	opts.FormatMajorVersion = pebble.FormatValueSeparation
	opts.Experimental.EnableColumnarBlocks = func() bool { return true }
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           StoreBlobMinBytes,
			MaxBlobReferenceDepth: storeBlobMaxReferenceDepth,
			RewriteMinimumAge:     storeBlobRewriteMinAge,
			TargetGarbageRatio:    storeBlobTargetGarbageRatio,
		}
	}
	db, err := pebble.Open(filepath.Join(dir, "pebble"), opts)
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return nil, errors.Join(fmt.Errorf("open store in %s: %w", dir, err), db.Close())
	}
	return db, nil
}

// The store's Pebble sizes. Values inline (ARCHITECTURE §18) put value
// bytes in the store: with Pebble's defaults (4 MiB memtables, an 8 MiB
// block cache) 160 MB of 4 KiB puts flushed 40 memtables and compacted
// them again and again (20 % of a key-write bench's CPU), and a commit's
// lookup of its key (a miss, for a new key) read filter and index blocks
// from the files (11 %). A 64 MiB cache held a fifth of 20,000 inline
// values of 4 KiB (80 MB) and most gets read their block from the file;
// 256 MiB holds them (bench key-read, 4 KiB, 32 clients, at load 7:
// 11,814 and 13,253 gets/s before, 16,408 and 24,135 after). Pebble
// allocates cache blocks as they are filled: a small store costs no more.
const (
	storeMemTableBytes = 32 << 20
	storeCacheBytes    = 256 << 20
	// Value separation: values of at least storeBlobMinBytes (inline
	// values; records and key entries are smaller) go to blob files; an
	// sstable references at most storeBlobMaxReferenceDepth overlapping
	// ones; a blob file older than storeBlobRewriteMinAge is rewritten
	// once more than storeBlobTargetGarbageRatio of it is garbage
	// (deleted or overwritten keys).
	StoreBlobMinBytes           = 1 << 10
	storeBlobMaxReferenceDepth  = 10
	storeBlobRewriteMinAge      = 5 * time.Minute
	storeBlobTargetGarbageRatio = 0.2
)

// pebbleLogger routes Pebble's logs to slog; Fatalf panics (the default
// would exit the process).
type PebbleLogger struct{ L *slog.Logger }

func (p PebbleLogger) Infof(format string, args ...any) {
	p.L.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p PebbleLogger) Errorf(format string, args ...any) {
	p.L.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p PebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.L.Error(msg, "component", "pebble", "fatal", true)
	panic("pebble: " + msg)
}

// store is the Pebble store as the service's code reads it: on the
// serving leader, Get and NewIter see the overlay (an indexed batch of
// the mutations proposed and not yet applied) over the store, so that a
// mutation validates against memory's state, not the committed one.
// ov is set and replaced under s.mu for writing and read under s.mu.
type Store struct {
	*pebble.DB
	Overlay *pebble.Batch
}

// Get reads k through the overlay.
func (st *Store) Get(k []byte) ([]byte, io.Closer, error) {
	if st.Overlay != nil {
		return st.Overlay.Get(k)
	}
	return st.DB.Get(k)
}

// NewIter iterates through the overlay.
func (st *Store) NewIter(o *pebble.IterOptions) (*pebble.Iterator, error) {
	if st.Overlay != nil {
		return st.Overlay.NewIter(o)
	}
	return st.DB.NewIter(o)
}

// CloseBatch gives b's memory back to Pebble once b is committed, applied
// elsewhere (the overlay, a proposal) or dropped. (*pebble.Batch).Close
// fails only on a batch already closed (pebble.ErrClosed), when there is
// nothing left to release and no store state depends on it: the error is
// dropped here, in one place, not at each batch.
func CloseBatch(b *pebble.Batch) { _ = b.Close() }

// CloseInto closes c, an iterator or a Get's closer, and keeps its error,
// wrapped with what, in *err when *err is nil: an iterator's Close returns
// its error (it.Error(), which *err may already hold) and any of releasing
// its readers. Deferred, with a named error result: defer
// CloseInto(it, &err, "list "+bucket).
func CloseInto(c io.Closer, err *error, what string) {
	if cerr := c.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("meta: %s: %w", what, cerr)
	}
}

// Names under Config.Dir: the store, a store being installed from a
// snapshot, the store it replaces, a snapshot being received.
const (
	// Names under Config.Dir.
	storeDirName = "pebble"
	StoreNewName = "pebble.new"
	storeOldName = "pebble.old"
	RecvDirName  = "snap-recv"
)

// installStore replaces DIR/pebble by DIR/pebble.new (complete and
// synced), the store closed. See finishStoreInstall for a crash.
func InstallStore(fs vfs.FS, dir string) error {
	cur, next, old := filepath.Join(dir, storeDirName), filepath.Join(dir, StoreNewName), filepath.Join(dir, storeOldName)
	if err := fs.RemoveAll(old); err != nil {
		return err
	}
	if err := fs.Rename(cur, old); err != nil {
		return err
	}
	if err := fs.SyncDir(dir); err != nil {
		return err
	}
	if err := fs.Rename(next, cur); err != nil {
		return err
	}
	if err := fs.SyncDir(dir); err != nil {
		return err
	}
	if err := fs.RemoveAll(old); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// finishStoreInstall, before the store is opened, settles an install a
// crash interrupted: DIR/pebble.new beside DIR/pebble is dropped (the
// install had not started: the old store stays), DIR/pebble.new without
// DIR/pebble is renamed into place (the old store was already moved: the
// new one wins), DIR/pebble.old and a partial DIR/snap-recv are removed.
func finishStoreInstall(fs vfs.FS, dir string) error {
	exists := func(p string) (bool, error) {
		_, err := fs.Stat(p)
		if err == nil {
			return true, nil
		}
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	cur, next, old := filepath.Join(dir, storeDirName), filepath.Join(dir, StoreNewName), filepath.Join(dir, storeOldName)
	hasCur, err := exists(cur)
	if err != nil {
		return err
	}
	hasNext, err := exists(next)
	if err != nil {
		return err
	}
	hasOld, err := exists(old)
	if err != nil {
		return err
	}
	hasRecv, err := exists(filepath.Join(dir, RecvDirName))
	if err != nil {
		return err
	}
	if !hasNext && !hasOld && !hasRecv {
		return nil
	}
	switch {
	case hasNext && !hasCur && hasOld:
		if err := fs.Rename(next, cur); err != nil {
			return fmt.Errorf("finish a snapshot install: %w", err)
		}
	case hasNext:
		if err := fs.RemoveAll(next); err != nil {
			return fmt.Errorf("undo a snapshot install: %w", err)
		}
	}
	if err := fs.SyncDir(dir); err != nil {
		return err
	}
	if hasOld {
		if err := fs.RemoveAll(old); err != nil {
			return err
		}
	}
	if hasRecv {
		if err := fs.RemoveAll(filepath.Join(dir, RecvDirName)); err != nil {
			return err
		}
	}
	return fs.SyncDir(dir)
}
