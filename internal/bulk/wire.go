package bulk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/spindle-store/spindle/internal/engine"
)

// Wire constants. See the package comment for the layout.
const (
	// Magic0 and Magic1 open every request and response: "SB", Spindle
	// Bulk. The data-path protocol's frames open with "SW": a listener can
	// tell the two apart from the first two bytes of a connection.
	Magic0 byte = 'S'
	Magic1 byte = 'B'
	// Version is the only protocol version spoken. Version 2 added the
	// BCSID to the container header.
	Version byte = 2

	// OpExportContainer asks for a whole CLOSED container.
	OpExportContainer byte = 1

	requestBytes      = 24
	statusHeaderBytes = 8
	containerHdrBytes = 8 + 8 + 8 + 4
	endRecordBytes    = 8 + 8 + 4

	tagBlock byte = 'B'
	tagEnd   byte = 'E'

	// MaxMessageBytes bounds a status message.
	MaxMessageBytes = 4096
	// MaxBlockRecordBytes bounds one block record on the wire: a block of
	// 64 chunks of the engine's largest size at the smallest bytes per
	// checksum needs less. Checked before anything is allocated.
	MaxBlockRecordBytes = 16 << 20
	// MaxBlockBytes bounds one block's length on the wire (the engine's
	// container size limit is far below).
	MaxBlockBytes = 1 << 40
)

// Status codes of a response.
const (
	StatusOK        byte = 0
	StatusNotFound  byte = 1 // no such container on this node
	StatusNotClosed byte = 2 // the container is not CLOSED: its files may still change
	StatusBusy      byte = 3 // too many exports in progress; try another source or later
	StatusError     byte = 4 // anything else; the message says what
	StatusBadReq    byte = 5 // the request did not parse
	maxStatus            = StatusBadReq
)

var statusNames = [...]string{"OK", "NOT_FOUND", "NOT_CLOSED", "BUSY", "ERROR", "BAD_REQUEST"}

// Errors; test them with errors.Is.
var (
	// ErrProtocol marks bytes that break the protocol: bad magic, version,
	// CRC, tag or a length over its bound.
	ErrProtocol = errors.New("bulk: protocol error")
	// ErrRemote is a non-OK status from the source; the error text carries
	// the status name and the source's message.
	ErrRemote = errors.New("bulk: source refused")
	// ErrBusy is StatusBusy (it also wraps ErrRemote).
	ErrBusy = errors.New("busy")
)

// MaxTokenBytes bounds a request's export token.
const MaxTokenBytes = 8192

// request is what a client sends: the 24 bytes, then the token.
type request struct {
	op        byte
	container uint64
	token     string // an export token (package blocktoken); "": none
	tokenLen  int    // decoded: the token bytes after the 24
}

func (r request) encode() []byte {
	b := make([]byte, requestBytes, requestBytes+len(r.token))
	b[0], b[1], b[2], b[3] = Magic0, Magic1, Version, r.op
	binary.LittleEndian.PutUint32(b[4:], uint32(len(r.token)))
	binary.LittleEndian.PutUint64(b[8:], r.container)
	binary.LittleEndian.PutUint32(b[20:], engine.CRC32C(b[:20]))
	return append(b, r.token...)
}

func decodeRequest(b []byte) (request, error) {
	if len(b) != requestBytes {
		return request{}, fmt.Errorf("%w: request of %d bytes", ErrProtocol, len(b))
	}
	if b[0] != Magic0 || b[1] != Magic1 {
		return request{}, fmt.Errorf("%w: bad magic %q", ErrProtocol, b[:2])
	}
	if b[2] != Version {
		return request{}, fmt.Errorf("%w: version %d, want %d", ErrProtocol, b[2], Version)
	}
	if got, want := binary.LittleEndian.Uint32(b[20:]), engine.CRC32C(b[:20]); got != want {
		return request{}, fmt.Errorf("%w: request CRC %08x, want %08x", ErrProtocol, got, want)
	}
	r := request{op: b[3], container: binary.LittleEndian.Uint64(b[8:]), tokenLen: int(binary.LittleEndian.Uint32(b[4:]))}
	if r.op != OpExportContainer {
		return request{}, fmt.Errorf("%w: unknown op %d", ErrProtocol, r.op)
	}
	if r.container == 0 {
		return request{}, fmt.Errorf("%w: container 0", ErrProtocol)
	}
	if r.tokenLen > MaxTokenBytes {
		return request{}, fmt.Errorf("%w: token of %d bytes", ErrProtocol, r.tokenLen)
	}
	for _, x := range b[16:20] {
		if x != 0 {
			return request{}, fmt.Errorf("%w: reserved bytes set", ErrProtocol)
		}
	}
	return r, nil
}

// appendStatus appends a status header and its message.
func appendStatus(b []byte, status byte, msg string) []byte {
	if len(msg) > MaxMessageBytes {
		msg = msg[:MaxMessageBytes]
	}
	b = append(b, Magic0, Magic1, Version, status)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(msg)))
	return append(b, msg...)
}

// readStatus reads a status header; a non-OK status is returned as an error
// wrapping ErrRemote (and ErrBusy for StatusBusy).
func readStatus(r io.Reader) error {
	var h [statusHeaderBytes]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return fmt.Errorf("bulk: reading the response: %w", err)
	}
	if h[0] != Magic0 || h[1] != Magic1 || h[2] != Version {
		return fmt.Errorf("%w: response header %q", ErrProtocol, h[:3])
	}
	if h[3] > maxStatus {
		return fmt.Errorf("%w: status %d", ErrProtocol, h[3])
	}
	n := binary.LittleEndian.Uint32(h[4:])
	if n > MaxMessageBytes {
		return fmt.Errorf("%w: message of %d bytes", ErrProtocol, n)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return fmt.Errorf("bulk: reading the response: %w", noEOF(err))
	}
	switch h[3] {
	case StatusOK:
		return nil
	case StatusBusy:
		return fmt.Errorf("%w: %w: %s: %s", ErrRemote, ErrBusy, statusNames[h[3]], msg)
	default:
		return fmt.Errorf("%w: %s: %s", ErrRemote, statusNames[h[3]], msg)
	}
}

// ContainerHeader follows an OK status: what the source says of the
// container before its blocks.
type ContainerHeader struct {
	MaxSizeBytes uint64 // the container's maximum size
	UsedBytes    uint64 // its committed bytes when the export opened
	BCSID        uint64 // its block commit sequence ID (engine.ContainerInfo.BCSID)
}

// CopyBytes bounds what a copy of the container holds: the larger of its
// maximum size and its bytes used. A pipeline's container can pass its
// maximum size by what its leader had in flight (the leader alone decides
// the room, engine.CheckRoom), and its copy must still fit.
func (h ContainerHeader) CopyBytes() uint64 { return max(h.MaxSizeBytes, h.UsedBytes) }

func (h ContainerHeader) appendTo(b []byte) []byte {
	s := len(b)
	b = binary.LittleEndian.AppendUint64(b, h.MaxSizeBytes)
	b = binary.LittleEndian.AppendUint64(b, h.UsedBytes)
	b = binary.LittleEndian.AppendUint64(b, h.BCSID)
	return binary.LittleEndian.AppendUint32(b, engine.CRC32C(b[s:]))
}

func readContainerHeader(r io.Reader) (ContainerHeader, error) {
	var b [containerHdrBytes]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return ContainerHeader{}, fmt.Errorf("bulk: reading the container header: %w", noEOF(err))
	}
	if got, want := binary.LittleEndian.Uint32(b[24:]), engine.CRC32C(b[:24]); got != want {
		return ContainerHeader{}, fmt.Errorf("%w: container header CRC %08x, want %08x", ErrProtocol, got, want)
	}
	return ContainerHeader{MaxSizeBytes: binary.LittleEndian.Uint64(b[:]), UsedBytes: binary.LittleEndian.Uint64(b[8:]),
		BCSID: binary.LittleEndian.Uint64(b[16:])}, nil
}

// appendBlockRecord appends tag 'B', the record length and the record of
// bd (see the package comment).
func appendBlockRecord(b []byte, bd *engine.BlockData) []byte {
	b = append(b, tagBlock, 0, 0, 0, 0)
	lenAt := len(b) - 4
	s := len(b)
	b = binary.LittleEndian.AppendUint64(b, bd.ID.Local)
	b = binary.LittleEndian.AppendUint64(b, bd.Length)
	b = binary.LittleEndian.AppendUint32(b, bd.BytesPerChecksum)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(bd.Chunks)))
	for _, c := range bd.Chunks {
		b = binary.LittleEndian.AppendUint32(b, uint32(c.Length))
		for _, s := range c.Checksums {
			b = binary.LittleEndian.AppendUint32(b, s)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, engine.CRC32C(b[s:]))
	binary.LittleEndian.PutUint32(b[lenAt:], uint32(len(b)-s))
	return b
}

// blockRecordSize is the size of bd's record after the tag and length.
func blockRecordSize(bd *engine.BlockData) int {
	n := 8 + 8 + 4 + 4 + 4
	for _, c := range bd.Chunks {
		n += 4 + 4*len(c.Checksums)
	}
	return n
}

// decodeBlockRecord decodes a record (after tag and length) of a block of
// container id. It checks the CRC and that the chunks are consistent
// (lengths sum to the block length, one checksum per piece); the importer
// checks the rest (engine validation).
func decodeBlockRecord(id engine.ContainerID, b []byte) (*engine.BlockData, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: block record: %s", ErrProtocol, fmt.Sprintf(format, args...))
	}
	if len(b) < 28 {
		return nil, bad("%d bytes", len(b))
	}
	body := b[:len(b)-4]
	if got, want := binary.LittleEndian.Uint32(b[len(b)-4:]), engine.CRC32C(body); got != want {
		return nil, bad("CRC %08x, want %08x", got, want)
	}
	bd := &engine.BlockData{
		ID:               engine.BlockID{Container: id, Local: binary.LittleEndian.Uint64(body)},
		Length:           binary.LittleEndian.Uint64(body[8:]),
		BytesPerChecksum: binary.LittleEndian.Uint32(body[16:]),
	}
	n := binary.LittleEndian.Uint32(body[20:])
	if bd.BytesPerChecksum == 0 {
		return nil, bad("bytes per checksum 0")
	}
	if bd.Length > MaxBlockBytes {
		return nil, bad("length %d over %d", bd.Length, MaxBlockBytes)
	}
	if uint64(n)*4 > uint64(len(body)-24) {
		return nil, bad("%d chunks in %d bytes", n, len(body))
	}
	p := body[24:]
	bd.Chunks = make([]engine.ChunkInfo, 0, n)
	var off uint64
	for i := uint32(0); i < n; i++ {
		if len(p) < 4 {
			return nil, bad("chunk %d truncated", i)
		}
		l := uint64(binary.LittleEndian.Uint32(p))
		p = p[4:]
		k := engine.PieceCount(l, bd.BytesPerChecksum)
		if l == 0 || len(p) < 4*k {
			return nil, bad("chunk %d of %d bytes truncated or empty", i, l)
		}
		sums := make([]uint32, k)
		for j := range sums {
			sums[j] = binary.LittleEndian.Uint32(p[4*j:])
		}
		p = p[4*k:]
		bd.Chunks = append(bd.Chunks, engine.ChunkInfo{Offset: off, Length: l, Checksums: sums})
		off += l
	}
	if len(p) != 0 {
		return nil, bad("%d trailing bytes", len(p))
	}
	if off != bd.Length {
		return nil, bad("chunks add up to %d bytes, block length %d", off, bd.Length)
	}
	return bd, nil
}

func appendEnd(b []byte, blocks, bytes uint64) []byte {
	b = append(b, tagEnd)
	s := len(b)
	b = binary.LittleEndian.AppendUint64(b, blocks)
	b = binary.LittleEndian.AppendUint64(b, bytes)
	return binary.LittleEndian.AppendUint32(b, engine.CRC32C(b[s:]))
}

func decodeEnd(b []byte) (blocks, bytes uint64, err error) {
	if got, want := binary.LittleEndian.Uint32(b[16:]), engine.CRC32C(b[:16]); got != want {
		return 0, 0, fmt.Errorf("%w: end record CRC %08x, want %08x", ErrProtocol, got, want)
	}
	return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), nil
}

// noEOF turns a clean EOF in the middle of a response into
// io.ErrUnexpectedEOF: the source went away.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
