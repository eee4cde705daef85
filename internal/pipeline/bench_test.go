package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// BenchmarkPipelineWriteChunk1KiB: 1 KiB durable writes through an
// in-process 3-replica pipeline (real files in the test's temp directory,
// real 127.0.0.1 connections), 64 writers on 4 connections.
func BenchmarkPipelineWriteChunk1KiB(b *testing.B) {
	nodes, _ := startCluster(b)
	leader := waitLeader(b, nodes)
	ctx := context.Background()
	var conns []*transport.Client
	for range 4 {
		c, err := transport.DialClient(ctx, leader.addr, transport.ClientConfig{Window: 1024})
		if err != nil {
			b.Fatal(err)
		}
		defer closeT(b, c)
		conns = append(conns, c)
	}
	const writers = 64
	data := chunkData(1, 0, 1024)
	sums := engine.ComputeChecksums(nil, data, 1024)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := conns[w%len(conns)]
			off := uint64(0)
			for next.Add(1) <= int64(b.N) {
				_, err := cl.Call(ctx, &transport.WriteChunk{PipelineID: 1, ContainerID: 1 + uint64(w%4), LocalID: uint64(w), Offset: off, Length: 1024, BytesPerChecksum: 1024, Checksums: sums}, data)
				if err != nil {
					b.Error(err)
					return
				}
				off += 1024
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
}
