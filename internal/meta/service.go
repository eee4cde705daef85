package meta

import (
	"errors"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/spindle-store/spindle/internal/meta/access"
	"github.com/spindle-store/spindle/internal/meta/authz"
	"github.com/spindle-store/spindle/internal/meta/certreg"
	"github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/creds"
	"github.com/spindle-store/spindle/internal/meta/ecmeta"
	"github.com/spindle-store/spindle/internal/meta/lcmeta"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/raftgroup"
	"github.com/spindle-store/spindle/internal/meta/repair"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/tokenkeys"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Service is the meta service: the concerns over one State, composed.
type Service struct {
	*state.State
	*cluster.Cluster
	*cluster.BlockGC
	*cluster.Allocator
	*repair.Damage
	*cluster.Ops
	*repair.Rerepl
	*namespace.Namespace
	*namespace.Multipart
	*namespace.S3Users

	// rep is the meta raft group's member (nil: a group of one); State.rep
	// is the same member as the state machine sees it.
	rep    *raftgroup.Member
	certs  *certreg.Registry // certificates and joins (certs.go, join.go)
	bodies *bodyGate         // admission.go
	gate   *access.Gate      // grants' routes, authorization, audit log
	tokens *tokenkeys.Minter // block tokens
	ec     *ecmeta.Manager   // erasure coding: policies, conversions
	lc     *lcmeta.Manager   // S3 lifecycle rules, run by the leader
}

// compose builds the concerns over st.
func compose(st *state.State) *Service {
	s := &Service{State: st}
	s.Cluster = cluster.New(st)
	s.BlockGC = cluster.NewBlockGC(st, s.Cluster)
	s.Allocator = cluster.NewAllocator(st, s.Cluster)
	s.Damage = repair.NewDamage(st, s.Cluster)
	s.Ops = cluster.NewOps(st, s.Cluster)
	s.Rerepl = repair.NewRerepl(st, s.Cluster, s.Damage, s.Ops)
	s.Namespace, s.Multipart = namespace.New(st, s.Cluster, s.Allocator, s.BlockGC)
	s.S3Users = namespace.NewS3Users(st)
	s.certs = certreg.New(st)
	s.tokens = tokenkeys.New(st)
	s.ec = ecmeta.New(st, s.Cluster, s.Rerepl, s.Ops, s.BlockGC) // (sets Rerepl.Coded, ShardHealth, Ops.Holds, BlockGC.Coded)
	s.lc = lcmeta.New(st, s.Namespace, s.Multipart)
	return s
}

// Open opens (creating if needed) the meta service's store in cfg.Dir and
// loads its state.
func Open(cfg state.Config) (*Service, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "meta")
	if err := creds.LoadKEK(&cfg, log); err != nil {
		return nil, err
	}
	db, err := state.OpenStore(cfg.FS, cfg.Dir, log)
	if err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	s := compose(&state.State{Cfg: cfg, Log: log, Store: &state.Store{DB: db}, Started: cfg.Now()})
	s.bodies = newBodyGate(&s.Cfg)
	s.InitMemory()
	s.Dur.Init()
	if err := s.Load(); err != nil {
		return nil, errors.Join(fmt.Errorf("meta: load %s: %w", cfg.Dir, err), db.Close())
	}
	if err := certreg.Validate(s.State); err != nil {
		return nil, errors.Join(fmt.Errorf("meta: load %s: certificates: %w", cfg.Dir, err), db.Close())
	}
	if err := authz.Validate(s.State); err != nil { // package access
		return nil, errors.Join(fmt.Errorf("meta: load %s: grants: %w", cfg.Dir, err), db.Close())
	}
	if len(cfg.Peers) > 0 {
		if s.rep, err = raftgroup.OpenMember(s.State, db); err != nil {
			return nil, errors.Join(err, db.Close())
		}
		s.State.Rep = s.rep
		// The load checked the store; a member holds memory only while
		// it serves as leader (it loads again then).
		s.InitMemory()
	}
	s.Metrics = newMetrics(s)
	if s.gate, err = access.Open(s.State, s.Namespace, s.S3Users); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if s.rep != nil {
		s.rep.Start()
	}
	log.Info("meta store opened", "dir", cfg.Dir, "nodes", len(s.NodeByID), "pipelines", len(s.PipelineByID),
		"containers", len(s.ContainerByID), "buckets", len(s.Buckets), "pending_allocations", len(s.Allocs), "pending_deletes", s.NDeletes)
	return s, nil
}

// Close closes the store. Requests after Close fail with ErrUnavailable.
func (s *Service) Close() error {
	rerr := s.gate.Close()
	if s.rep != nil {
		// Before s.mu: the raft goroutine takes it.
		rerr = errors.Join(rerr, s.rep.Close())
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.Closed {
		return nil
	}
	s.Closed = true
	// Batches applied and not yet synced belong to requests waiting
	// outside s.mu; their syncs end (or fail) without it.
	_ = s.Dur.Wait(s.Applied)
	if s.Store.Overlay != nil {
		state.CloseBatch(s.Store.Overlay)
		s.Store.Overlay = nil
	}
	if err := s.Store.Close(); err != nil {
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
	s.Mu.RLock()
	defer s.Mu.RUnlock()
	return !s.Closed && (s.rep == nil || s.Stint != 0)
}

// WALSyncs is the number of syncs of the store's write-ahead log since
// Open and the time they took, in seconds (a replicated member: its raft
// log's fdatasyncs, time 0). Concurrent synced batches share
// a sync (Pebble's group commit), so commits per sync says how well
// commits are grouped.
func (s *Service) WALSyncs() (syncs uint64, seconds float64, err error) {
	s.Mu.RLock()
	defer s.Mu.RUnlock()
	if s.Closed {
		return 0, 0, fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
	}
	if s.rep != nil {
		// The store is written without syncs: the raft log's are the
		// ones (their time is not measured: seconds 0).
		return s.rep.WAL.Stats().SyncDatas, 0, nil
	}
	h := s.Store.Metrics().LogWriter.FsyncLatency
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

// ChangeMembers makes one change of the meta raft group's members (add,
// promote, remove, replace) and returns once the leader applied it
// (raftgroup/raftconf.go).
func (s *Service) ChangeMembers(ch metaapi.MemberChange) (metaapi.MetaStatus, error) {
	if s.rep == nil {
		return metaapi.MetaStatus{}, fmt.Errorf("%w: a single meta service has no members to change (start members with --peers)", metaapi.ErrInvalid)
	}
	return s.rep.ChangeMembers(ch)
}
