package transport

import (
	"fmt"
	"strconv"
)

// Message is a frame header: one of *WriteChunk, *PutBlock, *ReadChunk,
// *GetBlock, *Response, *RaftMessage. The interface is sealed.
//
// Unmarshal decodes header bytes (protobuf wire format) into the message,
// replacing every field. It reuses the capacity of the message's slices
// (checksums, chunks, payload lengths): decode into a fresh value when the
// previous contents are still in use. The decoded message never aliases
// the input bytes. Errors wrap ErrBadFrame.
type Message interface {
	Type() MsgType
	Unmarshal(header []byte) error
	appendHeader(b []byte) ([]byte, error)
	// checkPayload checks a payload of n bytes against the header.
	checkPayload(n int) error
}

// Request is a Message that a Client sends and matches to its Response by
// request ID: *WriteChunk, *PutBlock, *ReadChunk, *GetBlock.
type Request interface {
	Message
	requestID() uint64
	setRequestID(id uint64)
}

// WriteChunk asks for one chunk of a block to be written. Its frame's
// payload is the chunk bytes, exactly Length of them. Raft log entries
// carry the same message (marshalled with AppendMarshal) as their data,
// without the bytes.
//
// Field numbers: 1 request_id, 2 pipeline_id, 3 container_id, 4 local_id,
// 5 offset, 6 length, 7 bytes_per_checksum, 8 checksums (packed fixed32).
type WriteChunk struct {
	RequestID uint64
	// PipelineID names the Raft group the write is for; 0 lets the
	// datanode find it from the container.
	PipelineID       uint64
	ContainerID      uint64
	LocalID          uint64
	Offset           uint64
	Length           uint64
	BytesPerChecksum uint32
	// Checksums are the CRC32C of each BytesPerChecksum piece of the chunk.
	// The transport does not check their count; the engine does.
	Checksums []uint32
	Token     []byte // block token (decoded in place: valid while the frame is)
}

// Type returns TypeWriteChunk.
func (*WriteChunk) Type() MsgType { return TypeWriteChunk }

// Size is the length of m's encoding.
func (m *WriteChunk) Size() int {
	return sizeUint64(1, m.RequestID) + sizeUint64(2, m.PipelineID) +
		sizeUint64(3, m.ContainerID) + sizeUint64(4, m.LocalID) +
		sizeUint64(5, m.Offset) + sizeUint64(6, m.Length) +
		sizeUint64(7, uint64(m.BytesPerChecksum)) + sizePackedFixed32(8, m.Checksums) + sizeString(9, m.Token)
}

// AppendMarshal appends m's canonical protobuf encoding to b.
func (m *WriteChunk) AppendMarshal(b []byte) []byte {
	b = appendUint64(b, 1, m.RequestID)
	b = appendUint64(b, 2, m.PipelineID)
	b = appendUint64(b, 3, m.ContainerID)
	b = appendUint64(b, 4, m.LocalID)
	b = appendUint64(b, 5, m.Offset)
	b = appendUint64(b, 6, m.Length)
	b = appendUint64(b, 7, uint64(m.BytesPerChecksum))
	return appendString(appendPackedFixed32(b, 8, m.Checksums), 9, m.Token)
}

// Unmarshal decodes b into m (see Message).
func (m *WriteChunk) Unmarshal(b []byte) error {
	cs := m.Checksums[:0]
	*m = WriteChunk{}
	d := decoder{msg: "WriteChunk", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			m.Checksums = cs
			return err
		}
		switch d.num {
		case 1:
			m.RequestID, err = d.uint64()
		case 2:
			m.PipelineID, err = d.uint64()
		case 3:
			m.ContainerID, err = d.uint64()
		case 4:
			m.LocalID, err = d.uint64()
		case 5:
			m.Offset, err = d.uint64()
		case 6:
			m.Length, err = d.uint64()
		case 7:
			m.BytesPerChecksum, err = d.uint32()
		case 8:
			cs, err = d.fixed32s(cs)
		case 9:
			m.Token, err = d.bytes()
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

func (m *WriteChunk) appendHeader(b []byte) ([]byte, error) { return m.AppendMarshal(b), nil }

func (m *WriteChunk) checkPayload(n int) error {
	if m.Length != uint64(n) {
		return badFrame("WriteChunk length %d with a payload of %d bytes", m.Length, n)
	}
	return nil
}

func (m *WriteChunk) requestID() uint64      { return m.RequestID }
func (m *WriteChunk) setRequestID(id uint64) { m.RequestID = id }

// ChunkInfo describes one chunk of a block in a BlockData.
//
// Field numbers: 1 offset, 2 length, 3 checksums (packed fixed32).
type ChunkInfo struct {
	Offset    uint64
	Length    uint64
	Checksums []uint32
}

func (m *ChunkInfo) size() int {
	return sizeUint64(1, m.Offset) + sizeUint64(2, m.Length) + sizePackedFixed32(3, m.Checksums)
}

func (m *ChunkInfo) appendTo(b []byte) []byte {
	b = appendUint64(b, 1, m.Offset)
	b = appendUint64(b, 2, m.Length)
	return appendPackedFixed32(b, 3, m.Checksums)
}

func (m *ChunkInfo) unmarshal(b []byte) error {
	cs := m.Checksums[:0]
	*m = ChunkInfo{}
	d := decoder{msg: "ChunkInfo", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			m.Checksums = cs
			return err
		}
		switch d.num {
		case 1:
			m.Offset, err = d.uint64()
		case 2:
			m.Length, err = d.uint64()
		case 3:
			cs, err = d.fixed32s(cs)
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

// BlockData is a block's committed metadata, as PutBlock stores it and
// GetBlock returns it.
//
// Field numbers: 1 container_id, 2 local_id, 3 length, 4
// bytes_per_checksum, 5 chunks (repeated ChunkInfo).
type BlockData struct {
	ContainerID      uint64
	LocalID          uint64
	Length           uint64
	BytesPerChecksum uint32
	Chunks           []ChunkInfo
}

func (m *BlockData) size() int {
	n := sizeUint64(1, m.ContainerID) + sizeUint64(2, m.LocalID) +
		sizeUint64(3, m.Length) + sizeUint64(4, uint64(m.BytesPerChecksum))
	for i := range m.Chunks {
		n += sizeMessage(5, m.Chunks[i].size())
	}
	return n
}

func (m *BlockData) appendTo(b []byte) []byte {
	b = appendUint64(b, 1, m.ContainerID)
	b = appendUint64(b, 2, m.LocalID)
	b = appendUint64(b, 3, m.Length)
	b = appendUint64(b, 4, uint64(m.BytesPerChecksum))
	for i := range m.Chunks {
		c := &m.Chunks[i]
		b = appendMessageTag(b, 5, c.size())
		b = c.appendTo(b)
	}
	return b
}

func (m *BlockData) unmarshal(b []byte) error {
	chunks := m.Chunks[:0]
	if n := countElements(b, 5, false); n > cap(chunks) {
		// One allocation, never more than the bytes can describe.
		chunks = make([]ChunkInfo, 0, n)
	}
	*m = BlockData{}
	d := decoder{msg: "BlockData", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			m.Chunks = chunks
			return err
		}
		switch d.num {
		case 1:
			m.ContainerID, err = d.uint64()
		case 2:
			m.LocalID, err = d.uint64()
		case 3:
			m.Length, err = d.uint64()
		case 4:
			m.BytesPerChecksum, err = d.uint32()
		case 5:
			var p []byte
			if p, err = d.bytes(); err == nil {
				// Reuse the element (and its checksum slice) left in
				// the capacity by an earlier decode.
				if len(chunks) < cap(chunks) {
					chunks = chunks[:len(chunks)+1]
				} else {
					chunks = append(chunks, ChunkInfo{})
				}
				err = chunks[len(chunks)-1].unmarshal(p)
			}
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

// PutBlock commits a block's metadata. No payload.
//
// Field numbers: 1 request_id, 2 pipeline_id, 3 block (BlockData).
type PutBlock struct {
	RequestID  uint64
	PipelineID uint64
	Block      BlockData
	Token      []byte
}

// Type returns TypePutBlock.
func (*PutBlock) Type() MsgType { return TypePutBlock }

// Size is the length of m's encoding.
func (m *PutBlock) Size() int {
	return sizeUint64(1, m.RequestID) + sizeUint64(2, m.PipelineID) + sizeMessage(3, m.Block.size()) + sizeString(4, m.Token)
}

// AppendMarshal appends m's canonical protobuf encoding to b. The block
// field is always written, even when empty.
func (m *PutBlock) AppendMarshal(b []byte) []byte {
	b = appendUint64(b, 1, m.RequestID)
	b = appendUint64(b, 2, m.PipelineID)
	b = appendMessageTag(b, 3, m.Block.size())
	return appendString(m.Block.appendTo(b), 4, m.Token)
}

// Unmarshal decodes b into m (see Message). A repeated block field
// replaces the earlier one (protobuf would merge them; this package never
// writes two).
func (m *PutBlock) Unmarshal(b []byte) error {
	blk, seen := m.Block, false
	*m = PutBlock{}
	d := decoder{msg: "PutBlock", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			if err == nil {
				if !seen {
					blk = BlockData{Chunks: blk.Chunks[:0]}
				}
				m.Block = blk
			}
			return err
		}
		switch d.num {
		case 1:
			m.RequestID, err = d.uint64()
		case 2:
			m.PipelineID, err = d.uint64()
		case 3:
			var p []byte
			if p, err = d.bytes(); err == nil {
				err = blk.unmarshal(p)
				seen = true
			}
		case 4:
			m.Token, err = d.bytes()
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

func (m *PutBlock) appendHeader(b []byte) ([]byte, error) { return m.AppendMarshal(b), nil }
func (m *PutBlock) checkPayload(n int) error              { return noPayload(TypePutBlock, n) }
func (m *PutBlock) requestID() uint64                     { return m.RequestID }
func (m *PutBlock) setRequestID(id uint64)                { m.RequestID = id }

// ReadChunk asks for Length bytes of a block from Offset. No payload; the
// Response carries the bytes as its payload.
//
// Field numbers: 1 request_id, 2 pipeline_id, 3 container_id, 4 local_id,
// 5 offset, 6 length.
type ReadChunk struct {
	RequestID   uint64
	PipelineID  uint64
	ContainerID uint64
	LocalID     uint64
	Offset      uint64
	Length      uint64
	Token       []byte
}

// Type returns TypeReadChunk.
func (*ReadChunk) Type() MsgType { return TypeReadChunk }

// Size is the length of m's encoding.
func (m *ReadChunk) Size() int {
	return sizeUint64(1, m.RequestID) + sizeUint64(2, m.PipelineID) +
		sizeUint64(3, m.ContainerID) + sizeUint64(4, m.LocalID) +
		sizeUint64(5, m.Offset) + sizeUint64(6, m.Length) + sizeString(7, m.Token)
}

// AppendMarshal appends m's canonical protobuf encoding to b.
func (m *ReadChunk) AppendMarshal(b []byte) []byte {
	b = appendUint64(b, 1, m.RequestID)
	b = appendUint64(b, 2, m.PipelineID)
	b = appendUint64(b, 3, m.ContainerID)
	b = appendUint64(b, 4, m.LocalID)
	b = appendUint64(b, 5, m.Offset)
	return appendString(appendUint64(b, 6, m.Length), 7, m.Token)
}

// Unmarshal decodes b into m (see Message).
func (m *ReadChunk) Unmarshal(b []byte) error {
	*m = ReadChunk{}
	d := decoder{msg: "ReadChunk", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			return err
		}
		switch d.num {
		case 1:
			m.RequestID, err = d.uint64()
		case 2:
			m.PipelineID, err = d.uint64()
		case 3:
			m.ContainerID, err = d.uint64()
		case 4:
			m.LocalID, err = d.uint64()
		case 5:
			m.Offset, err = d.uint64()
		case 6:
			m.Length, err = d.uint64()
		case 7:
			m.Token, err = d.bytes()
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

func (m *ReadChunk) appendHeader(b []byte) ([]byte, error) { return m.AppendMarshal(b), nil }
func (m *ReadChunk) checkPayload(n int) error              { return noPayload(TypeReadChunk, n) }
func (m *ReadChunk) requestID() uint64                     { return m.RequestID }
func (m *ReadChunk) setRequestID(id uint64)                { m.RequestID = id }

// GetBlock asks for a block's committed metadata; the Response carries it
// in its Block field. No payload.
//
// Field numbers: 1 request_id, 2 pipeline_id, 3 container_id, 4 local_id.
type GetBlock struct {
	RequestID   uint64
	PipelineID  uint64
	ContainerID uint64
	LocalID     uint64
	Token       []byte
}

// Type returns TypeGetBlock.
func (*GetBlock) Type() MsgType { return TypeGetBlock }

// Size is the length of m's encoding.
func (m *GetBlock) Size() int {
	return sizeUint64(1, m.RequestID) + sizeUint64(2, m.PipelineID) +
		sizeUint64(3, m.ContainerID) + sizeUint64(4, m.LocalID) + sizeString(5, m.Token)
}

// AppendMarshal appends m's canonical protobuf encoding to b.
func (m *GetBlock) AppendMarshal(b []byte) []byte {
	b = appendUint64(b, 1, m.RequestID)
	b = appendUint64(b, 2, m.PipelineID)
	b = appendUint64(b, 3, m.ContainerID)
	return appendString(appendUint64(b, 4, m.LocalID), 5, m.Token)
}

// Unmarshal decodes b into m (see Message).
func (m *GetBlock) Unmarshal(b []byte) error {
	*m = GetBlock{}
	d := decoder{msg: "GetBlock", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			return err
		}
		switch d.num {
		case 1:
			m.RequestID, err = d.uint64()
		case 2:
			m.PipelineID, err = d.uint64()
		case 3:
			m.ContainerID, err = d.uint64()
		case 4:
			m.LocalID, err = d.uint64()
		case 5:
			m.Token, err = d.bytes()
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

func (m *GetBlock) appendHeader(b []byte) ([]byte, error) { return m.AppendMarshal(b), nil }
func (m *GetBlock) checkPayload(n int) error              { return noPayload(TypeGetBlock, n) }
func (m *GetBlock) requestID() uint64                     { return m.RequestID }
func (m *GetBlock) setRequestID(id uint64)                { m.RequestID = id }

// Ping asks a Server whether the process behind a connection is running:
// the Server answers it with an OK Response from the connection's reader,
// without the handler, the engine or any admission (pipeline clients send
// it, on a connection of its own, when their requests to a member go
// unanswered: client.Options.ProbeAfter). Field numbers: 1 request_id.
type Ping struct {
	RequestID uint64
}

// Type returns TypePing.
func (*Ping) Type() MsgType { return TypePing }

// AppendMarshal appends m's canonical protobuf encoding to b.
func (m *Ping) AppendMarshal(b []byte) []byte { return appendUint64(b, 1, m.RequestID) }

// Unmarshal decodes b into m (see Message).
func (m *Ping) Unmarshal(b []byte) error {
	*m = Ping{}
	d := decoder{msg: "Ping", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			return err
		}
		switch d.num {
		case 1:
			m.RequestID, err = d.uint64()
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

func (m *Ping) appendHeader(b []byte) ([]byte, error) { return m.AppendMarshal(b), nil }
func (m *Ping) checkPayload(n int) error              { return noPayload(TypePing, n) }
func (m *Ping) requestID() uint64                     { return m.RequestID }
func (m *Ping) setRequestID(id uint64)                { m.RequestID = id }

func noPayload(t MsgType, n int) error {
	if n != 0 {
		return badFrame("%s with a payload (%d bytes)", t, n)
	}
	return nil
}

// Status is a Response's outcome. Values are stable on the wire; a value
// this version does not know is kept as is (String prints it as a number).
type Status uint32

// Statuses. The mapping from engine and Raft errors to these lives with
// the server that produces them.
const (
	StatusOK               Status = 0
	StatusInvalid          Status = 1  // malformed or inconsistent request
	StatusNotFound         Status = 2  // no such container, block or range
	StatusExists           Status = 3  // container already exists
	StatusNotOpen          Status = 4  // container not open for writes
	StatusContainerFull    Status = 5  // write would exceed the container's size
	StatusOverlap          Status = 6  // chunk overlaps written data
	StatusHole             Status = 7  // chunk would leave a hole
	StatusChecksumMismatch Status = 8  // data does not match the writer's checksums
	StatusCorrupt          Status = 9  // damage found on the server's disk
	StatusNotLeader        Status = 10 // retry at Response.Leader (if set)
	StatusUnavailable      Status = 11 // no leader, overloaded or shutting down: retry later
	StatusFailed           Status = 12 // the server's storage failed; it refuses writes
	StatusInternal         Status = 13 // a bug on the server
	StatusUnsupported      Status = 14 // request type the server does not serve
	StatusForbidden        Status = 15 // no valid block token for it (package blocktoken)
)

var statusNames = [...]string{
	StatusOK:               "OK",
	StatusInvalid:          "INVALID",
	StatusNotFound:         "NOT_FOUND",
	StatusExists:           "EXISTS",
	StatusNotOpen:          "NOT_OPEN",
	StatusContainerFull:    "CONTAINER_FULL",
	StatusOverlap:          "OVERLAP",
	StatusHole:             "HOLE",
	StatusChecksumMismatch: "CHECKSUM_MISMATCH",
	StatusCorrupt:          "CORRUPT",
	StatusNotLeader:        "NOT_LEADER",
	StatusUnavailable:      "UNAVAILABLE",
	StatusFailed:           "FAILED",
	StatusInternal:         "INTERNAL",
	StatusUnsupported:      "UNSUPPORTED",
	StatusForbidden:        "FORBIDDEN",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "STATUS_" + strconv.FormatUint(uint64(s), 10)
}

// StatusError is a Response whose status is not OK, as an error.
type StatusError struct {
	Status  Status
	Message string
	// Leader is the address to retry at, for StatusNotLeader (may be
	// empty when the server does not know the leader).
	Leader string
}

func (e *StatusError) Error() string {
	s := "transport: remote status " + e.Status.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Leader != "" {
		s += " (leader " + e.Leader + ")"
	}
	return s
}

// Response answers a Request: the request ID it answers, a status, and
// what the request asked for. Its frame's payload is the data of a
// ReadChunk (none otherwise).
//
// Field numbers: 1 request_id, 2 status, 3 message, 4 leader, 5 block
// (BlockData), 6 offset, 7 bytes_per_checksum, 8 checksums (packed
// fixed32).
type Response struct {
	RequestID uint64
	Status    Status
	// Message explains a status that is not OK.
	Message string
	// Leader is the leader's address, with StatusNotLeader.
	Leader string
	// Block is the block's metadata, for GetBlock (and PutBlock, if the
	// server echoes it). HasBlock tells an empty block from none.
	Block    BlockData
	HasBlock bool
	// Offset, BytesPerChecksum and Checksums describe a ReadChunk's
	// payload: its first byte is at Offset in the block, and Checksums
	// are the CRC32C of each BytesPerChecksum piece of it.
	Offset           uint64
	BytesPerChecksum uint32
	Checksums        []uint32
}

// Type returns TypeResponse.
func (*Response) Type() MsgType { return TypeResponse }

// Err returns nil for StatusOK, else a *StatusError.
func (m *Response) Err() error {
	if m.Status == StatusOK {
		return nil
	}
	return &StatusError{Status: m.Status, Message: m.Message, Leader: m.Leader}
}

// Size is the length of m's encoding.
func (m *Response) Size() int {
	n := sizeUint64(1, m.RequestID) + sizeUint64(2, uint64(m.Status)) +
		sizeString(3, m.Message) + sizeString(4, m.Leader)
	if m.HasBlock {
		n += sizeMessage(5, m.Block.size())
	}
	return n + sizeUint64(6, m.Offset) + sizeUint64(7, uint64(m.BytesPerChecksum)) +
		sizePackedFixed32(8, m.Checksums)
}

// AppendMarshal appends m's canonical protobuf encoding to b. Block is
// written when HasBlock is set.
func (m *Response) AppendMarshal(b []byte) []byte {
	b = appendUint64(b, 1, m.RequestID)
	b = appendUint64(b, 2, uint64(m.Status))
	b = appendString(b, 3, m.Message)
	b = appendString(b, 4, m.Leader)
	if m.HasBlock {
		b = appendMessageTag(b, 5, m.Block.size())
		b = m.Block.appendTo(b)
	}
	b = appendUint64(b, 6, m.Offset)
	b = appendUint64(b, 7, uint64(m.BytesPerChecksum))
	return appendPackedFixed32(b, 8, m.Checksums)
}

// Unmarshal decodes b into m (see Message). Strings are copied.
func (m *Response) Unmarshal(b []byte) error {
	blk, cs := m.Block, m.Checksums[:0]
	*m = Response{}
	d := decoder{msg: "Response", b: b}
	for {
		ok, err := d.next()
		if !ok || err != nil {
			if err == nil {
				m.Checksums = cs
				if m.HasBlock {
					m.Block = blk
				} else {
					// Keep the capacity for the next decode, empty.
					m.Block = BlockData{Chunks: blk.Chunks[:0]}
				}
			}
			return err
		}
		switch d.num {
		case 1:
			m.RequestID, err = d.uint64()
		case 2:
			var s uint32
			s, err = d.uint32()
			m.Status = Status(s)
		case 3:
			m.Message, err = d.string()
		case 4:
			m.Leader, err = d.string()
		case 5:
			var p []byte
			if p, err = d.bytes(); err == nil {
				err = blk.unmarshal(p)
				m.HasBlock = true
			}
		case 6:
			m.Offset, err = d.uint64()
		case 7:
			m.BytesPerChecksum, err = d.uint32()
		case 8:
			cs, err = d.fixed32s(cs)
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
}

func (m *Response) appendHeader(b []byte) ([]byte, error) { return m.AppendMarshal(b), nil }
func (m *Response) checkPayload(int) error                { return nil }

// String summarises a response for logs.
func (m *Response) String() string {
	return fmt.Sprintf("Response{id %d %s %q leader %q}", m.RequestID, m.Status, m.Message, m.Leader)
}
