package keyclient_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/keyclient/fakemeta"
)

// BenchmarkPut measures one stream's put throughput through a pipeline of
// three real datanodes whose data and logs are on /dev/shm (when it
// exists), by chunks in flight: the seed-001 question (can ONE writer reach
// disk speed?). 4 MiB chunks (SPINDLE_BENCH_CHUNK bytes), 256 MiB blocks,
// 64 MiB values; SPINDLE_BENCH_DIR puts the datanodes elsewhere.
//
//	go test -run '^$' -bench Put -benchtime 8x ./internal/keyclient/
func BenchmarkPut(b *testing.B) {
	root := os.Getenv("SPINDLE_BENCH_DIR")
	if root == "" {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			root = "/dev/shm"
		}
	}
	dir, err := os.MkdirTemp(root, "spindle-keyclient-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { removeAllT(b, dir) })
	_, p := startPipeline(b, dir, 1)
	meta := fakemeta.New(p) // shared: block IDs stay unique on the pipeline
	if _, err := meta.CreateBucket(context.Background(), bkt); err != nil {
		b.Fatal(err)
	}
	const size = 64 << 20
	data := randomBytes(1, size)
	for _, depth := range benchDepths() {
		b.Run(fmt.Sprintf("inflight=%d", depth), func(b *testing.B) {
			chunk, _ := strconv.Atoi(os.Getenv("SPINDLE_BENCH_CHUNK"))
			o := keyclient.Options{ChunkSize: chunk, InFlight: depth, Logger: quiet(), Pipeline: client.Options{Logger: quiet()},
				PauseAtCheckpoints: os.Getenv("SPINDLE_BENCH_PAUSE") != ""}
			kc, err := keyclient.New(meta, o)
			if err != nil {
				b.Fatal(err)
			}
			defer testutil.CloseT(b, kc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			// One put to dial and find the leader, outside the timing.
			if _, err := kc.Put(ctx, bkt, "warm", bytes.NewReader(data[:1<<20]), keyclient.PutOptions{}); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			b.ResetTimer()
			holes, chunks := 0, 0
			for i := range b.N {
				res, err := kc.Put(ctx, bkt, fmt.Sprintf("k%d", i), bytes.NewReader(data), keyclient.PutOptions{})
				if err != nil {
					b.Fatal(err)
				}
				holes += res.Holes
				chunks += res.Chunks
			}
			b.StopTimer()
			b.ReportMetric(float64(holes)/float64(chunks), "holes/chunk")
		})
	}
}

// benchDepths are the InFlight values of BenchmarkPut: SPINDLE_BENCH_INFLIGHT
// (comma-separated) or 1, 2, 4, 8, 16.
func benchDepths() []int {
	s := os.Getenv("SPINDLE_BENCH_INFLIGHT")
	if s == "" {
		return []int{1, 2, 4, 8, 16}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			panic(fmt.Sprintf("SPINDLE_BENCH_INFLIGHT=%q: want positive integers", s))
		}
		out = append(out, n)
	}
	return out
}
