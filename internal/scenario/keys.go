package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/units"
)

// Defaults of the key-write and key-read benches.
const (
	DefaultKeyBenchBucket = "bench"
	// MaxKeyBytes bounds one key of the key benches.
	MaxKeyBytes = 1 << 40
	// patternBytes is the length of the pattern values are cut from: not
	// a power of two, so that a byte at a wrong offset never matches by
	// alignment with chunks or blocks.
	patternBytes = 1<<20 + 13
)

// pattern is the bytes values are made of: value i at offset o is
// pattern[(o + i·7919) mod len(pattern)], a rotation per key.
var pattern = func() []byte {
	p := make([]byte, patternBytes)
	bench.FillPseudoRandom(p, 0x5eed)
	return p
}()

func patternStart(i int) int { return int(uint64(i) * 7919 % patternBytes) }

// valueReader streams value i of n bytes; it holds no data of its own.
type valueReader struct {
	pos  int   // index into pattern
	left int64 // bytes still to return
}

func newValueReader(i int, n int64) *valueReader {
	return &valueReader{pos: patternStart(i), left: n}
}

func (r *valueReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n := 0
	for n < len(p) { // at most len(p)/patternBytes + 2 rounds
		c := copy(p[n:], pattern[r.pos:])
		n += c
		r.pos = (r.pos + c) % patternBytes
	}
	r.left -= int64(n)
	return n, nil
}

// valueChecker is an io.Writer comparing what it gets with value i.
type valueChecker struct {
	pos int
	n   int64 // bytes compared
}

func newValueChecker(i int) *valueChecker { return &valueChecker{pos: patternStart(i)} }

// errValueMismatch marks bytes read that are not the ones written.
var errValueMismatch = errors.New("bytes read differ from the bytes written")

func (c *valueChecker) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) { // at most len(p)/patternBytes + 2 rounds
		m := min(len(p)-done, patternBytes-c.pos)
		if !bytes.Equal(p[done:done+m], pattern[c.pos:c.pos+m]) {
			for j := range m {
				if p[done+j] != pattern[c.pos+j] {
					return done + j, fmt.Errorf("%w at offset %d", errValueMismatch, c.n+int64(j))
				}
			}
		}
		done += m
		c.n += int64(m)
		c.pos = (c.pos + m) % patternBytes
	}
	return done, nil
}

// KeyBenchConfig configures `spindle bench key-write` and `key-read`.
type KeyBenchConfig struct {
	ClusterConfig
	// Keys is the number of keys (default 1000); SizeBytes each one's
	// size (0 allowed: puts of empty values).
	Keys      int
	SizeBytes int64
	// Concurrency is the puts or gets at once (default 16).
	Concurrency int
	// Bucket receives the keys (default "bench", created when missing),
	// named PREFIX/kNNNNNNNN; Prefix defaults to NAME-DATE-TIME-PID/.
	Bucket, Prefix string
	// Duration bounds the timed phase besides Keys (0: Keys only).
	Duration time.Duration
	// NoBaseline skips key-write's raw disk baseline; BaselineDuration
	// bounds it (default 10 s).
	NoBaseline       bool
	BaselineDuration time.Duration
	// Progress receives progress lines (nil: stderr when a terminal).
	Progress io.Writer
	// Logger for the key client (nil: discard).
	Logger *slog.Logger
}

// KeyBenchResult is the result with the key benches' top-level fields.
type KeyBenchResult struct {
	bench.Result
	Keys        int    `json:"keys"`
	SizeBytes   int64  `json:"size_bytes"`
	Concurrency int    `json:"concurrency"`
	Cluster     string `json:"cluster"`
	// ChunkWrites are the chunk writes the datanodes acknowledged, of
	// every put of the run (key-read's untimed writing included);
	// Resends the chunk writes sent again because the leader refused
	// them as holes (keyclient.PutResult.Holes: a chunk that overtook its
	// predecessor); Failovers the blocks ended early by a failed pipeline.
	ChunkWrites int64 `json:"chunk_writes"`
	Resends     int64 `json:"resends"`
	Failovers   int64 `json:"failovers"`
	// InlinePuts are the puts stored inline in the meta service (values
	// up to the key client's InlineMaxBytes: no block, no datanode).
	InlinePuts int64 `json:"inline_puts"`
}

func (c *KeyBenchConfig) defaults(name string) error {
	if c.Keys == 0 {
		c.Keys = 1000
	}
	if c.Keys < 1 || c.Keys > MaxBenchKeys {
		return fmt.Errorf("keys %d not in [1, %d]", c.Keys, MaxBenchKeys)
	}
	if c.SizeBytes < 0 || c.SizeBytes > MaxKeyBytes {
		return fmt.Errorf("size %d not in [0, %d]", c.SizeBytes, int64(MaxKeyBytes))
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Concurrency < 1 || c.Concurrency > bench.MaxWorkers {
		return fmt.Errorf("concurrency %d not in [1, %d]", c.Concurrency, bench.MaxWorkers)
	}
	if c.Duration < 0 {
		return fmt.Errorf("negative duration")
	}
	if c.Bucket == "" {
		c.Bucket = DefaultKeyBenchBucket
	}
	if c.Prefix == "" {
		c.Prefix = runPrefix(name)
	}
	if c.BaselineDuration <= 0 {
		c.BaselineDuration = DefaultBaselineDuration
	}
	if c.Progress == nil {
		c.Progress = bench.TerminalProgress()
	}
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	return nil
}

func (c *KeyBenchConfig) keyName(i int) string { return fmt.Sprintf("%sk%08d", c.Prefix, i) }

// keyBench is the state shared by key-write and key-read.
type keyBench struct {
	cfg     KeyBenchConfig
	name    string
	cl      *keyCluster
	kc      *keyclient.Client
	written []atomic.Bool // keys committed by this run
	// Summed over every put of the run (see KeyBenchResult).
	chunkWrites, resends, failovers, inline atomic.Int64
}

func openKeyBench(ctx context.Context, name string, cfg KeyBenchConfig) (*keyBench, error) {
	if err := cfg.defaults(name); err != nil {
		return nil, err
	}
	progress := func(format string, args ...any) { progressf(cfg.Progress, name+": "+format+"\n", args...) }
	cl, err := openKeyCluster(ctx, cfg.ClusterConfig, cfg.Logger, progress)
	if err != nil {
		return nil, err
	}
	opts := cfg.Client
	if opts.Logger == nil {
		opts.Logger = cfg.Logger
	}
	kc, err := keyclient.New(cl.meta, opts)
	if err != nil {
		_ = cl.cleanup() // best effort: err is the error
		return nil, err
	}
	if err := ensureBucket(ctx, kc, cfg.Bucket); err != nil {
		closeQuietly(kc)
		_ = cl.cleanup() // best effort: err is the error
		return nil, err
	}
	return &keyBench{cfg: cfg, name: name, cl: cl, kc: kc, written: make([]atomic.Bool, cfg.Keys)}, nil
}

// close deletes the keys on a running cluster (unless Keep), closes the
// client and stops and removes an embedded server.
func (b *keyBench) close(ctx context.Context) error {
	var err error
	if !b.cl.embedded && !b.cfg.Keep {
		var names []string
		for i := range b.written {
			if b.written[i].Load() {
				names = append(names, b.cfg.keyName(i))
			}
		}
		err = deleteKeys(ctx, b.kc, b.cfg.Bucket, names)
	}
	closeQuietly(b.kc)
	return errors.Join(err, b.cl.cleanup())
}

// put writes key i.
func (b *keyBench) put(ctx context.Context, i int) error {
	res, err := b.kc.Put(ctx, b.cfg.Bucket, b.cfg.keyName(i), newValueReader(i, b.cfg.SizeBytes), keyclient.PutOptions{SizeHintBytes: b.cfg.SizeBytes})
	b.chunkWrites.Add(int64(res.Chunks))
	b.resends.Add(int64(res.Holes))
	b.failovers.Add(int64(res.Failovers))
	if res.Inline {
		b.inline.Add(1)
	}
	if err != nil {
		return err
	}
	if int64(res.Key.Size) != b.cfg.SizeBytes {
		return fmt.Errorf("put %s: committed %d bytes, wrote %d", b.cfg.keyName(i), res.Key.Size, b.cfg.SizeBytes)
	}
	b.written[i].Store(true)
	return nil
}

// get reads key i back and compares every byte.
func (b *keyBench) get(ctx context.Context, i int) error {
	c := newValueChecker(i)
	ki, err := b.kc.Get(ctx, b.cfg.Bucket, b.cfg.keyName(i), c, keyclient.GetOptions{})
	if err != nil {
		return err
	}
	if c.n != b.cfg.SizeBytes || int64(ki.Size) != b.cfg.SizeBytes {
		return fmt.Errorf("get %s: %d bytes read, key size %d, wrote %d", b.cfg.keyName(i), c.n, ki.Size, b.cfg.SizeBytes)
	}
	return nil
}

// loop runs op on keys 0.. (each once) with Concurrency workers, bounded
// by Keys and Duration.
func (b *keyBench) loop(ctx context.Context, label string, duration time.Duration, progress io.Writer, op func(context.Context, int) error) (bench.Stats, error) {
	var next atomic.Int64
	return bench.Loop(ctx, bench.LoopConfig{
		Workers: b.cfg.Concurrency, Duration: duration, MaxOps: int64(b.cfg.Keys), Label: label, Progress: progress,
		Processes: b.cl.procs,
	}, func(ctx context.Context, _ int, _ int64) (int, error) {
		i := int(next.Add(1) - 1)
		if i >= b.cfg.Keys {
			panic("scenario: key bench issued more operations than keys")
		}
		if err := op(ctx, i); err != nil {
			return 0, err
		}
		return int(b.cfg.SizeBytes), nil
	})
}

func (b *keyBench) result(stats bench.Stats) KeyBenchResult {
	res := stats.Result(b.name)
	res.SetParam("keys", b.cfg.Keys)
	res.SetParam("size_bytes", b.cfg.SizeBytes)
	res.SetParam("concurrency", b.cfg.Concurrency)
	co := b.kc.Options()
	res.SetParam("chunk_size_bytes", co.ChunkSize)
	res.SetParam("block_size_bytes", co.BlockSize)
	res.SetParam("bucket", b.cfg.Bucket)
	res.SetParam("prefix", b.cfg.Prefix)
	if stats.Ops < int64(b.cfg.Keys) {
		res.AddNote("stopped by --duration after %d of %d keys", stats.Ops, b.cfg.Keys)
	}
	if n := b.cl.cpuNote(); n != "" {
		res.AddNote("%s", n)
	}
	if b.cfg.Keep {
		res.AddNote("kept: the keys in %s/%s on %s", b.cfg.Bucket, b.cfg.Prefix, b.cl.label)
	}
	out := KeyBenchResult{Result: res, Keys: int(stats.Ops), SizeBytes: b.cfg.SizeBytes, Concurrency: b.cfg.Concurrency, Cluster: b.cl.label,
		ChunkWrites: b.chunkWrites.Load(), Resends: b.resends.Load(), Failovers: b.failovers.Load(), InlinePuts: b.inline.Load()}
	out.AddNote("resends: %d chunk writes sent again (refused as holes), %d acknowledged; failovers: %d", out.Resends, out.ChunkWrites, out.Failovers)
	if out.InlinePuts > 0 {
		out.AddNote("inline: %d puts stored their value in the key's record in the meta service (no block, no datanode; --inline-max)", out.InlinePuts)
	}
	return out
}

// RunKeyWrite runs `spindle bench key-write`: Keys puts of SizeBytes, at
// most Concurrency at once, each a whole put (allocation, durable chunk
// writes on 3 replicas, block and key commits); then the raw disk
// baseline in the same directory (Concurrency writers, pwrite of
// min(size, chunk) + fdatasync each, appending).
func RunKeyWrite(ctx context.Context, cfg KeyBenchConfig) (out KeyBenchResult, err error) {
	b, err := openKeyBench(ctx, "key-write", cfg)
	if err != nil {
		return out, fmt.Errorf("key-write: %w", err)
	}
	defer func() {
		if cerr := b.close(ctx); cerr != nil && err == nil {
			err = fmt.Errorf("key-write: cleanup: %w", cerr)
		}
	}()
	cfg = b.cfg
	stats, err := b.loop(ctx, "key-write", cfg.Duration, cfg.Progress, b.put)
	if err != nil {
		return out, fmt.Errorf("key-write: %w", err)
	}
	if stats.Ops == 0 {
		return out, errors.New("key-write: no put completed in the time given")
	}
	out = b.result(stats)
	if err := b.cl.stop(); err != nil {
		return out, fmt.Errorf("key-write: stopping the embedded server: %w", err)
	}
	if dir := b.cl.baselineDir(); dir != "" && !cfg.NoBaseline {
		chunk := max(1, min(cfg.SizeBytes, int64(b.kc.Options().ChunkSize)))
		perKey := max(1, (cfg.SizeBytes+chunk-1)/chunk)
		base, err := bench.RunBaseline(ctx, bench.BaselineConfig{
			Dir: dir, Writers: cfg.Concurrency, ChunkSizeBytes: chunk, WritesPerSync: 1,
			Duration: cfg.BaselineDuration, MaxOps: stats.Ops * perKey, FileSizeBytes: max(chunk, 256<<20),
			Pattern: bench.PatternAppend, Progress: cfg.Progress,
		})
		if err != nil {
			return out, fmt.Errorf("key-write: baseline: %w", err)
		}
		out.SetBaseline(base)
		out.AddNote("baseline: %d writers, pwrite %s + fdatasync each, appending, in the same directory after the run; a put also allocates, commits its block and its key, and writes 3 replicas", cfg.Concurrency, units.FormatBytes(chunk))
	} else if !cfg.NoBaseline {
		out.AddNote("no baseline: the cluster's disks are not local (give --baseline-dir to measure one here)")
	}
	return out, nil
}

// RunKeyRead runs `spindle bench key-read`: Keys keys of SizeBytes are
// written first (untimed), then each is read once, at most Concurrency at
// once, every byte compared with what was written.
func RunKeyRead(ctx context.Context, cfg KeyBenchConfig) (out KeyBenchResult, err error) {
	b, err := openKeyBench(ctx, "key-read", cfg)
	if err != nil {
		return out, fmt.Errorf("key-read: %w", err)
	}
	defer func() {
		if cerr := b.close(ctx); cerr != nil && err == nil {
			err = fmt.Errorf("key-read: cleanup: %w", cerr)
		}
	}()
	cfg = b.cfg
	progressf(cfg.Progress, "key-read: writing %d keys of %s first\n", cfg.Keys, units.FormatBytes(cfg.SizeBytes))
	ws, err := b.loop(ctx, "key-read (writing)", 0, cfg.Progress, b.put)
	if err != nil {
		return out, fmt.Errorf("key-read: writing the keys: %w", err)
	}
	stats, err := b.loop(ctx, "key-read", cfg.Duration, cfg.Progress, b.get)
	if err != nil {
		return out, fmt.Errorf("key-read: %w", err)
	}
	if stats.Ops == 0 {
		return out, errors.New("key-read: no get completed in the time given")
	}
	out = b.result(stats)
	out.Extra = map[string]any{"write_seconds": round6(ws.Seconds()), "write_mb_per_s": round3(ws.MBPerS()), "verified": true}
	out.AddNote("every byte read was compared with the byte written (besides the client's CRC32C checks)")
	return out, nil
}
