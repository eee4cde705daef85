package transport

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestServerPayloadAdmission: PayloadAlloc is called before the payload
// is read; a payload not read in full (the connection died mid-frame)
// gives its admission back; a refused admission closes the connection
// without reading the payload.
func TestServerPayloadAdmission(t *testing.T) {
	released := make(chan struct{}, 4)
	admitted := make(chan int, 4)
	_, addr := startServer(t, ServerConfig{
		PayloadAlloc: func(_ context.Context, mt MsgType, _ []byte, n int) (Payload, error) {
			if n > 5000 {
				return Payload{}, errors.New("over budget")
			}
			admitted <- n
			return Payload{Buf: make([]byte, n), Release: func() { released <- struct{}{} }}, nil
		},
		Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
			t.Errorf("handler called for a frame whose payload never arrived in full")
			return nil, nil
		},
	})
	frame := func(n int) []byte {
		var e Encoder
		if err := e.Append(&WriteChunk{RequestID: 1, Length: uint64(n)}, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		var out []byte
		for _, b := range e.Buffers() {
			out = append(out, b...)
		}
		return out
	}
	// Half a frame, then the connection closes.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := frame(1000)
	if _, err := nc.Write(f[:len(f)-500]); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-admitted:
		if n != 1000 {
			t.Fatalf("admitted %d bytes", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("payload not admitted before it was read")
	}
	closeT(t, nc)
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the admission of a payload cut short was not given back")
	}
	// Refused: the connection is closed, the payload never read.
	nc, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer closeT(t, nc)
	f = frame(6000)
	if _, err := nc.Write(f[:len(f)-6000]); err != nil {
		t.Fatal(err)
	}
	if err := nc.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = nc.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed after a refused admission: %v", err)
	}
}

// TestServerIdleAndReadTimeouts: a connection on which no frame begins
// within the idle timeout is closed by the server; so is one whose frame
// stops arriving midway, after the read timeout (no idle timeout there).
// A reader's wait for a peer that sends nothing used to be unbounded.
func TestServerIdleAndReadTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ConnConfig
		send []byte
	}{
		{"idle", ConnConfig{IdleTimeout: 20 * time.Millisecond}, nil},
		{"mid-frame", ConnConfig{IdleTimeout: -1, ReadTimeout: 20 * time.Millisecond}, halfFrame(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startServer(t, ServerConfig{
				Conn: tc.cfg,
				Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
					t.Errorf("handler called")
					return nil, nil
				},
			})
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer closeT(t, nc)
			if _, err := nc.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			// Bounded wait for the server's close (EOF or reset); a
			// read that times out means the connection stayed open.
			if err := nc.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			_, err = nc.Read(make([]byte, 1))
			var ne net.Error
			if err == nil || errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection not closed by the server: %v", err)
			}
		})
	}
}

// halfFrame is a WriteChunk frame of 1000 payload bytes cut after 500.
func halfFrame(t *testing.T) []byte {
	var e Encoder
	if err := e.Append(&WriteChunk{RequestID: 1, Length: 1000}, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, b := range e.Buffers() {
		out = append(out, b...)
	}
	return out[:len(out)-500]
}

// TestServerSkipPayload: a payload PayloadAlloc skips is read and dropped:
// the handler sees its length in Frame.Skipped, no payload, a header that
// decodes; the next frame on the connection is read as usual.
func TestServerSkipPayload(t *testing.T) {
	_, addr := startServer(t, ServerConfig{
		PayloadAlloc: func(_ context.Context, mt MsgType, _ []byte, n int) (Payload, error) {
			if n > 1000 {
				return Payload{}, ErrSkipPayload
			}
			return Payload{Buf: make([]byte, n)}, nil
		},
		Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
			var wc WriteChunk
			if err := f.Decode(&wc); err != nil {
				return &Response{Status: StatusInvalid, Message: err.Error()}, nil
			}
			if wc.Length > 1000 {
				if f.Payload != nil || f.Skipped != int(wc.Length) {
					return &Response{RequestID: wc.RequestID, Status: StatusInternal, Message: "payload not skipped"}, nil
				}
				return &Response{RequestID: wc.RequestID, Status: StatusNotFound}, nil
			}
			if f.Skipped != 0 || len(f.Payload) != int(wc.Length) {
				return &Response{RequestID: wc.RequestID, Status: StatusInternal, Message: "payload skipped"}, nil
			}
			return &Response{RequestID: wc.RequestID}, nil
		},
	})
	cl := dial(t, addr, ClientConfig{})
	ctx := context.Background()
	_, err := cl.Call(ctx, &WriteChunk{Length: 5000}, make([]byte, 5000))
	var se *StatusError
	if !errors.As(err, &se) || se.Status != StatusNotFound {
		t.Fatalf("skipped payload: %v, want the handler's NOT_FOUND", err)
	}
	if _, err := cl.Call(ctx, &WriteChunk{Length: 10}, make([]byte, 10)); err != nil {
		t.Fatalf("the frame after a skipped one: %v", err)
	}
}

// TestSkipPacing: beyond a burst of MaxPayloadBytes, a connection's
// skipped payloads are read no faster than SkipBytesPerSecond.
func TestSkipPacing(t *testing.T) {
	const mib = 1 << 20
	t0 := time.Unix(1000, 0)
	b := skipBucket{rate: mib} // 1 MiB/s
	for i, step := range []struct {
		at   time.Duration
		n    int
		wait time.Duration
	}{
		{0, 40 * mib, 0},                          // the burst: 68 MiB
		{0, 40 * mib, 0},                          // 28 MiB left: let through (−12 MiB)
		{0, 40 * mib, 12 * time.Second},           // waits for the 12 MiB
		{12 * time.Second, mib, 40 * time.Second}, // the 40 MiB taken at 12 s
		{200 * time.Second, 68 * mib, 0},          // refilled to the burst (not beyond)
		{200 * time.Second, 1, time.Duration(0)},  // 0 left: let through
		{200 * time.Second, 1, time.Second / mib}, // −1 byte
	} {
		if got := b.take(t0.Add(step.at), step.n); got != step.wait {
			t.Fatalf("step %d: wait %v, want %v", i, got, step.wait)
		}
	}
	if (&skipBucket{rate: -1}).take(t0, MaxPayloadBytes*10) != 0 {
		t.Fatal("pacing off waits")
	}
}
