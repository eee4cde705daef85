package meta

import (
	"errors"
	"fmt"

	dto "github.com/prometheus/client_model/go"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// Service is the meta service: the concerns over one State, composed.
type Service struct {
	*State
	*Cluster
	*BlockGC
	*Allocator
	*Damage
	*Ops
	*Rerepl
	*Namespace
	*Multipart
	*S3Users

	// rep is the meta raft group's member (nil: a group of one); State.rep
	// is the same member as the state machine sees it.
	rep    *replicator
	joins  joinTokens // join.go
	bodies *bodyGate  // admission.go
}

// compose builds the concerns over st.
func compose(st *State) *Service {
	s := &Service{State: st}
	s.Cluster = &Cluster{st}
	s.BlockGC = &BlockGC{st, s.Cluster}
	s.Allocator = &Allocator{st, s.Cluster}
	s.Damage = &Damage{st, s.Cluster}
	s.Ops = &Ops{st, s.Cluster, s.Damage}
	s.Rerepl = &Rerepl{st, s.Cluster, s.Damage, s.Ops}
	s.Multipart = &Multipart{State: st, gc: s.BlockGC}
	s.Namespace = &Namespace{st, s.Cluster, s.Allocator, s.BlockGC, s.Multipart}
	s.Multipart.ns = s.Namespace
	s.S3Users = &S3Users{st}
	return s
}

// Open opens (creating if needed) the meta service's store in cfg.Dir and
// loads its state.
func Open(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "meta")
	db, err := openStore(cfg.FS, cfg.Dir, log)
	if err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	s := compose(&State{cfg: cfg, log: log, db: &store{DB: db}, started: cfg.Now()})
	s.bodies = newBodyGate(&s.cfg)
	s.initMemory()
	s.dur.init()
	if err := s.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("meta: load %s: %w", cfg.Dir, err)
	}
	if len(cfg.Peers) > 0 {
		if s.rep, err = openReplicator(s.State, db); err != nil {
			db.Close()
			return nil, err
		}
		s.State.rep = s.rep
		// The load checked the store; a member holds memory only while
		// it serves as leader (it loads again then).
		s.initMemory()
	}
	s.metrics = newMetrics(s)
	if s.rep != nil {
		s.rep.start()
	}
	log.Info("meta store opened", "dir", cfg.Dir, "nodes", len(s.nodes), "pipelines", len(s.pipelines),
		"containers", len(s.containers), "buckets", len(s.buckets), "pending_allocations", len(s.allocs), "pending_deletes", s.nDeletes)
	return s, nil
}

// Close closes the store. Requests after Close fail with ErrUnavailable.
func (s *Service) Close() error {
	var rerr error
	if s.rep != nil {
		// Before s.mu: the raft goroutine takes it.
		rerr = s.rep.close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// Batches applied and not yet synced belong to requests waiting
	// outside s.mu; their syncs end (or fail) without it.
	_ = s.dur.wait(s.applied)
	if s.db.ov != nil {
		s.db.ov.Close()
		s.db.ov = nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("meta: close store: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("meta: close raft log: %w", rerr)
	}
	return nil
}

// Serving says whether the service takes requests: always for a group of
// one, only while it serves as leader for a replicated member.
func (s *Service) Serving() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return !s.closed && (s.rep == nil || s.stint != 0)
}

// WALSyncs is the number of syncs of the store's write-ahead log since
// Open and the time they took, in seconds (a replicated member: its raft
// log's fdatasyncs, time 0). Concurrent synced batches share
// a sync (Pebble's group commit), so commits per sync says how well
// commits are grouped.
func (s *Service) WALSyncs() (syncs uint64, seconds float64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, 0, fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
	}
	if s.rep != nil {
		// The store is written without syncs: the raft log's are the
		// ones (their time is not measured: seconds 0).
		return s.rep.wal.Stats().SyncDatas, 0, nil
	}
	h := s.db.Metrics().LogWriter.FsyncLatency
	if h == nil {
		return 0, 0, errors.New("meta: the store reports no WAL sync histogram")
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0, 0, fmt.Errorf("meta: read the WAL sync histogram: %w", err)
	}
	// Pebble observes each sync's time.Duration: nanoseconds.
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum() / 1e9, nil
}
