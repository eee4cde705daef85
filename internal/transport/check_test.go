package transport

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
)

// checkPattern is the payload of n bytes the check tests send: byte i is
// i mod 251, never 0xff; a corrupt piece holds a 0xff.
func checkPattern(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i % 251)
	}
	return p
}

// checkSpan is one call of a PayloadCheck's Check as a test saw it.
type checkSpan struct {
	req   uint64
	off   int
	bytes []byte
}

// badPiece is the error of the tests' check: a piece holds a 0xff.
type badPiece struct{ off int }

func (e *badPiece) Error() string { return fmt.Sprintf("bad piece at %d", e.off) }

// checkServer starts a server whose PayloadAlloc checks WriteChunk
// payloads in pieces of the bytes_per_checksum their header names,
// refusing a piece that holds 0xff, and skips those of request ID 99.
// Every Check call is recorded in spans; each payload buffer, filled
// with 0xaa, in bufs by request ID; releases and paced counts the
// admissions given back and the bytes charged to skip pacing (each also
// signalled on pacedCh). The handler answers OK when the payload it got
// is checkPattern of its length, checked; CHECKSUM_MISMATCH with the
// check's error when refused; NOT_FOUND when skipped.
type checkServer struct {
	addr     string
	mu       sync.Mutex
	spans    []checkSpan
	bufs     map[uint64][]byte
	releases map[uint64]int
	paced    []int
	pacedCh  chan int
}

func startCheckServer(t *testing.T) *checkServer {
	cs := &checkServer{bufs: map[uint64][]byte{}, releases: map[uint64]int{}, pacedCh: make(chan int, 16)}
	_, cs.addr = startServer(t, ServerConfig{
		skipPaced: func(n int) {
			cs.mu.Lock()
			cs.paced = append(cs.paced, n)
			cs.mu.Unlock()
			cs.pacedCh <- n
		},
		PayloadAlloc: func(_ context.Context, mt MsgType, h []byte, n int) (Payload, error) {
			var wc WriteChunk
			if err := wc.Unmarshal(h); err != nil {
				return Payload{}, err
			}
			if wc.RequestID == 99 {
				return Payload{}, ErrSkipPayload
			}
			buf := bytes.Repeat([]byte{0xaa}, n)
			piece := int(wc.BytesPerChecksum)
			cs.mu.Lock()
			cs.bufs[wc.RequestID] = buf
			cs.mu.Unlock()
			return Payload{
				Buf: buf,
				Release: func() {
					cs.mu.Lock()
					cs.releases[wc.RequestID]++
					cs.mu.Unlock()
				},
				Check: PayloadCheck{PieceBytes: piece, Check: func(off int, span []byte) error {
					cs.mu.Lock()
					cs.spans = append(cs.spans, checkSpan{wc.RequestID, off, bytes.Clone(span)})
					cs.mu.Unlock()
					for p := 0; p < len(span); p += piece {
						if bytes.IndexByte(span[p:min(p+piece, len(span))], 0xff) >= 0 {
							return &badPiece{off + p}
						}
					}
					return nil
				}},
			}, nil
		},
		Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
			var wc WriteChunk
			if err := f.Decode(&wc); err != nil {
				return &Response{Status: StatusInvalid, Message: err.Error()}, nil
			}
			r := &Response{RequestID: wc.RequestID}
			switch {
			case f.CheckErr != nil:
				if f.Payload != nil || f.Release != nil || f.Skipped != int(wc.Length) || f.Checked {
					r.Status, r.Message = StatusInternal, fmt.Sprintf("refused frame: payload %v, release %v, skipped %d, checked %v", f.Payload != nil, f.Release != nil, f.Skipped, f.Checked)
				} else {
					r.Status, r.Message = StatusChecksumMismatch, f.CheckErr.Error()
				}
			case f.Skipped > 0:
				r.Status = StatusNotFound
			case !f.Checked || !bytes.Equal(f.Payload, checkPattern(int(wc.Length))):
				r.Status, r.Message = StatusInternal, fmt.Sprintf("payload: checked %v, %d bytes, as sent: %v", f.Checked, len(f.Payload), bytes.Equal(f.Payload, checkPattern(int(wc.Length))))
			}
			return r, nil
		},
	})
	return cs
}

func readResponse(t *testing.T, r *Reader) *Response {
	t.Helper()
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	var resp Response
	if err := f.Decode(&resp); err != nil {
		t.Fatal(err)
	}
	return &resp
}

// TestPayloadCheckSeesEveryByteOnceInPieces: a checked payload reaches
// its Check in order, every byte once, in spans of whole pieces of at
// most CheckStepBytes (one piece when a piece is larger), the last one
// ending with the payload; the handler gets the payload with Checked set.
func TestPayloadCheckSeesEveryByteOnceInPieces(t *testing.T) {
	cs := startCheckServer(t)
	cl := dial(t, cs.addr, ClientConfig{})
	cases := []struct {
		piece, n int
		spans    []int // lengths
	}{
		{1000, 600_500, []int{262_000, 262_000, 76_500}},
		{CheckStepBytes, 2*CheckStepBytes + 1, []int{CheckStepBytes, CheckStepBytes, 1}},
		{300_000, 700_000, []int{300_000, 300_000, 100_000}}, // a piece over the step
		{4096, 100, []int{100}},
	}
	for i, tc := range cases {
		req := uint64(i + 1)
		p := checkPattern(tc.n)
		if _, err := cl.Call(context.Background(), &WriteChunk{RequestID: req, Length: uint64(tc.n), BytesPerChecksum: uint32(tc.piece)}, p); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		cs.mu.Lock()
		var got []checkSpan
		for _, s := range cs.spans {
			if s.req == req {
				got = append(got, s)
			}
		}
		releases := cs.releases[req]
		cs.mu.Unlock()
		var lens []int
		var all []byte
		for _, s := range got {
			if s.off != len(all) {
				t.Fatalf("case %d: span at %d after %d bytes", i, s.off, len(all))
			}
			lens = append(lens, len(s.bytes))
			all = append(all, s.bytes...)
		}
		if fmt.Sprint(lens) != fmt.Sprint(tc.spans) {
			t.Fatalf("case %d: spans of %v bytes, want %v", i, lens, tc.spans)
		}
		if !bytes.Equal(all, p) {
			t.Fatalf("case %d: the spans are not the payload", i)
		}
		if releases != 0 {
			t.Fatalf("case %d: the server released a payload it handed to the handler", i)
		}
	}
}

// TestPayloadCheckRefusal: at the first span its check refuses, the
// payload is read no further into its buffer (the check's refusal and
// the pacing happen before the rest of the payload is even sent), its
// admission is given back, the rest is dropped and charged to the skip
// pacing as a skipped payload's bytes are; the handler answers from
// Frame.CheckErr, and the connection reads its next frames correctly.
func TestPayloadCheckRefusal(t *testing.T) {
	cs := startCheckServer(t)
	nc, err := net.Dial("tcp", cs.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, nc)
	const piece, n = 1000, 600_500
	step := CheckStepBytes / piece * piece
	// Request 1: its third piece is corrupt.
	bad := checkPattern(n)
	bad[2*piece+17] = 0xff
	f1 := encodeFrame(t, &WriteChunk{RequestID: 1, Length: n, BytesPerChecksum: piece}, bad)
	cut := len(f1) - n + step + 100 // the first step and a little more
	if _, err := nc.Write(f1[:cut]); err != nil {
		t.Fatal(err)
	}
	// The server refuses it from the first step and paces the whole
	// payload before dropping the rest, which is not sent yet.
	if got := <-cs.pacedCh; got != n {
		t.Fatalf("paced %d bytes, want %d", got, n)
	}
	cs.mu.Lock()
	spans, releases, buf := len(cs.spans), cs.releases[1], cs.bufs[1]
	cs.mu.Unlock()
	if spans != 1 {
		t.Fatalf("%d checks before the refusal, want 1", spans)
	}
	if releases != 1 {
		t.Fatalf("admission released %d times at the refusal, want 1", releases)
	}
	if !bytes.Equal(buf[:step], bad[:step]) || !bytes.Equal(buf[step:], bytes.Repeat([]byte{0xaa}, n-step)) {
		t.Fatal("the buffer holds something else than the first step")
	}
	// The rest of request 1, request 2 (skipped) and request 3 (good),
	// all in one write.
	rest := append([]byte{}, f1[cut:]...)
	rest = append(rest, encodeFrame(t, &WriteChunk{RequestID: 99, Length: 5000, BytesPerChecksum: piece}, checkPattern(5000))...)
	rest = append(rest, encodeFrame(t, &WriteChunk{RequestID: 3, Length: 70_000, BytesPerChecksum: piece}, checkPattern(70_000))...)
	if _, err := nc.Write(rest); err != nil {
		t.Fatal(err)
	}
	r := NewReader(nc, ConnConfig{})
	resp := readResponse(t, r)
	var want badPiece
	want.off = 2 * piece
	if resp.RequestID != 1 || resp.Status != StatusChecksumMismatch || resp.Message != want.Error() {
		t.Fatalf("request 1: %+v, want CHECKSUM_MISMATCH %q", resp, want.Error())
	}
	if resp := readResponse(t, r); resp.RequestID != 99 || resp.Status != StatusNotFound {
		t.Fatalf("skipped request: %+v", resp)
	}
	if resp := readResponse(t, r); resp.RequestID != 3 || resp.Status != StatusOK {
		t.Fatalf("request after the refused one: %+v", resp)
	}
	// The skipped payload was charged to the same pacing.
	if got := <-cs.pacedCh; got != 5000 {
		t.Fatalf("skipped payload paced %d bytes, want 5000", got)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.paced) != 2 || cs.releases[1] != 1 || cs.releases[3] != 0 {
		t.Fatalf("paced %v, releases %v", cs.paced, cs.releases)
	}
	for _, s := range cs.spans {
		if s.req == 1 && s.off != 0 {
			t.Fatalf("request 1 checked again at %d after its refusal", s.off)
		}
	}
}
