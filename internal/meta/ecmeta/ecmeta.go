package ecmeta

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/ec"
	"github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/repair"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/ecapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// Limits of the conversions.
const (
	// MaxConversions bounds the conversions in flight in the cluster.
	MaxConversions = 4
	// TaskTimeout drops a conversion not reported done in that time (it
	// may be scheduled again; its shards so far are garbage).
	TaskTimeout = 10 * time.Minute
	// ScanEvery is how often a new pass over the namespace's keys starts
	// (to learn the containers' buckets again, scan.go).
	ScanEvery = 5 * time.Second
	// ConfName is the bucket configuration document (state.BucketConfKey)
	// holding a bucket's own policy.
	ConfName = s3meta.ConfEC
)

// Manager keeps the erasure-coding policies and schedules and records
// the conversions of CLOSED containers. Its memory (the EC containers
// known, the conversions in flight, the containers' buckets) is rebuilt
// from the store when the State's serving stint changes.
type Manager struct {
	st *state.State
	cl *cluster.Cluster

	mu      sync.Mutex // after State.Mu
	stint   uint64
	loaded  bool
	coded   map[uint64]bool
	tasks   map[uint64]*task
	buckets map[uint64][]string  // container → the buckets whose keys have blocks in it (the last complete pass)
	scanned time.Time            // when that pass started
	scan    *bucketScan          // the pass in progress (nil: none)
	closed  map[uint64]time.Time // CLOSED containers: when first seen so this stint
	// Repair (repair.go).
	layout                     map[uint64]*layoutMem          // EC container → its shards
	held                       map[uint64]*inventory          // datanode → the shards its last poll listed
	repairs                    map[ecapi.ShardRef]*repairTask // rebuilds in flight
	failedOn                   map[ecapi.ShardRef]failure     // shard → its last rebuild's failure
	repairsDone, repairsFailed uint64
	repairedBytes              uint64
	refused                    map[uint64]string // container → why it could not be placed (logged once)
	// Compaction (compact.go): the policy (Compaction when made), the memory.
	compact CompactPolicy
	cp      compactions
}

// task is a conversion or a compaction in flight (one a container).
type task struct {
	node      uint64
	targets   []uint64
	started   time.Time
	reporting bool // its report is being applied: not timed out
	// A compaction: the generation it writes, the one it reads and the
	// blocks it keeps (their offsets in the one it reads).
	compact   bool
	gen, from uint32
	keep      []ecapi.Block
}

// New is the erasure-coding manager of st's containers; it makes rr
// (the replication manager) skip the EC containers' replicas (Coded) and
// count their shards (ShardHealth), gc leave the block deletions of EC
// containers and of those being converted to their compactions (so that
// a block deleted while its container is staged is never left in its
// shards with its deletion done), and ops wait for a decommissioning
// datanode's shards to move (Holds). Its compaction policy is
// Compaction's now (an invalid one: never).
func New(st *state.State, cl *cluster.Cluster, rr *repair.Rerepl, ops *cluster.Ops, gc *cluster.BlockGC) *Manager {
	m := &Manager{st: st, cl: cl, refused: map[uint64]string{}, compact: Compaction}
	if err := m.compact.Validate(); err != nil {
		st.Log.Error("erasure coding: no compaction", "err", err)
		m.compact.Below = 0
	}
	rr.Coded, rr.ShardHealth, ops.Holds = m.Coded, m.ShardHealth, m.Holds
	gc.Coded = func(cid uint64) bool { // (under State.Mu)
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.ensureLocked() == nil && (m.coded[cid] || m.tasks[cid] != nil)
	}
	return m
}

// ensureLocked (re)loads the EC containers when the stint changed; under
// State.Mu (read or write) and m.mu.
func (m *Manager) ensureLocked() error {
	if m.loaded && m.stint == m.st.Stint {
		return nil
	}
	coded, layout := map[uint64]bool{}, map[uint64]*layoutMem{}
	now := m.st.Cfg.Now()
	err := m.st.Scan(Prefix, func(k, v []byte) error {
		if len(k) == containerKeyBytes && k[1] == 1 {
			cid := uint64(k[2])<<56 | uint64(k[3])<<48 | uint64(k[4])<<40 | uint64(k[5])<<32 | uint64(k[6])<<24 | uint64(k[7])<<16 | uint64(k[8])<<8 | uint64(k[9])
			l, err := loadLayout(v, now)
			if err != nil {
				return err
			}
			coded[cid], layout[cid] = true, l
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: load the EC containers: %w", err)
	}
	m.coded, m.tasks, m.buckets, m.scanned, m.scan, m.closed = coded, map[uint64]*task{}, nil, time.Time{}, nil, map[uint64]time.Time{}
	m.layout, m.held, m.repairs, m.failedOn = layout, map[uint64]*inventory{}, map[ecapi.ShardRef]*repairTask{}, map[ecapi.ShardRef]failure{}
	m.cp = compactions{fails: map[uint64]failure{}, lastGen: map[uint64]uint32{}}
	m.loaded, m.stint = true, m.st.Stint
	return nil
}

// Coded says whether container cid is erasure-coded (its replicas are not
// counted, copied or waited for: the replication manager skips it). Under
// State.Mu.
func (m *Manager) Coded(cid uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ensureLocked(); err != nil {
		m.st.Log.Error("erasure coding", "err", err)
		return false
	}
	return m.coded[cid]
}

// readDoc reads a configuration record's document (nil: none).
func (m *Manager) readDoc(key []byte) (doc []byte, err error) {
	v, closer, err := m.st.Store.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer state.CloseInto(closer, &err, "EC policy")
	rec, err := state.DecodeBucketConf(v)
	if err != nil {
		return nil, err
	}
	return []byte(rec.Doc), nil
}

// policyLocked is the policy a bucket's containers get, with where it
// comes from; under State.Mu. An unreadable document counts as absent
// (rep3 is the safe side).
func (m *Manager) policyLocked(bucket string) (ec.Spec, string) {
	if bucket != "" {
		if doc, err := m.readDoc(state.BucketConfKey(bucket, ConfName)); err == nil && doc != nil {
			if s, err := ec.ParseSpec(string(doc)); err == nil {
				return s, "bucket"
			}
		}
		if doc, err := m.readDoc(state.BucketConfKey(bucket, s3meta.ConfTagging)); err == nil && doc != nil {
			if tags, err := s3meta.DecodeTags(string(doc)); err == nil && tags[ecapi.TagName] != "" {
				if s, err := ec.ParseSpec(tags[ecapi.TagName]); err == nil {
					return s, "tag"
				}
			}
		}
	}
	if doc, err := m.readDoc(DefaultKey()); err == nil && doc != nil {
		if s, err := ec.ParseSpec(string(doc)); err == nil {
			return s, "default"
		}
	}
	s, _ := ec.ParseSpec("rep3")
	return s, ""
}

// checkPlaceable refuses a coded spec the cluster has too few datanodes
// for (registered, in service).
func (m *Manager) checkPlaceable(s ec.Spec) error {
	if !s.Coded() {
		return nil
	}
	n := 0
	for id := range m.st.NodeByID {
		if m.cl.InService(id) {
			n++
		}
	}
	if n < s.Shards() {
		return fmt.Errorf("%w: policy %s puts %d shards on %d different datanodes; the cluster has %d in service", metaapi.ErrInvalid, s.Name, s.Shards(), s.Shards(), n)
	}
	return nil
}

// GetDefault returns the cluster's default policy.
func (m *Manager) GetDefault() (ecapi.Policy, error) {
	return state.Read(m.st, func() (ecapi.Policy, error) {
		s, src := m.policyLocked("")
		return ecapi.Policy{Policy: s.String(), Source: src}, nil
	})
}

// SetDefault sets the cluster's default policy (one record, replicated).
func (m *Manager) SetDefault(text string) error {
	s, err := ec.ParseSpec(text)
	if err != nil {
		return fmt.Errorf("%w: %v", metaapi.ErrInvalid, err)
	}
	_, err = state.Mutate(m.st, func() (struct{}, *pebble.Batch, error) {
		if err := m.checkPlaceable(s); err != nil {
			return struct{}{}, nil, err
		}
		b := m.st.Store.NewBatch()
		state.Set(b, DefaultKey(), state.BucketConfRecord{Updated: m.st.Cfg.Now(), Doc: s.String()}.Encode())
		return struct{}{}, b, nil
	})
	return err
}

// GetBucket returns the policy a bucket's containers get.
func (m *Manager) GetBucket(bucket string) (ecapi.Policy, error) {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return ecapi.Policy{}, err
	}
	return state.Read(m.st, func() (ecapi.Policy, error) {
		if _, ok := m.st.Buckets[bucket]; !ok {
			return ecapi.Policy{}, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		s, src := m.policyLocked(bucket)
		return ecapi.Policy{Policy: s.String(), Source: src}, nil
	})
}

// SetBucket sets a bucket's own policy ("" removes it), one record
// (state.BucketConfKey(bucket, ConfName)), deleted with the bucket.
func (m *Manager) SetBucket(bucket, text string) error {
	if err := metaapi.ValidBucket(bucket); err != nil {
		return err
	}
	var s ec.Spec
	if text != "" {
		var err error
		if s, err = ec.ParseSpec(text); err != nil {
			return fmt.Errorf("%w: %v", metaapi.ErrInvalid, err)
		}
	}
	_, err := state.Mutate(m.st, func() (struct{}, *pebble.Batch, error) {
		if _, ok := m.st.Buckets[bucket]; !ok {
			return struct{}{}, nil, fmt.Errorf("%w %s", metaapi.ErrNoSuchBucket, bucket)
		}
		if err := m.checkPlaceable(s); err != nil {
			return struct{}{}, nil, err
		}
		b := m.st.Store.NewBatch()
		if text == "" {
			state.Del(b, state.BucketConfKey(bucket, ConfName))
			return struct{}{}, b, nil
		}
		state.Set(b, state.BucketConfKey(bucket, ConfName), state.BucketConfRecord{Updated: m.st.Cfg.Now(), Doc: s.String()}.Encode())
		return struct{}{}, b, nil
	})
	return err
}

// bucketScan is a pass over the keys in progress (scan.go).
type bucketScan struct {
	prefix  int    // index in scanPrefixes
	after   []byte // the last key visited (nil: from the prefix's start)
	out     map[uint64][]string
	started time.Time
}
