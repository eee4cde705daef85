package transport

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spindle-store/spindle/internal/crc32c"
)

// Every message type through a real TCP connection on 127.0.0.1, both
// directions, several frames in flight.
func TestConnRoundTripTCP(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := NewConn(a, ConnConfig{}), NewConn(b, ConnConfig{})
	frames := sampleFrames()
	for _, pair := range [][2]*Conn{{ca, cb}, {cb, ca}} {
		snd, rcv := pair[0], pair[1]
		errc := make(chan error, 1)
		go func() {
			for _, f := range frames {
				if err := snd.Send(f.m, f.payload...); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		for _, want := range frames {
			f, err := rcv.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if f.Type != want.m.Type() {
				t.Fatalf("type %s, want %s", f.Type, want.m.Type())
			}
			got := newMessage(f.Type)
			if err := f.Decode(got); err != nil {
				t.Fatal(err)
			}
			if !equalMessages(got, want.m) {
				t.Fatalf("%s:\n got %+v\nwant %+v", f.Type, got, want.m)
			}
			if !bytes.Equal(f.Payload, bytes.Join(want.payload, nil)) {
				t.Fatalf("%s: payload differs", f.Type)
			}
			if r, ok := got.(*RaftMessage); ok {
				segs, err := r.Segments(f.Payload, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(segs) != len(want.payload) {
					t.Fatalf("%d segments", len(segs))
				}
				for i := range segs {
					if !bytes.Equal(segs[i], want.payload[i]) {
						t.Fatalf("segment %d differs", i)
					}
				}
				// Each entry's data is the WriteChunk header of its segment.
				for i, e := range r.Message.GetEntries() {
					var wc WriteChunk
					if err := wc.Unmarshal(e.GetData()); err != nil {
						t.Fatal(err)
					}
					if wc.Length != uint64(len(segs[i])) {
						t.Fatalf("entry %d length %d, segment %d", i, wc.Length, len(segs[i]))
					}
				}
			}
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// A 16 MiB WriteChunk through TCP (and a batch with it) arrives intact.
func TestConnLargePayload(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := NewConn(a, ConnConfig{}), NewConn(b, ConnConfig{})
	const size = 16 << 20
	payload := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < size; i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			payload[i+j] = byte(v >> (8 * j))
		}
	}
	sum := crc32c.Checksum(payload)
	wc := &WriteChunk{RequestID: 1, Length: size, BytesPerChecksum: 16 << 20, Checksums: []uint32{sum}}
	errc := make(chan error, 1)
	go func() {
		if err := ca.Send(wc, payload[:size/2], payload[size/2:]); err != nil {
			errc <- err
			return
		}
		var e Encoder
		if err := errors.Join(e.Append(&Response{RequestID: 2}), e.Append(wc, payload), e.Append(&Response{RequestID: 3})); err != nil {
			errc <- err
			return
		}
		errc <- ca.SendBatch(&e)
	}()
	check := func(f Frame) {
		t.Helper()
		var got WriteChunk
		if err := f.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if crc32c.Checksum(f.Payload) != got.Checksums[0] || !bytes.Equal(f.Payload, payload) {
			t.Fatal("16 MiB payload corrupted")
		}
	}
	f, err := cb.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	check(f)
	for _, want := range []MsgType{TypeResponse, TypeWriteChunk, TypeResponse} {
		f, err := cb.ReadFrame()
		if err != nil || f.Type != want {
			t.Fatal(f.Type, err)
		}
		if want == TypeWriteChunk {
			check(f)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A peer that drops the connection in the middle of a frame gives a clean
// error (io.ErrUnexpectedEOF), not a bad frame and not a panic.
func TestConnDroppedMidFrame(t *testing.T) {
	full := encodeFrame(t, sampleWriteChunk(), bytes.Repeat([]byte{'a'}, 1000))
	for _, cut := range []int{5, PrefixBytes + 4, len(full) - 500} {
		a, b := tcpPair(t)
		go func() {
			if _, err := a.Write(full[:cut]); err != nil {
				t.Errorf("writing %d bytes of the frame: %v", cut, err)
			}
			closeT(t, a)
		}()
		_, err := NewConn(b, ConnConfig{}).ReadFrame()
		if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrBadFrame) {
			t.Fatalf("cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

// Writes after Close fail with ErrClosed; a write error is sticky.
func TestConnClose(t *testing.T) {
	a, _ := tcpPair(t)
	c := NewConn(a, ConnConfig{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	err := c.Send(&Response{RequestID: 1})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	if err2 := c.Send(&Response{RequestID: 2}); err2 != err {
		t.Fatalf("write error not sticky: %v then %v", err, err2)
	}
	// A refused frame does not break a live connection.
	x, y := tcpPair(t)
	cx, cy := NewConn(x, ConnConfig{}), NewConn(y, ConnConfig{})
	if err := cx.Send(&WriteChunk{Length: 5}, []byte{1}); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if err := cx.Send(&Response{RequestID: 9}); err != nil {
		t.Fatal(err)
	}
	f, err := cy.ReadFrame()
	if err != nil || f.Type != TypeResponse {
		t.Fatal(f, err)
	}
}

// A write stuck behind a peer that does not read times out and breaks the
// connection.
func TestConnWriteTimeout(t *testing.T) {
	a, _ := tcpPair(t)
	c := NewConn(a, ConnConfig{WriteTimeout: 50 * time.Millisecond})
	big := make([]byte, 32<<20) // more than the socket buffers hold
	err := c.Send(&WriteChunk{Length: uint64(len(big))}, big)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Send = %v, want a timeout", err)
	}
	if err2 := c.Send(&Response{}); err2 != err {
		t.Fatalf("not sticky: %v", err2)
	}
}

// Concurrent senders never interleave frames.
func TestConnConcurrentSend(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := NewConn(a, ConnConfig{}), NewConn(b, ConnConfig{})
	const senders, each = 8, 200
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{byte(s)}, 3000+s)
			for i := range each {
				wc := &WriteChunk{RequestID: uint64(s*each + i), ContainerID: uint64(s), Length: uint64(len(p))}
				if err := ca.Send(wc, p); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var wc WriteChunk
	for range senders * each {
		f, err := cb.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Decode(&wc); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Payload, bytes.Repeat([]byte{byte(wc.ContainerID)}, 3000+int(wc.ContainerID))) {
			t.Fatal("interleaved frames")
		}
	}
	wg.Wait()
}

// No allocation per frame in steady state: Send on a TCP connection, and
// reading and decoding frames.
func TestConnSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector (sync.Pool drops items at random)")
	}
	a, b := tcpPair(t)
	ca := NewConn(a, ConnConfig{})
	drained := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, b)
		drained <- err
	}()
	defer func() {
		closeT(t, a) // ends the drain (tcpPair's cleanup closes again, dropped)
		if err := <-drained; err != nil {
			t.Errorf("drain: %v", err)
		}
	}()
	wc := sampleWriteChunk()
	payload := make([]byte, wc.Length)
	if n := testing.AllocsPerRun(200, func() {
		if err := ca.Send(wc, payload); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Send: %.1f allocations per frame", n)
	}

	frame := encodeFrame(t, wc, payload)
	raft, rp := sampleRaft()
	raftFrame := encodeFrame(t, raft, rp...)
	r := NewReader(&repeatReader{b: frame}, ConnConfig{})
	var got WriteChunk
	if n := testing.AllocsPerRun(200, func() {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Decode(&got); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ReadFrame+Decode: %.1f allocations per frame", n)
	}
	// Raft frames: encoding allocates nothing; decoding allocates only
	// what the protobuf runtime needs for the raft message.
	var e Encoder
	if n := testing.AllocsPerRun(200, func() {
		e.Reset()
		if err := e.Append(raft, rp...); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Encoder.Append(RaftMessage): %.1f allocations", n)
	}
	rr := NewReader(&repeatReader{b: raftFrame}, ConnConfig{})
	var rm RaftMessage
	rm.Message = new(raftpb.Message)
	n := testing.AllocsPerRun(200, func() {
		f, err := rr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Decode(&rm); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("ReadFrame+Decode(RaftMessage of 2 entries): %.1f allocations (protobuf runtime)", n)
}

// repeatReader returns b over and over.
type repeatReader struct {
	b   []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}
