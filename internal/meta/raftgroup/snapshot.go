package raftgroup

// Snapshots of a replicated meta service (docs/ARCHITECTURE.md §16,
// docs/CRASH_SAFETY.md "meta snapshot install").
//
// Taking: every member, on its own, once Config.SnapshotEntries entries
// were applied since its last checkpoint, makes a Pebble checkpoint of its
// store right after an apply round (in the apply worker: the checkpoint is
// the state at exactly the applied index, and the store's WAL is synced
// with it), renames it into DIR/snap/<index>, records it in the raft log
// (a SnapshotMetaRecord: index, term, membership) and compacts the log to
// index - Config.LogRetainEntries. Only the latest checkpoint is kept (an
// older one being streamed is removed when its last stream ends).
//
// Sending: raft's leader sends a follower whose next entry is compacted a
// MsgSnap holding only the metadata; the follower's append worker fetches
// GET /v1/raft/snapshot?min=INDEX from the leader (or any other member)
// and gets that member's latest checkpoint, of an index ≥ INDEX. A store
// ahead of the snapshot's index is fine: the apply worker skips entries at
// or below the store's applied index.
//
// Stream: package checkpoint's (FORMAT.md §13.6), the same as a backup's.
//
// Installing: the files go to DIR/snap-recv (each fsynced), the trailer's
// checksum is verified, the directory is synced and renamed to
// DIR/pebble.new; then, with the apply worker and s.mu held, the store is
// closed, DIR/pebble renamed to DIR/pebble.old, DIR/pebble.new to
// DIR/pebble (the directory synced after each rename), DIR/pebble.old
// removed, and the store opened again; only then does the raft log record
// the snapshot (a SnapshotRecord). finishStoreInstall, at every open,
// completes or undoes an install a crash interrupted: a crash at any point
// leaves the old store or the new one, and the raft log never says more
// than the store holds.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/meta/checkpoint"
	"github.com/spindle-store/spindle/internal/meta/raftnet"
	"github.com/spindle-store/spindle/internal/meta/state"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/vfs"
	"github.com/spindle-store/spindle/internal/wal"
)

// Snapshot settings and bounds.
const (
	SnapshotRoute = "/v1/raft/snapshot"
	snapDirName   = "snap"
	snapTmpPrefix = "tmp-"
	// maxSnapshotStreams bounds the streams a member serves at once.
	maxSnapshotStreams = 2
	// maxSnapshotFetchAttempts rounds over the members, snapshotFetchPause
	// apart, before the member gives up (it stops serving; a restart tries
	// again); snapshotFetchTimeout bounds one fetch.
	maxSnapshotFetchAttempts = 30
	snapshotFetchPause       = 500 * time.Millisecond
	snapshotFetchTimeout     = 10 * time.Minute
)

var snapshotStreamSlots = make(chan struct{}, maxSnapshotStreams)

// checkpoints is a member's registry of its checkpoints in DIR/snap: the
// latest, and older ones still streamed (removed when released).
type checkpoints struct {
	fs    vfs.FS
	dir   string
	mu    sync.Mutex
	last  uint64 // index of the latest checkpoint (0: none)
	refs  map[uint64]int
	stale map[uint64]bool
}

func ckptName(index uint64) string { return fmt.Sprintf("%020d", index) }

// openCheckpoints lists DIR/snap, removing temporary directories and every
// checkpoint but the latest.
func openCheckpoints(fs vfs.FS, dir string) (*checkpoints, error) {
	c := &checkpoints{fs: fs, dir: filepath.Join(dir, snapDirName), refs: map[uint64]int{}, stale: map[uint64]bool{}}
	if err := vfs.MkdirAllDurable(fs, c.dir); err != nil {
		return nil, fmt.Errorf("meta: snapshots: %w", err)
	}
	names, err := fs.List(c.dir)
	if err != nil {
		return nil, fmt.Errorf("meta: snapshots: %w", err)
	}
	var idx []uint64
	for _, n := range names {
		if i, err := strconv.ParseUint(n, 10, 64); err == nil && len(n) == 20 {
			idx = append(idx, i)
			continue
		}
		if err := fs.RemoveAll(filepath.Join(c.dir, n)); err != nil {
			return nil, fmt.Errorf("meta: snapshots: remove %s: %w", n, err)
		}
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
	for k, i := range idx {
		if k == len(idx)-1 {
			c.last = i
			break
		}
		if err := fs.RemoveAll(filepath.Join(c.dir, ckptName(i))); err != nil {
			return nil, fmt.Errorf("meta: snapshots: remove %d: %w", i, err)
		}
	}
	return c, nil
}

func (c *checkpoints) path(index uint64) string { return filepath.Join(c.dir, ckptName(index)) }

// latest is the index of the latest checkpoint (0: none).
func (c *checkpoints) latest() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// publish makes the checkpoint at index the latest; the previous one is
// removed now or when its last stream ends.
func (c *checkpoints) publish(index uint64) {
	c.mu.Lock()
	prev := c.last
	c.last = index
	remove := prev != 0 && prev != index && c.refs[prev] == 0
	if prev != 0 && prev != index && !remove {
		c.stale[prev] = true
	}
	c.mu.Unlock()
	if remove {
		_ = c.fs.RemoveAll(c.path(prev))
	}
}

// acquire pins the latest checkpoint if its index is at least min.
func (c *checkpoints) acquire(min uint64) (uint64, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	idx := c.last
	if idx == 0 || idx < min {
		return 0, nil, fmt.Errorf("%w: no snapshot at or past index %d here (latest %d)", metaapi.ErrNotFound, min, idx)
	}
	c.refs[idx]++
	return idx, func() {
		c.mu.Lock()
		c.refs[idx]--
		remove := c.refs[idx] == 0 && c.stale[idx]
		if c.refs[idx] == 0 {
			delete(c.refs, idx)
		}
		if remove {
			delete(c.stale, idx)
		}
		c.mu.Unlock()
		if remove {
			_ = c.fs.RemoveAll(c.path(idx))
		}
	}, nil
}

// takeCheckpoint checkpoints the store at its applied index (term: that
// entry's term), records it in the raft log and compacts the log behind
// it. Called by the apply worker between rounds (storeMu held).
func (sn *snapshots) takeCheckpoint(term uint64) error {
	r := sn.r
	idx := r.st.Index
	if err := r.Snap.checkpointStore(); err != nil {
		return err
	}
	cs, err := proto.Marshal(r.confState())
	if err != nil {
		return err
	}
	seq, err := r.WAL.Append(wal.SnapshotMetaRecord(WALGroup, idx, term, cs))
	if err == nil {
		err = r.WAL.WaitDurable(seq)
	}
	if err != nil {
		return fmt.Errorf("snapshot %d: raft log: %w", idx, err)
	}
	r.sinceSnap = 0
	if retain := uint64(r.s.Cfg.LogRetainEntries); idx > retain {
		to := idx - retain
		if last, err := r.WAL.LastIndex(WALGroup); err == nil && to <= last {
			if err := r.WAL.Compact(WALGroup, to); err != nil {
				return fmt.Errorf("snapshot %d: compact the raft log to %d: %w", idx, to, err)
			}
		}
	}
	r.log.Info("meta snapshot taken", "index", idx, "term", term)
	return nil
}

// checkpointStore checkpoints the store (applied to r.st.Index, storeMu
// held) into DIR/snap/<index> and makes it the latest.
func (sn *snapshots) checkpointStore() error {
	r := sn.r
	idx := r.st.Index
	c := r.ckpts
	if c.latest() == idx {
		return nil // taken already (and maybe being streamed)
	}
	tmp := filepath.Join(c.dir, snapTmpPrefix+ckptName(idx))
	fs := r.s.Cfg.FS
	if err := fs.RemoveAll(tmp); err != nil {
		return fmt.Errorf("snapshot %d: %w", idx, err)
	}
	// WithFlushedWAL syncs the store's WAL first: the store is durable at
	// idx, so the log may be compacted up to it.
	if err := r.DB.Checkpoint(tmp, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("snapshot %d: checkpoint: %w", idx, err)
	}
	if err := fs.RemoveAll(c.path(idx)); err != nil {
		return fmt.Errorf("snapshot %d: %w", idx, err)
	}
	if err := fs.Rename(tmp, c.path(idx)); err != nil {
		return fmt.Errorf("snapshot %d: %w", idx, err)
	}
	if err := fs.SyncDir(c.dir); err != nil {
		return fmt.Errorf("snapshot %d: %w", idx, err)
	}
	c.publish(idx)
	r.SnapIndex.Store(idx)
	return nil
}

// recordMembership restores, at open (before the raft goroutine runs),
// what applyEntries makes true after a membership change: the latest
// snapshot the raft log records has the store's member set in its
// ConfState. Raft sends a member it holds no log for (one just added)
// that snapshot, and the member refuses one whose ConfState does not
// name it: it would never catch up. A crash after the store applied the
// change durably (the checkpoint's first step syncs the store's WAL; a
// later round may too) and before the checkpoint's record was durable in
// the log leaves the new member set in the store and the old one in the
// log; the change's entry, at or below the store's applied index, is not
// applied (nor checkpointed) again. The checkpoint is taken now.
func (sn *snapshots) recordMembership() error {
	r := sn.r
	if !r.hasMembers || r.stTerm == 0 {
		// No member set recorded yet (the bootstrap's is the log's), or
		// the log does not hold the store's last entry (a snapshot
		// installed: its record carries the store's member set).
		return nil
	}
	meta, ok, err := r.WAL.Snapshot(WALGroup)
	if err != nil {
		return err
	}
	logged := &pb.ConfState{}
	if ok && len(meta.Meta) > 0 {
		if err := proto.Unmarshal(meta.Meta, logged); err != nil {
			return fmt.Errorf("%w: the raft log's snapshot: membership: %v", state.ErrCorrupt, err)
		}
	}
	voters := slices.Sorted(slices.Values(logged.GetVoters()))
	learners := slices.Sorted(slices.Values(logged.GetLearners()))
	cs := r.confState()
	if slices.Equal(voters, cs.GetVoters()) && slices.Equal(learners, cs.GetLearners()) {
		return nil
	}
	r.log.Warn("meta: the raft log's latest snapshot names other members than the store (a crash after a membership change, before its snapshot was recorded): taking it now",
		"index", r.st.Index, "snapshot_index", meta.Index, "snapshot_voters", voters, "snapshot_learners", learners, "voters", cs.GetVoters(), "learners", cs.GetLearners())
	return sn.takeCheckpoint(r.stTerm)
}

// checkpointNow takes a checkpoint for a member that asks for a snapshot
// this one has none of (a member joining before any was taken).
func (sn *snapshots) checkpointNow(min uint64) error {
	r := sn.r
	r.StoreMu.Lock()
	defer r.StoreMu.Unlock()
	if r.st.Index < min {
		return fmt.Errorf("%w: this member has applied %d, a snapshot at or past %d is asked for", metaapi.ErrNotFound, r.st.Index, min)
	}
	if r.stTerm == 0 {
		return r.Snap.checkpointStore() // the log does not know the term: not recorded there
	}
	return r.Snap.takeCheckpoint(r.stTerm)
}

// snapshotHandler serves GET /v1/raft/snapshot?min=INDEX: the stream of
// this member's latest checkpoint, if its index is at least INDEX.
func (sn *snapshots) SnapshotHandler(w http.ResponseWriter, req *http.Request) {
	r := sn.r
	s := r.s
	min, err := strconv.ParseUint(req.URL.Query().Get("min"), 10, 64)
	if err != nil {
		metaapi.WriteError(w, http.StatusBadRequest, metaapi.CodeInvalid, "snapshot: min: "+err.Error())
		return
	}
	select {
	case snapshotStreamSlots <- struct{}{}:
		defer func() { <-snapshotStreamSlots }()
	default:
		metaapi.WriteError(w, http.StatusServiceUnavailable, metaapi.CodeUnavailable, fmt.Sprintf("snapshot: %d stream(s) already running", maxSnapshotStreams))
		return
	}
	idx, release, err := r.ckpts.acquire(min)
	if errors.Is(err, metaapi.ErrNotFound) {
		if err = r.Snap.checkpointNow(min); err == nil {
			idx, release, err = r.ckpts.acquire(min)
		}
	}
	if err != nil {
		code, status := metaapi.CodeOf(err)
		metaapi.WriteError(w, status, code, err.Error())
		return
	}
	defer release()
	w.Header().Set("Content-Type", "application/octet-stream")
	n, err := checkpoint.Write(w, s.Cfg.FS, r.ckpts.path(idx), idx)
	if err != nil {
		r.log.Error("snapshot stream failed", "index", idx, "err", err)
		panic(http.ErrAbortHandler) // the receiver sees a truncated stream
	}
	r.log.Info("snapshot streamed", "index", idx, "bytes", n, "to", req.RemoteAddr)
}

// installSnapshot makes the store hold the state at md's index or later
// (fetched from another member), before the raft log records the
// snapshot. Called by the append worker.
func (sn *snapshots) installSnapshot(md *pb.SnapshotMetadata) error {
	r := sn.r
	idx := md.GetIndex()
	r.StoreMu.Lock()
	have := r.st.Index
	if have >= idx {
		// The store already holds it (an install before a crash); raft
		// restores md's ConfState all the same.
		r.raftCfgIndex = idx
	}
	r.StoreMu.Unlock()
	if have >= idx {
		return nil
	}
	fs, dir := r.s.Cfg.FS, r.s.Cfg.Dir
	var got uint64
	var lastErr error
	for attempt := 0; attempt < maxSnapshotFetchAttempts && got == 0; attempt++ {
		if attempt > 0 {
			select {
			case <-r.stop:
				return fmt.Errorf("%w: meta service closed", metaapi.ErrUnavailable)
			case <-time.After(snapshotFetchPause):
			}
		}
		for _, m := range r.Snap.fetchOrder() {
			n, err := r.Snap.fetchSnapshot(m, idx)
			if err == nil {
				got = n
				break
			}
			lastErr = err
			r.log.Warn("snapshot fetch failed", "from", m, "index", idx, "err", err)
		}
	}
	if got == 0 {
		return fmt.Errorf("snapshot at %d: no member sent it: %w", idx, lastErr)
	}
	// Swap the stores with the apply worker and the service held.
	r.StoreMu.Lock()
	defer r.StoreMu.Unlock()
	s := r.s
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.EndStintLocked(errors.New("installing a snapshot"))
	if err := r.DB.Close(); err != nil {
		r.log.Warn("closing the store before a snapshot install", "err", err)
	}
	if err := state.InstallStore(fs, dir); err != nil {
		return fmt.Errorf("install snapshot %d: %w", got, err)
	}
	db, err := state.OpenStore(fs, dir, s.Log)
	if err != nil {
		return fmt.Errorf("install snapshot %d: %w", got, err)
	}
	r.DB, s.Store.DB = db, db
	st, members, learners, err := ReadState(db)
	if err != nil {
		return fmt.Errorf("install snapshot %d: %w", got, err)
	}
	if st.Index != got {
		return fmt.Errorf("%w: snapshot stream at %d holds a store applied to %d", state.ErrCorrupt, got, st.Index)
	}
	r.st = st
	r.raftCfgIndex = idx // raft restores md's ConfState
	r.stTerm = 0         // the term of the entry at st.Index, when it is md's
	if st.Index == idx {
		r.stTerm = md.GetTerm()
	}
	r.Applied.Store(st.Index)
	if members != nil {
		r.Rec.sawLearners(learners)
		r.setMembers(members, learners)
		r.hasMembers = true
	}
	r.Rec.caughtUp(st.Index)
	r.sinceSnap = 0
	// This member can send the state it got at once (a checkpoint of the
	// new store; hard links).
	if err := r.Snap.checkpointStore(); err != nil {
		r.log.Warn("checkpoint of an installed snapshot", "err", err)
	}
	r.Installed.Add(1)
	r.log.Info("meta snapshot installed", "index", st.Index, "raft_index", idx)
	return nil
}

// fetchOrder is the members to fetch a snapshot from: the leader first.
func (sn *snapshots) fetchOrder() []uint64 {
	r := sn.r
	lead := r.leader.Load()
	var out []uint64
	if lead != 0 && lead != r.id {
		out = append(out, lead)
	}
	for _, id := range r.peerIDs() {
		if id != r.id && id != lead {
			out = append(out, id)
		}
	}
	return out
}

// fetchSnapshot receives member m's latest checkpoint (index ≥ min) into
// DIR/pebble.new, verified and synced.
func (sn *snapshots) fetchSnapshot(m, min uint64) (uint64, error) {
	r := sn.r
	addr := r.peerAddr(m)
	if addr == "" {
		return 0, fmt.Errorf("member %d: no address", m)
	}
	fs, dir := r.s.Cfg.FS, r.s.Cfg.Dir
	recv, next := filepath.Join(dir, state.RecvDirName), filepath.Join(dir, state.StoreNewName)
	for _, p := range []string{recv, next} {
		if err := fs.RemoveAll(p); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), snapshotFetchTimeout)
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s?min=%d", r.s.Cfg.TLS.Scheme(), addr, SnapshotRoute, min), nil)
	if err != nil {
		return 0, err
	}
	resp, err := r.net.SnapClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer raftnet.CloseBody(r.log, resp.Body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, raftnet.MaxErrorBodyBytes))
		return 0, fmt.Errorf("member %d: HTTP %d: %s", m, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	info, err := checkpoint.Read(resp.Body, fs, recv, min)
	if err != nil {
		return 0, err
	}
	idx := info.Index
	if err := fs.Rename(recv, next); err != nil {
		return 0, err
	}
	if err := fs.SyncDir(dir); err != nil {
		return 0, err
	}
	return idx, nil
}
