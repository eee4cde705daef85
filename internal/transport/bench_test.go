package transport

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/crc32c"
)

var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}}

func benchWriteChunk(size int) *WriteChunk {
	return &WriteChunk{RequestID: 1, PipelineID: 1, ContainerID: 1, LocalID: 1, Length: uint64(size),
		BytesPerChecksum: 16 << 10, Checksums: make([]uint32, (size+16<<10-1)/(16<<10))}
}

// WriteChunk frames one way over a TCP loopback connection: Send (one
// writev) on one side, ReadFrame + Decode on the other.
func BenchmarkWriteChunkLoopback(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			a, c := tcpPair(b)
			snd, rcv := NewConn(a, ConnConfig{}), NewConn(c, ConnConfig{})
			wc := benchWriteChunk(s.n)
			payload := make([]byte, s.n)
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			b.ResetTimer()
			errc := sendFrames(b.N, snd, wc, payload)
			var got WriteChunk
			for range b.N {
				f, err := rcv.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Decode(&got); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// processCPU is the CPU time (user and system) of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// 1 MiB WriteChunk frames one way over loopback, plaintext and mutual TLS
// (connections from tlsconf.Settings, as the datanodes make them): Send on
// one side, ReadHeader + ReadPayload into a reused buffer on the other.
// Reports the CPU seconds of the whole process (both ends) per GB moved,
// the figure TLS adds to: its encryption and decryption, crypto/tls's
// copies, and the syscalls of its records.
func BenchmarkWriteChunk1MiBLoopbackCPU(b *testing.B) {
	srvSet, cliSet := localTLS(b)
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			a, c := tcpPair(b)
			var snd, rcv net.Conn = a, c
			if mode == "tls" {
				ctx := context.Background()
				errc := make(chan error, 1)
				go func() {
					var err error
					rcv, err = srvSet.Server(ctx, c)
					errc <- err
				}()
				var err error
				if snd, err = cliSet.Client(ctx, a, "127.0.0.1"); err != nil {
					b.Fatal(err)
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
			sc, rc := NewConn(snd, ConnConfig{}), NewConn(rcv, ConnConfig{})
			const size = 1 << 20
			wc := benchWriteChunk(size)
			payload := make([]byte, size)
			dst := make([]byte, size)
			b.SetBytes(size)
			b.ResetTimer()
			cpu0 := processCPU(b)
			errc := sendFrames(b.N, sc, wc, payload)
			for range b.N {
				if _, _, _, err := rc.ReadHeader(); err != nil {
					b.Fatal(err)
				}
				if _, err := rc.ReadPayload(dst); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			cpu := processCPU(b) - cpu0
			b.ReportMetric(cpu.Seconds()/(float64(b.N)*size/1e9), "cpu-s/GB")
		})
	}
}

// Request/response through Client and Server on loopback: 64 callers
// sharing one connection with a window of 64; the handler decodes and
// replies at once.
func BenchmarkClientCall(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			_, addr := startServer(b, ServerConfig{Handler: func(ctx context.Context, c *Conn, f Frame) (Message, []byte) {
				var wc WriteChunk
				if err := f.Decode(&wc); err != nil {
					return &Response{Status: StatusInvalid}, nil
				}
				return &Response{RequestID: wc.RequestID}, nil
			}})
			cl := dial(b, addr, ClientConfig{Window: 64})
			payload := make([]byte, s.n)
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				wc := benchWriteChunk(s.n)
				for pb.Next() {
					res, err := cl.Call(context.Background(), wc, payload)
					if err != nil {
						b.Error(err)
						return
					}
					res.Release()
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// Header encode and decode alone, in memory.
func BenchmarkWriteChunkHeader(b *testing.B) {
	for _, s := range benchSizes {
		wc := benchWriteChunk(s.n)
		buf := wc.AppendMarshal(nil)
		b.Run(fmt.Sprintf("marshal/%s", s.name), func(b *testing.B) {
			b.ReportAllocs()
			out := make([]byte, 0, len(buf))
			for range b.N {
				out = wc.AppendMarshal(out[:0])
			}
		})
		b.Run(fmt.Sprintf("unmarshal/%s", s.name), func(b *testing.B) {
			b.ReportAllocs()
			var got WriteChunk
			for range b.N {
				if err := got.Unmarshal(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A RaftMessage of 10 WriteChunk entries of 1 MiB: encode to iovecs, and
// decode (header through the protobuf runtime, payload split into
// segments).
func BenchmarkRaftMessage10x1MiB(b *testing.B) {
	m, _ := sampleRaft()
	m.Message.Entries = nil
	var payloads [][]byte
	for i := range 10 {
		wc := benchWriteChunk(1 << 20)
		wc.Offset = uint64(i) << 20
		m.Message.Entries = append(m.Message.Entries, &raftpb.Entry{
			Term: proto.Uint64(5), Index: proto.Uint64(uint64(100 + i)),
			Type: raftpb.EntryNormal.Enum(), Data: wc.AppendMarshal(nil),
		})
		payloads = append(payloads, make([]byte, 1<<20))
	}
	m.SetPayloads(payloads)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		var e Encoder
		for range b.N {
			e.Reset()
			if err := e.Append(m, payloads...); err != nil {
				b.Fatal(err)
			}
			_ = e.Buffers()
		}
	})
	b.Run("decode", func(b *testing.B) {
		h := marshal(b, m)
		var got RaftMessage
		var segs [][]byte
		payload := make([]byte, 10<<20)
		b.ReportAllocs()
		for range b.N {
			if err := got.Unmarshal(h); err != nil {
				b.Fatal(err)
			}
			var err error
			if segs, err = got.Segments(payload, segs[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// 1 MiB WriteChunk payloads one way over loopback, read into one of 64
// rotating buffers (as a datanode's fresh payload buffers: not in cache)
// and their CRC32C pieces of 16 KiB verified: "steps" with a PayloadCheck
// (each CheckStepBytes step verified right after it is read, in cache),
// "whole" read in full, then verified. Reports the CPU seconds of the
// whole process (both ends) per GB and the verification's own speed.
func BenchmarkReadPayloadVerified(b *testing.B) {
	const size, piece, bufs = 1 << 20, 16 << 10, 64
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	wc := benchWriteChunk(size)
	for i := range wc.Checksums {
		wc.Checksums[i] = crc32c.Checksum(payload[i*piece : min((i+1)*piece, size)])
	}
	var verifying time.Duration // in verify, all calls
	verify := func(off int, span []byte) error {
		t0 := time.Now()
		defer func() { verifying += time.Since(t0) }()
		for p := 0; p < len(span); p += piece {
			if crc32c.Checksum(span[p:min(p+piece, len(span))]) != wc.Checksums[(off+p)/piece] {
				return fmt.Errorf("piece at %d", off+p)
			}
		}
		return nil
	}
	dst := make([][]byte, bufs)
	for i := range dst {
		dst[i] = make([]byte, size)
	}
	for _, mode := range []string{"steps", "whole"} {
		b.Run(mode, func(b *testing.B) {
			a, c := tcpPair(b)
			sc, rc := NewConn(a, ConnConfig{}), NewConn(c, ConnConfig{})
			b.SetBytes(size)
			b.ResetTimer()
			cpu0 := processCPU(b)
			verifying = 0
			errc := sendFrames(b.N, sc, wc, payload)
			for i := range b.N {
				if _, _, _, err := rc.ReadHeader(); err != nil {
					b.Fatal(err)
				}
				buf := dst[i%bufs]
				if mode == "steps" {
					if _, bad, err := rc.readPayload(buf, PayloadCheck{PieceBytes: piece, Check: verify}); err != nil || bad != nil {
						b.Fatal(err, bad)
					}
				} else {
					p, err := rc.ReadPayload(buf)
					if err != nil {
						b.Fatal(err)
					}
					if err := verify(0, p); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			cpu := processCPU(b) - cpu0
			b.ReportMetric(cpu.Seconds()/(float64(b.N)*size/1e9), "cpu-s/GB")
			b.ReportMetric(float64(b.N)*size/1e9/verifying.Seconds(), "verify-GB/s")
		})
	}
}

// sendFrames sends the WriteChunk wc with payload n times on c from a
// goroutine of its own; the channel gets the first error, or nil once all
// are sent.
func sendFrames(n int, c *Conn, wc *WriteChunk, payload []byte) <-chan error {
	errc := make(chan error, 1)
	go func() {
		for range n {
			if err := c.Send(wc, payload); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return errc
}
