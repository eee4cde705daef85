package transport

import (
	"fmt"
	"net"
)

// maxRetainedEncoderBytes bounds the prefix-and-header buffer an Encoder
// keeps between frames; a larger one (a batch of many frames, a header near
// MaxHeaderBytes) is dropped at Reset.
const maxRetainedEncoderBytes = 2 * MaxHeaderBytes

// Encoder lays out one or more frames for a single gathered write: the
// prefixes and headers are encoded into one reused buffer, and each
// payload is referenced, never copied. Buffers returns the iovecs:
//
//	[prefix₁+header₁, payload₁…, prefix₂+header₂, payload₂…, …]
//
// with the prefix+header runs of consecutive payload-less frames merged.
// An Encoder is not safe for concurrent use; its zero value is ready.
type Encoder struct {
	buf    []byte // prefixes and headers, frame after frame
	segs   []seg
	vec    net.Buffers
	bytes  int // total frame bytes
	frames int
}

// seg is one iovec: a range of buf, or a payload slice (p != nil).
type seg struct {
	lo, hi int
	p      []byte
}

var zeroPrefix [PrefixBytes]byte

// Append adds a frame with header m and the concatenation of payload as
// its payload. The payload slices are referenced until Reset and must not
// change before the frames are written. It refuses (ErrTooLarge) a header
// or payload over its limit and (ErrInvalid) a payload that does not match
// the header (a WriteChunk's Length, a RaftMessage's PayloadLengths) or a
// payload on a type that carries none; the Encoder is then as before.
func (e *Encoder) Append(m Message, payload ...[]byte) error {
	t := m.Type()
	start := len(e.buf)
	b, err := m.appendHeader(append(e.buf, zeroPrefix[:]...))
	if err != nil {
		e.buf = e.buf[:start]
		return err
	}
	e.buf = b
	headerLen := len(b) - start - PrefixBytes
	if headerLen > MaxHeaderBytes {
		e.buf = e.buf[:start]
		return fmt.Errorf("transport: %s header of %d bytes over limit %d: %w", t, headerLen, MaxHeaderBytes, ErrTooLarge)
	}
	total := 0
	for _, p := range payload {
		total += len(p)
	}
	if total > MaxPayloadBytes {
		e.buf = e.buf[:start]
		return fmt.Errorf("transport: %s payload of %d bytes over limit %d: %w", t, total, MaxPayloadBytes, ErrTooLarge)
	}
	if total > 0 && !t.hasPayload() {
		e.buf = e.buf[:start]
		return fmt.Errorf("transport: %s cannot carry a payload (%d bytes): %w", t, total, ErrInvalid)
	}
	if err := m.checkPayload(total); err != nil {
		e.buf = e.buf[:start]
		return fmt.Errorf("transport: refusing to send: %v: %w", err, ErrInvalid)
	}
	putPrefix(e.buf[start:], t, headerLen, total)
	if n := len(e.segs); n > 0 && e.segs[n-1].p == nil && e.segs[n-1].hi == start {
		e.segs[n-1].hi = len(e.buf)
	} else {
		e.segs = append(e.segs, seg{lo: start, hi: len(e.buf)})
	}
	for _, p := range payload {
		if len(p) > 0 {
			e.segs = append(e.segs, seg{p: p})
		}
	}
	e.bytes += PrefixBytes + headerLen + total
	e.frames++
	return nil
}

// Buffers returns the frames' iovecs (see Encoder). They alias the
// Encoder's buffer and the payloads, and stay valid until the next Append
// or Reset. Writing them with net.Buffers.WriteTo consumes the returned
// value, not the Encoder: Buffers can be called again to write them again.
func (e *Encoder) Buffers() net.Buffers {
	e.vec = e.vec[:0]
	for _, s := range e.segs {
		if s.p != nil {
			e.vec = append(e.vec, s.p)
		} else {
			e.vec = append(e.vec, e.buf[s.lo:s.hi:s.hi])
		}
	}
	return e.vec
}

// Len is the number of bytes of the frames appended since the last Reset.
func (e *Encoder) Len() int { return e.bytes }

// Frames is the number of frames appended since the last Reset.
func (e *Encoder) Frames() int { return e.frames }

// Reset forgets every frame and drops the references to their payloads,
// keeping the buffers for the next frames.
func (e *Encoder) Reset() {
	clear(e.segs)
	e.segs = e.segs[:0]
	clear(e.vec[:cap(e.vec)])
	e.vec = e.vec[:0]
	if cap(e.buf) > maxRetainedEncoderBytes {
		e.buf = nil
	} else {
		e.buf = e.buf[:0]
	}
	e.bytes, e.frames = 0, 0
}
