package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw"
	"github.com/spindle-store/spindle/internal/scenario/s3client"
	"github.com/spindle-store/spindle/internal/units"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Limits of the S3 bench.
const (
	// MaxS3BenchBufferBytes bounds Concurrency × SizeBytes: each PUT
	// worker holds one object's bytes (the SDK signs a seekable body).
	MaxS3BenchBufferBytes = 4 << 30
	// defaultS3BenchRounds and maxS3BenchRounds: S3BenchConfig.Rounds.
	defaultS3BenchRounds = 3
	maxS3BenchRounds     = 100
	// s3GatewayStartWait bounds the wait for the embedded gateway.
	s3GatewayStartWait = 10 * time.Second
)

// S3BenchConfig configures `spindle bench s3`.
type S3BenchConfig struct {
	// ClusterConfig: the embedded server (or running cluster) the bench
	// starts a gateway for, when Endpoint is empty; also where the
	// baseline (key-write / key-read of the same objects) runs.
	ClusterConfig
	// Endpoint is an S3 server to measure instead (http://host:port),
	// with AccessKey and SecretKey; no baseline then. ServerPIDs: its
	// processes (and their children), whose CPU the loops measure.
	Endpoint, AccessKey, SecretKey, Region string
	ServerPIDs                             []int
	EndpointCA                             string // with an https Endpoint: its CA's PEM file (none: the system's)
	// Op is "put" or "get" (gets read objects the bench writes first,
	// untimed, and compare every byte).
	Op string
	// Objects bounds the operations (default 1000); SizeBytes each
	// object's size; Concurrency the requests at once (default 16);
	// Duration a time bound besides Objects (0: none).
	Objects     int
	SizeBytes   int64
	Concurrency int
	Duration    time.Duration
	// Bucket (default "bench", created when missing) and Prefix (default
	// s3-DATE-TIME-PID/) name the objects.
	Bucket, Prefix string
	// NoBaseline skips the key client's run of the same operations.
	NoBaseline bool
	// Rounds splits the objects into this many rounds, each timed through
	// S3 and through the key client one after the other, in alternating
	// order (S3 first in the odd rounds): the ratio compares the two on
	// the same machine state, not a first run against a later one
	// (default 3; 1: S3, then the baseline, once).
	Rounds int
	// CPUProfileDir, when set, receives CPU profiles of this process (S3
	// client, gateway and, embedded, the meta service) over the timed
	// loops of the first round: s3.pprof, and baseline.pprof for the key
	// client's.
	CPUProfileDir string
	Progress      io.Writer
	Logger        *slog.Logger
}

// S3BenchResult is the S3 bench's result.
type S3BenchResult struct {
	bench.Result
	Op          string `json:"op"`
	Objects     int    `json:"objects"`
	SizeBytes   int64  `json:"size_bytes"`
	Concurrency int    `json:"concurrency"`
	Endpoint    string `json:"endpoint"`
}

func (c *S3BenchConfig) defaults() error {
	if c.Op == "" {
		c.Op = "put"
	}
	if c.Op != "put" && c.Op != "get" {
		return fmt.Errorf("op %q: want put or get", c.Op)
	}
	if c.Objects == 0 {
		c.Objects = 1000
	}
	if c.Objects < 1 || c.Objects > MaxBenchKeys {
		return fmt.Errorf("objects %d not in [1, %d]", c.Objects, MaxBenchKeys)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Concurrency < 1 || c.Concurrency > bench.MaxWorkers {
		return fmt.Errorf("concurrency %d not in [1, %d]", c.Concurrency, bench.MaxWorkers)
	}
	if c.SizeBytes < 0 || c.SizeBytes*int64(c.Concurrency) > MaxS3BenchBufferBytes {
		return fmt.Errorf("size %d × concurrency %d: at most %s in all", c.SizeBytes, c.Concurrency, units.FormatBytes(MaxS3BenchBufferBytes))
	}
	if c.Duration < 0 {
		return errors.New("negative duration")
	}
	if c.Rounds == 0 {
		c.Rounds = defaultS3BenchRounds
	}
	if c.Rounds < 1 || c.Rounds > maxS3BenchRounds {
		return fmt.Errorf("rounds %d not in [1, %d]", c.Rounds, maxS3BenchRounds)
	}
	c.Rounds = min(c.Rounds, c.Objects)
	if c.Bucket == "" {
		c.Bucket = DefaultKeyBenchBucket
	}
	if c.Prefix == "" {
		c.Prefix = runPrefix("s3")
	}
	if c.Region == "" {
		c.Region = s3gw.DefaultRegion
	}
	if c.Progress == nil {
		c.Progress = bench.TerminalProgress()
	}
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	return nil
}

func (c *S3BenchConfig) objectName(i int) string { return fmt.Sprintf("%sk%08d", c.Prefix, i) }

// checkS3BenchRoom refuses a run whose objects (3 replicas each, and as
// many again for the baseline) would not fit in the free space of the
// embedded server's filesystem: on /dev/shm that space is memory, and a
// run past it ends with the machine out of memory, not with a figure.
func checkS3BenchRoom(root string, cfg S3BenchConfig) error {
	du, err := vfs.Default.GetDiskUsage(root)
	if err != nil {
		return err
	}
	copies := int64(3)
	if !cfg.NoBaseline {
		copies *= 2
	}
	need := int64(cfg.Objects) * cfg.SizeBytes * copies
	if need > 0 && uint64(need) > du.AvailBytes {
		return fmt.Errorf("%d objects of %s need %s (3 replicas%s) in %s, which has %s free: fewer --objects, a smaller --size, or another --dir",
			cfg.Objects, units.FormatBytes(cfg.SizeBytes), units.FormatBytes(need), map[bool]string{true: "", false: ", and as many for the baseline"}[cfg.NoBaseline],
			root, units.FormatBytes(int64(du.AvailBytes)))
	}
	return nil
}

// startGateway runs an S3 gateway for the cluster of mc (its address, and
// its TLS settings for the gateway's connections to the cluster) on a free
// loopback port with a generated root user; stop ends it.
func startGateway(ctx context.Context, mc *metaapi.Client, log *slog.Logger) (endpoint, access, secret string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // portpick:allow embedgw binds an address itself, reports no port 0's: no listener to hand it
	if err != nil {
		return "", "", "", nil, err
	}
	addr := ln.Addr().String()
	closeQuietly(ln) // the gateway listens itself
	access, secret = meta.GenerateKeys()
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s3gw.Run(gctx, s3gw.Config{Meta: mc.Addr(), TLS: mc.TLS(), Listen: addr, AccessKey: access, SecretKey: secret, Logger: log})
	}()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			log.Warn("s3 gateway: stopped with an error", "err", err)
		}
	}
	deadline := time.Now().Add(s3GatewayStartWait)
	for {
		select {
		case err := <-done:
			cancel()
			return "", "", "", nil, fmt.Errorf("s3 gateway: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			closeQuietly(c)
			return "http://" + addr, access, secret, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", "", "", nil, fmt.Errorf("s3 gateway not listening on %s after %s", addr, s3GatewayStartWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RunS3 runs `spindle bench s3`: Objects PUTs (or GETs, of objects written
// first) of SizeBytes, Concurrency at a time, through an S3 gateway —
// Endpoint, or one started in this process for the embedded server (or
// the cluster at Meta). Unless NoBaseline or Endpoint is given, the same
// operations through the key client on the same cluster are the baseline,
// in Rounds rounds alternating with the S3 ones: the ratio is what the S3
// layer costs.
func RunS3(ctx context.Context, cfg S3BenchConfig) (out S3BenchResult, err error) {
	if err := cfg.defaults(); err != nil {
		return out, fmt.Errorf("s3: %w", err)
	}
	name := "s3-" + cfg.Op
	progress := func(format string, args ...any) { progressf(cfg.Progress, name+": "+format+"\n", args...) }
	endpoint, access, secret, cl := cfg.Endpoint, cfg.AccessKey, cfg.SecretKey, (*keyCluster)(nil)
	if endpoint == "" {
		if cl, err = openKeyCluster(ctx, cfg.ClusterConfig, cfg.Logger, progress); err != nil {
			return out, fmt.Errorf("s3: %w", err)
		}
		if cl.embedded {
			if err := checkS3BenchRoom(cl.root, cfg); err != nil {
				_ = cl.cleanup() // best effort: err is the error
				return out, fmt.Errorf("s3: %w", err)
			}
		}
		defer func() {
			if cerr := cl.cleanup(); cerr != nil && err == nil {
				err = fmt.Errorf("s3: cleanup: %w", cerr)
			}
		}()
		var stop func()
		if endpoint, access, secret, stop, err = startGateway(ctx, cl.meta, cfg.Logger); err != nil {
			return out, fmt.Errorf("s3: %w", err)
		}
		defer stop()
	}
	c, err := s3client.New(endpoint, access, secret, cfg.Region, cfg.Concurrency, cfg.EndpointCA)
	if err != nil {
		return out, fmt.Errorf("s3: %w", err)
	}
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &cfg.Bucket}); err != nil {
		var owned interface{ ErrorCode() string }
		if !errors.As(err, &owned) || (owned.ErrorCode() != "BucketAlreadyOwnedByYou" && owned.ErrorCode() != "BucketAlreadyExists") {
			return out, fmt.Errorf("s3: create bucket %s: %w", cfg.Bucket, err)
		}
	}
	bufs := make([][]byte, cfg.Concurrency)
	put := func(ctx context.Context, worker, i int) error {
		if bufs[worker] == nil {
			bufs[worker] = make([]byte, cfg.SizeBytes)
		}
		b := bufs[worker]
		if _, err := io.ReadFull(newValueReader(i, cfg.SizeBytes), b); err != nil {
			return err
		}
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &cfg.Bucket, Key: aws.String(cfg.objectName(i)),
			Body: bytes.NewReader(b), ContentLength: aws.Int64(cfg.SizeBytes)})
		return err
	}
	get := func(ctx context.Context, _, i int) error {
		o, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &cfg.Bucket, Key: aws.String(cfg.objectName(i))})
		if err != nil {
			return err
		}
		defer closeQuietly(o.Body) // read to its end, and checked
		chk := newValueChecker(i)
		if _, err := io.Copy(chk, o.Body); err != nil {
			return err
		}
		if chk.n != cfg.SizeBytes {
			return fmt.Errorf("get %s: %d bytes, wrote %d", cfg.objectName(i), chk.n, cfg.SizeBytes)
		}
		return nil
	}
	procs := func() []bench.Proc { return bench.ServerProcs(cfg.ServerPIDs) }
	if cl != nil {
		procs = cl.procs
	}
	loop := func(label string, lo, hi int, d time.Duration, op func(context.Context, int, int) error) (bench.Stats, error) {
		return cfg.loop(ctx, procs, label, lo, hi, d, op)
	}
	n := cfg.Objects
	if cfg.Op == "get" {
		progress("writing %d objects of %s first", n, units.FormatBytes(cfg.SizeBytes))
		if _, err := loop(name+" (writing)", 0, n, 0, put); err != nil {
			return out, fmt.Errorf("s3: writing the objects: %w", err)
		}
		defer func() {
			if cfg.Endpoint != "" || (cl != nil && !cl.embedded && !cfg.Keep) {
				deleteObjects(ctx, c, cfg, n)
			}
		}()
	}
	op := map[string]func(context.Context, int, int) error{"put": put, "get": get}[cfg.Op]
	var base *keyBaseline
	if cl != nil && !cfg.NoBaseline {
		if base, err = newKeyBaseline(ctx, cl, cfg, progress); err != nil {
			return out, fmt.Errorf("s3: baseline: %w", err)
		}
		defer base.close()
	}
	// The timed phase: Rounds rounds over the objects, each through S3
	// and through the key client, the order alternating.
	rounds := cfg.Rounds
	if base == nil {
		rounds = 1
	}
	var stats, baseStats bench.Stats
	roundDur := cfg.Duration / time.Duration(rounds)
	for r := range rounds {
		lo, hi := r*n/rounds, (r+1)*n/rounds
		runS3 := func() error {
			stopProf := func() {}
			if r == 0 {
				var perr error
				if stopProf, perr = cfg.startProfile("s3.pprof"); perr != nil {
					return perr
				}
			}
			st, err := loop(fmt.Sprintf("%s %d/%d", name, r+1, rounds), lo, hi, roundDur, op)
			stopProf()
			stats = stats.Add(st)
			return err
		}
		runBase := func() error {
			if base == nil {
				return nil
			}
			st, err := base.run(ctx, r, rounds, lo, hi, roundDur)
			baseStats = baseStats.Add(st)
			if err != nil {
				return fmt.Errorf("baseline: %w", err)
			}
			return nil
		}
		first, second := runS3, runBase
		if r%2 == 1 {
			first, second = runBase, runS3
		}
		if err := first(); err != nil {
			return out, fmt.Errorf("s3: %w", err)
		}
		if err := second(); err != nil {
			return out, fmt.Errorf("s3: %w", err)
		}
	}
	if stats.Ops == 0 {
		return out, errors.New("s3: no operation completed in the time given")
	}
	if cfg.Op == "put" && (cfg.Endpoint != "" || (cl != nil && !cl.embedded && !cfg.Keep)) {
		deleteObjects(ctx, c, cfg, n)
	}
	res := stats.Result(name)
	res.SetParam("op", cfg.Op)
	res.SetParam("objects", cfg.Objects)
	res.SetParam("size_bytes", cfg.SizeBytes)
	res.SetParam("concurrency", cfg.Concurrency)
	res.SetParam("bucket", cfg.Bucket)
	res.SetParam("prefix", cfg.Prefix)
	res.SetParam("rounds", rounds)
	if stats.Ops < int64(n) {
		res.AddNote("stopped by --duration after %d of %d objects", stats.Ops, n)
	}
	if n := bench.ServerCPUNote(stats.CPU, stats.Ops, stats.Bytes); n != "" {
		res.AddNote("%s", n)
	} else if cl == nil {
		res.AddNote("cpu_seconds: this process (the client) only; the endpoint was not started by the bench (--server-pid)")
	} else if n := cl.cpuNote(); n != "" {
		res.AddNote("%s", n)
	}
	res.AddNote("client: aws-sdk-go-v2, path style, UNSIGNED-PAYLOAD, no request checksums; GETs verify the CRC32C answered (ChecksumMode ENABLED, the SDK's default); %d connections with %s receive buffers", cfg.Concurrency, units.FormatBytes(s3client.RcvBufBytes))
	if cfg.Op == "get" {
		res.AddNote("every byte read was compared with the byte written")
	}
	out = S3BenchResult{Result: res, Op: cfg.Op, Objects: int(stats.Ops), SizeBytes: cfg.SizeBytes, Concurrency: cfg.Concurrency, Endpoint: endpoint}
	if base == nil {
		if cl == nil {
			out.AddNote("no baseline: an external endpoint")
		}
		return out, nil
	}
	if err := base.cleanup(ctx); err != nil {
		return out, fmt.Errorf("s3: baseline: %w", err)
	}
	out.SetBaseline(bench.Baseline{OpsPerS: baseStats.OpsPerS(), MBPerS: baseStats.MBPerS(), Ops: baseStats.Ops, Bytes: baseStats.Bytes,
		Seconds: baseStats.Seconds(), LatencyUs: baseStats.Latency.Summary(), Writers: cfg.Concurrency, ChunkSizeBytes: cfg.SizeBytes})
	if baseStats.CPU != nil && stats.CPU != nil {
		out.AddNote("baseline cpu: %.0f µs/op, %.2f s (%s); the S3 run: %.0f µs/op, %.2f s (%s)", baseStats.CPU.CPUUsPerOp, baseStats.CPU.CPUSeconds,
			cpuByProcess(baseStats.CPU), stats.CPU.CPUUsPerOp, stats.CPU.CPUSeconds, cpuByProcess(stats.CPU))
	}
	out.AddNote("baseline: key-%s of the same %d objects of %s, %d at once, through the key client (default options, the size as SizeHintBytes as the gateway passes Content-Length) on the same cluster, in %d rounds alternating with the S3 run's (S3 first in rounds 1, 3, ...)",
		map[string]string{"put": "write", "get": "read"}[cfg.Op], baseStats.Ops, units.FormatBytes(cfg.SizeBytes), cfg.Concurrency, rounds)
	return out, nil
}

// startProfile profiles this process into CPUProfileDir/name until the
// returned function is called (nothing without CPUProfileDir).
func (c *S3BenchConfig) startProfile(name string) (func(), error) {
	if c.CPUProfileDir == "" {
		return func() {}, nil
	}
	return startCPUProfile(filepath.Join(c.CPUProfileDir, name))
}

// cpuByProcess lists a loop's CPU seconds by process, sorted by name.
func cpuByProcess(u *bench.CPUUse) string {
	kv := make([]string, 0, len(u.CPUByProcess))
	for _, k := range slices.Sorted(maps.Keys(u.CPUByProcess)) {
		kv = append(kv, fmt.Sprintf("%s=%.2f", k, u.CPUByProcess[k]))
	}
	return strings.Join(kv, " ")
}

// keyBaseline runs the S3 bench's operations through the key client, on
// the same objects' indexes under its own prefix.
type keyBaseline struct {
	kc   *keyclient.Client
	cfg  S3BenchConfig
	cl   *keyCluster
	name func(int) string
	put  func(context.Context, int) error
	get  func(context.Context, int) error
}

// newKeyBaseline makes the key client; for gets it writes every key first
// (untimed).
func newKeyBaseline(ctx context.Context, cl *keyCluster, cfg S3BenchConfig, progress func(string, ...any)) (*keyBaseline, error) {
	kc, err := keyclient.New(cl.meta, keyclient.Options{Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	prefix := cfg.Prefix + "baseline/"
	b := &keyBaseline{kc: kc, cfg: cfg, cl: cl, name: func(i int) string { return fmt.Sprintf("%sk%08d", prefix, i) }}
	b.put = func(ctx context.Context, i int) error {
		_, err := kc.Put(ctx, cfg.Bucket, b.name(i), newValueReader(i, cfg.SizeBytes), keyclient.PutOptions{SizeHintBytes: cfg.SizeBytes})
		return err
	}
	b.get = func(ctx context.Context, i int) error {
		chk := newValueChecker(i)
		if _, err := kc.Get(ctx, cfg.Bucket, b.name(i), chk, keyclient.GetOptions{}); err != nil {
			return err
		}
		if chk.n != cfg.SizeBytes {
			return fmt.Errorf("get %s: %d bytes", b.name(i), chk.n)
		}
		return nil
	}
	if cfg.Op == "get" {
		progress("baseline: writing %d keys first", cfg.Objects)
		if _, err := b.loop(ctx, "baseline (writing)", 0, cfg.Objects, 0, b.put); err != nil {
			closeQuietly(kc)
			return nil, err
		}
	}
	return b, nil
}

func (b *keyBaseline) loop(ctx context.Context, label string, lo, hi int, d time.Duration, op func(context.Context, int) error) (bench.Stats, error) {
	return b.cfg.loop(ctx, b.cl.procs, label, lo, hi, d, func(ctx context.Context, _, i int) error { return op(ctx, i) })
}

// loop times op on the objects [lo, hi), Concurrency at a time, bounded
// by d (0: none): the S3 run's loops and the baseline's alike.
func (c *S3BenchConfig) loop(ctx context.Context, procs func() []bench.Proc, label string, lo, hi int, d time.Duration, op func(ctx context.Context, worker, i int) error) (bench.Stats, error) {
	var next atomic.Int64
	return bench.Loop(ctx, bench.LoopConfig{Workers: c.Concurrency, Duration: d, MaxOps: int64(hi - lo), Label: label, Progress: c.Progress, Processes: procs},
		func(ctx context.Context, worker int, _ int64) (int, error) {
			i := lo + int(next.Add(1)-1)
			if i >= hi {
				panic("scenario: s3 bench issued more operations than objects")
			}
			return int(c.SizeBytes), op(ctx, worker, i)
		})
}

// run times round r of rounds: the objects [lo, hi) (profiled in round 0).
func (b *keyBaseline) run(ctx context.Context, r, rounds, lo, hi int, d time.Duration) (bench.Stats, error) {
	stopProf := func() {}
	if r == 0 {
		var err error
		if stopProf, err = b.cfg.startProfile("baseline.pprof"); err != nil {
			return bench.Stats{}, err
		}
	}
	defer stopProf()
	op, kind := b.put, "key-write"
	if b.cfg.Op == "get" {
		op, kind = b.get, "key-read"
	}
	return b.loop(ctx, fmt.Sprintf("baseline %s %d/%d", kind, r+1, rounds), lo, hi, d, op)
}

// cleanup deletes the baseline's keys on a cluster the bench did not
// start (unless Keep).
func (b *keyBaseline) cleanup(ctx context.Context) error {
	if b.cl.embedded || b.cfg.Keep {
		return nil
	}
	names := make([]string, b.cfg.Objects)
	for i := range names {
		names[i] = b.name(i)
	}
	return deleteKeys(ctx, b.kc, b.cfg.Bucket, names)
}

func (b *keyBaseline) close() { closeQuietly(b.kc) }

// deleteObjects deletes the bench's objects on a server it did not start
// (bounded by cleanupWait; errors are ignored: the run is measured).
func deleteObjects(ctx context.Context, c *s3.Client, cfg S3BenchConfig, n int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupWait)
	defer cancel()
	for i := range n {
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &cfg.Bucket, Key: aws.String(cfg.objectName(i))}); err != nil && ctx.Err() != nil {
			return
		}
	}
}
