package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame prefix constants. See the package comment for the layout.
const (
	// PrefixBytes is the size of the fixed frame prefix.
	PrefixBytes = 12
	// Magic0 and Magic1 are the first two bytes of every frame: "SW",
	// Spindle Wire.
	Magic0 byte = 'S'
	Magic1 byte = 'W'
	// Version is the only protocol version this package speaks. A frame of
	// any other version is refused (ErrBadFrame).
	Version byte = 1
)

// Limits. Every length read from the wire is checked against these before
// anything is allocated for it; the sender checks them too.
const (
	// MaxHeaderBytes bounds a frame's protobuf header.
	MaxHeaderBytes = 1 << 20
	// MaxPayloadBytes bounds a frame's raw payload: one chunk of the
	// engine's maximum size (64 MiB) plus 4 MiB of slack for the other,
	// smaller chunks a Raft message may carry beside it.
	MaxPayloadBytes = 64<<20 + 4<<20
	// MaxRaftEntries bounds the entries of one RaftMessage. An entry that
	// carries a WriteChunk header takes ≥ 16 bytes, so a header of
	// MaxHeaderBytes never legitimately holds this many; the bound caps
	// what decoding a hostile message of empty entries allocates (~150
	// bytes each).
	MaxRaftEntries = 1 << 16
)

// MsgType is the message type byte of a frame: it names the message its
// header holds.
type MsgType uint8

// Message types. 0 is never valid; types above TypePing are reserved and
// refused (ErrBadFrame) by this version. A server older than TypePing
// refuses a Ping the same way and closes the connection: a prober reads
// that as an answer (the process is running), not as silence.
const (
	TypeWriteChunk  MsgType = 1 // header WriteChunk; payload the chunk bytes
	TypePutBlock    MsgType = 2 // header PutBlock; no payload
	TypeReadChunk   MsgType = 3 // header ReadChunk; no payload
	TypeGetBlock    MsgType = 4 // header GetBlock; no payload
	TypeResponse    MsgType = 5 // header Response; payload the data read, if any
	TypeRaftMessage MsgType = 6 // header RaftMessage; payload the chunk segments
	TypePing        MsgType = 7 // header Ping; no payload; answered by the Server itself
	maxType                 = TypePing
)

var typeNames = [...]string{
	TypeWriteChunk:  "WriteChunk",
	TypePutBlock:    "PutBlock",
	TypeReadChunk:   "ReadChunk",
	TypeGetBlock:    "GetBlock",
	TypeResponse:    "Response",
	TypeRaftMessage: "RaftMessage",
	TypePing:        "Ping",
}

func (t MsgType) String() string {
	if t >= 1 && t <= maxType {
		return typeNames[t]
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Valid reports whether t is a message type of this protocol version.
func (t MsgType) Valid() bool { return t >= 1 && t <= maxType }

// hasPayload reports whether frames of type t may carry a payload.
func (t MsgType) hasPayload() bool {
	return t == TypeWriteChunk || t == TypeResponse || t == TypeRaftMessage
}

// Errors; test them with errors.Is.
var (
	// ErrBadFrame marks bytes from the peer that are not a valid frame: bad
	// magic or version, unknown type, a length over its limit, a header
	// that does not decode, a payload that does not match its header. The
	// stream cannot be trusted after it: the connection must be closed.
	ErrBadFrame = errors.New("bad frame")
	// ErrTooLarge is a frame this side refuses to send because its header
	// or payload is over the limit. Nothing was written; the connection
	// stays usable.
	ErrTooLarge = errors.New("frame too large")
	// ErrInvalid is a frame this side refuses to send because its payload
	// does not match its header. Nothing was written; the connection stays
	// usable.
	ErrInvalid = errors.New("invalid frame")
	// ErrClosed is any use of a Conn, Client or Server after Close.
	ErrClosed = errors.New("transport closed")
)

func badFrame(format string, args ...any) error {
	return fmt.Errorf("transport: %s: %w", fmt.Sprintf(format, args...), ErrBadFrame)
}

// prefix is a decoded frame prefix.
type prefix struct {
	typ        MsgType
	headerLen  int
	payloadLen int
}

// putPrefix writes a frame prefix into b[:PrefixBytes].
func putPrefix(b []byte, t MsgType, headerLen, payloadLen int) {
	_ = b[PrefixBytes-1]
	b[0] = Magic0
	b[1] = Magic1
	b[2] = Version
	b[3] = byte(t)
	binary.LittleEndian.PutUint32(b[4:8], uint32(headerLen))
	binary.LittleEndian.PutUint32(b[8:12], uint32(payloadLen))
}

// parsePrefix decodes and validates a frame prefix: magic, version, type,
// both lengths against their limits, and that only types that carry a
// payload have one.
func parsePrefix(b []byte) (prefix, error) {
	_ = b[PrefixBytes-1]
	if b[0] != Magic0 || b[1] != Magic1 {
		return prefix{}, badFrame("bad magic %#02x %#02x", b[0], b[1])
	}
	if b[2] != Version {
		return prefix{}, badFrame("unsupported version %d (want %d)", b[2], Version)
	}
	t := MsgType(b[3])
	if !t.Valid() {
		return prefix{}, badFrame("unknown message type %d", b[3])
	}
	h := binary.LittleEndian.Uint32(b[4:8])
	p := binary.LittleEndian.Uint32(b[8:12])
	if h > MaxHeaderBytes {
		return prefix{}, badFrame("%s header length %d over limit %d", t, h, MaxHeaderBytes)
	}
	if p > MaxPayloadBytes {
		return prefix{}, badFrame("%s payload length %d over limit %d", t, p, MaxPayloadBytes)
	}
	if p > 0 && !t.hasPayload() {
		return prefix{}, badFrame("%s with a payload (%d bytes)", t, p)
	}
	return prefix{typ: t, headerLen: int(h), payloadLen: int(p)}, nil
}

// Frame is a frame as read: its type, its header bytes (protobuf) and its
// payload. Header and Payload alias buffers of the Reader that returned the
// frame (see Reader for how long they stay valid).
type Frame struct {
	Type    MsgType
	Header  []byte
	Payload []byte
	// Release, set by a Server whose PayloadAlloc admitted the payload,
	// gives the payload's admission back: the handler calls it (once)
	// when it no longer holds the bytes, or hands it on with them.
	Release func()
	// Skipped is the length of a payload a Server read and dropped
	// (PayloadAlloc answered ErrSkipPayload, or the payload's check
	// refused it: CheckErr); Payload is then nil.
	Skipped int
	// CheckErr is the error of the PayloadCheck that refused the payload
	// (see PayloadCheck): Payload and Release are nil, Skipped is the
	// payload's length, the admission is already given back.
	CheckErr error
	// Checked: the payload passed its PayloadCheck in full; the handler
	// need not check its bytes again.
	Checked bool
	// Decoded is Payload.Decoded of the frame's admitted payload (nil
	// otherwise): its header as PayloadAlloc decoded it.
	Decoded any
}

// ErrSkipPayload is PayloadAlloc's answer for a payload the handler will
// refuse whatever its bytes (a write to a pipeline not served, or not led,
// here): the Server reads it through the connection's read buffer and drops
// it, allocating nothing for it, then calls the handler with Frame.Skipped
// set.
var ErrSkipPayload = errors.New("transport: payload skipped")

// Decode unmarshals f's header into m and checks that m is of f's type and
// that the payload matches what the header says about it (a WriteChunk's
// length, a RaftMessage's segment lengths). Errors wrap ErrBadFrame. m does
// not alias f: a decoded header stays valid after the next read.
func (f Frame) Decode(m Message) error {
	if f.Type != m.Type() {
		return badFrame("frame of type %s decoded as %s", f.Type, m.Type())
	}
	if err := m.Unmarshal(f.Header); err != nil {
		return err
	}
	if f.Skipped > 0 {
		return m.checkPayload(f.Skipped)
	}
	return m.checkPayload(len(f.Payload))
}
