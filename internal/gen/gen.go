package gen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/datanode"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/localcluster"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/units"
	"github.com/spindle-store/spindle/internal/wal"
)

// Defaults and limits of Config.
const (
	DefaultDatanodes          = 4
	DefaultContainerSizeBytes = 256 << 20
	DefaultKeySizeBytes       = 64 << 20
	DefaultBucket             = "gen"
	// MaxWorkers bounds the parallel writers (each holds a block buffer).
	MaxWorkers = 64
	// MaxKeys bounds the keys of one run (the generator keeps a CRC32C per
	// block in memory until the meta store is written).
	MaxKeys = 1 << 24
	// MaxBaselineBytes bounds the disk baseline's file.
	MaxBaselineBytes = 2 << 30
	// progressIntervalMs is the period of the progress lines.
	progressIntervalMs = 1000
)

// PlaceholderAddr is the address the meta store holds for every generated
// datanode until its first heartbeat gives the real one.
const PlaceholderAddr = "127.0.0.1:1"

// Config describes a generated cluster state. Zero values take the
// defaults.
type Config struct {
	Dir                string `json:"dir"`                  // server layout root (required)
	Datanodes          int    `json:"datanodes"`            // default 4, 3..localcluster.MaxMembers
	SizeBytes          uint64 `json:"size_bytes"`           // total key bytes (required)
	ContainerSizeBytes uint64 `json:"container_size_bytes"` // default 256 MiB
	KeySizeBytes       uint64 `json:"key_size_bytes"`       // default 64 MiB (the last key may be shorter)
	BlockSizeBytes     uint64 `json:"block_size_bytes"`     // default: the key client's block size, at most the container size
	ChunkSizeBytes     uint64 `json:"chunk_size_bytes"`     // default: the key client's chunk size, at most the block size
	BytesPerChecksum   uint32 `json:"bytes_per_checksum"`   // default: the engine's (16 KiB)
	Bucket             string `json:"bucket"`               // default "gen"
	Seed               uint64 `json:"seed"`
	Workers            int    `json:"workers"` // parallel writers, default 2×Datanodes (at most MaxWorkers)
	// Progress receives progress lines (bytes, MB/s) every second when
	// not nil.
	Progress io.Writer `json:"-"`
	// Logger receives the engines' and logs' messages (nil: slog.Default()).
	Logger *slog.Logger `json:"-"`
	// MeasureBaseline measures the disk's sequential write bandwidth in
	// Dir before generating and again after: one file of min(SizeBytes, MaxBaselineBytes)
	// written with 4 MiB writes, one fdatasync, deleted.
	MeasureBaseline bool `json:"measure_baseline"`
}

// Result is what a run did. MB is 10^6 bytes.
type Result struct {
	Keys           int     `json:"keys"`
	Containers     int     `json:"containers"`
	KeyBytes       uint64  `json:"key_bytes"`
	ReplicaBytes   uint64  `json:"replica_bytes"`     // bytes of block files written (3 × KeyBytes)
	Seconds        float64 `json:"seconds"`           // the generation, without the baseline
	MBPerS         float64 `json:"mb_per_s"`          // ReplicaBytes / 10^6 / Seconds
	BaselineMBPerS float64 `json:"baseline_mb_per_s"` // 0 without MeasureBaseline
	// BaselineBeforeMBPerS and BaselineAfterMBPerS are the two runs of
	// the baseline (before and after generating); BaselineMBPerS is over
	// both.
	BaselineBeforeMBPerS float64 `json:"baseline_before_mb_per_s,omitempty"`
	BaselineAfterMBPerS  float64 `json:"baseline_after_mb_per_s,omitempty"`
	Ratio                float64 `json:"ratio_to_baseline"` // MBPerS / BaselineMBPerS (0 without a baseline)
	// Baseline is the whole disk baseline (nil without MeasureBaseline).
	Baseline *bench.Baseline `json:"baseline,omitempty"`
	// Config is the configuration with every default filled in.
	Config Config `json:"config"`
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("gen: --dir is required")
	}
	if c.SizeBytes == 0 {
		return c, errors.New("gen: --size is required (total bytes of keys, e.g. 5GiB)")
	}
	if c.Datanodes == 0 {
		c.Datanodes = DefaultDatanodes
	}
	if c.Datanodes < meta.PipelineSize || c.Datanodes > localcluster.MaxMembers {
		return c, fmt.Errorf("gen: %d datanodes, want %d..%d (a container has %d replicas; the embedded server runs at most %d)",
			c.Datanodes, meta.PipelineSize, localcluster.MaxMembers, meta.PipelineSize, localcluster.MaxMembers)
	}
	if c.ContainerSizeBytes == 0 {
		c.ContainerSizeBytes = DefaultContainerSizeBytes
	}
	if c.KeySizeBytes == 0 {
		c.KeySizeBytes = DefaultKeySizeBytes
	}
	if c.BlockSizeBytes == 0 {
		c.BlockSizeBytes = min(keyclient.DefaultBlockSize, c.ContainerSizeBytes)
	}
	if c.BlockSizeBytes > c.ContainerSizeBytes || c.BlockSizeBytes > keyclient.MaxBlockSize {
		return c, fmt.Errorf("gen: block size %d bytes: at most the container size (%d) and %d", c.BlockSizeBytes, c.ContainerSizeBytes, uint64(keyclient.MaxBlockSize))
	}
	if c.ChunkSizeBytes == 0 {
		c.ChunkSizeBytes = min(keyclient.DefaultChunkSize, c.BlockSizeBytes)
	}
	if c.ChunkSizeBytes > c.BlockSizeBytes || c.ChunkSizeBytes > engine.MaxChunkSizeBytes {
		return c, fmt.Errorf("gen: chunk size %d bytes: at most the block size (%d) and %d", c.ChunkSizeBytes, c.BlockSizeBytes, engine.MaxChunkSizeBytes)
	}
	if c.BytesPerChecksum == 0 {
		c.BytesPerChecksum = engine.DefaultBytesPerChecksum
	}
	if c.BytesPerChecksum < engine.MinBytesPerChecksum || c.BytesPerChecksum > engine.MaxBytesPerChecksum {
		return c, fmt.Errorf("gen: bytes per checksum %d not in [%d, %d]", c.BytesPerChecksum, engine.MinBytesPerChecksum, engine.MaxBytesPerChecksum)
	}
	// The key client's bound: a full block's chunk list and checksums fit
	// in one PutBlock header (4 bytes a piece, about 24 a chunk).
	chunks := ceilDiv(c.BlockSizeBytes, c.ChunkSizeBytes)
	pieces := ceilDiv(c.BlockSizeBytes, uint64(c.BytesPerChecksum)) + chunks
	if hdr := 4*pieces + 24*chunks; hdr > keyclient.MaxPutBlockHeader {
		return c, fmt.Errorf("gen: a block of %d bytes in chunks of %d at %d bytes per checksum needs a block record of ~%d bytes, more than %d: use bigger chunks or pieces, or smaller blocks",
			c.BlockSizeBytes, c.ChunkSizeBytes, c.BytesPerChecksum, hdr, keyclient.MaxPutBlockHeader)
	}
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if err := metaapi.ValidBucket(c.Bucket); err != nil {
		return c, fmt.Errorf("gen: %w", err)
	}
	if keys := ceilDiv(c.SizeBytes, c.KeySizeBytes); keys > MaxKeys {
		return c, fmt.Errorf("gen: %d keys of %d bytes, at most %d: use bigger keys", keys, c.KeySizeBytes, MaxKeys)
	}
	if c.Workers == 0 {
		c.Workers = 2 * c.Datanodes
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		return c, fmt.Errorf("gen: %d workers, want 1..%d", c.Workers, MaxWorkers)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// layoutEntries are the names under Dir that Run creates or refuses.
var layoutEntries = []string{"meta", "datanodes", "server.json"}

// checkFresh refuses a Dir that holds a cluster (or part of one).
func checkFresh(dir string) error {
	for _, name := range layoutEntries {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("gen: %s exists: %s already holds a meta store or datanode data; gen writes a new cluster only (use another --dir, or remove it)", p, dir)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("gen: %w", err)
		}
	}
	return nil
}

// Run generates the cluster state cfg describes. See the package comment.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkFresh(cfg.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("gen: %w", err)
	}
	l := newLayout(&cfg)
	if bpk := l.maxBlocksPerKey(); bpk > metaapi.MaxBlocksPerKey {
		return nil, fmt.Errorf("gen: a key of %d bytes may have %d blocks, more than %d: use bigger blocks or smaller keys", cfg.KeySizeBytes, bpk, metaapi.MaxBlocksPerKey)
	}
	res = &Result{Keys: l.keys, Containers: l.containers, KeyBytes: cfg.SizeBytes, Config: cfg}
	if cfg.MeasureBaseline {
		b, err := baseline(ctx, cfg)
		if err != nil {
			return nil, err
		}
		res.Baseline, res.BaselineMBPerS = &b, b.MBPerS
	}

	start := time.Now()
	defer func() {
		if err != nil {
			// Only what this run made: checkFresh saw none of it.
			for _, name := range layoutEntries[:2] {
				if rerr := os.RemoveAll(filepath.Join(cfg.Dir, name)); rerr != nil {
					err = errors.Join(err, fmt.Errorf("gen: cleaning up: %w", rerr))
				}
			}
		}
	}()
	dnRoot := filepath.Join(cfg.Dir, "datanodes")
	g := &run{cfg: cfg, l: l, crcs: make([][]uint32, l.containers+1)}
	if err := g.openEngines(dnRoot); err != nil {
		return nil, err
	}
	genErr := g.generate(ctx)
	if err := errors.Join(genErr, g.closeEngines()); err != nil {
		return nil, err
	}
	uuids := make([]string, cfg.Datanodes)
	for i := range uuids {
		if uuids[i], err = datanode.NewUUID(); err != nil {
			return nil, fmt.Errorf("gen: %w", err)
		}
		if err := writeLogDir(filepath.Join(dnRoot, "log", fmt.Sprintf("dn%d", i+1)), uuids[i], uint64(i+1), cfg.Logger); err != nil {
			return nil, err
		}
	}
	if err := g.writeMeta(filepath.Join(cfg.Dir, "meta"), uuids); err != nil {
		return nil, err
	}
	res.ReplicaBytes = g.replicaBytes.Load()
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBPerS = float64(res.ReplicaBytes) / 1e6 / res.Seconds
	}
	if cfg.MeasureBaseline {
		// Again after: a virtual disk's speed drifts by several times
		// within minutes; the baseline is both runs' bytes over both
		// runs' time.
		after, err := baseline(ctx, cfg)
		if err != nil {
			return nil, err
		}
		b := *res.Baseline
		res.BaselineBeforeMBPerS, res.BaselineAfterMBPerS = b.MBPerS, after.MBPerS
		b.Ops += after.Ops
		b.Bytes += after.Bytes
		b.Syncs += after.Syncs
		b.Seconds += after.Seconds
		b.OpsPerS = float64(b.Ops) / max(b.Seconds, 1e-9)
		b.MBPerS = float64(b.Bytes) / 1e6 / max(b.Seconds, 1e-9)
		res.Baseline, res.BaselineMBPerS = &b, b.MBPerS
	}
	if res.BaselineMBPerS > 0 {
		res.Ratio = math.Round(res.MBPerS/res.BaselineMBPerS*1e4) / 1e4
	}
	return res, nil
}

// BenchJSON is a result as the benches print it (bench.Result: scenario
// "gen", ops are keys, bytes are replica bytes, latency zeros, the disk
// baseline and the ratio to it) plus the generator's own figures.
type BenchJSON struct {
	bench.Result
	Keys       int    `json:"keys"`
	Containers int    `json:"containers"`
	KeyBytes   uint64 `json:"key_bytes"`
}

// Bench returns r in the benches' shape.
func (r *Result) Bench() BenchJSON {
	br := bench.Result{Scenario: "gen", Ops: int64(r.Keys), Seconds: r.Seconds, Bytes: int64(r.ReplicaBytes), MBPerS: r.MBPerS}
	if r.Seconds > 0 {
		br.OpsPerS = float64(r.Keys) / r.Seconds
	}
	if r.Baseline != nil {
		br.SetBaseline(*r.Baseline)
	}
	c := r.Config
	br.SetParam("dir", c.Dir)
	br.SetParam("datanodes", c.Datanodes)
	br.SetParam("container_size_bytes", c.ContainerSizeBytes)
	br.SetParam("key_size_bytes", c.KeySizeBytes)
	br.SetParam("block_size_bytes", c.BlockSizeBytes)
	br.SetParam("chunk_size_bytes", c.ChunkSizeBytes)
	br.SetParam("bytes_per_checksum", c.BytesPerChecksum)
	br.SetParam("bucket", c.Bucket)
	br.SetParam("seed", c.Seed)
	br.SetParam("workers", c.Workers)
	br.AddNote("%d keys (%s) in %d containers on %d datanodes; start it with: spindle server --dir %s --datanodes %d",
		r.Keys, units.FormatBytes(int64(r.KeyBytes)), r.Containers, c.Datanodes, c.Dir, c.Datanodes)
	if r.Baseline == nil {
		br.AddNote("no disk baseline measured")
	} else {
		br.AddNote("disk baseline: one file of up to 2 GiB, 4 MiB writes, one fdatasync, before (%.0f MB/s) and after (%.0f MB/s) generating; the baseline is both runs' bytes over their time",
			r.BaselineBeforeMBPerS, r.BaselineAfterMBPerS)
		br.Extra = map[string]any{"baseline_before_mb_per_s": r.BaselineBeforeMBPerS, "baseline_after_mb_per_s": r.BaselineAfterMBPerS}
	}
	return BenchJSON{Result: br, Keys: r.Keys, Containers: r.Containers, KeyBytes: r.KeyBytes}
}

// baseline measures the disk's sequential write bandwidth in Dir.
func baseline(ctx context.Context, cfg Config) (bench.Baseline, error) {
	b, err := bench.SequentialWriteBaseline(ctx, cfg.Dir, int64(min(cfg.SizeBytes, MaxBaselineBytes)))
	if err != nil {
		return b, fmt.Errorf("gen: disk baseline: %w", err)
	}
	return b, nil
}

// writeLogDir makes a datanode's log directory: an empty WAL and its
// identity.
func writeLogDir(dir, uuid string, nodeID uint64, log *slog.Logger) error {
	wl, err := wal.Open(wal.Config{Dir: dir, Logger: log})
	if err != nil {
		return fmt.Errorf("gen: log of datanode %d: %w", nodeID, err)
	}
	if err := wl.Close(); err != nil {
		return fmt.Errorf("gen: log of datanode %d: %w", nodeID, err)
	}
	if err := datanode.WriteIdentity(dir, uuid, nodeID); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	return nil
}

// run is one generation's state.
type run struct {
	cfg     Config
	l       *layout
	engines []*engine.Engine // node i at [i-1]
	// crcs[c][local-1] is the CRC32C of block local of container c,
	// written by the worker of c only, read after the workers ended.
	crcs         [][]uint32
	replicaBytes atomic.Uint64
}

func (g *run) openEngines(root string) error {
	for i := 1; i <= g.cfg.Datanodes; i++ {
		e, err := engine.Open(engine.Config{DataDirs: []string{filepath.Join(root, fmt.Sprintf("dn%d", i))}, MaxContainerSizeBytes: g.cfg.ContainerSizeBytes, Logger: g.cfg.Logger})
		if err != nil {
			return errors.Join(fmt.Errorf("gen: datanode %d: %w", i, err), g.closeEngines())
		}
		g.engines = append(g.engines, e)
	}
	return nil
}

func (g *run) closeEngines() error {
	var err error
	for i, e := range g.engines {
		if cerr := e.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("gen: close datanode %d: %w", i+1, cerr))
		}
	}
	g.engines = nil
	return err
}

// generate runs the workers over the containers, with progress lines.
func (g *run) generate(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	workers := min(g.cfg.Workers, g.l.containers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWorker(g)
			for c := range next {
				if ctx.Err() != nil {
					continue // drain: the feeder stops too
				}
				if err := w.container(ctx, c); err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					cancel()
				}
			}
		}()
	}
	stopProgress := g.progress()
feed:
	for c := 1; c <= g.l.containers; c++ {
		select {
		case next <- c:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	stopProgress()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	return nil
}

// progress prints a line every progressIntervalMs until the returned stop
// is called.
func (g *run) progress() (stop func()) {
	if g.cfg.Progress == nil {
		return func() {}
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	total := 3 * g.cfg.SizeBytes
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressIntervalMs * time.Millisecond)
		defer t.Stop()
		start, last, lastBytes := time.Now(), time.Now(), uint64(0)
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				b := g.replicaBytes.Load()
				// Progress only: no generation fails for a line lost.
				_, _ = fmt.Fprintf(g.cfg.Progress, "gen: %s of %s of replicas, %.0f MB/s now, %.0f MB/s overall\n",
					units.FormatBytes(int64(b)), units.FormatBytes(int64(total)),
					float64(b-lastBytes)/1e6/now.Sub(last).Seconds(), float64(b)/1e6/now.Sub(start).Seconds())
				last, lastBytes = now, b
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// worker writes whole containers with its reused buffers.
type worker struct {
	g      *run
	buf    []byte
	sums   []uint32
	chunks []engine.ChunkInfo
	// piece is the shift of a full checksum piece (crc.go).
	piece *crc32c.Shift
}

func newWorker(g *run) *worker {
	n := g.l.maxBlockLen()
	return &worker{
		g:      g,
		buf:    make([]byte, n),
		sums:   make([]uint32, 0, ceilDiv(n, uint64(g.cfg.BytesPerChecksum))+ceilDiv(n, g.cfg.ChunkSizeBytes)),
		chunks: make([]engine.ChunkInfo, 0, ceilDiv(n, g.cfg.ChunkSizeBytes)),
		piece:  crc32c.NewShift(uint64(g.cfg.BytesPerChecksum)),
	}
}

// container writes container c's blocks to its 3 replicas and commits
// them; on failure nothing of it stays visible.
func (w *worker) container(ctx context.Context, c int) (err error) {
	g := w.g
	members := g.l.members(c)
	imps := make([]*engine.Importer, 0, len(members))
	defer func() {
		if err != nil {
			for _, im := range imps {
				_ = im.Abort() // the first error is the one to report
			}
		}
	}()
	// The BCSID is the same on the 3 replicas (none is behind): as if
	// block i (local ID i) had been committed at sequence i.
	bcsid := g.l.blocks(c)
	for _, m := range members {
		im, err := g.engines[m-1].ImportContainer(engine.ContainerID(c), g.cfg.ContainerSizeBytes, bcsid)
		if err != nil {
			return fmt.Errorf("gen: container %d on datanode %d: %w", c, m, err)
		}
		imps = append(imps, im)
	}
	lo, hi := g.l.containerRange(c)
	var crcs []uint32
	for pos, local := lo, uint64(1); pos < hi; local++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
		key, keyOff, n := g.l.blockAt(pos)
		bd, crc := w.block(engine.BlockID{Container: engine.ContainerID(c), Local: local}, key, keyOff, n)
		for i, im := range imps {
			if err := im.AddBlock(bd, bytes.NewReader(w.buf[:n])); err != nil {
				return fmt.Errorf("gen: container %d on datanode %d: %w", c, members[i], err)
			}
			g.replicaBytes.Add(n)
		}
		crcs = append(crcs, crc)
		pos += n
	}
	errs := make([]error, len(imps))
	var wg sync.WaitGroup
	for i, im := range imps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := im.Commit(); err != nil {
				errs[i] = fmt.Errorf("gen: container %d on datanode %d: %w", c, members[i], err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	g.crcs[c] = crcs
	return nil
}

// block generates the n bytes of key at keyOff into w.buf and returns the
// block's metadata (chunks of ChunkSizeBytes, a checksum per piece) and
// the CRC32C of its bytes, combined from the pieces'. The BlockData shares
// w's buffers: it is valid until the next call.
func (w *worker) block(id engine.BlockID, key int, keyOff, n uint64) (*engine.BlockData, uint32) {
	cfg := &w.g.cfg
	data := w.buf[:n]
	Content(cfg.Seed, key, keyOff, data)
	bpc := uint64(cfg.BytesPerChecksum)
	w.sums, w.chunks = w.sums[:0], w.chunks[:0]
	var crc uint32
	for off := uint64(0); off < n; off += cfg.ChunkSizeBytes {
		cl := min(cfg.ChunkSizeBytes, n-off)
		first := len(w.sums)
		w.sums = engine.ComputeChecksums(w.sums, data[off:off+cl], cfg.BytesPerChecksum)
		for i, s := range w.sums[first:] {
			if pl := min(bpc, cl-uint64(i)*bpc); pl == bpc {
				crc = w.piece.Apply(crc) ^ s
			} else {
				crc = crc32c.Combine(crc, s, pl)
			}
		}
		w.chunks = append(w.chunks, engine.ChunkInfo{Offset: off, Length: cl, Checksums: w.sums[first:len(w.sums):len(w.sums)]})
	}
	return &engine.BlockData{ID: id, Length: n, BytesPerChecksum: cfg.BytesPerChecksum, Chunks: w.chunks}, crc
}

// writeMeta writes the meta store: nodes, pipelines, containers, the
// bucket and the keys with their CRC32C combined from their blocks'.
func (g *run) writeMeta(dir string, uuids []string) (err error) {
	w, err := meta.CreateOffline(dir)
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	defer func() {
		if cerr := w.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("gen: %w", cerr)
		}
	}()
	for i, u := range uuids {
		if err := w.AddNode(uint64(i+1), u, PlaceholderAddr); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	}
	for i, m := range g.l.pipelines {
		if err := w.AddPipeline(uint64(i+1), m); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	}
	for c := 1; c <= g.l.containers; c++ {
		lo, hi := g.l.containerRange(c)
		if err := w.AddContainer(uint64(c), g.l.pipeline(c), hi-lo, uint64(len(g.crcs[c]))+1); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	}
	if err := w.AddBucket(g.cfg.Bucket); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	// One walk of the stream in order: blocks come key by key.
	var (
		blocks []metaapi.KeyBlock
		crc    uint32
		local  uint64
		cur    = 1 // container of pos
	)
	for pos := uint64(0); pos < g.l.size; {
		if c := int(pos/g.l.containerSize) + 1; c != cur {
			cur, local = c, 0
		}
		key, _, n := g.l.blockAt(pos)
		local++
		blocks = append(blocks, metaapi.KeyBlock{BlockRef: metaapi.BlockRef{Container: uint64(cur), Local: local}, Pipeline: g.l.pipeline(cur), Length: n})
		crc = crc32c.Combine(crc, g.crcs[cur][local-1], n)
		pos += n
		if end := min(uint64(key+1)*g.l.keySize, g.l.size); pos == end {
			if err := w.AddKey(g.cfg.Bucket, KeyName(key), g.l.keyLen(key), crc, blocks); err != nil {
				return fmt.Errorf("gen: %w", err)
			}
			blocks, crc = blocks[:0], 0
		}
	}
	return nil
}
