package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/scenario"
	"github.com/spindle-store/spindle/internal/units"
)

// runBenches runs short versions of the benches that start what they
// need themselves (the server is stopped by now).
func (d *demo) runBenches(ctx context.Context) error {
	dur := d.cfg.BenchDuration
	dir := func(name string) string { return filepath.Join(d.tmp, "bench", name) }

	d.say("   baseline --writers 4 --chunk-size 1MiB --duration %s ...", dur)
	b, err := bench.RunBaseline(ctx, bench.BaselineConfig{
		Dir: dir("baseline"), Writers: 4, ChunkSizeBytes: 1 << 20, Duration: dur, Progress: io.Discard,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.results = append(d.results, b.Result())
	d.add("bench baseline 1.0 MiB x4", fmt.Sprintf("raw pwrite + fdatasync: %.0f writes/s, %.0f MB/s, p99 %.1f ms", b.OpsPerS, b.MBPerS, b.LatencyUs.P99/1e3))

	d.say("   chunk-write --local --chunk-size 1KiB --clients 16 --duration %s ...", dur)
	cw, err := scenario.RunChunkWriteLocal(ctx, scenario.ChunkWriteLocalConfig{
		DataDirs: []string{dir("chunk-write-local")}, ChunkSizeBytes: 1 << 10, Clients: 16, Duration: dur,
		RetainBytes: 256 << 20, NoOverwriteBaseline: true, Progress: io.Discard, Logger: d.log,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.results = append(d.results, cw)
	d.add("bench chunk-write --local 1.0 KiB x16", fmt.Sprintf("%.0f writes/s, p99 %.0f µs; raw pwrite+fdatasync %.0f/s; ratio %s", cw.OpsPerS, cw.LatencyUs.P99, baseOps(cw), ratioText(cw.RatioToBaseline)))

	d.say("   chunk-write (3 replicas) --chunk-size 1KiB --clients 16 --duration %s ...", dur)
	cp, err := scenario.RunChunkWritePipeline(ctx, scenario.ChunkWritePipelineConfig{
		Binary: d.cfg.Binary, DataDir: dir("chunk-write-data"), LogDir: dir("chunk-write-log"),
		ChunkSizeBytes: 1 << 10, Clients: 16, Duration: dur, Progress: io.Discard, Logger: d.log,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.results = append(d.results, cp.Result)
	d.add("bench chunk-write 1.0 KiB x16, 3 replicas", fmt.Sprintf("%.0f durable writes/s (%s), p99 %.1f ms; raw pwrite+fdatasync %.0f/s; ratio %s",
		cp.OpsPerS, cp.Placement.Label, cp.LatencyUs.P99/1e3, baseOps(cp.Result), ratioText(cp.RatioToBaseline)))

	const messages = 500
	d.say("   follower-append --messages %d --batch 1 --chunk-size 1MiB ...", messages)
	fa, err := scenario.RunFollowerAppend(ctx, scenario.FollowerAppendConfig{
		Binary: d.cfg.Binary, Messages: messages, Batch: 1, DataDir: dir("follower-data"), LogDir: dir("follower-log"),
		RetainBytes: 128 << 20, BlockSizeBytes: 64 << 20, Progress: io.Discard, Logger: d.log,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.results = append(d.results, fa.Result)
	d.add("bench follower-append 1.0 MiB, batch 1", fmt.Sprintf("%.0f AppendEntries/s as a raft follower, %.0f MB/s, p99 %.1f ms; ratio %s (syscalls per message: --profile-syscalls)",
		fa.OpsPerS, fa.MBPerS, fa.LatencyUs.P99/1e3, ratioText(fa.RatioToBaseline)))

	d.say("   queue-dirs --senders 4 --dirs 4 --size 4KiB --duration %s ...", dur)
	qd, err := scenario.RunQueueDirs(ctx, scenario.QueueDirsConfig{
		Dir: dir("queue-dirs"), Senders: 4, Dirs: 4, Files: 20000, Duration: dur, SizeBytes: 4 << 10, Unlink: true, Progress: io.Discard,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.results = append(d.results, qd.Result)
	d.add("bench queue-dirs 4 senders x 4 dirs", fmt.Sprintf("%.0f files/s (create, write %s, fsync, rename, unlink), p99 %.1f ms", qd.OpsPerS, units.FormatBytes(4<<10), qd.LatencyUs.P99/1e3))
	return nil
}

func baseOps(r bench.Result) float64 {
	if r.Baseline == nil {
		return 0
	}
	return r.Baseline.OpsPerS
}
