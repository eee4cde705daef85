package transport

import (
	"bytes"
	"io"
	"net"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// tcpPair returns both ends of a TCP connection on 127.0.0.1.
func tcpPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, l)
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	// A test may have closed either end already: errors dropped.
	t.Cleanup(func() { _ = c.Close(); _ = r.c.Close() })
	return c.(*net.TCPConn), r.c.(*net.TCPConn)
}

// newMessage returns a fresh message of type t.
func newMessage(t MsgType) Message {
	switch t {
	case TypeWriteChunk:
		return new(WriteChunk)
	case TypePutBlock:
		return new(PutBlock)
	case TypeReadChunk:
		return new(ReadChunk)
	case TypeGetBlock:
		return new(GetBlock)
	case TypeResponse:
		return new(Response)
	case TypeRaftMessage:
		return new(RaftMessage)
	case TypePing:
		return new(Ping)
	}
	return nil
}

func marshal(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := m.appendHeader(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// normalize makes empty slices nil, so that values decoded and values
// built by hand compare equal with reflect.DeepEqual.
func normalize(m Message) Message {
	nilIfEmpty := func(s []uint32) []uint32 {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	block := func(b BlockData) BlockData {
		if len(b.Chunks) == 0 {
			b.Chunks = nil
		} else {
			cs := make([]ChunkInfo, len(b.Chunks))
			for i, c := range b.Chunks {
				c.Checksums = nilIfEmpty(c.Checksums)
				cs[i] = c
			}
			b.Chunks = cs
		}
		return b
	}
	switch m := m.(type) {
	case *WriteChunk:
		c := *m
		c.Checksums = nilIfEmpty(c.Checksums)
		return &c
	case *PutBlock:
		c := *m
		c.Block = block(c.Block)
		return &c
	case *ReadChunk:
		c := *m
		return &c
	case *GetBlock:
		c := *m
		return &c
	case *Ping:
		c := *m
		return &c
	case *Response:
		c := *m
		c.Block = block(c.Block)
		c.Checksums = nilIfEmpty(c.Checksums)
		return &c
	case *RaftMessage:
		c := *m
		if len(c.PayloadLengths) == 0 {
			c.PayloadLengths = nil
		}
		if len(c.GoneAt) == 0 {
			c.GoneAt = nil
		}
		return &c
	}
	panic("unknown message")
}

// equalMessages compares decoded values.
func equalMessages(a, b Message) bool {
	ra, aok := a.(*RaftMessage)
	rb, bok := b.(*RaftMessage)
	if aok || bok {
		if !aok || !bok {
			return false
		}
		na, nb := normalize(ra).(*RaftMessage), normalize(rb).(*RaftMessage)
		return na.GroupID == nb.GroupID && reflect.DeepEqual(na.PayloadLengths, nb.PayloadLengths) &&
			reflect.DeepEqual(na.GoneAt, nb.GoneAt) && proto.Equal(na.Message, nb.Message)
	}
	return reflect.DeepEqual(normalize(a), normalize(b))
}

// Sample messages, one per type, with every field set.

func sampleWriteChunk() *WriteChunk {
	return &WriteChunk{
		RequestID: 7, PipelineID: 3, ContainerID: 1, LocalID: 42,
		Offset: 1 << 20, Length: 1000, BytesPerChecksum: 512,
		Checksums: []uint32{0x6f32a61f, 0xb878d09e},
	}
}

func sampleBlock() BlockData {
	return BlockData{
		ContainerID: 1, LocalID: 42, Length: 1100, BytesPerChecksum: 512,
		Chunks: []ChunkInfo{
			{Offset: 0, Length: 1000, Checksums: []uint32{0x6f32a61f, 0xb878d09e}},
			{Offset: 1000, Length: 100, Checksums: []uint32{0xaa7e06db}},
		},
	}
}

func samplePutBlock() *PutBlock {
	return &PutBlock{RequestID: 8, PipelineID: 3, Block: sampleBlock()}
}

func sampleReadChunk() *ReadChunk {
	return &ReadChunk{RequestID: 9, PipelineID: 3, ContainerID: 1, LocalID: 42, Offset: 512, Length: 588}
}

func sampleGetBlock() *GetBlock {
	return &GetBlock{RequestID: 10, PipelineID: 3, ContainerID: 1, LocalID: 42}
}

func sampleResponse() *Response {
	return &Response{
		RequestID: 11, Status: StatusNotLeader, Message: "not the leader of pipeline 3",
		Leader: "127.0.0.1:9860", HasBlock: true, Block: sampleBlock(),
		Offset: 512, BytesPerChecksum: 512, Checksums: []uint32{0xb878d09e},
	}
}

// sampleRaft returns a MsgApp of two entries, each one WriteChunk, and
// their payloads.
func sampleRaft() (*RaftMessage, [][]byte) {
	wc1 := &WriteChunk{RequestID: 1, ContainerID: 1, LocalID: 42, Length: 3000, BytesPerChecksum: 1024, Checksums: []uint32{1, 2, 3}}
	wc2 := &WriteChunk{RequestID: 2, ContainerID: 1, LocalID: 42, Offset: 3000, Length: 5, BytesPerChecksum: 1024, Checksums: []uint32{4}}
	msg := &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Term: proto.Uint64(5), LogTerm: proto.Uint64(5), Index: proto.Uint64(99), Commit: proto.Uint64(98),
		Entries: []*raftpb.Entry{
			{Term: proto.Uint64(5), Index: proto.Uint64(100), Type: raftpb.EntryNormal.Enum(), Data: wc1.AppendMarshal(nil)},
			{Term: proto.Uint64(5), Index: proto.Uint64(101), Type: raftpb.EntryNormal.Enum(), Data: wc2.AppendMarshal(nil)},
		},
	}
	payloads := [][]byte{bytes.Repeat([]byte{'x'}, 3000), []byte("hello")}
	m := &RaftMessage{GroupID: 77, Message: msg}
	m.SetPayloads(payloads)
	return m, payloads
}

// sampleFrames returns one frame of every type with its payload.
func sampleFrames() []struct {
	m       Message
	payload [][]byte
} {
	raft, rp := sampleRaft()
	return []struct {
		m       Message
		payload [][]byte
	}{
		{sampleWriteChunk(), [][]byte{bytes.Repeat([]byte{'a'}, 1000)}},
		{samplePutBlock(), nil},
		{sampleReadChunk(), nil},
		{sampleGetBlock(), nil},
		{sampleResponse(), [][]byte{bytes.Repeat([]byte{'r'}, 588)}},
		{&Response{RequestID: 12}, nil},
		{raft, rp},
		{&Ping{RequestID: 77}, nil},
	}
}

// encodeFrame returns the bytes of one frame.
func encodeFrame(t testing.TB, m Message, payload ...[]byte) []byte {
	t.Helper()
	var e Encoder
	if err := e.Append(m, payload...); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	bufs := e.Buffers()
	if _, err := bufs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// closeT closes c and fails the test on an error: a Close that fails is a
// bug of the code under test (make lint's errcheck).
func closeT(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
