// Package datanode runs a Spindle datanode: one storage engine over its data
// directories, one shared raft log in its log directory, and the pipelines
// (raft groups) it is a member of, served on one TCP address for peers and
// clients alike: mutual TLS 1.3 on it, on the connections it dials and on
// its /metrics when Config.TLS is set (plaintext otherwise: --insecure).
//
// Invariants: the log directory is never created silently empty for a
// datanode whose engine already holds containers (it would forget votes and
// acknowledged entries: Open refuses); the ready file appears only once the
// node serves, written atomically (temporary file, fsync, rename); a block
// an object lock holds is never deleted while the hold is in force, and a
// hold is acknowledged to the meta service only once durable (package
// holds, lockholds.go; the engine's deletions are refused until the holds
// are loaded).
//
// In the background it scrubs its CLOSED containers (scrub.go), repairs
// damaged blocks from other replicas when told to (repair.go), and probes
// its volumes, taking a failed one out of use and stopping once more fail
// than tolerated (volumes.go).
//
// Concurrency: Run blocks until its context ends, the node fails or too
// many volumes failed, then stops the heartbeat, the scrubber, the volume
// checker and the repairs, the node, and closes the log and the engine, in
// that order.
package datanode

import (
	"context"
	"errors"
	"fmt"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/certwatch"
	"github.com/spindle-store/spindle/internal/datanode/holds"
	"github.com/spindle-store/spindle/internal/ecnode"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/readyfile"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/wal"
)

// Config configures a datanode.
type Config struct {
	ID         uint64
	ListenAddr string
	// Listener, when set, is the data-path listener, already bound (a
	// socket handed over by the process that started this one: --listen-fd);
	// ListenAddr is not used then. Run serves on it and closes it.
	Listener net.Listener
	// AdvertiseAddr is the address other hosts reach this datanode at
	// (host, or host:port), registered with the meta service and handed to
	// peers; empty: the listener's address. A listener on every interface
	// (0.0.0.0, [::]) needs it: that address is no one's to dial.
	AdvertiseAddr string
	DataDirs      []string
	LogDir        string
	// LogSegmentSizeBytes is the size of the raft log's segment files,
	// preallocated (0: wal.DefaultSegmentSizeBytes, 64 MiB); a small log
	// volume needs smaller ones.
	LogSegmentSizeBytes int64
	// LogSkipZeroAhead: the raft log writes no zeros ahead of its records
	// (wal.Config.SkipZeroAhead: set when the log directory is on tmpfs,
	// where they are only one more copy of every byte logged).
	LogSkipZeroAhead bool
	// LogInlineMaxBytes: chunks of at most this many bytes travel with
	// their bytes in the raft log, their block files synced at PutBlock or
	// at a checkpoint (pipeline.Config.LogInlineMaxBytes; 0: never).
	LogInlineMaxBytes int
	Pipelines         []pipeline.PipelineConfig
	ReadyFile         string
	TickInterval      time.Duration
	ElectionTicks     int
	HeartbeatTicks    int
	// RetainEntries and MaxRetainEntries drive log compaction
	// (pipeline.Config; 0: defaults).
	RetainEntries, MaxRetainEntries uint64
	// DiskStallThreshold: a storage round (write, fdatasync, commit)
	// running longer fails the datanode (pipeline.DefaultDiskStallThreshold).
	DiskStallThreshold time.Duration
	CPUProfile         string
	// Meta, when set, is the meta service: the datanode registers (its node
	// ID comes from there on first start), heartbeats every
	// HeartbeatInterval with its container and pipeline reports, and serves
	// the pipelines it is told to (kept in PIPELINES.json for restarts).
	Meta              MetaClient
	HeartbeatInterval time.Duration
	// ECHook, when set (tests), is called after each step of this node's
	// EC conversions (ecnode.Worker.Hook).
	ECHook func(container uint64, step string) error
	// MetricsListen is the HTTP address of /metrics (Prometheus); empty:
	// none. Reported to the meta service.
	MetricsListen string
	// MaxCopies bounds the container copies (re-replication) this node
	// receives at once (default DefaultMaxCopies); MaxExports the
	// whole-container reads it serves at once (default
	// bulk.DefaultMaxExports).
	MaxCopies  int
	MaxExports int
	// MaxClientPayloadBytes and MaxRaftPayloadBytes are the pipeline
	// node's payload budgets: client chunk bytes held until answered,
	// peers' raft payload bytes held until appended (0: the pipeline
	// defaults, 512 and 256 MiB).
	MaxClientPayloadBytes int64
	MaxRaftPayloadBytes   int64
	// IdleTimeout and ReadTimeout bound the data-path connections' reads:
	// the wait for a frame to begin and for more bytes of a begun frame
	// (0: the transport defaults, 5 min and 30 s).
	IdleTimeout time.Duration
	ReadTimeout time.Duration
	Logger      *slog.Logger
	// TLS secures every connection of the datanode: its one address (data
	// path, raft, bulk copies: mutual TLS 1.3), the raft messages and
	// container copies it dials, and its /metrics listener; nil:
	// plaintext (--insecure). The meta client (Meta) carries its own.
	TLS *tlsconf.Settings
	// ScrubRateBytesPerS bounds the scrubber's reads (scrub.go; 0: no
	// scrubber); ScrubInterval is how often a CLOSED container is
	// scrubbed again (0: DefaultScrubInterval).
	ScrubRateBytesPerS uint64
	ScrubInterval      time.Duration
	// FailedVolumesTolerated: data directories that may fail (at start or
	// while running) before the datanode stops; negative: any number
	// while one works (volumes.go). VolumeCheckInterval: how often the
	// volumes are probed (0: DefaultVolumeCheckInterval).
	FailedVolumesTolerated int
	VolumeCheckInterval    time.Duration
	// BlockTokenKeyFile: a datanode outside a meta-managed cluster (static
	// pipelines) with TLS checks clients' block tokens against the keys in
	// this file (blocktoken.LoadKeys; "": none checked). Run by the meta
	// service with TLS, it always checks them, against the keys of its
	// heartbeat responses.
	BlockTokenKeyFile string
}

// DefaultMemoryOverheadBytes is what a datanode process needs beyond its
// payload budgets: the engine's and the log's buffers, the connections'
// read buffers (transport.DefaultMaxConns × 64 KiB), goroutines, raft state
// and the rest of the heap. MemoryLimitBytes adds it to the budgets.
const DefaultMemoryOverheadBytes = 256 << 20

// MemoryLimitBytes is the soft memory limit (runtime/debug.SetMemoryLimit)
// of a process running one datanode: its two payload budgets (the
// pipeline defaults for zero fields) plus DefaultMemoryOverheadBytes. The
// budgets bound the payload bytes held; the limit makes the garbage
// collector give back the ones released before the heap doubles (GOGC).
func MemoryLimitBytes(cfg Config) int64 {
	c, r := cfg.MaxClientPayloadBytes, cfg.MaxRaftPayloadBytes
	if c <= 0 {
		c = pipeline.DefaultMaxInflightPayloadBytes
	}
	if r <= 0 {
		r = pipeline.DefaultMaxInflightRaftPayloadBytes
	}
	return c + r + DefaultMemoryOverheadBytes
}

// ParsePipeline parses "GROUP:ID=ADDR,ID=ADDR,ID=ADDR".
func ParsePipeline(s string) (pipeline.PipelineConfig, error) {
	var p pipeline.PipelineConfig
	gid, rest, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return p, fmt.Errorf("pipeline %q: want GROUP:ID=ADDR,ID=ADDR,ID=ADDR", s)
	}
	id, err := strconv.ParseUint(gid, 10, 64)
	if err != nil || id == 0 {
		return p, fmt.Errorf("pipeline %q: group %q is not a positive integer", s, gid)
	}
	p.ID = id
	for _, m := range strings.Split(rest, ",") {
		mid, addr, ok := strings.Cut(strings.TrimSpace(m), "=")
		if !ok {
			return p, fmt.Errorf("pipeline %q: member %q: want ID=ADDR", s, m)
		}
		n, err := strconv.ParseUint(mid, 10, 64)
		if err != nil || n == 0 {
			return p, fmt.Errorf("pipeline %q: member ID %q is not a positive integer", s, mid)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return p, fmt.Errorf("pipeline %q: member %d address %q: %v", s, n, addr, err)
		}
		p.Members = append(p.Members, pipeline.Member{ID: n, Addr: addr})
	}
	if len(p.Members) < 1 {
		return p, fmt.Errorf("pipeline %q: no member", s)
	}
	return p, nil
}

// Run runs the datanode until ctx ends (a clean stop: nil) or it fails.
func Run(ctx context.Context, cfg Config) (err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if len(cfg.DataDirs) == 0 || cfg.LogDir == "" {
		return errors.New("datanode: --data-dir and --log-dir are required")
	}
	if len(cfg.Pipelines) == 0 && cfg.Meta == nil {
		return errors.New("datanode: no --pipeline and no --meta: a datanode serves static pipelines or those of a meta service")
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("datanode: --cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			closeQuietly(f) // nothing written
			return fmt.Errorf("datanode: --cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); err == nil && cerr != nil { // the profile's last write
				err = fmt.Errorf("datanode: --cpuprofile: %w", cerr)
			}
		}()
	}
	guard := &lockGuard{} // object lock holds (lockholds.go)
	eng, err := engine.Open(engine.Config{DataDirs: cfg.DataDirs, Logger: log, FailedVolumesTolerated: cfg.FailedVolumesTolerated, DeleteGuard: guard.check})
	if err != nil {
		return fmt.Errorf("datanode: %w", err)
	}
	vols := newVolumeChecker(eng, cfg, log)
	// stalled: the node failed on a hung disk; its workers may be stuck
	// in the engine or the log forever, so they are not closed (the
	// process exits).
	stalled := false
	defer func() {
		if stalled {
			return
		}
		if cerr := eng.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	// A datanode that holds containers has written its log before: an
	// empty log directory now is a lost or wrong --log-dir.
	mustExist := len(eng.ListContainers()) > 0
	wl, err := wal.Open(wal.Config{Dir: cfg.LogDir, MustExist: mustExist, Logger: log, SegmentSizeBytes: cfg.LogSegmentSizeBytes, SkipZeroAhead: cfg.LogSkipZeroAhead})
	if err != nil {
		if errors.Is(err, wal.ErrNoLog) {
			return fmt.Errorf("datanode: --log-dir %s holds no log, but the data directories hold containers: refusing to start with an empty log (it would forget acknowledged entries and votes)", cfg.LogDir)
		}
		if errors.Is(err, syscall.ENOSPC) {
			seg := cfg.LogSegmentSizeBytes
			if seg == 0 {
				seg = wal.DefaultSegmentSizeBytes
			}
			return fmt.Errorf("datanode: --log-dir %s has no room for a log segment of %d MiB (preallocated; --log-segment-size sets it, at least 2 MiB): %w", cfg.LogDir, seg>>20, err)
		}
		return fmt.Errorf("datanode: %w", err)
	}
	defer func() {
		if stalled {
			return
		}
		if cerr := wl.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	hs, err := holds.Open(nil, holds.Dir(cfg.LogDir), nil, log)
	if err != nil {
		return fmt.Errorf("datanode: %w", err)
	}
	guard.s.Store(hs)
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			return fmt.Errorf("datanode: listen: %w", err)
		}
	}
	advertise, err := AdvertiseAddr(ln.Addr(), cfg.AdvertiseAddr)
	if err != nil {
		closeQuietly(ln)
		return err
	}
	var id identity
	pipelines := cfg.Pipelines
	if cfg.Meta != nil {
		if id, err = loadIdentity(cfg.LogDir); err != nil {
			closeQuietly(ln)
			return err
		}
		if id.NodeID == 0 {
			if err := register(ctx, cfg.Meta, cfg.LogDir, &id, advertise, log); err != nil {
				closeQuietly(ln)
				return err
			}
			log.Info("registered with the meta service", "uuid", id.UUID, "node_id", id.NodeID)
		}
		if cfg.ID != 0 && cfg.ID != id.NodeID {
			closeQuietly(ln)
			return fmt.Errorf("datanode: --id %d, but the meta service knows this datanode as node %d", cfg.ID, id.NodeID)
		}
		cfg.ID = id.NodeID
		saved, err := loadPipelines(cfg.LogDir)
		if err != nil {
			closeQuietly(ln)
			return err
		}
		static := map[uint64]bool{}
		for _, p := range pipelines {
			static[p.ID] = true
		}
		for _, p := range saved {
			if !static[p.ID] {
				pipelines = append(pipelines, p)
			}
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// One address for the data path and bulk container streams: the demux
	// hands "SB" connections to the bulk server (sendfile of CLOSED
	// containers) and the rest to the pipeline node.
	bsrv := bulk.NewServer(eng, cfg.MaxExports, log)
	var tokens *blocktoken.Verifier // issue 32: clients' chunks only with a block token, exports only to the named target
	if cfg.TLS.Enabled() && (cfg.Meta != nil || cfg.BlockTokenKeyFile != "") {
		tokens = blocktoken.NewVerifier(0, nil)
		bsrv.Tokens = tokens
	}
	if cfg.BlockTokenKeyFile != "" && tokens != nil {
		keys, err := blocktoken.LoadKeys(cfg.BlockTokenKeyFile)
		if err != nil {
			closeQuietly(ln)
			return fmt.Errorf("datanode: %w", err)
		}
		tokens.SetKeys(keys)
	}
	defer bsrv.Close()
	var shards *ecnode.Store // erasure-coded shards (issue 37): stored and served through the bulk server
	if cfg.Meta != nil {
		if shards, err = ecnode.OpenStore(filepath.Join(cfg.DataDirs[0], "ec")); err != nil {
			closeQuietly(ln)
			return fmt.Errorf("datanode: %w", err)
		}
		bsrv.Shards = shards
	}
	registerBulkMetrics(reg, bsrv)
	reg.MustRegister(spaceCollector{eng: eng, log: log}) // space_metrics.go
	reg.MustRegister(tlsconf.ExpiryGauge(cfg.TLS))
	reg.MustRegister(hs.Collectors()...)
	dm := bulk.NewDemux(ln, cfg.TLS, bsrv.Handle, 0)
	defer dm.Wait()
	defer closeQuietly(dm)
	copier := newContainerCopier(eng, cfg.TLS, cfg.ID, cfg.MaxCopies, log)
	defer copier.stop()
	copier.register(reg)
	scrub := newScrubber(eng, cfg.ScrubRateBytesPerS, cfg.ScrubInterval, log)
	scrub.register(reg)
	repair := newRepairer(eng, cfg.TLS, scrub, log)
	// The scrubber and the repairs stop before the engine closes.
	bgCtx, bgStop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { bgStop(); bg.Wait() }()
	bg.Add(2)
	go func() { defer bg.Done(); scrub.run(bgCtx) }()
	go func() { defer bg.Done(); vols.run(bgCtx) }()
	certwatch.Start(bgCtx, &bg, cfg.TLS, cfg.Meta, log, nil) // renewal, the deny-list in force (issue 33)
	vols.register(reg)
	node, err := pipeline.Start(pipeline.Config{
		ID: cfg.ID, Listener: dm, Engine: eng, Log: wl, Pipelines: pipelines, Metrics: reg,
		TickInterval: cfg.TickInterval, ElectionTicks: cfg.ElectionTicks, HeartbeatTicks: cfg.HeartbeatTicks,
		DiskStallThreshold: cfg.DiskStallThreshold,
		// Run by the meta service, every member's certificate comes with
		// its pipelines and peers (heartbeats): none is taken on trust.
		RequirePeerCertNames:    cfg.Meta != nil && cfg.TLS.Enabled(),
		BlockTokens:             tokens,
		LogInlineMaxBytes:       cfg.LogInlineMaxBytes,
		MaxInflightPayloadBytes: cfg.MaxClientPayloadBytes, MaxInflightRaftPayloadBytes: cfg.MaxRaftPayloadBytes,
		Conn:          transport.ConnConfig{IdleTimeout: cfg.IdleTimeout, ReadTimeout: cfg.ReadTimeout, TLS: cfg.TLS},
		RetainEntries: cfg.RetainEntries, MaxRetainEntries: cfg.MaxRetainEntries,
		CompactEveryEntries: min(cfg.RetainEntries, pipeline.DefaultCompactEveryEntries),
		Logger:              log,
	})
	if err != nil {
		closeQuietly(ln)
		return fmt.Errorf("datanode: %w", err)
	}
	metricsURL := ""
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			closeQuietly(node)
			return fmt.Errorf("datanode: metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hs.Serve(cfg.TLS.Listener(mln)); !errors.Is(err, http.ErrServerClosed) {
				log.Warn("datanode: metrics server failed", "err", err)
			}
		}()
		defer closeQuietly(hs)
		metricsURL = cfg.TLS.Scheme() + "://" + mln.Addr().String() + "/metrics"
	}
	if !cfg.TLS.Enabled() {
		log.Warn("datanode serving WITHOUT TLS (--insecure): nobody is authenticated: anyone who reaches its address can inject raft messages and read containers (no role or membership is checked)", "addr", node.Addr())
	}
	log.Info("datanode serving", "id", cfg.ID, "addr", node.Addr(), "tls", cfg.TLS.Mode(), "data_dirs", cfg.DataDirs, "log_dir", cfg.LogDir, "pipelines", len(pipelines), "metrics", metricsURL)
	if cfg.ReadyFile != "" {
		if err := readyfile.Write(cfg.ReadyFile, advertise); err != nil { // what others dial
			closeQuietly(node)
			return err
		}
	}
	hbDone := make(chan struct{})
	if cfg.Meta != nil {
		interval := cfg.HeartbeatInterval
		if interval <= 0 {
			interval = metaapi.DefaultHeartbeatInterval
		}
		h := &heartbeater{mc: cfg.Meta, id: id, addr: advertise, metricsURL: metricsURL, logDir: cfg.LogDir, eng: eng, node: node, log: log,
			interval: interval, proposals: make(chan struct{}, maxConcurrentProposals), copier: copier, deleted: newReportQueue[metaapi.BlockRef](maxPendingAcks), blocks: newBlockCounter(),
			holds: hs, held: newReportQueue[holdapi.Ack](maxPendingHoldAcks),
			scrub: scrub, repair: repair, bg: &bg, bgCtx: bgCtx, volFound: vols.found, tokens: tokens}
		go func() { defer close(hbDone); h.run(bgCtx) }()
		if doer, ok := cfg.Meta.(ecapi.Doer); ok { // the meta service's client (not a test's fake)
			ecw := &ecnode.Worker{Eng: eng, Store: shards, Meta: doer, TLS: cfg.TLS, Node: cfg.ID, Log: log, Interval: interval, Hook: cfg.ECHook, ScrubInterval: scrub.interval * time.Duration(min(cfg.ScrubRateBytesPerS, 1))} // (no scrubber: no shard scrubs)
			bg.Add(1)
			go func() { defer bg.Done(); ecw.Run(bgCtx) }()
		}
	} else {
		close(hbDone)
	}
	var volErr error
	select {
	case <-ctx.Done():
	case <-node.Stopped():
	case volErr = <-vols.stop:
		log.Error("datanode stopping: too many failed volumes", "err", volErr)
		bgStop()
	}
	<-hbDone
	nerr := node.Close()
	if errors.Is(nerr, pipeline.ErrDiskStall) {
		stalled = true
		log.Error("datanode stopping: its storage stalled", "err", nerr)
		return fmt.Errorf("datanode: %w", nerr)
	}
	if nerr != nil {
		return fmt.Errorf("datanode: %w", nerr)
	}
	if volErr != nil {
		return volErr
	}
	log.Info("datanode stopped", "id", cfg.ID)
	return nil
}

// DefaultDirs returns dir/data and dir/log, for a datanode rooted at dir.
func DefaultDirs(dir string) (data, log string) {
	return filepath.Join(dir, "data"), filepath.Join(dir, "log")
}

// registerBulkMetrics exports the bulk server's counters.
func registerBulkMetrics(reg *prometheus.Registry, s *bulk.Server) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_export_bytes_total",
			Help: "Block bytes sent by whole-container reads (re-replication sources), by sendfile."},
			func() float64 { return float64(s.Stats().Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_exports_completed_total",
			Help: "Whole-container reads served to the end."},
			func() float64 { return float64(s.Stats().Exports) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_exports_failed_total",
			Help: "Whole-container reads started and not finished."},
			func() float64 { return float64(s.Stats().ExportsFailed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_exports_refused_total",
			Help: "Whole-container read requests refused (busy, not found, not closed, malformed, forbidden to the caller's certificate)."},
			func() float64 { return float64(s.Stats().Refused) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_exports_running",
			Help: "Whole-container reads being served now."},
			func() float64 { return float64(s.Stats().Active) }),
	)
}

// AdvertiseAddr is the address a datanode listening on ln registers: the
// advertised one (its port defaulting to the listener's), else the
// listener's own, which must then be dialable — a listener on every
// interface (0.0.0.0 or [::]) without an advertised address is an error,
// since no other host can dial it.
func AdvertiseAddr(ln net.Addr, advertise string) (string, error) {
	tcp, ok := ln.(*net.TCPAddr)
	if !ok {
		return "", fmt.Errorf("datanode: listener address %v is not TCP", ln)
	}
	if advertise == "" {
		if tcp.IP == nil || tcp.IP.IsUnspecified() {
			return "", fmt.Errorf("datanode: listening on every interface (%s) needs --advertise-addr: the address other hosts reach this datanode at", tcp)
		}
		return tcp.String(), nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		host, port = advertise, strconv.Itoa(tcp.Port) // a host alone: the listener's port
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
	}
	if host == "" {
		return "", fmt.Errorf("datanode: --advertise-addr %q: no host", advertise)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("datanode: --advertise-addr %q: not an address another host can dial", advertise)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("datanode: --advertise-addr %q: bad port", advertise)
	}
	return net.JoinHostPort(host, port), nil
}
