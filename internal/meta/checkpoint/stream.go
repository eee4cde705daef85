// Package checkpoint is the one stream format of a copy of the meta
// service's Pebble store: the snapshot a raft member sends to another
// (package raftgroup) and the backup an operator takes (spindle admin
// meta backup) are the same bytes, written by Write from a checkpoint
// directory and read back by Read into a new one.
//
// Stream (docs/FORMAT.md §13.6), little-endian:
//
//	offset  size  field
//	0       8     magic "SPNDSNAP"
//	8       1     format version (1)
//	9       8     index: the meta log index the store has applied (0: a
//	              single meta service, which has no log)
//	17      4     files
//	21      ...   per file: name length u16 | name | size u64 | bytes
//	end-4   4     CRC32C (Castagnoli) of every byte before it
//
// A stream cut anywhere, or with a byte changed, fails Read: the trailer's
// checksum covers the header, the names, the sizes and the data. Names are
// plain file names (no separator, not "." or ".."), each once; sizes and
// counts are bounded (MaxFiles, MaxNameBytes).
//
// Invariants: Read fsyncs every file it writes and then dest, before it
// returns the index; on an error dest may hold a partial copy, which the
// caller removes. Both ends copy through one fixed buffer (CopyBufBytes):
// memory is bounded whatever the store's size.
//
// Concurrency: none; Write reads dir, which must not change while it runs
// (a Pebble checkpoint is immutable), and Read writes only under dest.
package checkpoint

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/vfs"
)

// crcWriter and crcReader sum what passes through.
type crcWriter struct {
	w io.Writer
	h hash.Hash32
	n int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

type crcReader struct {
	r io.Reader
	h hash.Hash32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	return n, err
}

// The stream's constants and bounds.
const (
	// Magic opens every stream; FormatVersion is the version written and
	// the one read.
	Magic         = "SPNDSNAP"
	FormatVersion = 1
	// MaxFiles and MaxNameBytes bound what a stream may announce (a
	// checkpoint holds a few files per sstable level, the MANIFEST,
	// OPTIONS and WAL files).
	MaxFiles     = 1 << 16
	MaxNameBytes = 255
	// CopyBufBytes is the copy buffer of a stream, each way.
	CopyBufBytes = 256 << 10
)

// Info is what a stream held.
type Info struct {
	Index uint64
	Files int
	Bytes int64 // file data
}

// Write writes the checkpoint in dir (of meta log index index) as a
// stream and returns the bytes written.
func Write(w io.Writer, fs vfs.FS, dir string, index uint64) (int64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, err
	}
	type file struct {
		name string
		size int64
	}
	var files []file
	for _, n := range names {
		st, err := fs.Stat(filepath.Join(dir, n))
		if err != nil {
			return 0, err
		}
		if !st.Mode().IsRegular() {
			return 0, fmt.Errorf("checkpoint %s: %s is not a regular file", dir, n)
		}
		files = append(files, file{n, st.Size()})
	}
	cw := &crcWriter{w: w, h: crc32.New(crc32c.Table)}
	hdr := append([]byte(Magic), FormatVersion)
	hdr = binary.LittleEndian.AppendUint64(hdr, index)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(files)))
	if _, err := cw.Write(hdr); err != nil {
		return cw.n, err
	}
	buf := make([]byte, CopyBufBytes)
	for _, f := range files {
		h := binary.LittleEndian.AppendUint16(nil, uint16(len(f.name)))
		h = append(h, f.name...)
		h = binary.LittleEndian.AppendUint64(h, uint64(f.size))
		if _, err := cw.Write(h); err != nil {
			return cw.n, err
		}
		src, err := fs.Open(filepath.Join(dir, f.name))
		if err != nil {
			return cw.n, err
		}
		n, err := io.CopyBuffer(cw, io.LimitReader(src, f.size), buf)
		if cerr := src.Close(); err == nil {
			err = cerr // read-only: a Close error is a read error
		}
		if err == nil && n != f.size {
			err = fmt.Errorf("checkpoint file %s: %d bytes read, %d expected", f.name, n, f.size)
		}
		if err != nil {
			return cw.n, err
		}
	}
	sum := binary.LittleEndian.AppendUint32(nil, cw.h.Sum32())
	if _, err := w.Write(sum); err != nil {
		return cw.n, err
	}
	return cw.n + 4, nil
}

// Read receives a stream into dest (created; each file fsynced, then
// dest), verifies its checksum and returns what it held; its index must be
// at least min. On error dest may hold a partial copy.
func Read(body io.Reader, fs vfs.FS, dest string, min uint64) (Info, error) {
	cr := &crcReader{r: body, h: crc32.New(crc32c.Table)}
	hdr := make([]byte, len(Magic)+1+8+4)
	if _, err := io.ReadFull(cr, hdr); err != nil {
		return Info{}, fmt.Errorf("checkpoint stream header: %w", err)
	}
	if string(hdr[:len(Magic)]) != Magic || hdr[len(Magic)] != FormatVersion {
		return Info{}, fmt.Errorf("%w: not a checkpoint stream of format %d", state.ErrCorrupt, FormatVersion)
	}
	p := hdr[len(Magic)+1:]
	index, nfiles := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint32(p[8:])
	if index < min {
		return Info{}, fmt.Errorf("checkpoint stream at %d, want one at or past %d", index, min)
	}
	if nfiles > MaxFiles {
		return Info{}, fmt.Errorf("%w: checkpoint stream of %d files (at most %d)", state.ErrCorrupt, nfiles, MaxFiles)
	}
	if err := fs.MkdirAll(dest, 0o755); err != nil {
		return Info{}, err
	}
	buf := make([]byte, CopyBufBytes)
	seen := map[string]bool{}
	info := Info{Index: index}
	for range nfiles {
		var l [2]byte
		if _, err := io.ReadFull(cr, l[:]); err != nil {
			return Info{}, fmt.Errorf("checkpoint stream file header: %w", err)
		}
		n := int(binary.LittleEndian.Uint16(l[:]))
		if n == 0 || n > MaxNameBytes {
			return Info{}, fmt.Errorf("%w: checkpoint stream file name of %d bytes", state.ErrCorrupt, n)
		}
		nb := make([]byte, n+8)
		if _, err := io.ReadFull(cr, nb); err != nil {
			return Info{}, fmt.Errorf("checkpoint stream file header: %w", err)
		}
		name, size := string(nb[:n]), int64(binary.LittleEndian.Uint64(nb[n:]))
		if strings.ContainsAny(name, `/\`) || name == "." || name == ".." || seen[name] || size < 0 {
			return Info{}, fmt.Errorf("%w: checkpoint stream file %q (%d bytes)", state.ErrCorrupt, name, size)
		}
		seen[name] = true
		f, err := fs.Create(filepath.Join(dest, name))
		if err != nil {
			return Info{}, err
		}
		got, err := io.CopyBuffer(f, io.LimitReader(cr, size), buf)
		if err == nil && got != size {
			err = fmt.Errorf("checkpoint stream file %s: %w after %d of %d bytes", name, io.ErrUnexpectedEOF, got, size)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return Info{}, err
		}
		info.Files++
		info.Bytes += got
	}
	want := cr.h.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(body, sum[:]); err != nil {
		return Info{}, fmt.Errorf("checkpoint stream trailer: %w", err)
	}
	if got := binary.LittleEndian.Uint32(sum[:]); got != want {
		return Info{}, fmt.Errorf("%w: checkpoint stream crc %08x, trailer says %08x", state.ErrCorrupt, want, got)
	}
	if err := fs.SyncDir(dest); err != nil {
		return Info{}, err
	}
	return info, nil
}
