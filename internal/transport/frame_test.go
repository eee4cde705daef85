package transport

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"unsafe"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, f := range sampleFrames() {
		t.Run(f.m.Type().String(), func(t *testing.T) {
			b := marshal(t, f.m)
			got := newMessage(f.m.Type())
			if err := got.Unmarshal(b); err != nil {
				t.Fatal(err)
			}
			if !equalMessages(f.m, got) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, f.m)
			}
			if b2 := marshal(t, got); !bytes.Equal(b, b2) {
				t.Fatalf("re-marshal differs:\n%x\n%x", b, b2)
			}
		})
	}
}

// Decoding into a message that held something else gives the same value
// as decoding into a fresh one (the decoders reuse slices).
func TestUnmarshalReuse(t *testing.T) {
	frames := sampleFrames()
	for _, f := range frames {
		for _, g := range frames {
			if f.m.Type() != g.m.Type() {
				continue
			}
			dirty := newMessage(g.m.Type())
			if err := dirty.Unmarshal(marshal(t, g.m)); err != nil {
				t.Fatal(err)
			}
			if err := dirty.Unmarshal(marshal(t, f.m)); err != nil {
				t.Fatal(err)
			}
			if !equalMessages(dirty, f.m) {
				t.Fatalf("%s: decode into a used message:\n got %+v\nwant %+v", f.m.Type(), dirty, f.m)
			}
		}
	}
	// Fewer chunks, and a block-less response, after a fuller decode.
	var r Response
	if err := r.Unmarshal(marshal(t, sampleResponse())); err != nil {
		t.Fatal(err)
	}
	if err := r.Unmarshal(marshal(t, &Response{RequestID: 1})); err != nil {
		t.Fatal(err)
	}
	if !equalMessages(&r, &Response{RequestID: 1}) {
		t.Fatalf("got %+v", r)
	}
	var p PutBlock
	if err := p.Unmarshal(marshal(t, samplePutBlock())); err != nil {
		t.Fatal(err)
	}
	if err := p.Unmarshal([]byte{0x08, 0x01}); err != nil { // request_id 1, no block
		t.Fatal(err)
	}
	if !equalMessages(&p, &PutBlock{RequestID: 1}) {
		t.Fatalf("got %+v", p)
	}
}

// The decoders accept what any protobuf encoder may write: unknown fields,
// fields out of order, unpacked repeated scalars, duplicated packed runs.
func TestUnmarshalNonCanonical(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, 99, protowire.BytesType) // unknown
	b = protowire.AppendString(b, "future")
	b = protowire.AppendTag(b, 8, protowire.Fixed32Type) // unpacked checksum
	b = protowire.AppendFixed32(b, 0x6f32a61f)
	b = protowire.AppendTag(b, 6, protowire.VarintType) // length
	b = protowire.AppendVarint(b, 1000)
	b = protowire.AppendTag(b, 8, protowire.BytesType) // packed run
	b = protowire.AppendBytes(b, binary.LittleEndian.AppendUint32(nil, 0xb878d09e))
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	b = protowire.AppendTag(b, 100, protowire.Fixed64Type) // unknown
	b = protowire.AppendFixed64(b, 1)
	var m WriteChunk
	if err := m.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	want := WriteChunk{RequestID: 7, Length: 1000, Checksums: []uint32{0x6f32a61f, 0xb878d09e}}
	if !equalMessages(&m, &want) {
		t.Fatalf("got %+v", m)
	}
	// Unpacked payload lengths in a RaftMessage.
	raw, err := proto.Marshal(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum()})
	if err != nil {
		t.Fatal(err)
	}
	b = nil
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 5)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, raw)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 6)
	var r RaftMessage
	if err := r.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if len(r.PayloadLengths) != 2 || r.PayloadLengths[0] != 5 || r.PayloadLengths[1] != 6 || r.Message.GetType() != raftpb.MsgHeartbeat {
		t.Fatalf("got %+v", r)
	}
}

// TestRaftMessageGoneAt: gone_at round-trips, one value per segment, and
// a message without it leaves GoneAt empty also when decoded into a
// message that had it (Unmarshal reuses the slices).
func TestRaftMessageGoneAt(t *testing.T) {
	in := &RaftMessage{GroupID: 3, Message: &raftpb.Message{Type: raftpb.MsgApp.Enum()}, PayloadLengths: []uint64{0, 7, 0}, GoneAt: []uint64{41, 0, 0}}
	b, err := in.AppendMarshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Field 4, packed: tag 0x22, 3 bytes, 41 0 0.
	if !bytes.HasSuffix(b, []byte{0x22, 3, 41, 0, 0}) {
		t.Fatalf("encoding ends % x, want field 4 packed (22 03 29 00 00)", b[max(0, len(b)-8):])
	}
	var out RaftMessage
	if err := out.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if !equalMessages(in, &out) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
	in.GoneAt = nil
	if b, err = in.AppendMarshal(nil); err != nil {
		t.Fatal(err)
	}
	if err := out.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if len(out.GoneAt) != 0 {
		t.Fatalf("GoneAt %v from a message without it", out.GoneAt)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	full := marshal(t, sampleWriteChunk())
	cases := []struct {
		name string
		m    Message
		b    []byte
	}{
		{"truncated header", new(WriteChunk), full[:len(full)-3]},
		{"truncated varint", new(WriteChunk), []byte{0x08, 0x80}},
		{"truncated tag", new(ReadChunk), []byte{0x80}},
		{"field number 0", new(GetBlock), []byte{0x00, 0x01}},
		{"wrong wire type", new(WriteChunk), cat(tag(3, protowire.BytesType), []byte{0})},
		{"uint32 overflow", new(WriteChunk), cat(tag(7, protowire.VarintType), protowire.AppendVarint(nil, 1<<32))},
		{"status overflow", new(Response), cat(tag(2, protowire.VarintType), protowire.AppendVarint(nil, 1<<40))},
		{"varint over 64 bits", new(ReadChunk), cat(tag(5, protowire.VarintType), bytes.Repeat([]byte{0xff}, 10), []byte{0x01})},
		{"packed fixed32 not a multiple of 4", new(WriteChunk), cat(tag(8, protowire.BytesType), []byte{3, 1, 2, 3})},
		{"length past the end", new(Response), cat(tag(3, protowire.BytesType), []byte{10, 'a'})},
		{"bad chunk in a block", new(PutBlock), cat(tag(3, protowire.BytesType), []byte{2}, tag(5, protowire.VarintType), []byte{1})},
		{"unknown field truncated", new(GetBlock), cat(tag(50, protowire.Fixed64Type), []byte{1, 2})},
		{"unknown end group", new(GetBlock), tag(50, protowire.EndGroupType)},
		{"raft without message", new(RaftMessage), cat(tag(1, protowire.VarintType), []byte{1})},
		{"raft message does not decode", new(RaftMessage), cat(tag(2, protowire.BytesType), []byte{2, 0x08, 0x80})},
		{"raft truncated packed lengths", new(RaftMessage), cat(tag(2, protowire.BytesType), []byte{0}, tag(3, protowire.BytesType), []byte{1, 0x80})},
		{"raft gone_at not one per segment", new(RaftMessage), cat(tag(2, protowire.BytesType), []byte{0}, tag(3, protowire.BytesType), []byte{2, 0, 0}, tag(4, protowire.BytesType), []byte{1, 9})},
		{"raft gone_at on a segment with bytes", new(RaftMessage), cat(tag(2, protowire.BytesType), []byte{0}, tag(3, protowire.BytesType), []byte{2, 0, 5}, tag(4, protowire.BytesType), []byte{2, 0, 9})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.m.Unmarshal(c.b)
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Unmarshal(%x) = %v, want ErrBadFrame", c.b, err)
			}
		})
	}
}

// The brief's buffer-composition check: a frame is [prefix+header,
// payload], the payload not copied (same backing array), so that Conn
// writes it with one writev.
func TestEncoderBuffers(t *testing.T) {
	wc := sampleWriteChunk()
	payload := bytes.Repeat([]byte{'a'}, 1000)
	var e Encoder
	if err := e.Append(wc, payload); err != nil {
		t.Fatal(err)
	}
	bufs := e.Buffers()
	if len(bufs) != 2 {
		t.Fatalf("%d buffers, want 2", len(bufs))
	}
	if unsafe.SliceData(bufs[1]) != unsafe.SliceData(payload) || len(bufs[1]) != len(payload) {
		t.Fatal("payload was copied")
	}
	hdr := wc.AppendMarshal(nil)
	if len(bufs[0]) != PrefixBytes+len(hdr) || !bytes.Equal(bufs[0][PrefixBytes:], hdr) {
		t.Fatalf("first buffer %x, want prefix + %x", bufs[0], hdr)
	}
	if got := binary.LittleEndian.Uint32(bufs[0][8:]); got != 1000 {
		t.Fatalf("payload length %d", got)
	}
	if e.Len() != PrefixBytes+len(hdr)+1000 || e.Frames() != 1 {
		t.Fatalf("Len %d Frames %d", e.Len(), e.Frames())
	}

	// A batch: payload-less frames share one iovec with the next prefix.
	e.Reset()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.Append(&Response{RequestID: 1}))
	must(e.Append(&Response{RequestID: 2}))
	must(e.Append(wc, payload[:600], payload[600:]))
	must(e.Append(&Response{RequestID: 3}))
	bufs = e.Buffers()
	if len(bufs) != 4 {
		t.Fatalf("%d buffers, want 4 (2 headers + 2 payload pieces + header)", len(bufs))
	}
	if unsafe.SliceData(bufs[1]) != unsafe.SliceData(payload) || unsafe.SliceData(bufs[2]) != &payload[600] {
		t.Fatal("payload pieces were copied")
	}
	// The bytes decode back to the four frames.
	var stream bytes.Buffer
	if _, err := bufs.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	r := NewReader(&stream, ConnConfig{})
	for i, want := range []Message{&Response{RequestID: 1}, &Response{RequestID: 2}, wc, &Response{RequestID: 3}} {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		got := newMessage(f.Type)
		if err := f.Decode(got); err != nil {
			t.Fatal(err)
		}
		if !equalMessages(got, want) {
			t.Fatalf("frame %d: %+v", i, got)
		}
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("after the batch: %v, want io.EOF", err)
	}

	// Reset drops the payload references.
	e.Reset()
	for _, s := range e.segs[:cap(e.segs)] {
		if s.p != nil {
			t.Fatal("Reset kept a payload reference")
		}
	}
}

func TestEncoderRefuses(t *testing.T) {
	var e Encoder
	huge := make([]byte, MaxPayloadBytes+1)
	cases := []struct {
		name    string
		m       Message
		payload [][]byte
		want    error
	}{
		{"payload over the limit", &WriteChunk{Length: uint64(len(huge))}, [][]byte{huge}, ErrTooLarge},
		{"header over the limit", &WriteChunk{Length: 1, Checksums: make([]uint32, MaxHeaderBytes/4)}, [][]byte{{1}}, ErrTooLarge},
		{"write chunk length mismatch", &WriteChunk{Length: 3}, [][]byte{{1, 2}}, ErrInvalid},
		{"payload on a PutBlock", samplePutBlock(), [][]byte{{1}}, ErrInvalid},
		{"raft segments mismatch", &RaftMessage{Message: &raftpb.Message{}, PayloadLengths: []uint64{3}}, [][]byte{{1}}, ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := e.Append(c.m, c.payload...); !errors.Is(err, c.want) {
				t.Fatalf("Append = %v, want %v", err, c.want)
			}
			if e.Len() != 0 || e.Frames() != 0 || len(e.buf) != 0 {
				t.Fatal("a refused frame left bytes behind")
			}
		})
	}
	if err := e.Append(&RaftMessage{}); err == nil {
		t.Fatal("RaftMessage without a message was accepted")
	}
}

// prefixBytes builds a raw prefix.
func prefixBytes(magic0, magic1, version byte, t MsgType, h, p uint32) []byte {
	b := []byte{magic0, magic1, version, byte(t)}
	b = binary.LittleEndian.AppendUint32(b, h)
	return binary.LittleEndian.AppendUint32(b, p)
}

func TestReaderMalformed(t *testing.T) {
	ok := encodeFrame(t, &Response{RequestID: 1})
	wcHeader := marshal(t, sampleWriteChunk()) // says length 1000
	cases := []struct {
		name string
		b    []byte
	}{
		{"bad magic", append([]byte{'X', 'W'}, ok[2:]...)},
		{"bad second magic byte", append([]byte{'S', 'w'}, ok[2:]...)},
		{"version 0", prefixBytes('S', 'W', 0, TypeResponse, 0, 0)},
		{"version 2", prefixBytes('S', 'W', 2, TypeResponse, 0, 0)},
		{"type 0", prefixBytes('S', 'W', 1, 0, 0, 0)},
		{"type 8", prefixBytes('S', 'W', 1, 8, 0, 0)},
		{"type 255", prefixBytes('S', 'W', 1, 255, 0, 0)},
		{"header length over the limit", prefixBytes('S', 'W', 1, TypeResponse, MaxHeaderBytes+1, 0)},
		{"header length 4 GiB", prefixBytes('S', 'W', 1, TypeResponse, 0xffffffff, 0)},
		{"payload length over the limit", prefixBytes('S', 'W', 1, TypeWriteChunk, 0, MaxPayloadBytes+1)},
		{"payload length 4 GiB", prefixBytes('S', 'W', 1, TypeRaftMessage, 0, 0xffffffff)},
		{"payload on a PutBlock", prefixBytes('S', 'W', 1, TypePutBlock, 0, 1)},
		{"payload on a ReadChunk", prefixBytes('S', 'W', 1, TypeReadChunk, 0, 1)},
		{"payload on a GetBlock", prefixBytes('S', 'W', 1, TypeGetBlock, 0, 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(c.b), ConnConfig{})
			_, _, _, err := r.ReadHeader()
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("ReadHeader = %v, want ErrBadFrame", err)
			}
			if r.hdr != nil || r.pay != nil {
				t.Fatal("allocated a buffer for a refused frame")
			}
			if _, err2 := r.ReadFrame(); err2 != err {
				t.Fatalf("error not sticky: %v then %v", err, err2)
			}
		})
	}

	// Frames whose prefix is fine but whose header or payload is not.
	decodeCases := []struct {
		name string
		b    []byte
	}{
		{"truncated protobuf header", append(prefixBytes('S', 'W', 1, TypeWriteChunk, uint32(len(wcHeader)-2), 0), wcHeader[:len(wcHeader)-2]...)},
		{"write chunk shorter than its length", append(append(prefixBytes('S', 'W', 1, TypeWriteChunk, uint32(len(wcHeader)), 10), wcHeader...), make([]byte, 10)...)},
		{"raft segments past the payload", encodeRaftLying(t)},
	}
	for _, c := range decodeCases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(c.b), ConnConfig{})
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatalf("ReadFrame: %v", err)
			}
			if err := f.Decode(newMessage(f.Type)); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Decode = %v, want ErrBadFrame", err)
			}
		})
	}

	// Decoding as the wrong type.
	f, err := NewReader(bytes.NewReader(ok), ConnConfig{}).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Decode(new(WriteChunk)); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("Decode as the wrong type = %v", err)
	}
}

// encodeRaftLying returns a RaftMessage frame whose header claims 10 bytes
// of segments but whose payload has 4.
func encodeRaftLying(t *testing.T) []byte {
	m := &RaftMessage{Message: &raftpb.Message{Type: raftpb.MsgApp.Enum()}, PayloadLengths: []uint64{10}}
	h := marshal(t, m)
	b := append(prefixBytes('S', 'W', 1, TypeRaftMessage, uint32(len(h)), 4), h...)
	return append(b, "abcd"...)
}

// A stream that ends inside a frame is io.ErrUnexpectedEOF, not a bad
// frame; at a frame boundary it is io.EOF.
func TestReaderTruncatedStream(t *testing.T) {
	full := encodeFrame(t, sampleWriteChunk(), bytes.Repeat([]byte{'a'}, 1000))
	for _, n := range []int{1, PrefixBytes - 1, PrefixBytes, PrefixBytes + 3, len(full) - 1} {
		r := NewReader(bytes.NewReader(full[:n]), ConnConfig{})
		_, err := r.ReadFrame()
		if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrBadFrame) {
			t.Fatalf("%d of %d bytes: %v, want io.ErrUnexpectedEOF", n, len(full), err)
		}
	}
	r := NewReader(bytes.NewReader(full), ConnConfig{})
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

// ReadHeader skips a payload that was not read; ReadPayload reads into a
// caller's buffer when it is large enough.
func TestReaderPayloadHandling(t *testing.T) {
	var stream []byte
	for i := range 3 {
		p := bytes.Repeat([]byte{byte('a' + i)}, 100000)
		stream = append(stream, encodeFrame(t, &WriteChunk{RequestID: uint64(i), Length: uint64(len(p))}, p)...)
	}
	r := NewReader(bytes.NewReader(stream), ConnConfig{})
	if _, _, n, err := r.ReadHeader(); err != nil || n != 100000 {
		t.Fatal(n, err)
	}
	// Skip frame 0's payload; read frame 1's into our buffer.
	_, h, n, err := r.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	var wc WriteChunk
	if err := wc.Unmarshal(h); err != nil || wc.RequestID != 1 {
		t.Fatal(wc, err)
	}
	mine := make([]byte, n)
	p, err := r.ReadPayload(mine)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.SliceData(p) != unsafe.SliceData(mine) || !bytes.Equal(p, bytes.Repeat([]byte{'b'}, n)) {
		t.Fatal("payload not read into the caller's buffer")
	}
	// A short buffer is ignored.
	if _, _, _, err := r.ReadHeader(); err != nil {
		t.Fatal(err)
	}
	p, err = r.ReadPayload(make([]byte, 10))
	if err != nil || !bytes.Equal(p, bytes.Repeat([]byte{'c'}, 100000)) {
		t.Fatal("payload into a short buffer", err)
	}
}

// A payload larger than RetainPayloadBytes comes from the pool and goes
// back at the next read; smaller ones reuse the retained buffer.
func TestReaderRetain(t *testing.T) {
	small := bytes.Repeat([]byte{1}, 1000)
	big := bytes.Repeat([]byte{2}, 100000)
	var stream []byte
	for _, p := range [][]byte{small, big, small} {
		stream = append(stream, encodeFrame(t, &WriteChunk{Length: uint64(len(p))}, p)...)
	}
	r := NewReader(bytes.NewReader(stream), ConnConfig{RetainPayloadBytes: 4096})
	for i, want := range [][]byte{small, big, small} {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Payload, want) {
			t.Fatalf("frame %d payload differs", i)
		}
		if i == 1 && (r.big == nil || cap(r.pay) > 4096) {
			t.Fatal("large payload not read into a pooled buffer")
		}
	}
	if r.big != nil {
		t.Fatal("pooled buffer not given back")
	}
}

// The prefix and header bytes of the examples in the package comment and
// docs/FORMAT.md.
func TestGoldenFrames(t *testing.T) {
	wc := &WriteChunk{RequestID: 1, ContainerID: 1, LocalID: 7, Length: 1000, BytesPerChecksum: 512,
		Checksums: []uint32{0x6f32a61f, 0xb878d09e}}
	got := encodeFrame(t, wc, bytes.Repeat([]byte{'a'}, 1000))
	want := "5357010116000000e8030000" + // prefix: SW, v1, WriteChunk, header 22, payload 1000
		"0801" + "1801" + "2007" + "30e807" + "388004" + "4208" + "1fa6326f" + "9ed078b8"
	if h := hex.EncodeToString(got[:PrefixBytes+22]); h != want {
		t.Fatalf("WriteChunk frame\n got %s\nwant %s", h, want)
	}
	if !bytes.Equal(got[PrefixBytes+22:], bytes.Repeat([]byte{'a'}, 1000)) {
		t.Fatal("payload")
	}

	resp := &Response{RequestID: 1, Status: StatusNotLeader, Leader: "10.0.0.2:9860"}
	got = encodeFrame(t, resp)
	want = "5357010513000000" + "00000000" + "0801" + "100a" + "220d" + hex.EncodeToString([]byte("10.0.0.2:9860"))
	if h := hex.EncodeToString(got); h != want {
		t.Fatalf("Response frame\n got %s\nwant %s", h, want)
	}

	wc.RequestID = 0 // the log entry's copy
	raft := &RaftMessage{GroupID: 5, Message: &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(3),
		LogTerm: proto.Uint64(3), Index: proto.Uint64(9), Commit: proto.Uint64(9),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(3), Index: proto.Uint64(10), Type: raftpb.EntryNormal.Enum(), Data: marshal(t, wc)}},
	}, PayloadLengths: []uint64{1000}}
	got = encodeFrame(t, raft, bytes.Repeat([]byte{'a'}, 1000))
	want = "5357010634000000e8030000" + "0805" + "122c" + "080310021801" + "200328033009" +
		"3a1c" + "08001003180a" + "2214" + "18012007" + "30e807388004" + "42081fa6326f9ed078b8" +
		"4009" + "1a02e807"
	if h := hex.EncodeToString(got[:PrefixBytes+52]); h != want {
		t.Fatalf("RaftMessage frame\n got %s\nwant %s", h, want)
	}
}
