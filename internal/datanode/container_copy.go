package datanode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Limits of the container copier (the target side of re-replication).
const (
	// DefaultMaxCopies bounds the container copies a node runs at once.
	DefaultMaxCopies = 4
	// maxQueuedCopies bounds the copies accepted (running or waiting for
	// a slot); more replicate_container commands are ignored (the meta
	// service repeats them).
	maxQueuedCopies = 64
	// maxPendingFailures bounds the failure reports kept between
	// heartbeats.
	maxPendingFailures = metaapi.MaxCopyFailuresReport
	// maxErrorBytes bounds the error text of one failure report.
	maxErrorBytes = 512
)

// containerCopier carries out replicate_container commands (re-replication:
// this node is the target of a container copy): it pulls CLOSED
// containers from their sources by bulk streaming into an engine importer,
// which verifies every checksum and makes the container visible atomically.
// A copy that fails from every source listed is reported in the next
// heartbeat (CopyFailures); the meta service picks again.
//
// Concurrency: submit, copying and failures may be used from any
// goroutine; each copy runs in its own goroutine (at most maxQueuedCopies,
// of which maxActive copy at a time). stop cancels them and waits.
type containerCopier struct {
	eng   *engine.Engine
	tls   *tlsconf.Settings // the copies' connections (nil: plaintext)
	self  uint64
	log   *slog.Logger
	sema  chan struct{}
	wake  chan struct{}
	pause *copyPause // a test hook (copypause_hook.go); nothing in a release build

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// failures are the copies that failed from every source, for the next
	// heartbeats.
	failures *reportQueue[metaapi.CopyFailure]

	mu     sync.Mutex
	active map[uint64]bool // accepted: copying or waiting for a slot

	bytes, ok, failed atomic.Uint64
	running           atomic.Int64
}

func newContainerCopier(eng *engine.Engine, sec *tlsconf.Settings, self uint64, maxActive int, log *slog.Logger) *containerCopier {
	if maxActive <= 0 {
		maxActive = DefaultMaxCopies
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &containerCopier{eng: eng, tls: sec, self: self, log: log, sema: make(chan struct{}, maxActive), wake: make(chan struct{}, 1),
		pause: newCopyPause(), ctx: ctx, cancel: cancel, active: map[uint64]bool{},
		failures: newReportQueue[metaapi.CopyFailure](maxPendingFailures)}
}

// register exports the container copier's metrics.
func (cc *containerCopier) register(reg *prometheus.Registry) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_copy_bytes_total",
			Help: "Block bytes received by container copies (re-replication targets), completed or not."},
			func() float64 { return float64(cc.bytes.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_copies_completed_total",
			Help: "Container copies completed (verified and visible)."},
			func() float64 { return float64(cc.ok.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_copies_failed_total",
			Help: "Container copies that failed from every source offered."},
			func() float64 { return float64(cc.failed.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_copies_running",
			Help: "Container copies receiving now."},
			func() float64 { return float64(cc.running.Load()) }),
	)
}

// submit accepts a replicate_container command unless the container is
// here already, being copied, or the queue is full.
func (cc *containerCopier) submit(c metaapi.Command) {
	id := c.Container
	if id == 0 || len(c.Sources) == 0 {
		cc.log.Warn("replicate_container without a container or sources", "container", id)
		return
	}
	if _, err := cc.eng.Container(engine.ContainerID(id)); err == nil {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.active[id] || len(cc.active) >= maxQueuedCopies || cc.ctx.Err() != nil {
		return
	}
	cc.active[id] = true
	cc.wg.Add(1)
	go cc.run(c)
}

// copying lists the containers accepted and not finished, in ID order.
func (cc *containerCopier) copying() []uint64 {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	out := make([]uint64, 0, len(cc.active))
	for id := range cc.active {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	if len(out) > metaapi.MaxCopyingReport {
		out = out[:metaapi.MaxCopyingReport]
	}
	return out
}

func (cc *containerCopier) stop() {
	cc.cancel()
	cc.wg.Wait()
}

func (cc *containerCopier) notify() {
	select {
	case cc.wake <- struct{}{}:
	default:
	}
}

func (cc *containerCopier) run(c metaapi.Command) {
	defer cc.wg.Done()
	defer func() {
		cc.mu.Lock()
		delete(cc.active, c.Container)
		cc.mu.Unlock()
		cc.notify()
	}()
	select {
	case cc.sema <- struct{}{}:
		defer func() { <-cc.sema }()
	case <-cc.ctx.Done():
		return
	}
	cc.running.Add(1)
	defer cc.running.Add(-1)
	var lastErr error
	for _, src := range c.Sources {
		if src.NodeID == cc.self {
			continue
		}
		err := cc.copyFrom(c.Container, c.Token, src)
		if err == nil || errors.Is(err, engine.ErrExists) {
			if err != nil {
				cc.log.Info("container copy: already here", "container", c.Container)
			}
			return
		}
		lastErr = err
		if cc.ctx.Err() != nil {
			return // stopping: not a failure of the source
		}
		cc.log.Warn("container copy failed", "container", c.Container, "source", src.NodeID, "addr", src.Addr, "err", err)
	}
	if lastErr == nil {
		lastErr = errors.New("no source other than this node")
	}
	cc.failed.Add(1)
	msg := lastErr.Error()
	if len(msg) > maxErrorBytes {
		msg = msg[:maxErrorBytes]
	}
	cc.failures.add(metaapi.CopyFailure{Container: c.Container, Source: c.Sources[0].NodeID, Error: msg})
}

// copyFrom pulls container id from src into an importer; on any error the
// importer is aborted (nothing becomes visible).
func (cc *containerCopier) copyFrom(id uint64, token string, src metaapi.Member) error {
	var im *engine.Importer
	start := time.Now()
	res, err := bulk.FetchWithToken(cc.ctx, cc.tls, src.Addr, id, token, func(h bulk.ContainerHeader) (bulk.Sink, error) {
		var err error
		im, err = cc.eng.ImportContainer(engine.ContainerID(id), h.CopyBytes(), h.BCSID)
		if err != nil {
			return nil, err
		}
		return &countingSink{im: im, cc: cc}, nil
	})
	if err == nil {
		err = im.Commit()
	}
	if err != nil {
		if im != nil {
			if aerr := im.Abort(); aerr != nil {
				cc.log.Error("container copy: abort", "container", id, "err", aerr)
			}
		}
		return err
	}
	cc.ok.Add(1)
	secs := time.Since(start).Seconds()
	cc.log.Info("container copied", "container", id, "source", src.NodeID, "blocks", res.Blocks, "bytes", res.Bytes,
		"seconds", fmt.Sprintf("%.3f", secs), "mb_per_s", fmt.Sprintf("%.0f", float64(res.Bytes)/1e6/max(secs, 1e-9)))
	return nil
}

// countingSink counts received bytes and runs the test pause hook.
type countingSink struct {
	im     *engine.Importer
	cc     *containerCopier
	blocks int
}

func (s *countingSink) AddBlock(bd *engine.BlockData, rd io.Reader) error {
	if err := s.im.AddBlock(bd, rd); err != nil {
		return err
	}
	return s.added(bd)
}

func (s *countingSink) added(bd *engine.BlockData) error {
	s.cc.bytes.Add(bd.Length)
	s.blocks++
	if s.blocks == 1 {
		s.cc.pause.wait(s.cc.ctx, s.cc.log, uint64(bd.ID.Container))
	}
	return nil
}
