package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Loopback TCP baseline defaults and limits.
const (
	DefaultTCPBufferBytes = 1 << 20
	// MaxTCPStreams bounds the connections of one run.
	MaxTCPStreams = 64
	// MaxTCPBufferBytes bounds one write (and one buffer per stream side).
	MaxTCPBufferBytes = 64 << 20
	// tcpDialTimeout bounds connecting to the run's own listener.
	tcpDialTimeout = 10 * time.Second
)

// TCPConfig describes a loopback TCP bandwidth run: Streams connections to
// a listener on 127.0.0.1 in this process, each with one sender writing
// BufferBytes at a time and one receiver reading and discarding.
type TCPConfig struct {
	Streams     int   // default 1
	BufferBytes int64 // bytes per write and per read buffer (default 1 MiB)
	// Duration and MaxBytes bound the run (whichever first); at least one
	// must be positive. MaxBytes counts the bytes of all streams, rounded
	// up to whole buffers.
	Duration time.Duration
	MaxBytes int64
	// Progress is as in LoopConfig (nil: stderr when it is a terminal).
	Progress io.Writer
}

func (c TCPConfig) withDefaults() (TCPConfig, error) {
	if c.Streams == 0 {
		c.Streams = 1
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = DefaultTCPBufferBytes
	}
	switch {
	case c.Streams < 1 || c.Streams > MaxTCPStreams:
		return c, fmt.Errorf("bench: tcp: %d streams, want 1..%d", c.Streams, MaxTCPStreams)
	case c.BufferBytes < 1 || c.BufferBytes > MaxTCPBufferBytes:
		return c, fmt.Errorf("bench: tcp: buffer %d bytes, want 1..%d", c.BufferBytes, MaxTCPBufferBytes)
	case c.Duration < 0 || c.MaxBytes < 0 || (c.Duration == 0 && c.MaxBytes == 0):
		return c, fmt.Errorf("bench: tcp: bounds duration %v and max bytes %d: want at least one positive and none negative", c.Duration, c.MaxBytes)
	}
	return c, nil
}

// RunLoopbackTCP measures what the kernel's loopback TCP path carries in
// this process: the copy limit that replication over 127.0.0.1 works
// against. An operation is one write of BufferBytes by a sender (a
// MaxBytes-bounded run writes whole buffers, up to MaxBytes rounded up to a
// buffer); its latency is the time the write took to return. Bytes and MB/s count bytes RECEIVED, so data
// still in socket buffers at the end is not counted. The result's scenario
// is "tcp-loopback". Only 127.0.0.1 is ever used.
func RunLoopbackTCP(ctx context.Context, cfg TCPConfig) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, fmt.Errorf("bench: tcp: listen on 127.0.0.1: %w", err)
	}
	defer closeQuietly(ln)

	// Accept exactly Streams connections; each receiver discards what it
	// reads until the sender closes.
	var (
		recvWG   sync.WaitGroup
		mu       sync.Mutex
		received int64
		recvErr  error
		accepted = make(chan net.Conn, cfg.Streams)
	)
	go func() {
		defer close(accepted)
		for range cfg.Streams {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	conns := make([]net.Conn, 0, cfg.Streams)
	defer func() {
		for _, c := range conns {
			closeQuietly(c)
		}
	}()
	d := net.Dialer{Timeout: tcpDialTimeout}
	for i := range cfg.Streams {
		c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return Result{}, fmt.Errorf("bench: tcp: dial stream %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	for range cfg.Streams {
		rc, ok := <-accepted
		if !ok {
			return Result{}, errors.New("bench: tcp: listener closed before every stream was accepted")
		}
		recvWG.Add(1)
		go func() {
			defer recvWG.Done()
			defer closeQuietly(rc)
			buf := make([]byte, cfg.BufferBytes)
			var n int64
			for {
				m, err := rc.Read(buf)
				n += int64(m)
				if err != nil {
					mu.Lock()
					received += n
					if !errors.Is(err, io.EOF) && recvErr == nil {
						recvErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}

	bufs := make([][]byte, cfg.Streams)
	for i := range bufs {
		bufs[i] = make([]byte, cfg.BufferBytes)
		FillPseudoRandom(bufs[i], uint64(i)+1)
	}
	var maxOps int64
	if cfg.MaxBytes > 0 {
		maxOps = (cfg.MaxBytes + cfg.BufferBytes - 1) / cfg.BufferBytes
	}
	start := time.Now()
	st, loopErr := Loop(ctx, LoopConfig{Workers: cfg.Streams, Duration: cfg.Duration, MaxOps: maxOps, Label: "tcp-loopback", Progress: cfg.Progress},
		func(_ context.Context, w int, _ int64) (int, error) {
			m, err := conns[w].Write(bufs[w])
			if err != nil {
				return m, fmt.Errorf("stream %d: write: %w", w, err)
			}
			return m, nil
		})
	// Closing the senders' ends lets the receivers drain and stop; the
	// clock stops when the last byte has been received.
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			if err := tc.CloseWrite(); err != nil {
				closeQuietly(tc) // so that its receiver ends all the same
				if loopErr == nil {
					loopErr = err
				}
			}
		}
	}
	recvWG.Wait()
	elapsed := time.Since(start)
	res := Stats{Workers: cfg.Streams, Ops: st.Ops, Bytes: received, Elapsed: elapsed, Latency: st.Latency}.Result("tcp-loopback")
	res.SetParam("streams", cfg.Streams)
	res.SetParam("buffer_bytes", cfg.BufferBytes)
	res.SetParam("address", "127.0.0.1")
	res.Extra = map[string]any{"bytes_sent": st.Bytes}
	if loopErr != nil {
		return res, fmt.Errorf("bench: tcp: %w", loopErr)
	}
	if recvErr != nil {
		return res, fmt.Errorf("bench: tcp: receive: %w", recvErr)
	}
	if received != st.Bytes {
		return res, fmt.Errorf("bench: tcp: %d bytes sent, %d received", st.Bytes, received)
	}
	return res, nil
}
