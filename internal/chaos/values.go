package chaos

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// Values are never kept in memory: value (seed, key, version) of n bytes
// is regenerated whenever it is sent or checked. Its first headerBytes
// name it, so that a read tells which put it returns:
//
//	offset  size  field
//	0       8     magic "SPCHAOS1"
//	8       8     key index (little-endian)
//	16      8     version (little-endian, unique in the run)
//	24      8     size in bytes (little-endian)
//	32      n-32  splitmix64 stream seeded by (seed, key, version)
const (
	headerBytes = 32
	magic       = "SPCHAOS1"
	// MinValueBytes and MaxValueBytes bound a value's size.
	MinValueBytes = 1 << 10
	MaxValueBytes = 4 << 20
)

// valueID names one value.
type valueID struct {
	key     uint64
	version uint64
	size    int64
}

// valueGen produces the bytes of one value, from any offset on.
type valueGen struct {
	id    valueID
	state uint64 // splitmix64 state for the next 8-byte word
	word  [8]byte
	pos   int64 // bytes produced
}

func newValueGen(seed int64, id valueID) *valueGen {
	st := uint64(seed)*0x9e3779b97f4a7c15 ^ id.key*0xbf58476d1ce4e5b9 ^ id.version*0x94d049bb133111eb
	return &valueGen{id: id, state: st}
}

func (g *valueGen) next() uint64 {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fill writes the next len(p) bytes of the value into p (p must not go
// past its end).
func (g *valueGen) fill(p []byte) {
	for len(p) > 0 {
		if g.pos < headerBytes {
			var h [headerBytes]byte
			copy(h[:8], magic)
			binary.LittleEndian.PutUint64(h[8:], g.id.key)
			binary.LittleEndian.PutUint64(h[16:], g.id.version)
			binary.LittleEndian.PutUint64(h[24:], uint64(g.id.size))
			n := copy(p, h[g.pos:])
			p, g.pos = p[n:], g.pos+int64(n)
			continue
		}
		off := (g.pos - headerBytes) % 8
		if off == 0 {
			binary.LittleEndian.PutUint64(g.word[:], g.next())
		}
		n := copy(p, g.word[off:])
		p, g.pos = p[n:], g.pos+int64(n)
	}
}

// valueReader streams a value (an io.Reader for Put) and its CRC32C.
type valueReader struct {
	g   *valueGen
	crc uint32
}

func newValueReader(seed int64, id valueID) *valueReader {
	return &valueReader{g: newValueGen(seed, id)}
}

func (r *valueReader) Read(p []byte) (int, error) {
	left := r.g.id.size - r.g.pos
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	r.g.fill(p)
	r.crc = crc32c.Update(r.crc, p)
	return len(p), nil
}

// valueChecker is the io.Writer a Get writes to: it reads the header,
// regenerates the value it names and compares every byte. It never fails
// a write (the Get must run to its end, so that a wrong value returned
// without error is seen as such); the verdict is in result.
type valueChecker struct {
	seed   int64
	head   [headerBytes]byte
	n      int64 // bytes received
	g      *valueGen
	buf    []byte
	crc    uint32
	badAt  int64 // first differing offset, -1: none
	badHdr bool
}

func newValueChecker(seed int64) *valueChecker { return &valueChecker{seed: seed, badAt: -1} }

func (c *valueChecker) Write(p []byte) (int, error) {
	c.crc = crc32c.Update(c.crc, p)
	total := len(p)
	for len(p) > 0 && c.n < headerBytes {
		k := copy(c.head[c.n:], p)
		c.n += int64(k)
		p = p[k:]
		if c.n == headerBytes {
			c.startBody()
		}
	}
	if len(p) == 0 || c.g == nil {
		c.n += int64(len(p))
		return total, nil
	}
	if cap(c.buf) < len(p) {
		c.buf = make([]byte, len(p))
	}
	want := c.buf[:min(int64(len(p)), max(c.g.id.size-c.n, 0))] // past its size: longer than its header says
	c.g.fill(want)
	if c.badAt < 0 {
		for i := range want {
			if want[i] != p[i] {
				c.badAt = c.n + int64(i)
				break
			}
		}
		if c.badAt < 0 && len(want) < len(p) {
			c.badAt = c.n + int64(len(want))
		}
	}
	c.n += int64(len(p))
	return total, nil
}

func (c *valueChecker) startBody() {
	id := valueID{
		key:     binary.LittleEndian.Uint64(c.head[8:]),
		version: binary.LittleEndian.Uint64(c.head[16:]),
		size:    int64(binary.LittleEndian.Uint64(c.head[24:])),
	}
	if string(c.head[:8]) != magic || id.size < headerBytes || id.size > MaxValueBytes {
		c.badHdr, c.badAt = true, 0
		return
	}
	c.g = newValueGen(c.seed, id)
	c.g.pos = headerBytes // the header takes no words of the stream
}

// errWrongBytes marks a value read back that is not the value it claims
// to be, or not the one expected.
var errWrongBytes = errors.New("chaos: wrong bytes read")

// result says which value was received, and checks it: the bytes must be
// exactly the value its header names, and that value must be one of the
// key's (want, when its version is not 0, must match exactly).
func (c *valueChecker) result(key uint64) (valueID, error) {
	if c.n < headerBytes || c.badHdr {
		return valueID{}, fmt.Errorf("%w: %d bytes without a valid header", errWrongBytes, c.n)
	}
	id := c.g.id
	switch {
	case id.key != key:
		return id, fmt.Errorf("%w: key %d's read returned key %d's value (version %d)", errWrongBytes, key, id.key, id.version)
	case c.n != id.size:
		return id, fmt.Errorf("%w: %d bytes, the value (key %d version %d) has %d", errWrongBytes, c.n, id.key, id.version, id.size)
	case c.badAt >= 0:
		return id, fmt.Errorf("%w: key %d version %d differs from offset %d", errWrongBytes, id.key, id.version, c.badAt)
	}
	return id, nil
}
