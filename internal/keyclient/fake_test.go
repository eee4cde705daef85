package keyclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/transport"
)

// fakePipeline is a pipeline of fake datanodes on 127.0.0.1 sharing one
// store with the engine's rules for a block: chunks contiguous from 0, a
// write past the end refused as a hole, a write before it accepted only as
// an identical replay, PutBlock only of written chunks, never shrinking.
// Every member serves writes (no leader) and reads. A client that breaks a
// rule the engine enforces fails the test. Knobs script failures.
type fakePipeline struct {
	t     *testing.T
	id    uint64
	addrs []string
	srvs  []*transport.Server

	mu     sync.Mutex
	blocks map[metaapi.BlockRef]*fakeBlock
	// holeOnce: a write at one of these (block, offset) is answered
	// StatusHole the first time, as if it had overtaken its predecessor.
	holeOnce map[fakeChunkKey]bool
	// writesLeft ≥ 0: after that many more successful chunk writes, every
	// write and PutBlock is answered Unavailable (the pipeline lost its
	// quorum); reads still work. -1: unlimited.
	writesLeft int
	// corrupt: members whose reads come back with wrong checksums.
	corrupt map[int]bool
	// holdN > 0: chunk write answers (but the first) are held until holdN
	// are held or holdTotal chunk writes arrived; maxHeld records the most
	// held. A
	// write past the end is then accepted, and applied once the writes
	// before it arrive (answers held back would otherwise make the
	// client's order-keeping stall the test).
	holdN, holdTotal, arrived, maxHeld int
	held                               []heldReply
	// replyDelay > 0: chunk write and PutBlock answers are sent that much
	// later, from another goroutine; overlaps counts a PutBlock of a block
	// arriving while writes of it are unanswered, and writes of a block
	// arriving while its PutBlock is unanswered.
	replyDelay  time.Duration
	lateReplies sync.WaitGroup // the goroutines sending delayed answers
	unanswered  map[metaapi.BlockRef]int
	putPending  map[metaapi.BlockRef]bool
	overlaps    int
	// counters
	writes, holes, putBlocks, reads int
}

type fakeChunkKey struct {
	b   metaapi.BlockRef
	off uint64
}

type fakeBlock struct {
	data      []byte
	chunks    []transport.ChunkInfo // written, in order
	committed transport.BlockData
	ahead     map[uint64]aheadChunk // hold mode: writes past the end
}

type aheadChunk struct {
	info transport.ChunkInfo
	data []byte
}

type heldReply struct {
	c *transport.Conn
	r *transport.Response
}

func newFakePipeline(t *testing.T, id uint64, members int) *fakePipeline {
	t.Helper()
	p := &fakePipeline{t: t, id: id, blocks: map[metaapi.BlockRef]*fakeBlock{}, holeOnce: map[fakeChunkKey]bool{}, writesLeft: -1, corrupt: map[int]bool{},
		unanswered: map[metaapi.BlockRef]int{}, putPending: map[metaapi.BlockRef]bool{}}
	for i := range members {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := transport.NewServer(transport.ServerConfig{
			Handler: func(ctx context.Context, c *transport.Conn, f transport.Frame) (transport.Message, []byte) {
				return p.handle(i, c, f)
			},
			Logger: quiet(),
		})
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		p.addrs = append(p.addrs, l.Addr().String())
		p.srvs = append(p.srvs, srv)
		t.Cleanup(func() {
			testutil.CloseT(t, srv) // a second Close (a test stopped it) is nil
			if err := <-served; !errors.Is(err, transport.ErrServerClosed) {
				t.Errorf("fake datanode %d: Serve: %v", i, err)
			}
		})
	}
	// Registered last, run first: the delayed answers are sent before the
	// servers close.
	t.Cleanup(p.lateReplies.Wait)
	return p
}

func (p *fakePipeline) pipeline() metaapi.Pipeline {
	mp := metaapi.Pipeline{ID: p.id, State: "OPEN"}
	for i, a := range p.addrs {
		mp.Members = append(mp.Members, metaapi.Member{NodeID: uint64(i + 1), Addr: a})
	}
	return mp
}

func (p *fakePipeline) set(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// committed returns a block's committed metadata.
func (p *fakePipeline) committed(b metaapi.BlockRef) (transport.BlockData, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fb := p.blocks[b]
	if fb == nil {
		return transport.BlockData{}, false
	}
	return fb.committed, true
}

func (p *fakePipeline) handle(member int, c *transport.Conn, f transport.Frame) (transport.Message, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &transport.Response{}
	fail := func(s transport.Status, msg string) (transport.Message, []byte) {
		resp.Status, resp.Message = s, msg
		return resp, nil
	}
	switch f.Type {
	case transport.TypeWriteChunk:
		var m transport.WriteChunk
		if err := f.Decode(&m); err != nil {
			p.t.Errorf("decode: %v", err)
			return nil, nil
		}
		resp.RequestID = m.RequestID
		msg, payload := p.writeChunk(&m, f.Payload, resp)
		if p.replyDelay > 0 && msg != nil {
			ref := metaapi.BlockRef{Container: m.ContainerID, Local: m.LocalID}
			if p.putPending[ref] {
				p.overlaps++
			}
			p.unanswered[ref]++
			p.later(c, resp, func() { p.unanswered[ref]-- })
			return nil, nil
		}
		if p.holdN == 0 || msg == nil {
			return msg, payload
		}
		p.arrived++
		p.held = append(p.held, heldReply{c, resp})
		p.maxHeld = max(p.maxHeld, len(p.held))
		// The first write is answered at once: until it is, the client
		// knows no leader and sends one write at a time.
		if len(p.held) >= p.holdN || p.arrived >= p.holdTotal || p.arrived == 1 {
			for _, h := range p.held {
				if err := h.c.Send(h.r); err != nil {
					p.t.Errorf("send held reply: %v", err)
				}
			}
			p.held = nil
		}
		return nil, nil
	case transport.TypePutBlock:
		var m transport.PutBlock
		if err := f.Decode(&m); err != nil {
			p.t.Errorf("decode: %v", err)
			return nil, nil
		}
		resp.RequestID = m.RequestID
		if m.PipelineID != p.id {
			return fail(transport.StatusNotFound, "pipeline not served here")
		}
		if p.writesLeft == 0 {
			return fail(transport.StatusUnavailable, "no quorum")
		}
		bd := m.Block
		ref := metaapi.BlockRef{Container: bd.ContainerID, Local: bd.LocalID}
		fb := p.blocks[ref]
		if fb == nil {
			p.t.Errorf("PutBlock of block %v never written", ref)
			return fail(transport.StatusNotFound, "no such block")
		}
		var off uint64
		for i, ch := range bd.Chunks {
			if i >= len(fb.chunks) || ch.Offset != off || ch.Offset != fb.chunks[i].Offset || ch.Length != fb.chunks[i].Length || !slices.Equal(ch.Checksums, fb.chunks[i].Checksums) {
				p.t.Errorf("PutBlock %v: chunk %d (%d@%d) is not the chunk written there", ref, i, ch.Length, ch.Offset)
				return fail(transport.StatusInvalid, "chunk mismatch")
			}
			off += ch.Length
		}
		if off != bd.Length || bd.Length < fb.committed.Length || len(bd.Chunks) < len(fb.committed.Chunks) {
			p.t.Errorf("PutBlock %v: length %d, chunks add up to %d, committed %d", ref, bd.Length, off, fb.committed.Length)
			return fail(transport.StatusInvalid, "bad length")
		}
		fb.committed = bd
		p.putBlocks++
		if p.replyDelay > 0 {
			if p.unanswered[ref] > 0 {
				p.overlaps++
			}
			p.putPending[ref] = true
			p.later(c, resp, func() { delete(p.putPending, ref) })
			return nil, nil
		}
		return resp, nil
	case transport.TypeReadChunk:
		var m transport.ReadChunk
		if err := f.Decode(&m); err != nil {
			p.t.Errorf("decode: %v", err)
			return nil, nil
		}
		resp.RequestID = m.RequestID
		fb := p.blocks[metaapi.BlockRef{Container: m.ContainerID, Local: m.LocalID}]
		if fb == nil || m.Length == 0 || m.Offset+m.Length > fb.committed.Length {
			return fail(transport.StatusNotFound, "range not committed")
		}
		p.reads++
		data := fb.data[m.Offset : m.Offset+m.Length]
		resp.Offset, resp.BytesPerChecksum = m.Offset, 512
		resp.Checksums = engine.ComputeChecksums(nil, data, 512)
		if p.corrupt[member] {
			resp.Checksums[len(resp.Checksums)-1] ^= 1
		}
		return resp, bytes.Clone(data)
	}
	return fail(transport.StatusUnsupported, "unsupported")
}

// later sends resp after replyDelay, calling done (under the lock) just
// before.
func (p *fakePipeline) later(c *transport.Conn, resp *transport.Response, done func()) {
	p.lateReplies.Add(1)
	go func() {
		defer p.lateReplies.Done()
		time.Sleep(p.replyDelay) // a slow datanode: only makes overlaps possible
		p.mu.Lock()
		done()
		p.mu.Unlock()
		if err := c.Send(resp); err != nil && !connGone(err) { // gone: the client gave up
			p.t.Errorf("late answer: %v", err)
		}
	}()
}

// writeChunk applies a WriteChunk with the engine's rules; the lock is held.
func (p *fakePipeline) writeChunk(m *transport.WriteChunk, data []byte, resp *transport.Response) (transport.Message, []byte) {
	fail := func(s transport.Status, msg string) (transport.Message, []byte) {
		resp.Status, resp.Message = s, msg
		return resp, nil
	}
	if m.PipelineID != p.id {
		return fail(transport.StatusNotFound, "pipeline not served here")
	}
	if p.writesLeft == 0 {
		return fail(transport.StatusUnavailable, "no quorum")
	}
	if !slices.Equal(engine.ComputeChecksums(nil, data, m.BytesPerChecksum), m.Checksums) {
		p.t.Errorf("WriteChunk %d/%d@%d: checksums do not match the data", m.ContainerID, m.LocalID, m.Offset)
		return fail(transport.StatusChecksumMismatch, "checksum mismatch")
	}
	ref := metaapi.BlockRef{Container: m.ContainerID, Local: m.LocalID}
	k := fakeChunkKey{ref, m.Offset}
	if p.holeOnce[k] {
		delete(p.holeOnce, k)
		p.holes++
		return fail(transport.StatusHole, "scripted hole")
	}
	fb := p.blocks[ref]
	if fb == nil {
		fb = &fakeBlock{}
		p.blocks[ref] = fb
	}
	end := uint64(len(fb.data))
	switch {
	case m.Offset > end && p.holdN > 0:
		if fb.ahead == nil {
			fb.ahead = map[uint64]aheadChunk{}
		}
		fb.ahead[m.Offset] = aheadChunk{transport.ChunkInfo{Offset: m.Offset, Length: m.Length, Checksums: slices.Clone(m.Checksums)}, bytes.Clone(data)}
		return resp, nil
	case m.Offset > end:
		p.holes++
		return fail(transport.StatusHole, "hole")
	case m.Offset < end:
		for _, ch := range fb.chunks {
			if ch.Offset == m.Offset {
				if ch.Length == m.Length && slices.Equal(ch.Checksums, m.Checksums) {
					return resp, nil // identical replay
				}
				break
			}
		}
		p.t.Errorf("WriteChunk %v@%d: a different chunk where one was written (a block never gets two)", ref, m.Offset)
		return fail(transport.StatusOverlap, "overlap")
	}
	fb.data = append(fb.data, data...)
	fb.chunks = append(fb.chunks, transport.ChunkInfo{Offset: m.Offset, Length: m.Length, Checksums: slices.Clone(m.Checksums)})
	p.writes++
	if p.writesLeft > 0 {
		p.writesLeft--
	}
	for {
		a, ok := fb.ahead[uint64(len(fb.data))]
		if !ok {
			break
		}
		delete(fb.ahead, a.info.Offset)
		fb.data = append(fb.data, a.data...)
		fb.chunks = append(fb.chunks, a.info)
		p.writes++
	}
	return resp, nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastPipelineOptions make a pipeline that lost its quorum fail fast.
func fastPipelineOptions() client.Options {
	return client.Options{
		Logger: quiet(), MaxAttempts: 4, RetryTimeout: 2 * time.Second, AttemptTimeout: 2 * time.Second,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
	}
}

func crc(b []byte) uint32 { return crc32c.Checksum(b) }
