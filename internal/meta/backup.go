package meta

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/checkpoint"
	"github.com/spindle-store/spindle/internal/meta/raftgroup"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Backups of the meta store (spindle admin meta backup).
//
// GET /v1/admin/backup answers a consistent Pebble checkpoint of the
// store as a checkpoint stream (package checkpoint: the same format as a
// raft snapshot, CRC32C over every byte, so that a stream cut or changed
// anywhere is refused), with the meta log index the store had applied
// (0 for a single meta service). UnpackBackup writes it into DIR/pebble,
// so that the directory is a meta service Dir (Config.Dir) as it was at
// the checkpoint, which Open opens as it opens any store. Backups taken
// before this format (a tar of "pebble/NAME" entries ending with
// backup.json) are still unpacked.
//
// The checkpoint is taken under s.mu's read lock, after a synced write to
// the store's WAL (pebble.WithFlushedWAL): it holds every commit applied
// before it, synced, and none applied after it. It is made with hard links
// in Dir/.backup-NANOS (created, streamed, removed; a crash in between
// leaves that directory, which may be deleted at any time), so it costs
// little space while streaming, whatever the store's size.
//
// An error before the first byte answers a JSON error; an error after it
// aborts the response, so that a client sees a truncated stream, which
// the trailer's checksum refuses.
//
// Concurrency: at most MaxConcurrentBackups backups run in this process
// at once; another request answers UNAVAILABLE.

// MaxConcurrentBackups bounds the backups a process serves at once.
const MaxConcurrentBackups = 1

// backupPrefix is the directory of the store inside a backup: the same as
// in Dir (openStore).
const backupPrefix = "pebble"

var backupSlots = make(chan struct{}, MaxConcurrentBackups)

// backupSummaryName is the last entry of a backup stream of the tar
// format (before package checkpoint's).
const backupSummaryName = "backup.json"

// backupSummary is the content of backup.json.
type backupSummary struct {
	Created time.Time `json:"created"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
}

// backupHandler serves GET /v1/admin/backup.
func (s *Service) backupHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		status := http.StatusOK
		defer func() {
			s.Metrics.Requests.WithLabelValues("backup", fmt.Sprint(status)).Observe(time.Since(start).Seconds())
		}()
		select {
		case backupSlots <- struct{}{}:
			defer func() { <-backupSlots }()
		default:
			status = http.StatusServiceUnavailable
			metaapi.WriteError(w, status, metaapi.CodeUnavailable, fmt.Sprintf("meta: %d backup(s) already running", MaxConcurrentBackups))
			return
		}
		dir, index, err := s.checkpoint()
		if dir != "" {
			defer func() {
				if err := s.Cfg.FS.RemoveAll(dir); err != nil {
					s.Log.Warn("backup: removing the checkpoint", "dir", dir, "err", err)
				}
			}()
		}
		if err != nil {
			var code string
			code, status = metaapi.CodeOf(err)
			s.Log.Error("backup failed", "err", err)
			metaapi.WriteError(w, status, code, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		n, err := checkpoint.Write(w, s.Cfg.FS, dir, index)
		if err != nil {
			s.Log.Error("backup: streaming the checkpoint failed", "err", err)
			panic(http.ErrAbortHandler) // the client sees a truncated stream
		}
		s.Log.Info("backup streamed", "index", index, "bytes", n, "seconds", time.Since(start).Seconds())
	})
}

// checkpoint makes a consistent checkpoint of the store in a new directory
// under Dir and returns the meta log index it holds (0: a single meta
// service). dir is set whenever something may have been created, for the
// caller to remove.
func (s *Service) checkpoint() (dir string, index uint64, err error) {
	dir = filepath.Join(s.Cfg.Dir, fmt.Sprintf(".backup-%d", time.Now().UnixNano()))
	s.Mu.RLock()
	if s.Closed {
		s.Mu.RUnlock()
		return "", 0, fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
	}
	err = s.Store.Checkpoint(dir, pebble.WithFlushedWAL())
	s.Mu.RUnlock()
	if err != nil {
		return dir, 0, fmt.Errorf("meta: backup: checkpoint into %s: %w", dir, err)
	}
	if s.rep != nil {
		// The applied state is in the checkpoint: read it there, not in
		// the store, which the apply worker moves on meanwhile.
		db, err := pebble.Open(dir, &pebble.Options{FS: vfs.ToPebble(s.Cfg.FS), Logger: state.PebbleLogger{L: s.Log}, ReadOnly: true})
		if err != nil {
			return dir, 0, fmt.Errorf("meta: backup: open the checkpoint: %w", err)
		}
		st, _, _, err := raftgroup.ReadState(db)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return dir, 0, fmt.Errorf("meta: backup: the checkpoint's applied state: %w", err)
		}
		index = st.Index
	}
	return dir, index, nil
}

// MaxBackupFiles bounds the entries UnpackBackup accepts (a checkpoint
// holds a few per sstable level, the MANIFEST, OPTIONS and WAL files).
const MaxBackupFiles = 100000

// UnpackBackup writes the backup stream r into dir, which must not exist:
// it unpacks into dir.partial, syncs every file and directory, and renames
// that to dir only once the whole stream has been read and checked, so
// that dir either holds a complete backup or does not exist. The result
// is a meta service Dir: start the meta service on it (or copy it into
// place) to restore. It returns the files and bytes written.
func UnpackBackup(r io.Reader, dir string) (files int, total int64, err error) {
	if _, err := os.Lstat(dir); err == nil {
		return 0, 0, fmt.Errorf("%w: %s exists: a backup goes into a new directory", metaapi.ErrInvalid, dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, err
	}
	tmp := dir + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, 0, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(tmp))
		}
	}()
	store := filepath.Join(tmp, backupPrefix)
	if err := vfs.MkdirAllDurable(vfs.Default, store); err != nil {
		return 0, 0, err
	}
	br := bufio.NewReaderSize(r, checkpoint.CopyBufBytes)
	if head, err := br.Peek(len(checkpoint.Magic)); err == nil && string(head) == checkpoint.Magic {
		info, err := checkpoint.Read(br, vfs.Default, store, 0)
		if err != nil {
			return info.Files, info.Bytes, fmt.Errorf("backup stream: %w", err)
		}
		files, total = info.Files, info.Bytes
	} else if files, total, err = unpackTar(br, tmp, store); err != nil {
		return files, total, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return files, total, err
	}
	return files, total, vfs.Default.SyncDir(filepath.Dir(dir))
}

// unpackTar unpacks a backup stream of the format before package
// checkpoint's (a tar of "pebble/NAME" entries, then backup.json) into
// store, under tmp.
func unpackTar(r io.Reader, tmp, store string) (files int, total int64, err error) {
	tr := tar.NewReader(r)
	var sum *backupSummary
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return files, total, fmt.Errorf("backup stream after %d files: %w", files, err)
		}
		if sum != nil {
			return files, total, fmt.Errorf("backup stream: entry %q after %s", hdr.Name, backupSummaryName)
		}
		if hdr.Name == backupSummaryName && hdr.Typeflag == tar.TypeReg && hdr.Size <= maxBackupSummaryBytes {
			b, err := io.ReadAll(io.LimitReader(tr, maxBackupSummaryBytes))
			if err != nil {
				return files, total, fmt.Errorf("backup stream: %s: %w", backupSummaryName, err)
			}
			sum = &backupSummary{}
			if err := json.Unmarshal(b, sum); err != nil {
				return files, total, fmt.Errorf("backup stream: %s: %w", backupSummaryName, err)
			}
			if _, err := writeSynced(filepath.Join(tmp, backupSummaryName), bytes.NewReader(b)); err != nil {
				return files, total, err
			}
			continue
		}
		d, name := path.Split(hdr.Name)
		if d != backupPrefix+"/" || name == "" || name == "." || name == ".." || hdr.Typeflag != tar.TypeReg {
			return files, total, fmt.Errorf("backup stream: unexpected entry %q (want regular files %s/NAME)", hdr.Name, backupPrefix)
		}
		if files++; files > MaxBackupFiles {
			return files, total, fmt.Errorf("backup stream: more than %d files", MaxBackupFiles)
		}
		n, err := writeSynced(filepath.Join(store, name), tr)
		total += n
		if err != nil {
			return files, total, err
		}
		if n != hdr.Size {
			return files, total, fmt.Errorf("backup stream: %s: %d of %d bytes", hdr.Name, n, hdr.Size)
		}
	}
	if sum == nil {
		return files, total, fmt.Errorf("backup stream: incomplete: no %s after %d files", backupSummaryName, files)
	}
	if sum.Files != files || sum.Bytes != total || files == 0 {
		return files, total, fmt.Errorf("backup stream: %d files of %d bytes, its %s says %d files of %d bytes", files, total, backupSummaryName, sum.Files, sum.Bytes)
	}
	return files, total, vfs.Default.SyncDir(store)
}

// maxBackupSummaryBytes bounds backup.json.
const maxBackupSummaryBytes = 4096

// writeSynced creates name with r's bytes and fsyncs it.
func writeSynced(name string, r io.Reader) (int64, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("backup: write %s: %w", name, err)
	}
	return n, nil
}
