// Package teragen generates Hadoop TeraGen's rows and computes
// TeraValidate's checksum of them, so that `spindle bench teragen` writes
// exactly the bytes a Hadoop TeraGen job writes (seed 001) and the
// figures can be compared row for row.
//
// # Row format (100 bytes, Hadoop's GenSort.generateRecord)
//
//	| offset | bytes | content                                                   |
//	|--------|-------|-----------------------------------------------------------|
//	|      0 |    10 | key: the 10 most significant bytes of the row's random    |
//	|     10 |     2 | 0x00 0x11                                                 |
//	|     12 |    32 | the row number, 128 bits as 32 upper-case hex digits      |
//	|     44 |     4 | 0x88 0x99 0xAA 0xBB                                       |
//	|     48 |    48 | filler: hex digits 20..31 of the random (its low 48 bits) |
//	|        |       | as upper-case ASCII, each written four times              |
//	|     96 |     4 | 0xCC 0xDD 0xEE 0xFF                                       |
//
// The random of row r is X(r+1) of the 128-bit linear congruential
// generator X(n+1) = (a·X(n) + c) mod 2^128, X(0) = 0, with
// a = 0x2360ed051fc65da44385df649fccf645 and
// c = 0x4a696d47726179524950202020202001 (Hadoop's Random16, after
// Nyberg's gensort). Skipping to any row costs at most 128 steps (powers
// of two of the generator), so any range of rows is generated without
// generating the rows before it: a writer of rows [s, e) needs nothing
// else.
//
// # Checksum (TeraGen's CHECKSUM counter, TeraValidate's checksum)
//
// The sum, modulo 2^64, of the CRC32 (IEEE, java.util.zip.CRC32) of every
// 100-byte row. It does not depend on the order of the rows, so sums of
// disjoint ranges add up. Hadoop's TeraGen of 10^8 rows (10 GB) prints
// CHECKSUM=214760662691937609 (seed 001); TestChecksumSeed001 checks that
// this package gives the same.
//
// # Invariants and concurrency
//
// Generation is a pure function of the row number: a Reader holds one row
// of carry, never the data. A Reader and a Summer are used by one
// goroutine; Row and Random are safe anywhere.
package teragen

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
)

// RowSize is the size of one row.
const RowSize = 100

// KeySize is the size of a row's key (the sort key of TeraSort).
const KeySize = 10

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

func (x u128) mul(y u128) u128 {
	hi, lo := bits.Mul64(x.lo, y.lo)
	hi += x.hi*y.lo + x.lo*y.hi
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, carry)
	return u128{hi, lo}
}

// step is one power of the generator: x ↦ a·x + c.
type step struct{ a, c u128 }

// gen[i] is the generator applied 2^i times.
var gen [128]step

func init() {
	gen[0] = step{
		a: u128{0x2360ed051fc65da4, 0x4385df649fccf645},
		c: u128{0x4a696d4772617952, 0x4950202020202001},
	}
	for i := 1; i < len(gen); i++ {
		p := gen[i-1]
		// f∘f(x) = a·(a·x + c) + c = a²·x + (a·c + c)
		gen[i] = step{a: p.a.mul(p.a), c: p.a.mul(p.c).add(p.c)}
	}
}

// skipAhead returns X(n), the generator's state after n steps from 0.
func skipAhead(n uint64) u128 {
	var x u128
	for i := 0; n != 0; i++ {
		if n&1 != 0 {
			x = x.mul(gen[i].a).add(gen[i].c)
		}
		n >>= 1
	}
	return x
}

func next(x u128) u128 { return x.mul(gen[0].a).add(gen[0].c) }

// Random returns the 128-bit random of row r (hi, lo): X(r+1).
func Random(r uint64) (hi, lo uint64) {
	x := next(skipAhead(r))
	return x.hi, x.lo
}

const hexDigits = "0123456789ABCDEF"

// fixed holds the bytes every row has: breaks, and the row number's
// leading zero digits (rows < 2^64).
var fixed = func() [RowSize]byte {
	var b [RowSize]byte
	b[10], b[11] = 0x00, 0x11
	for i := 12; i < 28; i++ {
		b[i] = '0'
	}
	b[44], b[45], b[46], b[47] = 0x88, 0x99, 0xAA, 0xBB
	b[96], b[97], b[98], b[99] = 0xCC, 0xDD, 0xEE, 0xFF
	return b
}()

// put writes row r with random x into p (len ≥ RowSize).
func put(p []byte, r uint64, x u128) {
	p = p[:RowSize]
	copy(p, fixed[:])
	for i := range 8 {
		p[i] = byte(x.hi >> (56 - 8*i))
	}
	p[8] = byte(x.lo >> 56)
	p[9] = byte(x.lo >> 48)
	// The row number: hex digits 16..31 (the high 64 bits are 0).
	for i := range 16 {
		p[28+i] = hexDigits[(r>>(60-4*i))&0xf]
	}
	// Filler: hex digits 20..31 of the random = nibbles 11..0 of its low
	// 48 bits, most significant first, each four times.
	for i := range 12 {
		d := hexDigits[(x.lo>>(44-4*i))&0xf]
		o := 48 + 4*i
		p[o], p[o+1], p[o+2], p[o+3] = d, d, d, d
	}
}

// Row writes row r into p[:RowSize] (p must hold a row).
func Row(p []byte, r uint64) {
	put(p, r, next(skipAhead(r)))
}

// RowChecksum is the CRC32 (IEEE) of one row, the term the checksum adds.
func RowChecksum(row []byte) uint64 { return uint64(crc32.ChecksumIEEE(row[:RowSize])) }

// MaxRows bounds a range: row numbers stay below 2^63, far beyond any run.
const MaxRows = 1 << 62

// Reader streams rows [start, start+count) as bytes, generating them as
// they are read (it holds one row, never the data), and sums their
// checksum as it goes. Not safe for concurrent use.
type Reader struct {
	next, end uint64 // next row to generate, end of the range
	x         u128   // random of row next-1 (X(next))
	sum       uint64 // checksum of the rows generated
	carry     [RowSize]byte
	carryOff  int // carry[carryOff:] is still to be returned
}

// NewReader returns a Reader of rows [start, start+count).
func NewReader(start, count uint64) (*Reader, error) {
	if start > MaxRows || count > MaxRows-start {
		return nil, fmt.Errorf("teragen: rows [%d, +%d) beyond %d", start, count, uint64(MaxRows))
	}
	return &Reader{next: start, end: start + count, x: skipAhead(start), carryOff: RowSize}, nil
}

// genInto writes the next row into p and advances.
func (r *Reader) genInto(p []byte) {
	r.x = next(r.x)
	put(p, r.next, r.x)
	r.sum += RowChecksum(p)
	r.next++
}

// Read fills p with the next bytes of the range; io.EOF at its end.
func (r *Reader) Read(p []byte) (int, error) {
	n := 0
	if r.carryOff < RowSize {
		c := copy(p, r.carry[r.carryOff:])
		r.carryOff += c
		n += c
	}
	for len(p)-n >= RowSize && r.next < r.end {
		r.genInto(p[n:])
		n += RowSize
	}
	if n < len(p) && r.next < r.end {
		r.genInto(r.carry[:])
		c := copy(p[n:], r.carry[:])
		r.carryOff = c
		n += c
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Checksum is the checksum of the rows generated so far (all of them once
// Read returned io.EOF).
func (r *Reader) Checksum() uint64 { return r.sum }

// Remaining is the bytes not yet returned.
func (r *Reader) Remaining() int64 {
	return int64(r.end-r.next)*RowSize + int64(RowSize-r.carryOff)
}

// Summer is an io.Writer that cuts what it is given into rows and sums
// their checksum (TeraValidate over a stream of rows). Not safe for
// concurrent use.
type Summer struct {
	rows    uint64
	sum     uint64
	partial [RowSize]byte
	n       int // bytes in partial
}

// Write adds p's rows; a row split across writes is completed by the next.
func (s *Summer) Write(p []byte) (int, error) {
	total := len(p)
	if s.n > 0 {
		c := copy(s.partial[s.n:], p)
		s.n += c
		p = p[c:]
		if s.n < RowSize {
			return total, nil
		}
		s.add(s.partial[:])
		s.n = 0
	}
	for len(p) >= RowSize {
		s.add(p[:RowSize])
		p = p[RowSize:]
	}
	s.n = copy(s.partial[:], p)
	return total, nil
}

func (s *Summer) add(row []byte) {
	s.sum += RowChecksum(row)
	s.rows++
}

// ErrPartialRow is a stream whose length is not a whole number of rows.
var ErrPartialRow = errors.New("teragen: stream ends inside a row")

// Result returns the rows and checksum summed; ErrPartialRow when the
// bytes written do not end on a row boundary.
func (s *Summer) Result() (rows, checksum uint64, err error) {
	if s.n != 0 {
		return s.rows, s.sum, fmt.Errorf("%w (%d bytes after row %d)", ErrPartialRow, s.n, s.rows)
	}
	return s.rows, s.sum, nil
}

// Checksum returns the checksum of rows [start, start+count), generating
// them (about 1 GB/s of rows per core).
func Checksum(start, count uint64) (uint64, error) {
	r, err := NewReader(start, count)
	if err != nil {
		return 0, err
	}
	var buf [RowSize * 1024]byte
	for {
		if _, err := r.Read(buf[:]); err == io.EOF {
			return r.Checksum(), nil
		}
	}
}
