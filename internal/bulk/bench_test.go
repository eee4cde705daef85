package bulk

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"

	"github.com/spindle-store/spindle/internal/engine"
)

// BenchmarkFetch copies a 256 MiB container between two engines in
// BENCH_DIR (default the test's temporary directory; /dev/shm shows the
// CPU cost) over loopback: sendfile at the source; recv, CRC32C check and
// pwrite at the target; Commit. It reports the CPU time of the whole
// process (both ends) per GB copied, cpu-s/GB.
func BenchmarkFetch(b *testing.B) {
	dir := os.Getenv("BENCH_DIR")
	mk := func() *engine.Engine {
		d, err := os.MkdirTemp(dir, "bulk-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := os.RemoveAll(d); err != nil {
				b.Error(err)
			}
		})
		e, err := engine.Open(engine.Config{DataDirs: []string{d}, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { testutil.CloseT(b, e) })
		return e
	}
	src := mk()
	sizes := make([]int, 64)
	for i := range sizes {
		sizes[i] = 4 << 20
	}
	fill(b, src, 1, false, sizes...)
	_, dm := serve(b, src, 0)
	d := dm.Addr().String()
	b.SetBytes(256 << 20)
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		dst := mk()
		var im *engine.Importer
		_, err := Fetch(context.Background(), nil, d, 1, func(h ContainerHeader) (Sink, error) {
			var err error
			im, err = dst.ImportContainer(1, h.MaxSizeBytes, h.BCSID)
			return im, err
		})
		if err == nil {
			err = im.Commit()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((processCPU()-cpu0).Seconds()/(float64(b.N)*(256<<20)/1e9), "cpu-s/GB")
}

// processCPU is the user and system time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
