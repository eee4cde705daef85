package bulk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/vfs"
)

// ManifestFile is the name of the block list a DirSink writes last.
const ManifestFile = "blocks.json"

// Manifest describes a downloaded container: ManifestFile in its
// directory, next to one file per block, <local ID in 16 hex digits>.blk.
type Manifest struct {
	Container    uint64              `json:"container"`
	Source       string              `json:"source"`
	MaxSizeBytes uint64              `json:"max_size_bytes"`
	BCSID        uint64              `json:"bcsid"`
	Bytes        uint64              `json:"bytes"`
	Blocks       []*engine.BlockData `json:"blocks"`
}

// DirSink is the client side of a whole-container read: it writes each
// block to its own file in a new directory, verifying every checksum as
// the bytes arrive (with one buffer of the importer's size), and the
// manifest last, once the stream is complete. Memory is bounded by the
// buffer and the block records.
type DirSink struct {
	dir string
	buf []byte
	m   Manifest
	// limit is what the source said the container holds at most
	// (ContainerHeader.CopyBytes): a source that sends more is refused
	// before the disk fills. got counts the blocks' bytes.
	limit, got uint64
}

// DownloadContainer reads container id from the datanode at addr into dir
// (created; it must not exist), every block verified, everything fsynced;
// on any error dir is removed.
func DownloadContainer(ctx context.Context, sec *tlsconf.Settings, addr string, id uint64, dir string) (*Manifest, error) {
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("bulk: %s exists: give a new directory", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bulk: %w", err)
	}
	s := &DirSink{dir: dir, buf: make([]byte, engine.ImportBufferBytes), m: Manifest{Container: id, Source: addr}}
	res, err := Fetch(ctx, sec, addr, id, func(h ContainerHeader) (Sink, error) {
		s.m.MaxSizeBytes, s.m.BCSID = h.MaxSizeBytes, h.BCSID
		s.limit = h.CopyBytes()
		return s, nil
	})
	if err == nil {
		s.m.Bytes = res.Bytes
		err = s.finish()
	}
	if err != nil {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = fmt.Errorf("%w (and removing %s: %v)", err, dir, rerr)
		}
		return nil, err
	}
	return &s.m, nil
}

// AddBlock verifies and writes one block.
func (s *DirSink) AddBlock(bd *engine.BlockData, r io.Reader) error {
	if bd.Length > s.limit-s.got {
		return fmt.Errorf("%w: block %d of %d bytes after %d: more than the %d bytes the source announced", ErrProtocol, bd.ID.Local, bd.Length, s.got, s.limit)
	}
	s.got += bd.Length
	f, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("%016x.blk", bd.ID.Local)))
	if err != nil {
		return err
	}
	err = s.copyBlock(bd, r, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	s.m.Blocks = append(s.m.Blocks, bd)
	return nil
}

// copyBlock reads the block a chunk piece-run at a time, checks each piece
// against the record, and writes it.
func (s *DirSink) copyBlock(bd *engine.BlockData, r io.Reader, f *os.File) error {
	bpc := uint64(bd.BytesPerChecksum)
	if bpc == 0 || bpc > uint64(len(s.buf)) {
		return fmt.Errorf("%w: block %d: bytes per checksum %d", ErrProtocol, bd.ID.Local, bpc)
	}
	room := uint64(len(s.buf)) / bpc * bpc
	for _, ch := range bd.Chunks {
		for off := uint64(0); off < ch.Length; {
			n := min(room, ch.Length-off)
			buf := s.buf[:n]
			if _, err := io.ReadFull(r, buf); err != nil {
				return fmt.Errorf("block %d at %d: %w", bd.ID.Local, ch.Offset+off, noEOF(err))
			}
			if bad := engine.VerifyPieces(buf, ch.Checksums[off/bpc:], bd.BytesPerChecksum); bad >= 0 {
				return fmt.Errorf("block %d: checksum mismatch at offset %d: %w", bd.ID.Local, ch.Offset+off+uint64(bad)*bpc, engine.ErrCorrupt)
			}
			if _, err := f.Write(buf); err != nil {
				return err
			}
			off += n
		}
	}
	return nil
}

// finish writes the manifest and syncs the directory.
func (s *DirSink) finish() error {
	b, err := json.MarshalIndent(&s.m, "", "  ")
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(vfs.Default, filepath.Join(s.dir, ManifestFile), append(b, '\n')); err != nil {
		return err
	}
	return vfs.Default.SyncDir(s.dir)
}
