package transport

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// RaftMessage is the header of a Raft frame: one etcd raft message for one
// Raft group, and the lengths of the chunk payloads that travel with it.
//
// The raft message is carried whole, as raftpb marshals it, in field 2 (an
// embedded message, so the header is itself a valid protobuf message:
//
//	message RaftMessage {
//	  uint64 group_id = 1;
//	  raftpb.Message message = 2;
//	  repeated uint64 payload_lengths = 3 [packed = true];
//	  repeated uint64 gone_at = 4 [packed = true];
//	}
//
// ). Its entries carry WriteChunk headers only; the chunk bytes are the
// frame's payload: segments laid end to end, PayloadLengths[i] bytes each,
// in the order of the WriteChunk records in the entries (entry order, then
// order within an entry). The lengths must add up to the payload length.
// The transport checks only that; matching segments to WriteChunk records
// (and their lengths) is the Raft layer's job.
//
// A catch-up may send a chunk without its bytes (an empty segment: its
// leader could not read them back). GoneAt, absent or one value per
// segment, then says for such a segment the log index of the committed
// DeleteBlock of the chunk's block that the leader applied (0: no such
// delete known), so that the follower knows it need not store the chunk.
// A non-zero value on a non-empty segment is refused. A reader that does
// not know field 4 skips it (and treats the chunk as lost).
type RaftMessage struct {
	GroupID uint64
	// Message is the raft message. Unmarshal decodes into it when it is
	// not nil (and allocates it otherwise); the decoded message does not
	// alias the frame.
	Message        *raftpb.Message
	PayloadLengths []uint64
	GoneAt         []uint64
}

// Type returns TypeRaftMessage.
func (*RaftMessage) Type() MsgType { return TypeRaftMessage }

// SetPayloads sets PayloadLengths to the lengths of payloads, reusing its
// capacity. Pass the same payloads to Conn.Send.
func (m *RaftMessage) SetPayloads(payloads [][]byte) {
	m.PayloadLengths = m.PayloadLengths[:0]
	for _, p := range payloads {
		m.PayloadLengths = append(m.PayloadLengths, uint64(len(p)))
	}
}

// Segments splits a frame's payload into its segments, appending them to
// dst (pass dst[:0] to reuse it). The segments alias payload. The lengths
// must add up to len(payload) (Frame.Decode has checked that already).
func (m *RaftMessage) Segments(payload []byte, dst [][]byte) ([][]byte, error) {
	if err := m.checkPayload(len(payload)); err != nil {
		return dst, err
	}
	for _, n := range m.PayloadLengths {
		dst = append(dst, payload[:n:n])
		payload = payload[n:]
	}
	return dst, nil
}

var marshalRaft = proto.MarshalOptions{UseCachedSize: true}

// errNoRaftMessage is sending a RaftMessage without a raft message.
var errNoRaftMessage = errors.New("transport: RaftMessage without a raft message")

// AppendMarshal appends m's protobuf encoding to b. The raft message is
// marshalled by the protobuf runtime straight into b.
func (m *RaftMessage) AppendMarshal(b []byte) ([]byte, error) {
	if m.Message == nil {
		return b, errNoRaftMessage
	}
	b = appendUint64(b, 1, m.GroupID)
	size := proto.Size(m.Message) // also caches the sizes MarshalAppend uses
	b = appendMessageTag(b, 2, size)
	start := len(b)
	b, err := marshalRaft.MarshalAppend(b, m.Message)
	if err != nil {
		return b, fmt.Errorf("transport: marshal raft message: %w", err)
	}
	if len(b)-start != size {
		return b, fmt.Errorf("transport: raft message changed while being marshalled (%d bytes, sized %d)", len(b)-start, size)
	}
	b = appendPackedVarint(b, 3, m.PayloadLengths)
	if len(m.GoneAt) > 0 {
		b = appendPackedVarint(b, 4, m.GoneAt)
	}
	return b, nil
}

// Unmarshal decodes b into m (see Message). The message field is
// required.
func (m *RaftMessage) Unmarshal(b []byte) error {
	lens, gone, msg := m.PayloadLengths[:0], m.GoneAt[:0], m.Message
	if n := countElements(b, 3, true); n > cap(lens) {
		lens = make([]uint64, 0, n)
	}
	*m = RaftMessage{}
	var raw []byte
	seen := false
	d := decoder{msg: "RaftMessage", b: b}
	for {
		ok, err := d.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		switch d.num {
		case 1:
			m.GroupID, err = d.uint64()
		case 2:
			raw, err = d.bytes()
			seen = true
		case 3:
			lens, err = d.varints(lens)
		case 4:
			gone, err = d.varints(gone) // rare (catch-ups over deleted blocks): append sizes it
		default:
			err = d.skip()
		}
		if err != nil {
			return err
		}
	}
	if !seen {
		return d.errf("no raft message")
	}
	if err := scanRaft(raw); err != nil {
		return d.errf("raft message: %v", err)
	}
	if msg == nil {
		msg = new(raftpb.Message)
	}
	if err := proto.Unmarshal(raw, msg); err != nil {
		return d.errf("raft message: %v", err)
	}
	if len(gone) > 0 {
		if len(gone) != len(lens) {
			return d.errf("%d gone_at values for %d payload segments", len(gone), len(lens))
		}
		for i, g := range gone {
			if g != 0 && lens[i] != 0 {
				return d.errf("gone_at %d on payload segment %d of %d bytes", g, i, lens[i])
			}
		}
	}
	m.Message, m.PayloadLengths, m.GoneAt = msg, lens, gone
	return nil
}

// scanRaft checks a raft message's top-level fields before the protobuf
// runtime decodes it, to bound what that decode allocates: at most
// MaxRaftEntries entries, and no responses (field 14: they instruct the
// local storage thread and never go to another node; nested, each costs
// the runtime a whole message per two bytes).
func scanRaft(b []byte) error {
	entries := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch num {
		case raftEntriesField:
			if entries++; entries > MaxRaftEntries {
				return fmt.Errorf("more than %d entries", MaxRaftEntries)
			}
		case raftResponsesField:
			return errors.New("local storage responses in a message to a peer")
		}
	}
	return nil
}

// Field numbers of raftpb.Message checked by scanRaft.
const (
	raftEntriesField   = 7
	raftResponsesField = 14
)

func (m *RaftMessage) appendHeader(b []byte) ([]byte, error) { return m.AppendMarshal(b) }

func (m *RaftMessage) checkPayload(n int) error {
	var sum uint64
	for _, l := range m.PayloadLengths {
		if l > MaxPayloadBytes {
			return badFrame("RaftMessage payload segment of %d bytes over limit %d", l, MaxPayloadBytes)
		}
		sum += l // cannot overflow: at most MaxHeaderBytes terms of at most MaxPayloadBytes
	}
	if sum != uint64(n) {
		return badFrame("RaftMessage segments add up to %d bytes, payload is %d", sum, n)
	}
	return nil
}

// RaftRoute is what RaftMessageRouteOf reads of an encoded RaftMessage
// header: its group, and its raft message's type, sender and term.
type RaftRoute struct {
	Group, From, Term uint64
	Type              int32 // raftpb.MessageType
}

// RaftMessageRoute returns the group_id of an encoded RaftMessage header
// and the sender (from) of its raft message, without decoding the rest:
// enough to route or refuse a frame before its payload is read.
func RaftMessageRoute(b []byte) (group, from uint64, err error) {
	r, err := RaftMessageRouteOf(b)
	return r.Group, r.From, err
}

// RaftMessageRouteOf reads a RaftMessage header's group and its raft
// message's type (field 1), sender (3) and term (4), without decoding the
// rest (entries, snapshot).
func RaftMessageRouteOf(b []byte) (RaftRoute, error) {
	var r RaftRoute
	group, err := raftMessageFields(b, &r)
	r.Group = group
	if err != nil {
		return RaftRoute{}, err
	}
	return r, nil
}

func raftMessageFields(b []byte, r *RaftRoute) (group uint64, err error) {
	d := decoder{msg: "RaftMessage", b: b}
	var raw []byte
	for {
		ok, err := d.next()
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		switch d.num {
		case 1:
			group, err = d.uint64()
		case 2:
			raw, err = d.bytes()
		default:
			err = d.skip()
		}
		if err != nil {
			return 0, err
		}
	}
	// raftpb.Message: type = 1, from = 3, term = 4 (varints).
	d = decoder{msg: "raftpb.Message", b: raw}
	for {
		ok, err := d.next()
		if err != nil {
			return 0, err
		}
		if !ok {
			return group, nil
		}
		switch d.num {
		case 1:
			var t uint64
			t, err = d.uint64()
			r.Type = int32(t)
		case 3:
			r.From, err = d.uint64()
		case 4:
			r.Term, err = d.uint64()
		default:
			err = d.skip()
		}
		if err != nil {
			return 0, err
		}
	}
}
