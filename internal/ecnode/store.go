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
	"strconv"
	"strings"
	"sync"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
)

// Store keeps a datanode's shards in one directory: <cid>.<index>.shard
// (the container ID in decimal) for generation 0 (the conversion's),
// <cid>.g<gen>.<index>.shard for a later one (a compaction's), written as
// <name>.tmp-<16 hex> first.
type Store struct {
	Dir string
	mu  sync.Mutex // a rename into place, a drop and a quarantine one at a time
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

// Path is the file of a shard of generation 0.
func (s *Store) Path(container uint64, index int) string {
	return s.PathOf(ecapi.ShardRef{Container: container, Index: index})
}

// PathOf is the file of a shard.
func (s *Store) PathOf(ref ecapi.ShardRef) string { return filepath.Join(s.Dir, ShardFileName(ref)) }

// ShardFileName is a shard's file name: <cid>.<index>.shard (generation
// 0) or <cid>.g<gen>.<index>.shard.
func ShardFileName(ref ecapi.ShardRef) string {
	if ref.Generation == 0 {
		return fmt.Sprintf("%d.%d.shard", ref.Container, ref.Index)
	}
	return fmt.Sprintf("%d.g%d.%d.shard", ref.Container, ref.Generation, ref.Index)
}

// parseShardName reads a shard's file name (suffix: ".shard" or
// ".shard.corrupt").
func parseShardName(name, suffix string) (ecapi.ShardRef, bool) {
	base, ok := strings.CutSuffix(name, suffix)
	if !ok {
		return ecapi.ShardRef{}, false
	}
	parts := strings.Split(base, ".")
	var ref ecapi.ShardRef
	var err error
	if len(parts) == 3 && strings.HasPrefix(parts[1], "g") {
		var g uint64
		if g, err = strconv.ParseUint(parts[1][1:], 10, 32); err != nil || g == 0 {
			return ecapi.ShardRef{}, false
		}
		ref.Generation, parts = uint32(g), []string{parts[0], parts[2]}
	}
	if len(parts) != 2 {
		return ecapi.ShardRef{}, false
	}
	if ref.Container, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return ecapi.ShardRef{}, false
	}
	if ref.Index, err = strconv.Atoi(parts[1]); err != nil || ref.Index < 0 || ref.Index > 255 {
		return ecapi.ShardRef{}, false
	}
	return ref, ShardFileName(ref)+strings.TrimPrefix(suffix, ".shard") == name
}

// Put stores a shard: written to a temporary, fsynced, verified whole
// (ec.VerifyShard: its header must name this container, generation and
// index), renamed into place, the directory fsynced. An error leaves
// nothing. A shard of a generation ≥ 1 (a compaction's) is refused when
// its file exists: each attempt at a compaction writes a generation of
// its own, so such a file is another attempt's, never to be replaced.
func (s *Store) Put(container uint64, gen uint32, index int, size int64, r io.Reader) error {
	return s.put(ecapi.ShardRef{Container: container, Generation: gen, Index: index}, gen > 0, func(f *os.File) error {
		n, err := io.Copy(f, r)
		if err != nil || n != size {
			return fmt.Errorf("ecnode: shard %d of container %d: %d of %d bytes received: %v", index, container, n, size, err)
		}
		return nil
	})
}

// put stores the shard fill writes to f as Put does (a quarantined copy
// of it, if any, removed once it is in place; once: refused when its
// file exists).
func (s *Store) put(ref ecapi.ShardRef, once bool, fill func(f *os.File) error) (err error) {
	container, index := ref.Container, ref.Index
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	final := s.PathOf(ref)
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
	if err := fill(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("ecnode: fsync shard: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("ecnode: %w", err)
	}
	info, err := ec.VerifyShard(f, st.Size())
	if err != nil {
		return fmt.Errorf("ecnode: shard %d of container %d: %w", index, container, err)
	}
	if info.Container != container || info.Index != index || info.Generation != ref.Generation {
		return fmt.Errorf("ecnode: shard received as %d of container %d generation %d holds shard %d of container %d generation %d", index, container, ref.Generation, info.Index, info.Container, info.Generation)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(final); once && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ecnode: shard %d of container %d generation %d is here already (another attempt's): %v", index, container, ref.Generation, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("ecnode: %w", err)
	}
	if err := os.Remove(final + corruptSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ecnode: %w", err)
	}
	return syncDir(s.Dir)
}

// Open opens a stored shard.
func (s *Store) Open(container uint64, gen uint32, index int) (bulk.ShardFile, error) {
	f, err := os.Open(s.PathOf(ecapi.ShardRef{Container: container, Generation: gen, Index: index}))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("shard %d of container %d: %w", index, container, engine.ErrNotFound)
	}
	return f, err
}

// Shards lists the stored shards of generation 0: container → indexes.
func (s *Store) Shards() (map[uint64][]int, error) {
	held, err := s.Held()
	if err != nil {
		return nil, err
	}
	out := map[uint64][]int{}
	for _, h := range held {
		if h.Generation == 0 {
			out[h.Container] = append(out[h.Container], h.Index)
		}
	}
	return out, nil
}

// Held lists the stored shards with their files' modification times
// (quarantined ones are not).
func (s *Store) Held() ([]ecapi.HeldShard, error) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, err
	}
	var out []ecapi.HeldShard
	for _, e := range ents {
		if ref, ok := parseShardName(e.Name(), ".shard"); ok {
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // dropped meanwhile
			}
			if err != nil {
				return nil, err
			}
			out = append(out, ecapi.HeldShard{ShardRef: ref, MTime: info.ModTime().UnixNano()})
		}
	}
	return out, nil
}

// Quarantined lists the quarantined shards (their copies kept until
// they are rebuilt here or the meta service says they are elsewhere).
func (s *Store) Quarantined() ([]ecapi.ShardRef, error) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, err
	}
	var out []ecapi.ShardRef
	for _, e := range ents {
		if ref, ok := parseShardName(e.Name(), ".shard"+corruptSuffix); ok {
			out = append(out, ref)
		}
	}
	return out, nil
}

// DropQuarantined deletes the quarantined copy of a shard (none: nothing
// to do).
func (s *Store) DropQuarantined(ref ecapi.ShardRef) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := os.Remove(s.PathOf(ref) + corruptSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ecnode: %w", err)
	}
	return true, syncDir(s.Dir)
}

// Drop deletes a shard if its file still has modification time mtime (a
// later file of the same shard — a rebuild or conversion since — stays).
func (s *Store) Drop(ref ecapi.ShardRef, mtime int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.PathOf(ref)
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil || info.ModTime().UnixNano() != mtime {
		return false, err
	}
	if err := os.Remove(p); err != nil {
		return false, fmt.Errorf("ecnode: %w", err)
	}
	return true, syncDir(s.Dir)
}

// corruptSuffix names a quarantined shard (the scrubber found it
// corrupt): never served or listed, removed once the shard is rebuilt.
const corruptSuffix = ".corrupt"

// Quarantine takes a corrupt shard out of service (renamed: reads and
// the inventory no longer see it, so the meta service has it rebuilt).
func (s *Store) Quarantine(ref ecapi.ShardRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.PathOf(ref)
	if err := os.Rename(p, p+corruptSuffix); err != nil {
		return fmt.Errorf("ecnode: %w", err)
	}
	return syncDir(s.Dir)
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
