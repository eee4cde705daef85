package datanode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// The scrubber: the background re-verification of CLOSED containers.
//
// One goroutine per datanode walks its CLOSED containers in ID order,
// each block of each, verifying every checksum (engine.ScrubBlock) at no
// more than ScrubRateBytesPerS on average, all volumes together; a
// container scrubbed less than ScrubInterval ago is skipped, and once a
// pass finds nothing due the scrubber sleeps until the next container is
// due (at least minScrubIdle, at most ScrubInterval). Damage it finds is
// marked in the engine (the block, not the container) and reported in the
// next heartbeat, which leaves at once. The times of the last scrub are
// memory only: a restarted datanode scrubs everything again, from the
// lowest container ID.

// Defaults of the scrubber (flags --scrub-rate, --scrub-interval).
const (
	// DefaultScrubRateBytesPerS: 5 MB/s, Ozone's
	// hdds.container.scrub.volume.bytes.per.second default (there per
	// volume; here per datanode).
	DefaultScrubRateBytesPerS = 5_000_000
	// DefaultScrubInterval: a container is scrubbed again at most this
	// often (Ozone's hdds.container.scrub.data.scan.interval is 7 days;
	// at the default rate a pass over 3 TB takes 7 days anyway).
	DefaultScrubInterval = 7 * 24 * time.Hour
	// minScrubIdle bounds how often an idle scrubber looks for due
	// containers (new ones closed meanwhile).
	minScrubIdle = time.Second
	// scrubPage is the block records read at a time.
	scrubPage = 1000
)

// scrubber verifies CLOSED containers in the background (see above).
type scrubber struct {
	eng      *engine.Engine
	rate     uint64 // bytes per second; 0: disabled
	interval time.Duration
	log      *slog.Logger
	// found is signalled (without blocking) when damage is found, so that
	// the heartbeat reports it at once.
	found chan struct{}

	mu      sync.Mutex
	report  metaapi.ScrubReport
	scanned map[engine.ContainerID]time.Time // last complete scrub
	// next: when the paced reader may read again.
	next time.Time
}

func newScrubber(eng *engine.Engine, rateBytesPerS uint64, interval time.Duration, log *slog.Logger) *scrubber {
	if interval <= 0 {
		interval = DefaultScrubInterval
	}
	return &scrubber{eng: eng, rate: rateBytesPerS, interval: interval, log: log, found: make(chan struct{}, 1),
		scanned: map[engine.ContainerID]time.Time{}, report: metaapi.ScrubReport{RateBytesPerS: rateBytesPerS}}
}

// progress is the scrubber's report for a heartbeat.
func (s *scrubber) progress() *metaapi.ScrubReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	return &r
}

func (s *scrubber) register(reg *prometheus.Registry) {
	field := func(f func(r *metaapi.ScrubReport) uint64) func() float64 {
		return func() float64 { return float64(f(s.progress())) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_scrub_bytes_total",
			Help: "Bytes of CLOSED containers' blocks the scrubber verified."},
			field(func(r *metaapi.ScrubReport) uint64 { return r.ScannedBytes })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_scrub_blocks_total",
			Help: "Blocks the scrubber verified."},
			field(func(r *metaapi.ScrubReport) uint64 { return r.ScannedBlocks })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_scrub_passes_total",
			Help: "Complete scrubber passes over the CLOSED containers."},
			field(func(r *metaapi.ScrubReport) uint64 { return r.Passes })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_scrub_damage_found_total",
			Help: "Damaged blocks the scrubber found."},
			field(func(r *metaapi.ScrubReport) uint64 { return r.DamageFound })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_repaired_blocks_total",
			Help: "Damaged blocks repaired from another replica (repair_blocks)."},
			field(func(r *metaapi.ScrubReport) uint64 { return r.RepairedBlocks })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_repair_failures_total",
			Help: "Block repairs that failed from every source."},
			field(func(r *metaapi.ScrubReport) uint64 { return r.RepairFailures })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_damaged_blocks",
			Help: "Blocks of CLOSED containers marked damaged now (found by the scrubber or a read, not repaired yet)."},
			func() float64 {
				n := 0
				for _, c := range s.eng.ListContainers() {
					n += len(c.DamagedBlocks)
				}
				return float64(n)
			}),
	)
}

// pace waits until n more bytes may be read at the scrubber's rate.
func (s *scrubber) pace(ctx context.Context, n uint64) error {
	s.mu.Lock()
	now := time.Now()
	if s.next.Before(now) {
		s.next = now
	}
	wait := s.next.Sub(now)
	s.next = s.next.Add(time.Duration(float64(n) / float64(s.rate) * float64(time.Second)))
	s.mu.Unlock()
	if wait <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// run scrubs until ctx ends; nothing when the rate is 0.
func (s *scrubber) run(ctx context.Context) {
	if s.rate == 0 {
		return
	}
	s.log.Info("scrubber started", "rate_bytes_per_s", s.rate, "interval", s.interval)
	for ctx.Err() == nil {
		idle := s.pass(ctx)
		t := time.NewTimer(idle)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// pass scrubs every CLOSED container that is due, in ID order, and
// returns how long to wait before the next pass.
func (s *scrubber) pass(ctx context.Context) time.Duration {
	worked := false
	for _, c := range s.eng.ListContainers() {
		if ctx.Err() != nil {
			return 0
		}
		s.mu.Lock()
		last, ok := s.scanned[c.ID]
		s.mu.Unlock()
		if c.State != engine.StateClosed || (ok && time.Since(last) < s.interval) {
			continue
		}
		worked = true
		if err := s.container(ctx, c.ID); err != nil {
			if ctx.Err() == nil && !errors.Is(err, engine.ErrNotFound) {
				s.log.Warn("scrubbing a container", "container", c.ID, "err", err)
			}
			continue
		}
		s.mu.Lock()
		s.scanned[c.ID] = time.Now()
		s.mu.Unlock()
	}
	// Forget containers gone from the engine; find the next one due.
	live := map[engine.ContainerID]bool{}
	for _, c := range s.eng.ListContainers() {
		live[c.ID] = true
	}
	idle := s.interval
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, t := range s.scanned {
		if !live[id] {
			delete(s.scanned, id)
			continue
		}
		idle = min(idle, time.Until(t.Add(s.interval)))
	}
	s.report.Container = 0
	if worked {
		s.report.Passes++
		s.report.LastPassEnded = time.Now()
	}
	return max(idle, minScrubIdle)
}

// container scrubs every block of container id.
func (s *scrubber) container(ctx context.Context, id engine.ContainerID) error {
	s.mu.Lock()
	s.report.Container = uint64(id)
	s.mu.Unlock()
	var after uint64
	first := true
	for {
		blocks, err := s.eng.ListBlocks(id, after, first, scrubPage)
		if err != nil {
			return err
		}
		for _, bd := range blocks {
			if info, err := s.eng.Container(id); err != nil || info.State != engine.StateClosed {
				return fmt.Errorf("container %d no longer CLOSED here: %w", id, errors.Join(err, engine.ErrNotFound))
			}
			err := s.eng.ScrubBlock(bd, func(n uint64) error { return s.pace(ctx, n) })
			s.mu.Lock()
			s.report.ScannedBlocks++
			s.report.ScannedBytes += bd.Length
			if errors.Is(err, engine.ErrCorrupt) {
				s.report.DamageFound++
			}
			s.mu.Unlock()
			switch {
			case errors.Is(err, engine.ErrCorrupt):
				s.log.Error("scrubber: damaged block", "container", id, "block", bd.ID.Local, "err", err)
				select {
				case s.found <- struct{}{}:
				default:
				}
			case err != nil:
				return err
			}
		}
		if len(blocks) < scrubPage {
			return nil
		}
		first, after = false, blocks[len(blocks)-1].ID.Local
	}
}
