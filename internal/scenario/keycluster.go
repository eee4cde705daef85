package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/server"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// ClusterConfig says which cluster the key benches (teragen, key-write,
// key-read) use: an embedded `spindle server` with its data in Dir, started
// and stopped by the bench, or the running cluster whose meta service is at
// Meta.
type ClusterConfig struct {
	// Dir, for an embedded server: created when missing and then removed
	// at the end; when it exists, the bench works in a new subdirectory
	// of it, removed at the end. "" (and no Meta): a new temporary
	// directory.
	Dir string
	// Meta is the meta service of a running cluster (host:port); the
	// bench's keys are deleted at the end unless Keep.
	Meta string
	// MetaTLS is how the bench reaches Meta (nil: plaintext).
	MetaTLS *tlsconf.Settings
	// TLS runs the embedded server with mutual TLS on every connection
	// (spindle server's default; it costs the handshakes and the
	// encryption: bench --tls measures it); false: plaintext.
	TLS bool
	// Binary is the spindle executable run as the embedded datanodes
	// (required for an embedded server).
	Binary string
	// Datanodes of the embedded server (default 3).
	Datanodes int
	// DatanodeArgs and DatanodeEnv are added to the embedded datanodes'
	// command lines and environments.
	DatanodeArgs []string
	DatanodeEnv  []string
	// DatanodeProcs is each embedded datanode's GOMAXPROCS; 0: Go's
	// default (every datanode may use every CPU).
	DatanodeProcs int
	// MetaConfig overrides settings of the embedded meta service.
	MetaConfig meta.Config
	// BaselineDir, with Meta, is where the raw disk baseline runs (""
	// with Meta: no baseline, the cluster's disks are not known here).
	// With an embedded server the baseline runs in the bench's directory.
	BaselineDir string
	// BaselineWriters is the writers of the teragen disk baseline (0: one
	// per datanode with an embedded server, one with BaselineDir).
	BaselineWriters int
	// Keep leaves the keys (and an embedded server's data) in place.
	Keep bool
	// Client configures the key client (zero fields: its defaults).
	Client keyclient.Options
}

// keyCluster is the cluster a key bench runs against.
type keyCluster struct {
	cfg  ClusterConfig
	meta *metaapi.Client
	srv  *server.Server // nil once stopped
	// embedded: the cluster is an embedded server started by the bench.
	embedded bool
	root     string   // the bench's directory (embedded)
	remove   []string // created by the bench: removed by cleanup, last first
	label    string   // "embedded (DIR)" or "meta ADDR"
	log      *slog.Logger
}

// procs returns the processes the bench started and whose CPU time it
// charges to its loops (bench.LoopConfig.Processes): an embedded server's
// datanodes (its meta service runs in this process, measured with it).
// None for a running cluster.
func (k *keyCluster) procs() []bench.Proc {
	if k.srv == nil || k.srv.Cluster() == nil {
		return nil
	}
	return k.srv.Cluster().Procs()
}

// cpuNote says what a figure of cpu_seconds covers on a running cluster
// (nothing of it but this process); "" for an embedded one.
func (k *keyCluster) cpuNote() string {
	if k.embedded {
		return ""
	}
	return "cpu_seconds: this process (the client) only; the cluster at " + k.label + " was not started by the bench"
}

// Limits of the key benches.
const (
	// clusterStartWait bounds the wait for an embedded server's first
	// pipeline.
	clusterStartWait = 60 * time.Second
	// cleanupWait bounds deleting a bench's keys on a running cluster.
	cleanupWait = 2 * time.Minute
	// MaxBenchKeys bounds the keys one key bench writes.
	MaxBenchKeys = 10_000_000
)

// openKeyCluster starts the embedded server or connects to Meta.
func openKeyCluster(ctx context.Context, cfg ClusterConfig, log *slog.Logger, progress func(string, ...any)) (*keyCluster, error) {
	k := &keyCluster{cfg: cfg, log: log}
	if cfg.Meta != "" {
		if cfg.Dir != "" {
			return nil, errors.New("give --dir (an embedded server) or --meta (a running cluster), not both")
		}
		mc, err := metaapi.NewClient(cfg.Meta, metaapi.ClientOptions{TLS: cfg.MetaTLS})
		if err != nil {
			return nil, err
		}
		if _, err := mc.ListBuckets(ctx); err != nil {
			return nil, fmt.Errorf("meta service at %s: %w", cfg.Meta, err)
		}
		k.meta, k.label = mc, "meta "+cfg.Meta
		return k, nil
	}
	if cfg.Binary == "" {
		return nil, errors.New("no spindle binary to run the embedded datanodes")
	}
	root, made, err := benchRoot(cfg.Dir)
	if err != nil {
		return nil, err
	}
	k.root, k.remove = root, made
	env := cfg.DatanodeEnv
	if cfg.DatanodeProcs > 0 && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
		env = append(slices.Clip(env), fmt.Sprintf("GOMAXPROCS=%d", cfg.DatanodeProcs))
	}
	mcfg := cfg.MetaConfig
	if mcfg.Logger == nil {
		mcfg.Logger = quietLogger()
	}
	progress("starting spindle server (%d datanodes) in %s", max(cfg.Datanodes, server.DefaultDatanodes), filepath.Join(root, "server"))
	srv, err := server.Start(ctx, server.Config{
		Dir: filepath.Join(root, "server"), Datanodes: cfg.Datanodes, MetaListen: "127.0.0.1:0",
		Binary: cfg.Binary, Meta: mcfg, DatanodeArgs: cfg.DatanodeArgs, DatanodeEnv: env,
		ReadyTimeout: clusterStartWait, Logger: quietLogger(), Insecure: !cfg.TLS,
	})
	if err != nil {
		_ = k.cleanup() // best effort: err is the error
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	k.srv, k.meta, k.embedded, k.label = srv, srv.Meta(), true, "embedded server in "+filepath.Join(root, "server")
	return k, nil
}

// benchRoot returns the bench's directory: dir itself when the bench
// creates it, a new subdirectory when dir exists, a temporary directory
// when dir is "". made lists what cleanup removes.
func benchRoot(dir string) (string, []string, error) {
	d, made, err := benchDir(dir, "spindle-bench-")
	if err != nil || len(made) > 0 {
		return d, made, err
	}
	// dir existed: work in a new subdirectory of it.
	sub, err := os.MkdirTemp(d, "spindle-bench-")
	if err != nil {
		return "", nil, err
	}
	return sub, []string{sub}, nil
}

// baselineDir is where the raw disk baseline runs ("" = none).
func (k *keyCluster) baselineDir() string {
	if k.embedded {
		return filepath.Join(k.root, "baseline")
	}
	return k.cfg.BaselineDir
}

// stop stops an embedded server and removes its data (unless Keep), so
// that a baseline after it starts from the same free space.
func (k *keyCluster) stop() error {
	if k.srv == nil {
		return nil
	}
	err := k.srv.Close()
	k.srv = nil
	if !k.cfg.Keep {
		if rerr := os.RemoveAll(filepath.Join(k.root, "server")); err == nil {
			err = rerr
		}
	}
	return err
}

// cleanup stops what runs and removes what the bench created (unless
// Keep).
func (k *keyCluster) cleanup() error {
	err := k.stop()
	if k.cfg.Keep {
		return err
	}
	for i := len(k.remove) - 1; i >= 0; i-- {
		if rerr := os.RemoveAll(k.remove[i]); err == nil {
			err = rerr
		}
	}
	k.remove = nil
	return err
}

// ensureBucket creates bucket unless it exists.
func ensureBucket(ctx context.Context, kc *keyclient.Client, bucket string) error {
	_, err := kc.CreateBucket(ctx, bucket)
	if err != nil && !errors.Is(err, metaapi.ErrExists) {
		return err
	}
	return nil
}

// deleteKeys deletes names from bucket (bounded by cleanupWait), for a
// bench on a running cluster; a key already gone is fine.
func deleteKeys(ctx context.Context, kc *keyclient.Client, bucket string, names []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupWait)
	defer cancel()
	var errs []error
	for _, n := range names {
		if err := kc.Delete(ctx, bucket, n); err != nil && !errors.Is(err, metaapi.ErrNotFound) {
			errs = append(errs, err)
			if len(errs) >= 10 || ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// runPrefix names a bench run's keys: NAME-YYYYMMDD-HHMMSS-<pid>/.
func runPrefix(name string) string {
	return fmt.Sprintf("%s-%s-%d/", name, time.Now().Format("20060102-150405"), os.Getpid())
}

// baselineWriters is how many writers the disk baseline has: by default
// one per datanode of an embedded server (each writes its replica to this
// disk at the same time), one for a --baseline-dir.
func (k *keyCluster) baselineWriters() int {
	if k.cfg.BaselineWriters > 0 {
		return k.cfg.BaselineWriters
	}
	if k.embedded {
		return max(k.cfg.Datanodes, server.DefaultDatanodes)
	}
	return 1
}

// diskBaseline measures the disk under dir: writers each doing pwrite of
// chunk bytes + fdatasync, appending (as datanodes write new blocks), for
// at most d or maxBytes in all.
func diskBaseline(ctx context.Context, dir string, writers int, chunk int64, d time.Duration, maxBytes int64, progress io.Writer) (bench.Baseline, error) {
	ops := max(maxBytes/chunk, 1)
	return bench.RunBaseline(ctx, bench.BaselineConfig{
		Dir: dir, Writers: writers, ChunkSizeBytes: chunk, WritesPerSync: 1,
		Duration: d, MaxOps: ops, FileSizeBytes: max(chunk, 1<<30), Pattern: bench.PatternAppend,
		Progress: progress,
	})
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
