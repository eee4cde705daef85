package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/teragen"
	"github.com/spindle-store/spindle/internal/units"
)

// Defaults and limits of the TeraGen bench.
const (
	DefaultTeraGenKeyBytes = 1 << 30
	DefaultTeraGenBucket   = "teragen"
	// DefaultTeraGenTimeout bounds a whole run (writing, validating).
	DefaultTeraGenTimeout = 30 * time.Minute
	// DefaultBaselineDuration bounds the raw disk baseline of the key
	// benches.
	DefaultBaselineDuration = 10 * time.Second
	// MaxTeraGenWriters bounds the writers (TeraGen's map tasks).
	MaxTeraGenWriters = 1024
)

// TeraGenConfig configures `spindle bench teragen` (seed 001): TeraGen's
// rows written as keys through the key client by Writers concurrent
// writers, like TeraGen's map tasks writing their part files.
type TeraGenConfig struct {
	ClusterConfig
	// SizeBytes is the data written: SizeBytes/100 rows (whole rows).
	SizeBytes int64
	// Writers write concurrently (default 2), each its share of the rows
	// (contiguous, as a map task's split), in keys of at most KeyBytes.
	Writers int
	// KeyBytes sizes the keys (default 1 GiB): a writer's share is cut
	// into ⌈share/KeyBytes⌉ keys of equal row counts (so a key is at
	// most one row over KeyBytes); a share smaller than that is one key.
	KeyBytes int64
	// Bucket receives the keys (default "teragen"; created when missing),
	// named PREFIX/part-m-NNNNN in row order; Prefix defaults to
	// teragen-DATE-TIME-PID/.
	Bucket, Prefix string
	// Validate reads every key back after the run (timed separately)
	// and checks its rows and TeraValidate checksum.
	Validate bool
	// NoBaseline skips the raw disk baseline; BaselineDuration bounds it
	// (default 10 s; never more bytes than the run wrote).
	NoBaseline       bool
	BaselineDuration time.Duration
	// Timeout bounds the whole run (default 30 min).
	Timeout time.Duration
	// Progress receives progress lines (nil: stderr when a terminal).
	Progress io.Writer
	// Logger for the key client (nil: discard).
	Logger *slog.Logger
}

// TeraGenWriter is one writer's share and figures.
type TeraGenWriter struct {
	Writer   int     `json:"writer"`
	FirstRow uint64  `json:"first_row"`
	Rows     uint64  `json:"rows"`
	Keys     int     `json:"keys"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MBPerS   float64 `json:"mb_per_s"`
}

// TeraGenValidation is the read-back check.
type TeraGenValidation struct {
	Rows     uint64  `json:"rows"`
	Checksum string  `json:"checksum"`
	Seconds  float64 `json:"seconds"`
	MBPerS   float64 `json:"mb_per_s"`
	OK       bool    `json:"ok"`
}

// TeraGenResult is the result with TeraGen's figures at the top level.
type TeraGenResult struct {
	bench.Result
	Rows uint64 `json:"rows"`
	// Checksum is TeraGen's CHECKSUM counter (the sum of the rows'
	// CRC32s mod 2^64) in decimal, as Hadoop prints it; a string because
	// JSON numbers lose digits past 2^53.
	Checksum    string             `json:"checksum"`
	ChecksumHex string             `json:"checksum_hex"`
	Keys        int                `json:"keys"`
	Writers     []TeraGenWriter    `json:"writers"`
	Validation  *TeraGenValidation `json:"validation,omitempty"`
	Cluster     string             `json:"cluster"`
}

// teraKey is one key: rows [first, first+rows).
type teraKey struct {
	name        string
	first, rows uint64
	sum         uint64 // checksum of its rows, once written
}

// planTeraGen splits rows over writers (contiguous shares, as TeraGen's
// splits) and each share into ⌈share bytes / keyBytes⌉ keys of equal row
// counts (±1 row; a key is at most one row over keyBytes), numbered in
// row order.
func planTeraGen(rows uint64, writers int, keyBytes int64, prefix string) [][]*teraKey {
	plan := make([][]*teraKey, writers)
	idx := 0
	for w := range writers {
		s, e := rows*uint64(w)/uint64(writers), rows*uint64(w+1)/uint64(writers)
		share := e - s
		if share == 0 {
			continue
		}
		n := (share*teragen.RowSize + uint64(keyBytes) - 1) / uint64(keyBytes)
		for k := range n {
			first, last := s+share*k/n, s+share*(k+1)/n
			plan[w] = append(plan[w], &teraKey{
				name: fmt.Sprintf("%spart-m-%05d", prefix, idx), first: first, rows: last - first,
			})
			idx++
		}
	}
	return plan
}

func (c *TeraGenConfig) defaults() error {
	if c.SizeBytes < teragen.RowSize {
		return fmt.Errorf("size %d bytes: at least one row (%d bytes)", c.SizeBytes, teragen.RowSize)
	}
	if c.SizeBytes/teragen.RowSize > teragen.MaxRows {
		return fmt.Errorf("size %d bytes: more than %d rows", c.SizeBytes, uint64(teragen.MaxRows))
	}
	if c.Writers == 0 {
		c.Writers = 2
	}
	if c.Writers < 1 || c.Writers > MaxTeraGenWriters {
		return fmt.Errorf("writers %d not in [1, %d]", c.Writers, MaxTeraGenWriters)
	}
	if c.KeyBytes == 0 {
		c.KeyBytes = DefaultTeraGenKeyBytes
	}
	if c.KeyBytes < teragen.RowSize {
		return fmt.Errorf("key size %d bytes: at least one row (%d bytes)", c.KeyBytes, teragen.RowSize)
	}
	if keys := c.Writers + int(c.SizeBytes/c.KeyBytes); keys > MaxBenchKeys {
		return fmt.Errorf("%d bytes in keys of %d bytes: more than %d keys", c.SizeBytes, c.KeyBytes, MaxBenchKeys)
	}
	if c.Bucket == "" {
		c.Bucket = DefaultTeraGenBucket
	}
	if c.Prefix == "" {
		c.Prefix = runPrefix("teragen")
	}
	if c.BaselineDuration <= 0 {
		c.BaselineDuration = DefaultBaselineDuration
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTeraGenTimeout
	}
	if c.Progress == nil {
		c.Progress = bench.TerminalProgress()
	}
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	return nil
}

// RunTeraGen runs the TeraGen bench: it starts the embedded server (or
// uses the cluster at Meta), writes SizeBytes/100 TeraGen rows as keys
// from Writers concurrent writers through the key client, reports the
// whole run's MB/s (bytes of rows over the wall time from the first put
// to the last commit), each writer's figures, the rows' checksum, and a
// raw disk baseline measured afterwards in the same directory; ops are
// keys and latency_us is per key put. With Validate it reads every key
// back and checks the checksum.
func RunTeraGen(ctx context.Context, cfg TeraGenConfig) (out TeraGenResult, err error) {
	if err := cfg.defaults(); err != nil {
		return out, fmt.Errorf("teragen: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	progress := func(format string, args ...any) {
		progressf(cfg.Progress, "teragen: "+format+"\n", args...)
	}
	cl, err := openKeyCluster(ctx, cfg.ClusterConfig, cfg.Logger, progress)
	if err != nil {
		return out, fmt.Errorf("teragen: %w", err)
	}
	defer func() {
		if cerr := cl.cleanup(); cerr != nil && err == nil {
			err = fmt.Errorf("teragen: cleanup: %w", cerr)
		}
	}()
	opts := cfg.Client
	if opts.Logger == nil {
		opts.Logger = cfg.Logger
	}
	kc, err := keyclient.New(cl.meta, opts)
	if err != nil {
		return out, fmt.Errorf("teragen: %w", err)
	}
	defer closeQuietly(kc)
	if err := ensureBucket(ctx, kc, cfg.Bucket); err != nil {
		return out, fmt.Errorf("teragen: %w", err)
	}

	rows := uint64(cfg.SizeBytes / teragen.RowSize)
	plan := planTeraGen(rows, cfg.Writers, cfg.KeyBytes, cfg.Prefix)
	var names []string
	for _, ks := range plan {
		for _, k := range ks {
			names = append(names, k.name)
		}
	}
	if !cl.embedded && !cfg.Keep {
		defer func() {
			if derr := deleteKeys(ctx, kc, cfg.Bucket, names); derr != nil && err == nil {
				err = fmt.Errorf("teragen: deleting the bench's keys: %w", derr)
			}
		}()
	}
	total := int64(rows) * teragen.RowSize
	progress("%d rows (%s) from %d writers in %d keys of about %s at most, into %s/%s on %s",
		rows, units.FormatBytes(total), cfg.Writers, len(names), units.FormatBytes(cfg.KeyBytes),
		cfg.Bucket, cfg.Prefix, cl.label)

	writers := make([]TeraGenWriter, cfg.Writers)
	lats := make([]*bench.Latency, cfg.Writers)
	var acked atomic.Int64 // bytes acknowledged, for progress
	var holes, failovers atomic.Int64
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	errs := make([]error, cfg.Writers)
	stopProgress := startByteProgress(cfg.Progress, "teragen", total, &acked)
	cpu := bench.StartCPU(cl.procs())
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.Writers {
		lats[w] = bench.NewLatency()
		wr := &writers[w]
		wr.Writer = w
		if len(plan[w]) > 0 {
			wr.FirstRow = plan[w][0].first
		}
		wg.Go(func() {
			ws := time.Now()
			for _, k := range plan[w] {
				if wctx.Err() != nil {
					errs[w] = wctx.Err()
					return
				}
				ks := time.Now()
				res, err := putRows(wctx, kc, cfg.Bucket, k, &acked)
				if err != nil {
					errs[w] = fmt.Errorf("writer %d: %w", w, err)
					wcancel()
					return
				}
				lats[w].Record(time.Since(ks))
				holes.Add(int64(res.Holes))
				failovers.Add(int64(res.Failovers))
				wr.Keys++
				wr.Rows += k.rows
				wr.Bytes += int64(k.rows) * teragen.RowSize
			}
			wr.Seconds = time.Since(ws).Seconds()
			wr.MBPerS = round3(float64(wr.Bytes) / 1e6 / wr.Seconds)
			wr.Seconds = round6(wr.Seconds)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuUse := cpu.Stop(int64(len(names)), total)
	stopProgress()
	if err := firstError(errs); err != nil {
		if ctx.Err() != nil {
			return out, fmt.Errorf("teragen: interrupted or over --timeout %v after %v: %w", cfg.Timeout, elapsed.Round(time.Millisecond), err)
		}
		return out, fmt.Errorf("teragen: %w", err)
	}

	lat := bench.NewLatency()
	for _, l := range lats {
		lat.Merge(l)
	}
	var sum uint64
	for _, ks := range plan {
		for _, k := range ks {
			sum += k.sum
		}
	}
	st := bench.Stats{Workers: cfg.Writers, Ops: int64(len(names)), Bytes: total, Elapsed: elapsed, Latency: lat, CPU: &cpuUse}
	res := st.Result("teragen")
	if n := cl.cpuNote(); n != "" {
		res.AddNote("%s", n)
	}
	res.SetParam("size_bytes", cfg.SizeBytes)
	res.SetParam("writers", cfg.Writers)
	res.SetParam("key_bytes", cfg.KeyBytes)
	co := kc.Options()
	res.SetParam("chunk_size_bytes", co.ChunkSize)
	res.SetParam("block_size_bytes", co.BlockSize)
	res.SetParam("in_flight", co.InFlight)
	res.SetParam("commit_every_bytes", co.CommitEvery)
	res.SetParam("bucket", cfg.Bucket)
	res.SetParam("prefix", cfg.Prefix)
	res.SetParam("durable", true)
	res.Extra = map[string]any{"holes": holes.Load(), "failovers": failovers.Load()}
	if rem := cfg.SizeBytes % teragen.RowSize; rem != 0 {
		res.AddNote("size rounded down to whole rows: %d bytes (%d rows) of the %d asked", total, rows, cfg.SizeBytes)
	}
	out = TeraGenResult{
		Rows: rows, Checksum: fmt.Sprint(sum), ChecksumHex: fmt.Sprintf("%x", sum),
		Keys: len(names), Writers: writers, Cluster: cl.label,
	}
	progress("wrote %s in %.1fs: %.1f MB/s; checksum %d", units.FormatBytes(total), elapsed.Seconds(), res.MBPerS, sum)

	if cfg.Validate {
		v, err := validateTeraGen(ctx, kc, cfg.Bucket, plan, &acked, cfg.Progress)
		if err != nil {
			return out, fmt.Errorf("teragen: validate: %w", err)
		}
		out.Validation = v
		if !v.OK {
			out.Result = res
			return out, fmt.Errorf("teragen: validate: read back %d rows with checksum %s, wrote %d rows with checksum %d", v.Rows, v.Checksum, rows, sum)
		}
	}

	if err := cl.stop(); err != nil {
		return out, fmt.Errorf("teragen: stopping the embedded server: %w", err)
	}
	if dir := cl.baselineDir(); dir != "" && !cfg.NoBaseline {
		bw := cl.baselineWriters()
		progress("baseline: %d writers, pwrite %s + fdatasync, appending, on %s", bw, units.FormatBytes(int64(co.ChunkSize)), dir)
		b, err := diskBaseline(ctx, dir, bw, int64(co.ChunkSize), cfg.BaselineDuration, total, cfg.Progress)
		if err != nil {
			return out, fmt.Errorf("teragen: baseline: %w", err)
		}
		res.SetBaseline(b)
		if cl.embedded {
			res.AddNote("baseline: the disk's sequential durable writes in the same directory after the run (%d writers, one per datanode, pwrite of a chunk + fdatasync each); the embedded cluster writes every byte 3 times to this disk (3 replicas), so about 1/3 is the most the ratio can be", bw)
		} else {
			res.AddNote("baseline: sequential durable writes in %s (%d writers, pwrite of a chunk + fdatasync each), not necessarily on the cluster's disks", dir, bw)
		}
	} else if !cfg.NoBaseline {
		res.AddNote("no baseline: the cluster's disks are not local (give --baseline-dir to measure one here)")
	}
	if cfg.Keep {
		res.AddNote("kept: the keys in %s/%s on %s", cfg.Bucket, cfg.Prefix, cl.label)
	}
	out.Result = res
	return out, nil
}

// putRows writes key k's rows and records their checksum in k.
func putRows(ctx context.Context, kc *keyclient.Client, bucket string, k *teraKey, acked *atomic.Int64) (keyclient.PutResult, error) {
	r, err := teragen.NewReader(k.first, k.rows)
	if err != nil {
		return keyclient.PutResult{}, err
	}
	var last int64
	res, err := kc.Put(ctx, bucket, k.name, r, keyclient.PutOptions{Progress: func(done int64) {
		acked.Add(done - last)
		last = done
	}})
	if err != nil {
		return res, err
	}
	want := int64(k.rows) * teragen.RowSize
	if r.Remaining() != 0 || int64(res.Key.Size) != want {
		return res, fmt.Errorf("put %s: committed %d bytes, the key has %d (%d not read)", k.name, res.Key.Size, want, r.Remaining())
	}
	acked.Add(want - last)
	k.sum = r.Checksum()
	return res, nil
}

// validateTeraGen reads every key back, one reader per writer's share,
// and sums the rows' checksum (TeraValidate's, without the sort check).
func validateTeraGen(ctx context.Context, kc *keyclient.Client, bucket string, plan [][]*teraKey, done *atomic.Int64, progress io.Writer) (*TeraGenValidation, error) {
	var total int64
	var want uint64
	for _, ks := range plan {
		for _, k := range ks {
			total += int64(k.rows) * teragen.RowSize
			want += k.sum
		}
	}
	done.Store(0)
	stop := startByteProgress(progress, "teragen validate", total, done)
	start := time.Now()
	errs := make([]error, len(plan))
	sums := make([]uint64, len(plan))
	rowsRead := make([]uint64, len(plan))
	var wg sync.WaitGroup
	for w, ks := range plan {
		wg.Go(func() {
			for _, k := range ks {
				var s teragen.Summer
				if _, err := kc.Get(ctx, bucket, k.name, &s, keyclient.GetOptions{}); err != nil {
					errs[w] = err
					return
				}
				n, sum, err := s.Result()
				if err != nil {
					errs[w] = fmt.Errorf("%s: %w", k.name, err)
					return
				}
				if n != k.rows || sum != k.sum {
					errs[w] = fmt.Errorf("%s: read back %d rows with checksum %d, wrote %d rows with checksum %d", k.name, n, sum, k.rows, k.sum)
					return
				}
				done.Add(int64(n) * teragen.RowSize)
				sums[w] += sum
				rowsRead[w] += n
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	stop()
	if err := firstError(errs); err != nil {
		return nil, err
	}
	v := &TeraGenValidation{Seconds: round6(el.Seconds()), MBPerS: round3(float64(total) / 1e6 / el.Seconds())}
	var sum uint64
	for i := range sums {
		sum += sums[i]
		v.Rows += rowsRead[i]
	}
	v.Checksum = fmt.Sprint(sum)
	v.OK = sum == want
	return v, nil
}

// startByteProgress refreshes a progress line on w every second from
// *done out of total bytes, until the returned function is called.
func startByteProgress(w io.Writer, label string, total int64, done *atomic.Int64) func() {
	if w == io.Discard {
		return func() {}
	}
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		last, lastT := int64(0), start
		printed := false
		for {
			select {
			case <-stop:
				if printed {
					progressf(w, "\r\033[K")
				}
				return
			case now := <-t.C:
				d := done.Load()
				dt := now.Sub(lastT).Seconds()
				progressf(w, "\r\033[K%s %6.1fs  %s / %s  %.1f MB/s", label, now.Sub(start).Seconds(),
					units.FormatBytes(d), units.FormatBytes(total), float64(d-last)/1e6/max(dt, 1e-3))
				last, lastT, printed = d, now, true
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-stopped
		})
	}
}

// firstError returns the first error that is not a cancellation caused
// by another one, or the first error.
func firstError(errs []error) error {
	var first error
	for _, e := range errs {
		if e == nil {
			continue
		}
		if !errors.Is(e, context.Canceled) {
			return e
		}
		if first == nil {
			first = e
		}
	}
	return first
}

func round3(x float64) float64 { return roundN(x, 1e3) }
func round6(x float64) float64 { return roundN(x, 1e6) }

func roundN(x, scale float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*scale) / scale
}
