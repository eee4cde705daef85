// Package ecread reads the blocks of erasure-coded containers for the key
// client (and so for `spindle get` and the S3 gateway, which do not know
// the difference): the container's layout from the meta service
// (ecapi.GetLayout), its shards opened as an ec.Set over bulk shard reads
// (bulk.ShardReader, one connection per shard), a block's range read at
// its place in the logical bytes — from the data shards alone when they
// are whole, reconstructed from any k verified shards otherwise.
//
// Invariants: every byte returned matched the CRC32C of its 16 KiB of
// shard (ec.Set.ReadAt), and a whole block read matches the block's
// CRC32C recorded at its conversion as well; a set that cannot answer is
// dropped and opened again once (a datanode back, a layout changed: a
// shard rebuilt elsewhere, a new generation after a compaction), and
// a degraded one (a shard missing, a stripe rebuilt) is opened again after
// RefreshDegraded (its shard may have been rebuilt elsewhere).
//
// Concurrency: a Reader may be used from any goroutine; its cache of
// open sets is guarded by its mutex, and ec.Set is safe for concurrent
// reads.
package ecread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// ErrNotCoded: the container is not erasure-coded (read its replicas).
var ErrNotCoded = errors.New("ecread: container not erasure-coded")

// ShardTimeout bounds each shard read.
const ShardTimeout = 10 * time.Second

// Reader reads blocks of EC containers.
type Reader struct {
	meta ecapi.Doer
	tls  *tlsconf.Settings

	mu   sync.Mutex
	sets map[uint64]*set
}

type set struct {
	s       *ec.Set
	readers []*bulk.ShardReader
	blocks  map[uint64]ecapi.Block
	opened  time.Time
}

// RefreshDegraded: a set opened with a shard missing, or that rebuilt a
// stripe since, is opened again (a fresh layout: the shard may have been
// rebuilt elsewhere) when older than this.
const RefreshDegraded = 30 * time.Second

// stale says whether s should be opened again (RefreshDegraded).
func (s *set) stale() bool {
	return time.Since(s.opened) > RefreshDegraded && (len(s.s.Missing()) > 0 || s.s.Reconstructions() > 0)
}

func (s *set) close() {
	for _, r := range s.readers {
		if r != nil {
			_ = r.Close() // closes a connection: nothing to report
		}
	}
}

// New is a Reader asking meta for layouts and dialling datanodes with
// sec (nil: plaintext).
func New(meta ecapi.Doer, sec *tlsconf.Settings) *Reader {
	return &Reader{meta: meta, tls: sec, sets: map[uint64]*set{}}
}

// Coded says whether container is known erasure-coded (a set of it is
// open): its reads go to its shards first.
func (r *Reader) Coded(container uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets[container] != nil
}

// ReadBlock reads n bytes at off of block local of container.
func (r *Reader) ReadBlock(ctx context.Context, container, local, off, n uint64) ([]byte, error) {
	var err error
	for attempt := range 2 {
		var s *set
		if s, err = r.open(ctx, container, attempt > 0); err != nil {
			return nil, err
		}
		var b []byte
		if b, err = s.read(container, local, off, n); err == nil {
			return b, nil
		}
		r.mu.Lock()
		if r.sets[container] == s {
			delete(r.sets, container)
			s.close()
		}
		r.mu.Unlock()
	}
	return nil, err
}

func (s *set) read(container, local, off, n uint64) ([]byte, error) {
	bl, ok := s.blocks[local]
	if !ok || off+n > bl.Length {
		return nil, fmt.Errorf("%w: block %d/%d: %d bytes at %d not in the EC container's layout", metaapi.ErrNotFound, container, local, n, off)
	}
	b := make([]byte, n)
	if _, err := s.s.ReadAt(b, int64(bl.Offset+off)); err != nil && !(errors.Is(err, io.EOF) && off+n == bl.Length) {
		return nil, fmt.Errorf("ecread: block %d/%d: %w", container, local, err)
	}
	if off == 0 && n == bl.Length && crc32c.Checksum(b) != bl.CRC32C {
		return nil, fmt.Errorf("ecread: block %d/%d: crc32c %08x, recorded %08x", container, local, crc32c.Checksum(b), bl.CRC32C)
	}
	return b, nil
}

// open returns the container's open set (fresh: open it again).
func (r *Reader) open(ctx context.Context, container uint64, fresh bool) (*set, error) {
	r.mu.Lock()
	s := r.sets[container]
	r.mu.Unlock()
	if s != nil && !fresh && !s.stale() {
		return s, nil
	}
	l, err := ecapi.GetLayout(ctx, r.meta, container)
	if errors.Is(err, metaapi.ErrNotFound) {
		return nil, fmt.Errorf("%w: %v", ErrNotCoded, err)
	}
	if err != nil {
		return nil, err
	}
	s = &set{blocks: map[uint64]ecapi.Block{}, opened: time.Now()}
	shards := make([]io.ReaderAt, len(l.Shards))
	for i, sh := range l.Shards {
		if sh.Addr == "" {
			continue
		}
		sr := &bulk.ShardReader{Sec: r.tls, Addr: sh.Addr, Container: container, Generation: l.Generation, Index: i, Timeout: ShardTimeout}
		s.readers = append(s.readers, sr)
		shards[i] = sr
	}
	if s.s, err = ec.Open(shards); err == nil && (s.s.Container() != container || s.s.Generation() != l.Generation) {
		err = fmt.Errorf("%w: shards of container %d generation %d, the layout says %d", ec.ErrCorrupt, s.s.Container(), s.s.Generation(), l.Generation)
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("ecread: container %d (%s): %w", container, l.Policy, err)
	}
	for _, b := range l.Blocks {
		s.blocks[b.Local] = b
	}
	r.mu.Lock()
	if old := r.sets[container]; old != nil {
		old.close()
	}
	r.sets[container] = s
	r.mu.Unlock()
	return s, nil
}

// Close closes every open set's connections.
func (r *Reader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.sets {
		s.close()
		delete(r.sets, id)
	}
}
