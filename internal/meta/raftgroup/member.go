package raftgroup

// Replication of the meta service over etcd raft (Config.Peers set): see
// "Replication" in the package comment for the model; this file is the
// state machine side (proposals, waits, apply, leadership), raftnet.go
// the transport between members.

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"

	"github.com/spindle-store/spindle/internal/meta/liveness"
	"github.com/spindle-store/spindle/internal/meta/raftnet"
	"github.com/spindle-store/spindle/internal/meta/readlease"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/raftqueue"

	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/wal"
)

// Raft settings and bounds of a replicated meta service.
const (
	// raftGroup is the meta raft log's group in its wal.Log.
	WALGroup           = 1
	raftHeartbeatTicks = 1
	// maxRaftCommittedBytes bounds the committed entries applied per
	// Ready (maxRaftMsgBytes, the entries of one append message, is with
	// the meta log entry's format).
	maxRaftCommittedBytes = 8 << 20
	// Raft's bound on the leader's proposals not yet committed is
	// state.MaxUncommittedProposalBytes (raft drops a proposal beyond
	// it: the leader's stint ends); client writes are held back well
	// before it (state.Config.MaxProposalBacklogBytes).
	maxRaftInflightMsgs = 256
	// maxInboundRaftMsgs bounds the received messages not yet stepped;
	// more are dropped (raft resends).
	maxInboundRaftMsgs = 4096
)

// appliedKey holds the applied state in the Pebble store of a replicated
// meta service (0x00 sorts before every record prefix).
var AppliedKey = []byte("\x00raft-applied")

// appliedState is what the store has applied of the meta log: the index
// of the last entry applied, and the (term, sequence) of the last
// proposal applied. It is written in the batch of every applied round,
// so that the store is always exactly the log's prefix up to index.
type AppliedState struct {
	Index, Term, Seq uint64
}

const appliedStateBytes = 1 + 8 + 8 + 8 + 4

func (a AppliedState) Encode() []byte {
	b := make([]byte, 0, appliedStateBytes)
	b = append(b, state.RecordVersion)
	b = binary.LittleEndian.AppendUint64(b, a.Index)
	b = binary.LittleEndian.AppendUint64(b, a.Term)
	b = binary.LittleEndian.AppendUint64(b, a.Seq)
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

func DecodeAppliedState(v []byte) (AppliedState, error) {
	if len(v) != appliedStateBytes || v[0] != state.RecordVersion {
		return AppliedState{}, fmt.Errorf("%w: applied state of %d bytes", state.ErrCorrupt, len(v))
	}
	if got, want := crc32c.Checksum(v[:len(v)-4]), binary.LittleEndian.Uint32(v[len(v)-4:]); got != want {
		return AppliedState{}, fmt.Errorf("%w: applied state crc %08x, want %08x", state.ErrCorrupt, got, want)
	}
	return AppliedState{Index: binary.LittleEndian.Uint64(v[1:]), Term: binary.LittleEndian.Uint64(v[9:]), Seq: binary.LittleEndian.Uint64(v[17:])}, nil
}

// follows says whether a proposal (term, seq) continues the applied
// state: the next sequence of the same stint, or the first of a later
// one. A proposal that does not was made by a leader that had one of its
// proposals dropped; that leader's stint ended at the drop, and every
// member skips the proposal the same way (it depends only on the log).
func (a AppliedState) Follows(term, seq uint64) bool {
	if term == a.Term {
		return seq == a.Seq+1
	}
	return term > a.Term && seq == 1
}

// readReq is a read barrier waiting for a ReadIndex confirmation.
type readReq struct {
	stint uint64
	done  chan error
}

// membership is the member set of the group as this member knows it.
type membership struct {
	// pmu guards members (ID → host:port, API and raft), learners (the
	// members without a vote: learners.go) and addrs (the members plus
	// this one: where the transport sends). hasMembers: the store records
	// a member set (raftStorage).
	pmu        sync.RWMutex
	members    map[uint64]string
	learners   map[uint64]bool
	addrs      map[uint64]string
	hasMembers bool
	// active: on the leader, the members up (heard from within two
	// election timeouts, itself included) as of its last tick
	// (map[uint64]bool, never changed once stored; nil on a follower).
	active atomic.Value
}

// snapshots is the member's checkpoints as snapshots: taken, streamed to
// the members that need one, fetched and installed (snapshot.go).
type snapshots struct{ r *Member }

// replicator runs the meta raft group of one member.
type Member struct {
	s    *state.State
	id   uint64
	log  *slog.Logger
	WAL  *wal.Log
	DB   *pebble.DB
	tick time.Duration
	net  *raftnet.Net

	membership
	// snap ships and installs checkpoints (snapshot.go).
	Snap snapshots

	// storeMu is held by the apply worker for each round and by a
	// snapshot install (which replaces db); it guards db and st. Lock
	// order: storeMu → s.mu.
	StoreMu sync.Mutex
	// ckpts are this member's checkpoints (snapshot.go); sinceSnap counts
	// the entries applied since the latest (apply worker).
	ckpts     *checkpoints
	sinceSnap int
	// snapIndex is the latest checkpoint's index, installed the
	// snapshots received (status).
	SnapIndex, Installed atomic.Uint64

	// Owned by the run goroutine.
	rn          *raft.RawNode
	leading     bool
	readCtx     uint64
	readBatches map[uint64][]readReq
	// lease answers reads without a round of their own while no other
	// member can lead (readlease); leaseRounds: each round's start.
	lease       readlease.Lease
	leaseRounds map[uint64]readlease.Round
	// st is the store's applied state, stTerm the term of the entry at
	// st.Index (0: unknown) (guarded by storeMu).
	st     AppliedState
	stTerm uint64
	// raftCfgIndex: raft's configuration is the member set as of this
	// index (the store's applied index at open, the snapshot's index
	// after an install, whose store may be further on): a membership
	// change above it in entries the store already holds still goes to
	// raft (guarded by storeMu).
	raftCfgIndex uint64
	// hsDurable is the term and vote of the log's HardState at open (the
	// append worker's starting point, see commitOnly).
	hsDurable wal.HardState
	// leaderTerm is the term this member leads (0: it does not); set by
	// the run goroutine, read by the apply worker.
	leaderTerm atomic.Uint64
	// appendq and applyq feed the append and apply workers (raft's
	// MsgStorageAppend and MsgStorageApply, in order).
	appendq, applyq *raftqueue.Queue[*pb.Message]

	// in is what other goroutines hand to the run goroutine.
	in struct {
		mu          sync.Mutex
		props       []state.Proposal
		msgs        []*pb.Message
		reads       []readReq
		unreachable map[uint64]bool
		// local: the workers' answers to raft (never dropped).
		local []*pb.Message
		// confs: membership changes applied to the store, for raft's
		// ApplyConfChange; confProps: changes to propose (admin).
		confs, confProps []*pb.ConfChange
		// snapSent: MsgSnap sends to report (member → delivered).
		snapSent map[uint64]bool
		// transfer: a member to hand the leadership to (0: none).
		transfer uint64
		// fatal: a worker failed; the member stops serving.
		fatal error
	}
	notify chan struct{} // cap 1
	stop   chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup // the workers
	once   sync.Once

	// wmu guards the wait state; wcond is broadcast when it changes.
	wmu   sync.Mutex
	wcond sync.Cond
	// stint is the term of the current serving stint (0: not serving);
	// appliedSeq the last of its proposals applied to the store,
	// committedSeq the last known committed (by the raft goroutine, as
	// raft hands the entries to the apply worker).
	stint                    uint64
	appliedSeq, committedSeq uint64
	// endedTerm is the term of the last stint that ended: a stint never
	// resumes in its term (its sequence numbers would restart); a leader
	// whose stint ended while it stays leader hands the leadership over.
	endedTerm uint64
	// failed is sticky: the log or the store failed, or the replicator
	// stopped; nothing is served any more.
	failed error

	// streamsCtx is cancelled by streamsStop when the member stops: the
	// raft streams it receives end (raftnet.go).
	streamsCtx  context.Context
	streamsStop context.CancelFunc

	// rec: the member started from an empty directory in a group with
	// a history (raftconf.go, rejoinTerm) neither grants nor asks votes
	// until it has caught up (recovery.go).
	Rec recovery

	// iso: with -tags spindle_testhooks, a test may cut the member off
	// (isolation_hook.go); a release build's iso is empty and never
	// drops a message (isolation_release.go).
	iso isolation

	// Status (any goroutine).
	leader, Term, Applied, commit, Last atomic.Uint64
	role                                atomic.Value // string
	// match is the leader's progress (member → match index) as of its
	// last tick, nil on a follower (map[uint64]uint64, never changed once
	// stored).
	match atomic.Value
	// live: when each member was last RecentActive, in raft ticks;
	// promoteTried: when each learner's promotion was last proposed (run
	// goroutine).
	live         *liveness.Tracker
	promoteTried map[uint64]time.Time
}

// OpenMember opens the meta raft log in dir/raft (bootstrapping the
// membership when new) and the raft node, reading the applied state from
// the store. Start with run.
func OpenMember(s *state.State, db *pebble.DB) (*Member, error) {
	cfg := &s.Cfg
	if _, ok := cfg.Peers[cfg.ID]; !ok {
		return nil, fmt.Errorf("meta: --id %d is not one of --peers", cfg.ID)
	}
	r := &Member{s: s, id: cfg.ID, log: s.Log.With("member", cfg.ID), DB: db,
		tick: cfg.RaftTickInterval, notify: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		readBatches: map[uint64][]readReq{}, leaseRounds: map[uint64]readlease.Round{}, live: liveness.New(), promoteTried: map[uint64]time.Time{}}
	r.Snap.r = r
	r.Rec.r = r
	r.lease.Dur = readlease.Duration(cfg.ElectionTicks, cfg.RaftTickInterval) // CheckQuorum and PreVote: raft.Config below
	r.appendq, r.applyq = raftqueue.New[*pb.Message](), raftqueue.New[*pb.Message]()
	r.wcond.L = &r.wmu
	r.streamsCtx, r.streamsStop = context.WithCancel(context.Background())
	r.in.unreachable = map[uint64]bool{}
	r.in.snapSent = map[uint64]bool{}
	r.role.Store("follower")
	st, members, learners, err := ReadState(db)
	if err != nil {
		return nil, err
	}
	if members != nil {
		r.hasMembers = true
		r.setMembers(members, learners)
	} else if cfg.Join {
		r.setMembers(map[uint64]string{}, nil) // a member once the snapshot says so
		r.addrs = maps.Clone(cfg.Peers)
	} else {
		r.setMembers(cfg.Peers, nil) // the bootstrap membership
	}
	switch {
	case st.Index == 0:
		// A new store: the state of the bootstrap snapshot (index 1), or
		// nothing yet for a member joining.
		r.st = AppliedState{Index: 1}
		if cfg.Join {
			r.st = AppliedState{}
		}
		it, err := db.NewIter(nil)
		if err != nil {
			return nil, fmt.Errorf("meta: read the store: %w", err)
		}
		used := it.First()
		if err := it.Close(); err != nil {
			return nil, fmt.Errorf("meta: read the store: %w", err)
		}
		if used {
			return nil, fmt.Errorf("meta: %s holds a store of a single meta service; a replicated member starts from an empty --dir", cfg.Dir)
		}
	default:
		r.st = st
	}
	if err := r.Rec.load(); err != nil {
		return nil, err
	}
	if r.ckpts, err = openCheckpoints(cfg.FS, cfg.Dir); err != nil {
		return nil, err
	}
	r.SnapIndex.Store(r.ckpts.latest())
	r.sinceSnap = int(r.st.Index - min(r.st.Index, r.ckpts.latest()))
	l, err := wal.Open(wal.Config{Dir: filepath.Join(cfg.Dir, "raft"), FS: cfg.FS, MaxRecordBytes: state.MaxRaftRecordBytes, Logger: s.Log})
	if err != nil {
		return nil, fmt.Errorf("meta: open raft log: %w", err)
	}
	r.WAL = l
	err = r.openRaft()
	if err == nil {
		err = r.Snap.recordMembership() // snapshot.go
	}
	if err != nil {
		if cerr := l.Close(); cerr != nil {
			err = fmt.Errorf("%w (and closing the raft log: %v)", err, cerr)
		}
		return nil, err
	}
	r.pmu.RLock()
	addrs := maps.Clone(r.addrs)
	r.pmu.RUnlock()
	r.net = raftnet.New(raftnet.Host{ID: r.id, TLS: r.s.Cfg.TLS, Log: r.log, Isolated: r.iso.isolated,
		SnapshotSent: r.snapshotSent, Unreachable: r.unreachable}, addrs)
	return r, nil
}

func (r *Member) openRaft() error {
	last, err := r.WAL.LastIndex(WALGroup)
	if err != nil {
		return err
	}
	_, hasSnap, err := r.WAL.Snapshot(WALGroup)
	if err != nil {
		return err
	}
	if last == 0 && !hasSnap && !r.s.Cfg.Join {
		// Bootstrap: every member starts from the same snapshot at (1, 1)
		// holding the membership (as a pipeline does).
		if r.st.Index > 1 {
			if !r.s.Cfg.RestoreAsNewGroup {
				return fmt.Errorf("meta: the store has applied the meta log to %d but the raft log is empty: "+
					"a restored backup starts a new group of this member alone with --restore (docs/OPERATIONS.md §6)", r.st.Index)
			}
			if err := r.bootstrapRestored(); err != nil {
				return err
			}
		}
	}
	if last == 0 && !hasSnap && r.s.Cfg.Join && r.st.Index == 0 {
		if err := joinAfterLoss(r); err != nil {
			return err
		}
	}
	if last == 0 && !hasSnap && !r.s.Cfg.Join && r.st.Index <= 1 {
		voters := slices.Sorted(maps.Keys(r.s.Cfg.Peers))
		cs, err := proto.Marshal(&pb.ConfState{Voters: voters})
		if err != nil {
			return err
		}
		// A member whose directory was lost comes back here too: it
		// starts in a term past every running member's, so that it never
		// votes again in a term its lost self may have voted in, and the
		// leader, deposed by the higher term, forgets how far it had
		// replicated to it (raftconf.go, rejoinTerm).
		rejoin, history := rejoinTerm(r.s.Cfg.Peers, r.s.Cfg.TLS, r.id, r.log)
		term := max(1, rejoin)
		if history {
			// Before the log exists: a crash after the bootstrap below
			// still finds the marker and the member still does not vote.
			if err := r.Rec.start(rejoin > 0); err != nil {
				return err
			}
		}
		seq, err := r.WAL.Append(wal.SnapshotRecord(WALGroup, 1, 1, cs), wal.HardStateRecord(WALGroup, wal.HardState{Term: term, Commit: 1}))
		if err == nil {
			err = r.WAL.WaitDurable(seq)
		}
		if err != nil {
			return fmt.Errorf("meta: bootstrap raft log: %w", err)
		}
		r.log.Info("meta raft group bootstrapped", "voters", voters, "term", term)
	}
	first, err := r.WAL.FirstIndex(WALGroup)
	if err != nil {
		return err
	}
	if r.st.Index+1 < first {
		return fmt.Errorf("meta: the store has applied the meta log to %d, the raft log starts at %d", r.st.Index, first)
	}
	// The apply worker may apply an entry before the HardState that says
	// it is committed is durable (AsyncStorageWrites): raft must not be
	// told more was applied than its log says is committed. The entries
	// in between come back as committed and are skipped by index.
	hs, err := r.WAL.HardState(WALGroup)
	if err != nil {
		return err
	}
	applied := min(r.st.Index, max(hs.Commit, first-1))
	r.hsDurable = wal.HardState{Term: hs.Term, Vote: hs.Vote}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        r.id,
		ElectionTick:              r.s.Cfg.ElectionTicks,
		HeartbeatTick:             raftHeartbeatTicks,
		Storage:                   raftStorage{RaftStorage: r.WAL.RaftStorage(WALGroup), r: r},
		Applied:                   applied,
		AsyncStorageWrites:        true,
		MaxSizePerMsg:             state.MaxRaftMsgBytes,
		MaxCommittedSizePerReady:  maxRaftCommittedBytes,
		MaxUncommittedEntriesSize: state.MaxUncommittedProposalBytes,
		MaxInflightMsgs:           maxRaftInflightMsgs,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		// A follower never proposes on a leader's behalf: a proposal's
		// place in the log must be its leader's memory order.
		DisableProposalForwarding: true,
		// A leader that applies its own removal steps down at once.
		StepDownOnRemoval: true,
		Logger:            wal.RaftLogger{L: r.log},
	})
	if err != nil {
		return fmt.Errorf("meta: raft: %w", err)
	}
	r.rn = rn
	r.Applied.Store(r.st.Index)
	r.raftCfgIndex = r.st.Index
	if t, err := r.WAL.Term(WALGroup, r.st.Index); err == nil {
		r.stTerm = t
	}
	return nil
}

// start runs the raft goroutine and the senders.
func (r *Member) Start() {
	r.net.Start()
	r.wg.Add(2)
	go r.appendWorker()
	go r.applyWorker()
	go r.run()
	if r.Rec.on.Load() && r.Rec.lost && len(r.s.Cfg.Peers) > 1 {
		// Recovering from a lost directory: become a learner
		// (learners.go); it stops with the member (r.stop).
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.Rec.demoteSelf()
		}()
	}
}

// close stops the raft goroutine and the senders, fails every waiter and
// closes the log. Callers do not hold s.mu (the raft goroutine takes it).
func (r *Member) Close() error {
	var err error
	r.once.Do(func() {
		r.StopStreams()
		close(r.stop)
		<-r.done
		r.wg.Wait()
		r.net.Close()
		r.fail(fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable))
		err = r.WAL.Close()
	})
	return err
}

// fail stops serving for good.
func (r *Member) fail(err error) {
	r.wmu.Lock()
	if r.failed == nil {
		r.failed = err
	}
	r.stint = 0
	r.wcond.Broadcast()
	r.wmu.Unlock()
}

func (r *Member) wake() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// deliver hands received messages to the raft goroutine (dropped beyond
// maxInboundRaftMsgs: raft resends).
func (r *Member) deliver(msgs []*pb.Message) {
	r.in.mu.Lock()
	n := min(len(msgs), maxInboundRaftMsgs-len(r.in.msgs))
	if n > 0 {
		r.in.msgs = append(r.in.msgs, msgs[:n]...)
	}
	r.in.mu.Unlock()
	r.wake()
}

// unreachable reports a failed send to a member.
func (r *Member) unreachable(id uint64) {
	r.in.mu.Lock()
	r.in.unreachable[id] = true
	r.in.mu.Unlock()
	r.wake()
}

// leaderAddr is the address of the member this one takes for the leader
// ("" when unknown).
func (r *Member) leaderAddr() (uint64, string) {
	id := r.leader.Load()
	return id, r.peerAddr(id)
}

// notLeader is the error of a member that does not serve.
func (r *Member) NotLeader() error {
	r.wmu.Lock()
	failed := r.failed
	r.wmu.Unlock()
	if failed != nil {
		return failed
	}
	id, addr := r.leaderAddr()
	if id == r.id {
		addr = "" // elected, not serving yet: the client retries here
	}
	return &metaapi.NotLeaderError{Member: r.id, Leader: id, LeaderAddr: addr}
}

// await waits, outside s.mu, until p's proposals are committed (in the
// fsynced log of a majority; memory and the overlay hold them already,
// and a new leader applies every committed entry before it serves), and,
// for an answer that made no proposal of its own, until a ReadIndex round
// confirms that this member was still the leader after the request
// looked at the state.
func (r *Member) Await(p state.Pending) error {
	if p.Read {
		if err := r.readBarrier(p.Stint); err != nil {
			return err
		}
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	for {
		if r.failed != nil {
			return r.failed
		}
		if r.stint != p.Stint {
			return fmt.Errorf("%w: meta leadership of term %d lost before the change was known committed: its outcome is unknown", metaapi.ErrUnavailable, p.Stint)
		}
		if max(r.appliedSeq, r.committedSeq) >= p.Seq {
			return nil
		}
		r.wcond.Wait()
	}
}

func (r *Member) readBarrier(stint uint64) error {
	now := time.Now()
	ok, half := r.lease.Valid(stint, now)
	req := readReq{stint: stint, done: make(chan error, 1)}
	if ok && (!half || !r.lease.StartRenewal(now)) {
		return nil // no other member can lead now
	}
	r.in.mu.Lock()
	r.in.reads = append(r.in.reads, req)
	r.in.mu.Unlock()
	r.wake()
	if ok {
		return nil // the round renews the lease; nobody waits for it
	}
	select {
	case err := <-req.done:
		return err
	case <-r.stop:
		return fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
	}
}

// run is the raft goroutine: it owns the RawNode.
func (r *Member) run() {
	defer close(r.done)
	t := time.NewTicker(r.tick)
	defer t.Stop()
	noteActive := func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		r.live.Note(id, pr.RecentActive || id == r.id)
	}
	for {
		select {
		case <-r.stop:
			r.failReads(fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable))
			return
		case <-t.C:
			r.live.Tick()
			if r.leading {
				// Before Tick: a quorum check in it clears RecentActive,
				// and the answers heard since the last tick would be lost.
				r.rn.WithProgress(noteActive)
			}
			r.rn.Tick()
			r.handOver()
			var m map[uint64]uint64
			var act map[uint64]bool
			if r.leading {
				// RecentActive is cleared at each quorum check and set again
				// by the member's next answer: a member is up if it was
				// active within the last two election timeouts (in ticks).
				m, act = map[uint64]uint64{}, map[uint64]bool{}
				r.rn.WithProgress(func(id uint64, pt raft.ProgressType, pr tracker.Progress) {
					noteActive(id, pt, pr)
					m[id] = pr.Match
					act[id] = r.live.Up(id, 2*uint64(r.s.Cfg.ElectionTicks))
				})
			}
			r.match.Store(m)
			r.active.Store(act)
			if r.leading {
				for _, cc := range r.promotions(m, r.Last.Load(), time.Now(), r.promoteTried) {
					r.log.Info("meta learner caught up: promoted to a voter", "member", cc.GetNodeId(), "match", m[cc.GetNodeId()])
					if err := r.rn.ProposeConfChange(cc); err != nil {
						r.log.Warn("learner promotion not proposed", "member", cc.GetNodeId(), "err", err)
					}
				}
			}
		case <-r.notify:
			// Yield once before taking the inbox: goroutines about to
			// hand something in (concurrent requests staging their
			// proposals, stream handlers delivering messages) run first,
			// and this turn takes them together — fewer entries, Readys,
			// messages and log syncs per op (bench meta --replicas 3 at
			// load 9-12: 1.5-1.6 → 4.2-4.6 ops per entry, 0.30-0.42 →
			// 0.20-0.22 leader syncs per op, 277-282 → 250-261 CPU µs
			// per op). Nothing runnable: it returns at once.
			runtime.Gosched()
		}
		r.in.mu.Lock()
		props, msgs, reads, unreach, local, fatal := r.in.props, r.in.msgs, r.in.reads, r.in.unreachable, r.in.local, r.in.fatal
		confs, confProps, transfer := r.in.confs, r.in.confProps, r.in.transfer
		r.in.props, r.in.msgs, r.in.reads, r.in.local = nil, nil, nil, nil
		r.in.confs, r.in.confProps, r.in.transfer = nil, nil, 0
		snapSent := r.in.snapSent
		if len(snapSent) > 0 {
			r.in.snapSent = map[uint64]bool{}
		} else {
			snapSent = nil // the map stays the senders'
		}
		if len(unreach) > 0 {
			r.in.unreachable = map[uint64]bool{}
		} else {
			unreach = nil // the map stays the senders'
		}
		r.in.mu.Unlock()
		if fatal != nil {
			r.log.Error("meta raft failed; this member stops serving", "err", fatal)
			r.endStint(fatal)
			r.fail(fmt.Errorf("meta member %d failed: %w", r.id, fatal))
			r.failReads(fatal)
			<-r.stop
			return
		}
		for id := range unreach {
			r.rn.ReportUnreachable(id)
		}
		for id, ok := range snapSent {
			if ok {
				r.rn.ReportSnapshot(id, raft.SnapshotFinish)
			} else {
				r.rn.ReportSnapshot(id, raft.SnapshotFailure)
			}
		}
		for _, cc := range confs {
			r.rn.ApplyConfChange(cc)
		}
		for _, m := range local {
			_ = r.rn.Step(m)
		}
		for _, m := range msgs {
			if r.Rec.on.Load() && !r.Rec.step(m) {
				continue
			}
			_ = r.rn.Step(m) // a stale or foreign message is dropped
		}
		r.wmu.Lock()
		stint := r.stint
		r.wmu.Unlock()
		// Group commit: the proposals queued meanwhile go in as few
		// entries as maxFoldedEntryBytes allows.
		for _, f := range FoldProposals(props, stint) {
			err := f.Err
			if err == nil {
				err = r.rn.Propose(state.EncodeEntry(f.First, f.Last, f.Repr))
			}
			if err != nil {
				// Memory is ahead of the log now: end the stint, and
				// drop the proposals queued after it.
				r.endStint(fmt.Errorf("proposals %d..%d of term %d dropped by raft: %v", f.First, f.Last, stint, err))
				stint = 0
				break
			}
		}
		if len(reads) > 0 {
			r.startRead(reads, stint)
		}
		for _, cc := range confProps {
			if r.leading {
				if err := r.rn.ProposeConfChange(cc); err != nil {
					r.log.Warn("membership change not proposed", "change", cc.GetType(), "member", cc.GetNodeId(), "err", err)
				}
			}
		}
		if transfer != 0 && r.leading {
			r.rn.TransferLeader(transfer)
		}
		for r.rn.HasReady() {
			r.handleReady()
		}
	}
}

// folded is one entry's worth of proposals: the stint sequences first..last
// and their batches as one (err: they could not be joined).
type Folded struct {
	First, Last uint64
	Repr        []byte
	Err         error
}

// foldProposals joins the proposals of stint among props (queued in
// sequence order; those of another stint are dropped: their waiters have
// their answer) into entries, consecutive proposals together while their
// batches stay within maxFoldedEntryBytes.
func FoldProposals(props []state.Proposal, stint uint64) []Folded {
	var out []Folded
	for i := 0; i < len(props); {
		if props[i].Stint != stint || stint == 0 {
			i++
			continue
		}
		j, n := i+1, len(props[i].Repr)
		for j < len(props) && props[j].Stint == stint && n+len(props[j].Repr) <= state.MaxFoldedEntryBytes {
			n += len(props[j].Repr)
			j++
		}
		f := Folded{First: props[i].Seq, Last: props[j-1].Seq, Repr: props[i].Repr}
		if j > i+1 {
			f.Repr, f.Err = joinBatches(props[i:j])
		}
		out = append(out, f)
		i = j
	}
	return out
}

// joinBatches is the Pebble batch of the proposals' batches in order
// (Pebble's own Batch.Apply, on batches of no store: no copy of the
// proposals' read-only bytes is changed).
func joinBatches(props []state.Proposal) ([]byte, error) {
	acc := new(pebble.Batch)
	for _, p := range props {
		var eb pebble.Batch
		if err := eb.SetRepr(p.Repr); err != nil {
			return nil, fmt.Errorf("proposal %d: %w", p.Seq, err)
		}
		if err := acc.Apply(&eb, nil); err != nil {
			return nil, fmt.Errorf("proposal %d: %w", p.Seq, err)
		}
	}
	return acc.Repr(), nil
}

// local hands the workers' answers to the raft goroutine.
func (r *Member) local(msgs []*pb.Message) {
	r.in.mu.Lock()
	r.in.local = append(r.in.local, msgs...)
	r.in.mu.Unlock()
	r.wake()
}

// fatal reports a worker's failure to the raft goroutine.
func (r *Member) fatal(err error) {
	r.in.mu.Lock()
	if r.in.fatal == nil {
		r.in.fatal = err
	}
	r.in.mu.Unlock()
	r.wake()
}

// respond delivers what raft attached to a storage message, once done.
func (r *Member) respond(m *pb.Message) {
	var mine []*pb.Message
	for _, resp := range m.GetResponses() {
		if resp.GetTo() == r.id {
			mine = append(mine, resp)
		} else {
			r.net.Send(resp)
		}
	}
	if len(mine) > 0 {
		r.local(mine)
	}
}

// appendWorker writes raft's appends (entries and HardState) to the log,
// everything queued meanwhile with one fdatasync, then answers them. A
// round that only moves the commit index (no entries, no snapshot, term
// and vote as durable already) is written without its own fdatasync: see
// commitOnly.
func (r *Member) appendWorker() {
	defer r.wg.Done()
	durable := r.hsDurable // term and vote the log holds durably
	for {
		jobs := r.appendq.PopAll(nil, r.stop)
		if jobs == nil { // stopped
			return
		}
		var recs []wal.Record
		flush := func() error {
			if len(recs) == 0 {
				return nil
			}
			seq, err := r.WAL.Append(recs...)
			if err == nil {
				err = r.WAL.WaitDurable(seq)
			}
			recs = recs[:0]
			if err != nil {
				return fmt.Errorf("raft log: %w", err)
			}
			return nil
		}
		for _, m := range jobs {
			if snap := m.GetSnapshot(); snap != nil && snap.GetMetadata().GetIndex() > 0 {
				// The store first, then the log: the log never says more
				// than the store holds (snapshot.go).
				md := snap.GetMetadata()
				err := flush()
				if err == nil {
					err = r.Snap.installSnapshot(md)
				}
				var cs []byte
				if err == nil {
					cs, err = proto.Marshal(md.GetConfState())
				}
				if err != nil {
					r.fatal(fmt.Errorf("snapshot at %d: %w", md.GetIndex(), err))
					return
				}
				recs = append(recs, wal.SnapshotRecord(WALGroup, md.GetIndex(), md.GetTerm(), cs))
				r.Last.Store(md.GetIndex())
			}
			for _, e := range m.GetEntries() {
				recs = append(recs, wal.EntryRecord(WALGroup, e.GetTerm(), e.GetIndex(), uint8(e.GetType()), e.GetData()))
			}
			if m.Term != nil {
				recs = append(recs, wal.HardStateRecord(WALGroup, wal.HardState{Term: m.GetTerm(), Vote: m.GetVote(), Commit: m.GetCommit()}))
				r.commit.Store(m.GetCommit())
			}
			if n := len(m.GetEntries()); n > 0 {
				r.Last.Store(m.GetEntries()[n-1].GetIndex())
			}
		}
		if CommitOnly(jobs, durable) {
			// Written, and made durable by the next round that syncs.
			if _, err := r.WAL.Append(recs...); err != nil {
				r.fatal(fmt.Errorf("raft log: %w", err))
				return
			}
			recs = recs[:0]
		}
		if err := flush(); err != nil {
			r.fatal(err)
			return
		}
		for _, m := range jobs {
			if m.Term != nil {
				durable = wal.HardState{Term: m.GetTerm(), Vote: m.GetVote()}
			}
			r.respond(m)
		}
	}
}

// commitOnly says whether a round of appends only moves the commit index:
// no entries, no snapshot, and every HardState of the term and vote that
// durable (the last synced) has. Such a round needs no fdatasync of its
// own: the commit index need not be durable (after a crash a member
// restarts from a lower one and learns the rest from the leader; its
// store may then be ahead of it, which openRaft allows), and the
// responses raft attached to it (acknowledgements of entries appended
// before, in rounds that synced) claim nothing the log does not hold
// durably. The records go to the log and become durable with the next
// round that syncs.
func CommitOnly(jobs []*pb.Message, durable wal.HardState) bool {
	for _, m := range jobs {
		if len(m.GetEntries()) > 0 || (m.GetSnapshot() != nil && m.GetSnapshot().GetMetadata().GetIndex() > 0) {
			return false
		}
		if m.Term != nil && (m.GetTerm() != durable.Term || m.GetVote() != durable.Vote) {
			return false
		}
	}
	return true
}

// applyWorker applies committed entries to the store, in order.
func (r *Member) applyWorker() {
	defer r.wg.Done()
	for {
		jobs := r.applyq.PopAll(nil, r.stop)
		if jobs == nil { // stopped
			return
		}
		for _, m := range jobs {
			r.StoreMu.Lock()
			err := r.applyEntries(m.GetEntries())
			r.StoreMu.Unlock()
			if err != nil {
				r.fatal(err)
				return
			}
			r.respond(m)
		}
	}
}

// handOver transfers the leadership of a leader whose stint ended in its
// term (a dropped proposal) to the most up-to-date other member.
func (r *Member) handOver() {
	st := r.rn.BasicStatus()
	r.wmu.Lock()
	ended := r.endedTerm
	r.wmu.Unlock()
	if !r.leading || ended != st.GetTerm() || st.LeadTransferee != 0 {
		return
	}
	var best, match uint64
	r.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != r.id && (best == 0 || pr.Match > match) {
			best, match = id, pr.Match
		}
	})
	if best != 0 {
		r.log.Warn("meta leader hands its leadership over", "to", best, "term", st.GetTerm())
		r.rn.TransferLeader(best)
	}
}

// startRead starts a ReadIndex round for the reads of the current stint.
func (r *Member) startRead(reads []readReq, stint uint64) {
	var ok []readReq
	for _, q := range reads {
		if q.stint != stint || stint == 0 {
			q.done <- fmt.Errorf("%w: meta leadership of term %d lost before the read was confirmed", metaapi.ErrUnavailable, q.stint)
			continue
		}
		ok = append(ok, q)
	}
	if len(ok) == 0 {
		return
	}
	r.readCtx++
	r.readBatches[r.readCtx] = ok
	r.leaseRounds[r.readCtx] = r.lease.Start(stint) // before raft's heartbeats go out
	r.rn.ReadIndex(binary.LittleEndian.AppendUint64(nil, r.readCtx))
}

func (r *Member) failReads(err error) {
	for id, qs := range r.readBatches {
		for _, q := range qs {
			q.done <- err
		}
		delete(r.readBatches, id)
	}
	clear(r.leaseRounds)
	r.lease.Revoke()
	r.in.mu.Lock()
	reads := r.in.reads
	r.in.reads = nil
	r.in.mu.Unlock()
	for _, q := range reads {
		q.done <- err
	}
}

// handleReady hands one Ready's appends and applies to the workers and
// sends its messages (AsyncStorageWrites: what must wait for the log
// write travels in the workers' responses).
func (r *Member) handleReady() {
	rd := r.rn.Ready()
	if rd.SoftState != nil {
		r.leader.Store(rd.SoftState.Lead)
		r.role.Store(roleName(rd.SoftState.RaftState))
		was := r.leading
		r.leading = rd.SoftState.RaftState == raft.StateLeader
		if was != r.leading {
			r.lease.Revoke()
			r.log.Info("meta raft role changed", "role", roleName(rd.SoftState.RaftState), "leader", rd.SoftState.Lead, "term", r.rn.BasicStatus().GetTerm())
		}
	}
	bs := r.rn.BasicStatus()
	term := bs.GetTerm()
	if bs.LeadTransferee != 0 {
		r.lease.NoMoreIn(term) // before its TimeoutNow goes out below: the transferee's campaign is forced
	}
	r.Term.Store(term)
	if r.leading {
		r.leaderTerm.Store(term)
	} else {
		r.leaderTerm.Store(0)
	}
	r.wmu.Lock()
	stint := r.stint
	r.wmu.Unlock()
	if stint != 0 && (!r.leading || term != stint) {
		r.endStint(fmt.Errorf("leadership of term %d lost (now term %d, leader %d)", stint, term, r.leader.Load()))
	}
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			r.appendq.Push(m)
		case raft.LocalApplyThread:
			for _, e := range m.GetEntries() {
				if e.GetType() != pb.EntryNormal {
					r.lease.Revoke() // a membership change: another quorum
				}
			}
			r.noteCommitted(m.GetEntries())
			r.applyq.Push(m)
		default:
			r.net.Send(m)
		}
	}
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.LittleEndian.Uint64(rs.RequestCtx)
		for _, q := range r.readBatches[id] {
			q.done <- nil // the leader's memory holds every entry committed at rs.Index
		}
		if round, ok := r.leaseRounds[id]; ok && r.leading && bs.LeadTransferee == 0 {
			r.lease.Granted(round)
		}
		delete(r.readBatches, id)
		delete(r.leaseRounds, id)
	}
}

// noteCommitted lets the waiters of the stint's proposals in ents go:
// raft hands committed entries to the apply worker only, so their
// waiters need not wait for the store apply. Only entries of the stint's
// term count: this leader's own proposals, from its memory, each
// continuing the one before (a dropped proposal ends the stint before
// any later one can commit).
func (r *Member) noteCommitted(ents []*pb.Entry) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.stint == 0 {
		return
	}
	for i := len(ents) - 1; i >= 0; i-- {
		e := ents[i]
		if e.GetTerm() != r.stint {
			return // terms only grow: no entry before it is of the stint
		}
		if e.GetType() != pb.EntryType_EntryNormal || len(e.GetData()) == 0 {
			continue
		}
		if last, ok := entryLastSeq(e.GetData()); ok && last > r.committedSeq {
			r.committedSeq = last
			r.wcond.Broadcast()
		}
		return
	}
}

// entryLastSeq is the last stint sequence of an entry's data, read from
// its header only (the apply worker checks the whole entry).
func entryLastSeq(data []byte) (uint64, bool) {
	switch {
	case len(data) >= state.EntryFoldedOverheadBytes && data[0] == state.EntryVersionFolded:
		return binary.LittleEndian.Uint64(data[9:17]), true
	case len(data) >= state.EntryOneOverheadBytes && data[0] == state.EntryVersionOne:
		return binary.LittleEndian.Uint64(data[1:9]), true
	}
	return 0, false
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return "follower"
}

// applyEntries applies committed entries to the store in one batch with
// the applied state, then lets the waiters of the stint's proposals go;
// the leader starts serving once an entry of its own term is applied.
func (r *Member) applyEntries(ents []*pb.Entry) error {
	b := r.DB.NewBatch()
	defer state.CloseBatch(b)
	st := r.st
	var startTerm, lastTerm uint64
	var members map[uint64]string // changed by the round (nil: unchanged)
	var learners map[uint64]bool
	var confs []*pb.ConfChange
	for _, e := range ents {
		if e.GetIndex() <= st.Index {
			// Applied before a restart (see openRaft), or in the store
			// a snapshot installed. A membership change there is in the
			// ConfState raft started from, unless it is past the
			// installed snapshot's index: then raft gets it now.
			if e.GetType() == pb.EntryType_EntryConfChange && e.GetIndex() > r.raftCfgIndex {
				cc := &pb.ConfChange{}
				if err := proto.Unmarshal(e.GetData(), cc); err != nil {
					return fmt.Errorf("%w: entry %d: membership change: %v", state.ErrCorrupt, e.GetIndex(), err)
				}
				confs = append(confs, cc)
				r.raftCfgIndex = e.GetIndex()
			}
			continue
		}
		st.Index, lastTerm = e.GetIndex(), e.GetTerm()
		r.stTerm = lastTerm
		r.sinceSnap++
		switch e.GetType() {
		case pb.EntryType_EntryNormal:
			if lt := r.leaderTerm.Load(); lt != 0 && e.GetTerm() == lt && startTerm == 0 {
				startTerm = e.GetTerm()
			}
			if len(e.GetData()) == 0 {
				continue // a new leader's empty entry
			}
			first, last, repr, err := state.DecodeEntry(e.GetData())
			if err != nil {
				return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
			}
			if !st.Follows(e.GetTerm(), first) {
				r.log.Warn("meta log entry skipped: its leader's earlier proposal was dropped", "index", e.GetIndex(), "term", e.GetTerm(), "seq", first, "last_term", st.Term, "last_seq", st.Seq)
				continue
			}
			// A batch of no store (never closed, so never handed back
			// to Pebble) reads the entry's bytes in place; b copies them.
			var eb pebble.Batch
			if err := eb.SetRepr(repr); err != nil {
				return fmt.Errorf("%w: entry %d: %v", state.ErrCorrupt, e.GetIndex(), err)
			}
			if err := b.Apply(&eb, nil); err != nil {
				return fmt.Errorf("%w: entry %d: %v", state.ErrCorrupt, e.GetIndex(), err)
			}
			st.Term, st.Seq = e.GetTerm(), last
		case pb.EntryType_EntryConfChange:
			cc := &pb.ConfChange{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return fmt.Errorf("%w: entry %d: membership change: %v", state.ErrCorrupt, e.GetIndex(), err)
			}
			if members == nil {
				members, learners = r.memberSet(), r.learnerSet()
				if learners == nil {
					learners = map[uint64]bool{}
				}
			}
			if err := applyConfChange(members, learners, cc); err != nil {
				return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
			}
			r.Rec.sawLearners(learners)
			confs = append(confs, cc)
			r.raftCfgIndex = e.GetIndex()
		case pb.EntryType_EntryConfChangeV2:
			return fmt.Errorf("entry %d: joint membership changes are not supported", e.GetIndex())
		}
	}
	state.Set(b, AppliedKey, st.Encode())
	if members != nil {
		state.Set(b, membersKey, encodeMembers(members, learners))
	}
	// NoSync: the log holds every applied entry durably; after a crash
	// the store is a prefix of what was applied (batches are atomic) and
	// raft applies again from its applied state.
	if err := r.DB.Apply(b, pebble.NoSync); err != nil {
		return fmt.Errorf("store apply: %w", err)
	}
	r.st = st
	r.Applied.Store(st.Index)
	if members == nil && len(confs) > 0 {
		// Only changes the installed store held before raft did.
		r.in.mu.Lock()
		r.in.confs = append(r.in.confs, confs...)
		r.in.mu.Unlock()
		r.wake()
	}
	if members != nil {
		// The transport knows a new member before raft sends to it, and
		// the latest snapshot has it in its ConfState (raft sends a new
		// member a snapshot; one from before its addition is refused).
		r.setMembers(members, learners)
		r.hasMembers = true
		if err := r.Snap.takeCheckpoint(lastTerm); err != nil {
			return fmt.Errorf("snapshot after a membership change: %w", err)
		}
		r.in.mu.Lock()
		r.in.confs = append(r.in.confs, confs...)
		r.in.mu.Unlock()
		r.wake()
		r.log.Info("meta membership changed", "index", st.Index, "members", members, "learners", learners)
	}
	r.Rec.caughtUp(st.Index)
	r.wmu.Lock()
	if r.stint != 0 && st.Term == r.stint {
		r.appliedSeq = st.Seq
	}
	r.wcond.Broadcast()
	r.wmu.Unlock()
	if startTerm != 0 {
		r.startStint(startTerm)
	}
	if lastTerm != 0 && r.sinceSnap >= r.s.Cfg.SnapshotEntries {
		if err := r.Snap.takeCheckpoint(lastTerm); err != nil {
			// The log keeps growing until a checkpoint succeeds; the
			// member still serves.
			r.log.Error("meta snapshot failed", "index", st.Index, "err", err)
			r.sinceSnap = 0
		}
	}
	return nil
}

// startStint makes the leader serve: every entry before its term's first
// is applied, so the store is the committed state; memory is loaded from
// it (every datanode counts as heard at this start).
func (r *Member) startStint(term uint64) {
	r.wmu.Lock()
	skip := r.stint != 0 || r.failed != nil || term <= r.endedTerm
	r.wmu.Unlock()
	if skip {
		return
	}
	s := r.s
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.Closed {
		return
	}
	s.InitMemory()
	s.Started = s.Cfg.Now()
	if err := s.Load(); err != nil {
		r.log.Error("meta leader cannot load the store; not serving", "err", err)
		r.fail(fmt.Errorf("meta member %d: load the store: %w", r.id, err))
		return
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	// Still the leader of term? The run goroutine stores leaderTerm before
	// it looks at stint: either it sees this stint and ends it, or this
	// sees its change.
	if r.leaderTerm.Load() != term || r.stint != 0 || r.failed != nil || term <= r.endedTerm {
		return
	}
	s.Store.Overlay = r.DB.NewIndexedBatch()
	s.BeginStint(term)
	r.stint, r.appliedSeq, r.committedSeq = term, 0, 0
	r.wcond.Broadcast()
	r.log.Info("meta leader serving", "term", term, "applied", r.st.Index, "nodes", len(s.NodeByID), "buckets", len(s.Buckets))
}

// endStint stops serving: memory may be ahead of the log (proposals not
// committed), so it is dropped; the waiters get UNAVAILABLE.
func (r *Member) endStint(why error) {
	s := r.s
	s.Mu.Lock()
	s.EndStintLocked(why)
	s.Mu.Unlock()
	r.failReads(fmt.Errorf("%w: meta leadership lost: %v", metaapi.ErrUnavailable, why))
}

// stintEnded records that the serving stint ended (State.endStintLocked,
// under s.mu): it never resumes in its term; the waiters are woken.
func (r *Member) StintEnded() {
	r.wmu.Lock()
	r.endedTerm = max(r.endedTerm, r.stint)
	r.stint = 0
	r.wcond.Broadcast()
	r.wmu.Unlock()
}

// propose hands p to the raft goroutine (State.flushStaged, under s.mu:
// in s.mu order, so that the log's order is memory's).
func (r *Member) Propose(p state.Proposal) {
	r.in.mu.Lock()
	r.in.props = append(r.in.props, p)
	r.in.mu.Unlock()
	r.wake()
}

// appliedSeqNow is the last proposal of the stint applied to the store.
func (r *Member) AppliedSeqNow() uint64 {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.appliedSeq
}

// status is this member's view of the group.
func (r *Member) Status() metaapi.MetaStatus {
	r.wmu.Lock()
	serving := r.stint != 0
	r.wmu.Unlock()
	lead := r.leader.Load()
	role := r.role.Load().(string)
	members := r.memberSet()
	if _, ok := members[r.id]; !ok && len(members) > 0 {
		role = "removed" // it applied its own removal: stop its process
	} else if r.Rec.on.Load() {
		role = "recovering" // catching up; no vote until it has
	} else if r.learnerSet()[r.id] {
		role = "learner" // no vote until the leader promotes it
	}
	return metaapi.MetaStatus{ID: r.id, LeaderID: lead, LeaderAddr: r.peerAddr(lead), Role: role, Serving: serving,
		Term: r.Term.Load(), AppliedIndex: r.Applied.Load(), CommitIndex: r.commit.Load(), LastIndex: r.Last.Load(),
		Members: sortedMembers(members, r.learnerSet()), SnapshotIndex: r.SnapIndex.Load(), SnapshotsInstalled: r.Installed.Load(),
		VotesRefused: r.Rec.votesRefused.Load(), Down: liveness.Down(r.active.Load(), members),
		Match: r.matchMap()}
}

// matchMap is the leader's progress as of its last tick (nil: none).
func (r *Member) matchMap() map[uint64]uint64 {
	m, _ := r.match.Load().(map[uint64]uint64)
	return m
}

// WaitApplied waits at most d until a proposal of stint past seen is
// applied (state.State.admitLocked's wait for the backlog to drain).
func (r *Member) WaitApplied(stint, seen uint64, d time.Duration) error {
	deadline := time.Now().Add(d)
	r.wmu.Lock()
	defer r.wmu.Unlock()
	for r.failed == nil && r.stint == stint && r.appliedSeq <= seen {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		r.wcondWaitTimeout(left)
	}
	if r.failed != nil {
		return r.failed
	}
	if r.stint != stint {
		return fmt.Errorf("%w: meta leadership of term %d lost while a write waited for the backlog", metaapi.ErrUnavailable, stint)
	}
	return nil
}

// bootstrapRestored starts a new group of this member alone from a store
// restored from a backup (Config.RestoreAsNewGroup; the raft log is
// empty, the store has applied the old group's log to r.st.Index): the
// store's member set becomes this member (synced), then the raft log
// starts from a snapshot at the store's applied index holding it, so
// that raft restarts from the store as after a snapshot install.
// Members are then added one at a time (spindle admin meta add): each
// gets the store as a snapshot. A crash between the two writes leaves an
// empty log, and the same start does both again.
func (r *Member) bootstrapRestored() error {
	peers := r.s.Cfg.Peers
	if len(peers) != 1 || peers[r.id] == "" {
		return fmt.Errorf("meta: --restore starts a group of one: --peers must name this member (%d) only, not %d members", r.id, len(peers))
	}
	b := r.DB.NewBatch()
	err := b.Set(membersKey, encodeMembers(peers, nil), nil)
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("meta: restore: record the member set: %w", err)
	}
	r.setMembers(peers, nil)
	r.hasMembers = true
	cs, err := proto.Marshal(&pb.ConfState{Voters: []uint64{r.id}})
	if err != nil {
		return err
	}
	// The snapshot's term is the last proposal's the store applied: no
	// other log of this new group exists to disagree with it, and the
	// member's first election takes a term past it.
	term := max(1, r.st.Term)
	seq, err := r.WAL.Append(wal.SnapshotRecord(WALGroup, r.st.Index, term, cs),
		wal.HardStateRecord(WALGroup, wal.HardState{Term: term, Commit: r.st.Index}))
	if err == nil {
		err = r.WAL.WaitDurable(seq)
	}
	if err != nil {
		return fmt.Errorf("meta: restore: start the raft log: %w", err)
	}
	r.log.Info("meta raft group restored from a backup: a new group of one; add members with spindle admin meta add",
		"member", r.id, "index", r.st.Index, "term", term)
	return nil
}
