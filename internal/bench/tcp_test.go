package bench

import (
	"context"
	"io"
	"testing"
)

func TestLoopbackTCPBoundedByBytes(t *testing.T) {
	for _, streams := range []int{1, 3} {
		res, err := RunLoopbackTCP(context.Background(), TCPConfig{Streams: streams, BufferBytes: 64 << 10, MaxBytes: 10<<20 + 1, Progress: io.Discard})
		if err != nil {
			t.Fatalf("%d streams: %v", streams, err)
		}
		// 10 MiB + 1 byte is 161 whole 64 KiB writes.
		if res.Ops != 161 || res.Bytes != 161*64<<10 {
			t.Errorf("%d streams: ops %d bytes %d, want 161 writes of 64 KiB", streams, res.Ops, res.Bytes)
		}
		if res.Scenario != "tcp-loopback" || res.Params["streams"] != streams || res.MBPerS <= 0 || res.Seconds <= 0 {
			t.Errorf("%d streams: result %+v", streams, res)
		}
		if res.Extra["bytes_sent"] != res.Bytes {
			t.Errorf("bytes sent %v, received %d", res.Extra["bytes_sent"], res.Bytes)
		}
	}
}

func TestLoopbackTCPRejectsBadConfig(t *testing.T) {
	for _, c := range []TCPConfig{
		{},                             // unbounded
		{MaxBytes: 1, Streams: -1},     // bad streams
		{MaxBytes: 1, Streams: 65},     // too many
		{MaxBytes: 1, BufferBytes: -1}, // bad buffer
		{MaxBytes: -1, Duration: 1},    // negative bound
	} {
		if _, err := RunLoopbackTCP(context.Background(), c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

func TestLoopbackTCPCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunLoopbackTCP(ctx, TCPConfig{MaxBytes: 1 << 30, Progress: io.Discard}); err == nil {
		t.Error("cancelled run returned no error")
	}
}
