package ecnode

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/engine"
)

// Store keeps a datanode's shards in one directory: <cid>.<index>.shard
// (the container ID in decimal), written as <name>.tmp-<16 hex> first.
type Store struct {
	Dir string
}

// OpenStore opens (creating) the shard directory dir and removes the
// temporaries a crash left.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ecnode: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ecnode: %w", err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") || strings.HasPrefix(e.Name(), "work-") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("ecnode: %w", err)
			}
		}
	}
	return &Store{Dir: dir}, nil
}

// Path is the file of a shard.
func (s *Store) Path(container uint64, index int) string {
	return filepath.Join(s.Dir, fmt.Sprintf("%d.%d.shard", container, index))
}

// Put stores a shard: written to a temporary, fsynced, verified whole
// (ec.VerifyShard: its header must name this container and index), renamed
// into place, the directory fsynced. An error leaves nothing.
func (s *Store) Put(container uint64, index int, size int64, r io.Reader) (err error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	final := s.Path(container, index)
	tmp := final + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("ecnode: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(tmp) // nothing under the final name; the next start removes it too
		}
	}()
	n, err := io.Copy(f, r)
	if err != nil || n != size {
		return fmt.Errorf("ecnode: shard %d of container %d: %d of %d bytes received: %v", index, container, n, size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("ecnode: fsync shard: %w", err)
	}
	info, err := ec.VerifyShard(f, size)
	if err != nil {
		return fmt.Errorf("ecnode: shard %d of container %d: %w", index, container, err)
	}
	if info.Container != container || info.Index != index {
		return fmt.Errorf("ecnode: shard received as %d of container %d holds shard %d of container %d", index, container, info.Index, info.Container)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("ecnode: %w", err)
	}
	return syncDir(s.Dir)
}

// Open opens a stored shard.
func (s *Store) Open(container uint64, index int) (bulk.ShardFile, error) {
	f, err := os.Open(s.Path(container, index))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("shard %d of container %d: %w", index, container, engine.ErrNotFound)
	}
	return f, err
}

// Shards lists the stored shards: container → indexes.
func (s *Store) Shards() (map[uint64][]int, error) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, err
	}
	out := map[uint64][]int{}
	for _, e := range ents {
		var cid uint64
		var idx int
		if n, err := fmt.Sscanf(e.Name(), "%d.%d.shard", &cid, &idx); err == nil && n == 2 && strings.HasSuffix(e.Name(), ".shard") {
			out[cid] = append(out[cid], idx)
		}
	}
	return out, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ecnode: fsync %s: %w", dir, err)
	}
	return nil
}
