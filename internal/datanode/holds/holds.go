// Package holds keeps a datanode's object lock holds (issue 35 item 2,
// defence in depth): for each block of a locked version the meta service
// told this node about (holdapi, hold_blocks commands), its retain-until
// time and legal hold, durably; and refuses the deletion of a held block,
// whatever path asks for it (engine.Config.DeleteGuard: a delete_blocks
// command proposed through the pipeline or applied to a replica alone, a
// delete applied from a pipeline's log) and of a whole replica holding
// one (delete_container). A buggy or compromised meta service or GC, or an
// operator's delete, cannot free a locked version's blocks on this node
// before its retention ends or while its legal hold is on.
//
// Storage (docs/FORMAT.md §11.5): one file per container that has holds,
// DIR/<container ID>.holds, replaced whole by vfs.WriteFileAtomic (temporary
// file, fsync, rename, directory fsync) before Apply returns, so a hold is
// durable before the node acknowledges it (holdapi.Ack).
//
// Invariants:
//
//   - A hold only grows (holdapi.Merge): a later retain-until date or
//     COMPLIANCE taken, never a shorter one, but for a GOVERNANCE
//     retention told with Bypass; the legal hold follows the meta
//     service's latest word.
//   - A block whose hold is in force (legal hold on, or retain-until in
//     the future by the store's clock) is never deleted through the
//     engine: Check refuses it (ErrHeld), counted in
//     spindle_datanode_locked_deletes_refused_total and logged.
//   - An expired hold is dropped lazily: from memory when Check meets it,
//     from its file at the container's next Apply (or at Open).
//   - A holds file that does not decode fails Open (fail closed: the node
//     does not start without knowing what it holds).
//
// Concurrency: a Store is safe for concurrent use; one mutex guards the
// memory and serialises the file writes (Apply holds it across the write,
// so that a hold is in force once, and only once, it is durable).
package holds

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
	"github.com/spindle-store/spindle/internal/vfs"
)

// ErrHeld: the block's deletion was refused, an object lock holds it.
var ErrHeld = errors.New("object lock: block held")

// Dir is the holds directory under a datanode's log directory.
func Dir(logDir string) string { return filepath.Join(logDir, "holds") }

const (
	suffix      = ".holds"
	fileVersion = 1
	entryBytes  = 17 // local u64, until i64, flags u8
	flagComp    = 1
	flagLegal   = 2
)

// Store is a datanode's holds.
type Store struct {
	dir string
	fs  vfs.FS
	now func() time.Time
	log *slog.Logger

	mu  sync.Mutex
	byC map[uint64]map[uint64]holdapi.Hold // container → local → hold

	refused prometheus.Counter
}

// Open loads the holds in dir (created when missing); now is the clock
// holds expire by (nil: time.Now), fs the filesystem (nil: vfs.Default).
func Open(fsys vfs.FS, dir string, now func() time.Time, log *slog.Logger) (*Store, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Store{dir: dir, fs: fsys, now: now, log: log, byC: map[uint64]map[uint64]holdapi.Hold{},
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_locked_deletes_refused_total",
			Help: "Block or replica deletions refused because an object lock holds a block (legal hold, or retention not expired)."})}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("holds: %w", err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil { // the directory's entry, made at first start
		return nil, fmt.Errorf("holds: %w", err)
	}
	names, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("holds: %w", err)
	}
	for _, name := range names {
		cid, err := strconv.ParseUint(strings.TrimSuffix(name, suffix), 10, 64)
		if !strings.HasSuffix(name, suffix) || err != nil {
			continue // a temporary file of an interrupted write: the old file stands
		}
		data, err := vfs.ReadFile(fsys, filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("holds: %w", err)
		}
		m, err := decode(data)
		if err != nil {
			return nil, fmt.Errorf("holds: %s: %w", name, err)
		}
		s.dropExpired(m)
		if len(m) > 0 {
			s.byC[cid] = m
		}
	}
	return s, nil
}

// Collectors are the store's metrics.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_held_blocks",
		Help: "Blocks this datanode keeps an object lock hold for (expired ones until dropped)."}, func() float64 { return float64(s.Held()) })}
}

// Held counts the blocks with a hold kept (expired ones until dropped).
func (s *Store) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.byC {
		n += len(m)
	}
	return n
}

// Entry is a hold told for one block.
type Entry struct {
	Local uint64
	Hold  holdapi.Hold
}

// Apply merges each entry's hold into its block's of container, in order
// (holdapi.Merge), and makes the result durable (one file write) before
// it returns.
func (s *Store) Apply(container uint64, entries []Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(s.byC[container])
	if next == nil {
		next = map[uint64]holdapi.Hold{}
	}
	for _, e := range entries {
		next[e.Local] = holdapi.Merge(next[e.Local], e.Hold)
	}
	s.dropExpired(next)
	path := filepath.Join(s.dir, strconv.FormatUint(container, 10)+suffix)
	var err error
	if len(next) == 0 {
		if err = s.fs.Remove(path); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		if err == nil {
			err = s.fs.SyncDir(s.dir)
		}
	} else {
		err = vfs.WriteFileAtomic(s.fs, path, encode(next))
	}
	if err != nil {
		return fmt.Errorf("holds: container %d: %w", container, err)
	}
	if len(next) == 0 {
		delete(s.byC, container)
	} else {
		s.byC[container] = next
	}
	return nil
}

// Check refuses (ErrHeld) the deletion of block local of container while
// a hold is in force; an expired hold it meets is dropped from memory.
// It is the engine's DeleteGuard.
func (s *Store) Check(container, local uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.byC[container][local]
	if !ok {
		return nil
	}
	if !h.InForce(s.now()) {
		delete(s.byC[container], local)
		return nil
	}
	s.refused.Inc()
	s.log.Warn("deletion of a block an object lock holds refused", "container", container, "block", local,
		"retain_until", time.Unix(h.Until, 0).UTC(), "compliance", h.Compliance, "legal_hold", h.Legal)
	return fmt.Errorf("%w: container %d block %d (retain until %s, compliance %v, legal hold %v)", ErrHeld,
		container, local, time.Unix(h.Until, 0).UTC().Format(time.RFC3339), h.Compliance, h.Legal)
}

// CheckContainer refuses (ErrHeld) the deletion of a whole replica of
// container while a hold on one of its blocks is in force.
func (s *Store) CheckContainer(container uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, local := range slices.Sorted(maps.Keys(s.byC[container])) {
		if h := s.byC[container][local]; h.InForce(now) {
			s.refused.Inc()
			s.log.Warn("deletion of a replica holding a block an object lock holds refused", "container", container, "block", local)
			return fmt.Errorf("%w: container %d holds block %d", ErrHeld, container, local)
		}
	}
	return nil
}

func (s *Store) dropExpired(m map[uint64]holdapi.Hold) {
	now := s.now()
	maps.DeleteFunc(m, func(_ uint64, h holdapi.Hold) bool { return !h.InForce(now) })
}

// encode is a holds file: version u8, count u32 LE, the entries in local
// ID order (local u64 LE, until i64 LE, flags u8), CRC32C of every byte
// before u32 LE.
func encode(m map[uint64]holdapi.Hold) []byte {
	b := make([]byte, 0, 9+len(m)*entryBytes)
	b = append(b, fileVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m)))
	for _, local := range slices.Sorted(maps.Keys(m)) {
		h := m[local]
		var f byte
		if h.Compliance {
			f |= flagComp
		}
		if h.Legal {
			f |= flagLegal
		}
		b = binary.LittleEndian.AppendUint64(b, local)
		b = binary.LittleEndian.AppendUint64(b, uint64(h.Until))
		b = append(b, f)
	}
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

var errCorrupt = errors.New("corrupt holds file")

func decode(b []byte) (map[uint64]holdapi.Hold, error) {
	if len(b) < 9 {
		return nil, fmt.Errorf("%w: %d bytes", errCorrupt, len(b))
	}
	body := b[:len(b)-4]
	if crc32c.Checksum(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum", errCorrupt)
	}
	if body[0] != fileVersion {
		return nil, fmt.Errorf("%w: version %d", errCorrupt, body[0])
	}
	n := binary.LittleEndian.Uint32(body[1:5])
	if uint64(len(body)-5) != uint64(n)*entryBytes {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", errCorrupt, n, len(body))
	}
	m := make(map[uint64]holdapi.Hold, n)
	for e := body[5:]; len(e) > 0; e = e[entryBytes:] {
		f := e[16]
		if f&^(flagComp|flagLegal) != 0 {
			return nil, fmt.Errorf("%w: flags %#x", errCorrupt, f)
		}
		m[binary.LittleEndian.Uint64(e)] = holdapi.Hold{Until: int64(binary.LittleEndian.Uint64(e[8:])), Compliance: f&flagComp != 0, Legal: f&flagLegal != 0}
	}
	return m, nil
}
