package ec

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/reedsolomon"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// ErrUnrecoverable: fewer than k shards of a stripe are whole.
var ErrUnrecoverable = errors.New("ec: fewer good shards than data shards")

// Set is a container's shards opened for reading.
type Set struct {
	p          Policy
	h          header
	shards     []io.ReaderAt // nil: missing (or its header or table is bad)
	crcs       [][]uint32
	enc        reedsolomon.Encoder
	cellPool   sync.Pool // *[]byte of one cell
	stripePool sync.Pool // *[][]byte of k+m cells
	// reconstructions counts the stripes rebuilt (degraded reads).
	reconstructions atomic.Uint64
}

// Open reads the headers and checksum tables of a container's shards
// (len(shards) == k+m of their policy, nil for a missing one). A shard
// whose header or table is corrupt is left out (Missing lists it); the
// headers of the others must agree. At least k must be whole.
func Open(shards []io.ReaderAt) (*Set, error) {
	s := &Set{shards: make([]io.ReaderAt, len(shards)), crcs: make([][]uint32, len(shards))}
	var first *header
	var errs []error
	for i, r := range shards {
		if r == nil {
			continue
		}
		hb := make([]byte, headerBytes)
		if _, err := r.ReadAt(hb, 0); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
			continue
		}
		h, err := decodeHeader(hb)
		if err == nil && h.index != i {
			err = fmt.Errorf("%w: shard %d holds index %d", ErrCorrupt, i, h.index)
		}
		if err == nil && first != nil && (h.data != first.data || h.parity != first.parity || h.cellBytes != first.cellBytes || h.container != first.container || h.generation != first.generation || h.logical != first.logical) {
			err = fmt.Errorf("%w: shard %d is of another set (container %d, %d+%d)", ErrCorrupt, i, h.container, h.data, h.parity)
		}
		var crcs []uint32
		if err == nil {
			crcs, err = readTable(r, h)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if first == nil {
			first = &h
		}
		s.shards[i], s.crcs[i] = r, crcs
	}
	if first == nil {
		return nil, fmt.Errorf("%w: no shard readable: %v", ErrUnrecoverable, errors.Join(errs...))
	}
	s.h = *first
	s.p = Policy{Data: first.data, Parity: first.parity, CellBytes: first.cellBytes}
	if len(shards) != s.p.Shards() {
		return nil, fmt.Errorf("ec: %d shards given for a %d+%d set", len(shards), s.p.Data, s.p.Parity)
	}
	if good := len(shards) - len(s.Missing()); good < s.p.Data {
		return nil, fmt.Errorf("%w: %d of %d shards readable, %d needed: %v", ErrUnrecoverable, good, len(shards), s.p.Data, errors.Join(errs...))
	}
	enc, err := reedsolomon.New(s.p.Data, s.p.Parity, reedsolomon.WithMaxGoroutines(1)) // reads run side by side: one core each
	if err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	s.enc = enc
	cell := s.p.CellBytes
	s.cellPool.New = func() any { b := make([]byte, cell); return &b }
	n := s.p.Shards()
	s.stripePool.New = func() any {
		buf := make([]byte, n*cell)
		cells := make([][]byte, n)
		for i := range cells {
			cells[i] = buf[i*cell : (i+1)*cell : (i+1)*cell]
		}
		return &cells
	}
	return s, nil
}

// Size is the container's logical bytes.
func (s *Set) Size() int64 { return s.h.logical }

// Policy is the set's shape.
func (s *Set) Policy() Policy { return s.p }

// Container is the container the shards belong to.
func (s *Set) Container() uint64 { return s.h.container }

// Generation is the shards' generation (0: the conversion's; each
// compaction writes the next).
func (s *Set) Generation() uint32 { return s.h.generation }

// Missing lists the shards not read (absent, or a bad header or table).
func (s *Set) Missing() []int {
	var out []int
	for i, r := range s.shards {
		if r == nil {
			out = append(out, i)
		}
	}
	return out
}

// Reconstructions counts the stripes rebuilt from parity so far.
func (s *Set) Reconstructions() uint64 { return s.reconstructions.Load() }

// ReadAt reads len(b) logical bytes at off: each stripe from its data
// shards when their chunks verify, else rebuilt from any k shards whose
// chunks verify.
func (s *Set) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("ec: read at %d", off)
	}
	if off >= s.h.logical {
		return 0, io.EOF
	}
	want := len(b)
	b = b[:min(int64(len(b)), s.h.logical-off)]
	done := 0
	stripeBytes := s.p.StripeBytes()
	for done < len(b) {
		pos := off + int64(done)
		stripe := pos / stripeBytes
		end := min((stripe+1)*stripeBytes, off+int64(len(b)))
		n := int(end - pos)
		if err := s.readStripeRange(b[done:done+n], stripe, pos-stripe*stripeBytes); err != nil {
			return done, err
		}
		done += n
	}
	if done < want {
		return done, io.EOF
	}
	return done, nil
}

// readStripeRange fills b from stripe at offset within it.
func (s *Set) readStripeRange(b []byte, stripe, within int64) error {
	cell := int64(s.p.CellBytes)
	for done := 0; done < len(b); {
		pos := within + int64(done)
		j := int(pos / cell)
		inCell := pos % cell
		n := int(min(cell-inCell, int64(len(b)-done)))
		if !s.readCellRange(b[done:done+n], j, stripe, inCell) {
			return s.readDegraded(b, stripe, within)
		}
		done += n
	}
	return nil
}

// readCellRange reads b from data cell j of stripe at offset inCell,
// verifying the 16 KiB chunks it covers; false when the shard is missing
// or a chunk does not verify.
func (s *Set) readCellRange(b []byte, j int, stripe, inCell int64) bool {
	r := s.shards[j]
	if r == nil {
		return false
	}
	lo := inCell / ChunkBytes * ChunkBytes
	hi := (inCell + int64(len(b)) + ChunkBytes - 1) / ChunkBytes * ChunkBytes
	base := stripe * int64(s.p.CellBytes)
	buf := b // chunk-aligned at both ends: read in place, no copy
	if lo != inCell || hi-lo != int64(len(b)) {
		bp := s.cellPool.Get().(*[]byte)
		defer s.cellPool.Put(bp)
		buf = (*bp)[:hi-lo]
	}
	if _, err := r.ReadAt(buf, headerBytes+base+lo); err != nil {
		return false
	}
	first := (base + lo) / ChunkBytes
	for k := int64(0); k < int64(len(buf)); k += ChunkBytes {
		if crc32c.Checksum(buf[k:k+ChunkBytes]) != s.crcs[j][first+k/ChunkBytes] {
			return false
		}
	}
	if &buf[0] != &b[0] {
		copy(b, buf[inCell-lo:])
	}
	return true
}

// readDegraded rebuilds stripe from the shards whose cells verify and
// fills b from offset within.
func (s *Set) readDegraded(b []byte, stripe, within int64) error {
	cp := s.stripePool.Get().(*[][]byte)
	defer s.stripePool.Put(cp)
	all := *cp
	cells := make([][]byte, len(all))
	good := 0
	cell := int64(s.p.CellBytes)
	base := stripe * cell
	// inB[i]: data cell i lies whole inside b, so it is read (or
	// rebuilt) where it is wanted and not copied after.
	inB := make([]bool, s.p.Data)
	for i := range inB {
		lo := int64(i)*cell - within
		inB[i] = lo >= 0 && lo+cell <= int64(len(b))
	}
	for i, r := range s.shards {
		if r == nil || good == s.p.Data {
			continue
		}
		c := all[i]
		if i < s.p.Data && inB[i] {
			lo := int64(i)*cell - within
			c = b[lo : lo+cell : lo+cell]
		}
		if _, err := r.ReadAt(c, headerBytes+base); err != nil {
			continue
		}
		ok := true
		first := base / ChunkBytes
		for k := 0; k < len(c); k += ChunkBytes {
			if crc32c.Checksum(c[k:k+ChunkBytes]) != s.crcs[i][first+int64(k/ChunkBytes)] {
				ok = false
				break
			}
		}
		if ok {
			cells[i] = c
			good++
		}
	}
	if good < s.p.Data {
		return fmt.Errorf("%w: stripe %d of container %d: %d good shards, %d needed", ErrUnrecoverable, stripe, s.h.container, good, s.p.Data)
	}
	for i := range cells {
		if cells[i] == nil {
			cells[i] = all[i][:0]
			if i < s.p.Data && inB[i] { // rebuilt in place (ReconstructData uses the capacity)
				lo := int64(i)*cell - within
				cells[i] = b[lo : lo : lo+cell]
			}
		}
	}
	if err := s.enc.ReconstructData(cells); err != nil {
		return fmt.Errorf("ec: reconstruct stripe %d: %w", stripe, err)
	}
	s.reconstructions.Add(1)
	for done := 0; done < len(b); {
		pos := within + int64(done)
		j, inCell := int(pos/cell), pos%cell
		if j < s.p.Data && inB[j] {
			done += int(cell) // already in place
			continue
		}
		done += copy(b[done:], cells[j][inCell:])
	}
	return nil
}
