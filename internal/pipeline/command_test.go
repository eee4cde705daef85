package pipeline

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/transport"
)

func sampleEntry() []byte {
	var d []byte
	d = AppendCommand(d, &Command{Kind: KindWriteChunk, ProposalID: 1<<48 | 5, WriteChunk: transport.WriteChunk{PipelineID: 1, ContainerID: 2, LocalID: 3, Offset: 4096, Length: 1024, BytesPerChecksum: 512, Checksums: []uint32{1, 2}}})
	d = AppendCommand(d, &Command{Kind: KindPutBlock, ProposalID: 1<<48 | 6, PutBlock: transport.PutBlock{PipelineID: 1, Block: transport.BlockData{ContainerID: 2, LocalID: 3, Length: 5120, BytesPerChecksum: 512, Chunks: []transport.ChunkInfo{{Offset: 0, Length: 5120, Checksums: make([]uint32, 10)}}}}})
	d = AppendCommand(d, &Command{Kind: KindDeleteBlock, Ref: transport.GetBlock{ContainerID: 2, LocalID: 9}})
	d = AppendCommand(d, &Command{Kind: KindCloseContainer, Ref: transport.GetBlock{ContainerID: 2}})
	return d
}

func TestEntryRoundTrip(t *testing.T) {
	d := sampleEntry()
	var kinds []Kind
	err := DecodeEntry(d, func(c *Command) error {
		kinds = append(kinds, c.Kind)
		switch c.Kind {
		case KindWriteChunk:
			if c.WriteChunk.Offset != 4096 || c.WriteChunk.Length != 1024 || len(c.WriteChunk.Checksums) != 2 || c.ProposalID != 1<<48|5 {
				t.Fatalf("write chunk decoded as %+v", c.WriteChunk)
			}
		case KindPutBlock:
			if c.PutBlock.Block.Length != 5120 || len(c.PutBlock.Block.Chunks) != 1 {
				t.Fatalf("put block decoded as %+v", c.PutBlock)
			}
		case KindDeleteBlock:
			if c.Ref.LocalID != 9 {
				t.Fatalf("delete decoded as %+v", c.Ref)
			}
		}
		return nil
	})
	if err != nil || len(kinds) != 4 {
		t.Fatalf("decode: %v, kinds %v", err, kinds)
	}
	cmds, err := DecodeCommands(d)
	var lens []uint64
	for _, c := range cmds {
		if c.Kind == KindWriteChunk {
			lens = append(lens, c.WriteChunk.Length)
		}
	}
	if err != nil || len(cmds) != 4 || len(lens) != 1 || lens[0] != 1024 {
		t.Fatalf("commands %d, WriteChunk lengths %v, %v", len(cmds), lens, err)
	}
}

func TestEntryRejectsDamage(t *testing.T) {
	d := sampleEntry()
	cases := map[string][]byte{
		"version":    append([]byte{2}, d[1:]...),
		"no command": {1},
		"truncated":  d[:len(d)-1],
		"trailing":   append(append([]byte(nil), d...), 0),
		"kind":       append([]byte{1, 9}, d[2:]...),
	}
	for name, b := range cases {
		err := DecodeEntry(b, func(*Command) error { return nil })
		if !errors.Is(err, ErrBadEntry) {
			t.Errorf("%s: %v, want ErrBadEntry", name, err)
		}
	}
	if err := DecodeEntry(nil, func(*Command) error { t.Fatal("command in empty entry"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(sampleEntry())
	f.Add([]byte{1})
	f.Add(AppendCommand(nil, &Command{Kind: KindWriteChunk, ProposalID: 3, Inline: []byte("xy"), WriteChunk: transport.WriteChunk{Length: 2, BytesPerChecksum: 512, Checksums: []uint32{5}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out []byte
		n := 0
		err := DecodeEntry(b, func(c *Command) error {
			out = AppendCommand(out, c)
			n++
			return nil
		})
		if err != nil || n == 0 {
			return
		}
		// What decodes re-encodes to something that decodes to the same
		// number of commands.
		m := 0
		if err := DecodeEntry(out, func(*Command) error { m++; return nil }); err != nil || m != n {
			t.Fatalf("re-encoded entry: %v, %d commands, want %d", err, m, n)
		}
	})
}

func TestByteBudget(t *testing.T) {
	b := newByteBudget(100)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	// 60 + 50 > 100: waits; a cancelled context ends the wait.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- b.acquire(cctx, 50) }()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("acquire over the budget returned without the bytes being released")
	}
	// A release lets a waiter in.
	go func() { done <- b.acquire(ctx, 50) }()
	b.release(60)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Larger than the whole budget: admitted once nothing else is held.
	go func() { done <- b.acquire(ctx, 500) }()
	b.release(50)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.used != 500 {
		t.Fatalf("used %d", b.used)
	}
	b.release(500)
	// Large payloads (over 100/8) leave 100/4 to the small ones: 40 + 40
	// > 75 waits, a small one (10) does not.
	if err := b.acquire(ctx, 40); err != nil {
		t.Fatal(err)
	}
	go func() { done <- b.acquire(ctx, 40) }()
	if err := b.acquire(ctx, 10); err != nil {
		t.Fatal(err)
	}
	waitWaiting(t, b, 1)
	b.release(40)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// waitWaiting waits (bounded) until n acquires of b are waiting.
func waitWaiting(t *testing.T, b *byteBudget, n int) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for _, _, w := b.stats(); w != n; _, _, w = b.stats() {
		if time.Now().After(deadline) {
			t.Fatalf("%d acquires waiting, want %d", w, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMsgAppSplit: a MsgApp whose chunk bytes exceed one frame's bound goes
// out as consecutive MsgApps, each naming the entry before it, with its own
// entries' segments.
func TestMsgAppSplit(t *testing.T) {
	const seg = 20 << 20 // three of them exceed maxRaftPayloadBytes
	m := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Term: proto.Uint64(3), LogTerm: proto.Uint64(2), Index: proto.Uint64(10), Commit: proto.Uint64(9)}
	om := &outMsg{group: 7, msg: m}
	for i := uint64(11); i <= 13; i++ {
		data := AppendCommand(nil, &Command{Kind: KindWriteChunk, WriteChunk: transport.WriteChunk{ContainerID: 1, LocalID: i, Length: seg}})
		m.Entries = append(m.Entries, &raftpb.Entry{Term: proto.Uint64(3), Index: proto.Uint64(i), Type: raftpb.EntryType_EntryNormal.Enum(), Data: data})
		b := make([]byte, seg)
		b[0] = byte(i)
		om.segs = append(om.segs, b)
		om.perEntry = append(om.perEntry, 1)
	}
	var enc transport.Encoder
	if err := (&peer{}).encode(&enc, om, func() error { t.Fatal("flushed below maxPeerBatchBytes"); return nil }); err != nil {
		t.Fatal(err)
	}
	if enc.Frames() != 3 {
		t.Fatalf("%d frames, want 3", enc.Frames())
	}
	var buf bytes.Buffer
	bufs := enc.Buffers()
	if _, err := bufs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := transport.NewReader(&buf, transport.ConnConfig{})
	prevIndex, prevTerm := uint64(10), uint64(2)
	for i := uint64(11); i <= 13; i++ {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		var rm transport.RaftMessage
		if err := f.Decode(&rm); err != nil {
			t.Fatal(err)
		}
		got := rm.Message
		if rm.GroupID != 7 || got.GetIndex() != prevIndex || got.GetLogTerm() != prevTerm || got.GetCommit() != 9 ||
			len(got.GetEntries()) != 1 || got.GetEntries()[0].GetIndex() != i || len(f.Payload) != seg || f.Payload[0] != byte(i) {
			t.Fatalf("part for entry %d: index %d logterm %d, %d entries, %d payload bytes", i, got.GetIndex(), got.GetLogTerm(), len(got.GetEntries()), len(f.Payload))
		}
		prevIndex, prevTerm = i, 3
	}
}

// TestCommandBytesIsWhatAppendCommandAppends: the loop sizes each entry
// with CommandBytes and builds it in exactly that room (it panics on a
// mismatch), so the two must agree for every kind and size.
func TestCommandBytesIsWhatAppendCommandAppends(t *testing.T) {
	wc := transport.WriteChunk{PipelineID: 3, ContainerID: 1 << 40, LocalID: 7, Offset: 1 << 33, Length: 4096, BytesPerChecksum: 16 << 10, Checksums: []uint32{1, 2, 3}}
	cmds := []Command{
		{Kind: KindWriteChunk, ProposalID: 1, WriteChunk: wc},
		{Kind: KindPutBlock, ProposalID: 1 << 60, PutBlock: transport.PutBlock{PipelineID: 9, Block: transport.BlockData{ContainerID: 5, LocalID: 6, Length: 1 << 20}}},
		{Kind: KindDeleteBlock, ProposalID: 2, Ref: transport.GetBlock{ContainerID: 5, LocalID: 6}},
		{Kind: KindCloseContainer, ProposalID: 3, Ref: transport.GetBlock{ContainerID: 5}},
		{Kind: KindWriteChunk, ProposalID: 4},
	}
	for _, n := range []int{0, 1, 127, 128, 1024, 16383, 16384, 256 << 10} {
		c := Command{Kind: KindWriteChunk, ProposalID: 5, WriteChunk: wc, Inline: make([]byte, n)}
		cmds = append(cmds, c)
	}
	for i := range cmds {
		if got, want := len(AppendCommand(nil, &cmds[i])), 1+CommandBytes(&cmds[i]); got != want {
			t.Errorf("command %d (%v, %d inline bytes): AppendCommand wrote %d bytes, CommandBytes+1 says %d", i, cmds[i].Kind, len(cmds[i].Inline), got, want)
		}
		if got, want := len(AppendCommand([]byte{entryVersion}, &cmds[i])), 1+CommandBytes(&cmds[i]); got != want {
			t.Errorf("command %d appended to an entry: %d bytes, want %d", i, got, want)
		}
	}
}
