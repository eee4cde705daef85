package pipeline

// A node's pipelines (raft groups): the peers' addresses, opening a
// group on its log and engine (and adopting the chunks its log holds),
// adding and removing groups from the node's loop.

import (
	"context"
	"fmt"
	"sort"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/wal"
)

// setPeerAddrs records the members' addresses (and certificate names,
// when given). A peer has one address for
// all pipelines: the newest one given wins (a datanode restarted on
// another port is reached there from then on); a peer whose address
// changed redials it before its next send.
func (n *Node) setPeerAddrs(ms []Member) {
	n.certMu.Lock()
	for _, m := range ms {
		if m.CertName != "" && m.ID != n.cfg.ID && n.certNames[m.ID] != m.CertName {
			if old, ok := n.certNames[m.ID]; ok {
				n.log.Info("peer certificate changed", "peer", m.ID, "old", old, "new", m.CertName)
			}
			n.certNames[m.ID] = m.CertName
		}
	}
	n.certMu.Unlock()
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	for _, m := range ms {
		if m.ID == n.cfg.ID || m.Addr == "" || n.addrs[m.ID] == m.Addr {
			continue
		}
		if old, ok := n.addrs[m.ID]; ok {
			n.log.Info("peer address changed", "peer", m.ID, "old", old, "new", m.Addr)
		}
		n.addrs[m.ID] = m.Addr
		if p := n.peers[m.ID]; p != nil {
			p.setAddr(m.Addr)
		}
	}
}

// UpdatePeers records the current addresses of peers (the meta service's
// view, from a heartbeat): the peer connections follow them, and the
// pipelines' member lists (redirects, status) show them.
func (n *Node) UpdatePeers(ctx context.Context, ms []Member) error {
	return n.call(ctx, event{kind: evPeers, members: ms})
}

// onPeers applies UpdatePeers (loop only).
func (n *Node) onPeers(ms []Member) {
	n.setPeerAddrs(ms)
	n.groupsMu.Lock()
	defer n.groupsMu.Unlock()
	for _, m := range ms {
		if m.Addr == "" {
			continue
		}
		for _, g := range n.order {
			if a, ok := g.members[m.ID]; ok && a != m.Addr {
				g.members[m.ID] = m.Addr
			}
		}
	}
}

// openGroup bootstraps or recovers one pipeline's raft state.
func (n *Node) openGroup(p PipelineConfig) (*group, error) {
	g := &group{id: p.ID, members: map[uint64]string{}, pending: map[uint64]*proposal{}, cache: map[uint64]*cachedEntry{}}
	var voters []uint64
	for _, m := range p.Members {
		g.members[m.ID] = m.Addr
		voters = append(voters, m.ID)
	}
	sort.Slice(voters, func(i, j int) bool { return voters[i] < voters[j] })
	last, err := n.wal.LastIndex(p.ID)
	if err != nil {
		return nil, err
	}
	_, hasSnap, err := n.wal.Snapshot(p.ID)
	if err != nil {
		return nil, err
	}
	if last == 0 && !hasSnap {
		// Bootstrap: every member starts from the same snapshot at (1, 1)
		// holding the membership, so that no member needs to be told it.
		cs, err := proto.Marshal(&raftpb.ConfState{Voters: voters})
		if err != nil {
			return nil, err
		}
		seq, err := n.wal.Append(wal.SnapshotRecord(p.ID, 1, 1, cs), wal.HardStateRecord(p.ID, wal.HardState{Term: 1, Commit: 1}))
		if err != nil {
			return nil, fmt.Errorf("pipeline %d: bootstrap: %w", p.ID, err)
		}
		if err := n.wal.WaitDurable(seq); err != nil {
			return nil, fmt.Errorf("pipeline %d: bootstrap: %w", p.ID, err)
		}
		n.log.Info("pipeline bootstrapped", "pipeline", p.ID, "voters", voters)
		// A new pipeline's first election would wait a randomized
		// election timeout (1-2 s) and could split; writers wait on it.
		// One member, designated by the pipeline ID (so that leaders
		// spread over the nodes), campaigns at every tick instead until a
		// leader is known, for at most eagerCampaignElections election
		// timeouts: its PreVotes are dropped until the other members have
		// joined (each at its next heartbeat), then win at once. Only
		// Follower and PreCandidate campaign again: a Candidate's term is
		// not raised by it.
		if voters[p.ID%uint64(len(voters))] == n.cfg.ID {
			g.eagerTicks = eagerCampaignElections * n.cfg.ElectionTicks
		}
	} else if err := n.adoptChunks(p.ID); err != nil {
		return nil, err
	}
	first, err := n.wal.FirstIndex(p.ID)
	if err != nil {
		return nil, err
	}
	rc := groupRaftConfig(n.cfg, n.wal.RaftStorage(p.ID), first-1, wal.RaftLogger{L: n.log.With("pipeline", p.ID)})
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("pipeline %d: %w", p.ID, err)
	}
	g.rn = rn
	g.payloadLow = first
	g.applied.Store(first - 1)
	return g, nil
}

// groupRaftConfig is a pipeline's raft configuration (why proposals are
// never forwarded: the package doc, TestProposalsAreNotForwarded).
func groupRaftConfig(cfg Config, st raft.Storage, applied uint64, lg raft.Logger) *raft.Config {
	return &raft.Config{ID: cfg.ID, ElectionTick: cfg.ElectionTicks, HeartbeatTick: cfg.HeartbeatTicks, Storage: st, Applied: applied,
		AsyncStorageWrites: true, MaxSizePerMsg: maxMsgEntriesBytes, MaxCommittedSizePerReady: 8 << 20, MaxUncommittedEntriesSize: 64 << 20,
		MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true, DisableProposalForwarding: true, Logger: lg}
}

// adoptChunks tells the engine about the chunks of the WriteChunk entries
// the log holds: their bytes were made durable before their log records
// (see appendWorker), but the engine rebuilt its blocks from their last
// PutBlock only. A chunk the entry carries is written again from the log
// (engine.ReplayLoggedChunk: its block file was written without a sync, so
// a crash may have lost it); in log order, so a block's chunks come back
// contiguously, the header-only ones adopted from the file between them.
func (n *Node) adoptChunks(gid uint64) error {
	first, err := n.wal.FirstIndex(gid)
	if err != nil {
		return err
	}
	last, err := n.wal.LastIndex(gid)
	if err != nil {
		return err
	}
	adopted, failed := 0, 0
	for lo := first; lo <= last; {
		ents, err := n.wal.Entries(gid, lo, last+1, 8<<20)
		if err != nil {
			return fmt.Errorf("pipeline %d: recover entries from %d: %w", gid, lo, err)
		}
		for _, e := range ents {
			if raftpb.EntryType(e.Type) != raftpb.EntryType_EntryNormal {
				continue
			}
			err := DecodeEntry(e.Data, func(c *Command) error {
				if c.Kind != KindWriteChunk {
					return nil
				}
				w := &c.WriteChunk
				b := engine.BlockID{Container: engine.ContainerID(w.ContainerID), Local: w.LocalID}
				adopt := func() error { return n.eng.AdoptChunk(b, w.Offset, w.Length, w.BytesPerChecksum, w.Checksums) }
				if c.Inline != nil {
					// The log holds the bytes; the block file may not
					// (written without a sync): write them again.
					adopt = func() error {
						return n.eng.ReplayLoggedChunk(b, w.Offset, c.Inline, w.BytesPerChecksum, w.Checksums)
					}
				}
				if err := adopt(); err != nil {
					// A chunk whose block was deleted later, or a
					// write that failed when it was first made.
					failed++
					n.log.Debug("recovery: chunk not adopted", "pipeline", gid, "index", e.Index, "err", err)
					return nil
				}
				if c.Inline != nil {
					n.inlineWrites.Add(1)
				}
				adopted++
				return nil
			})
			if err != nil {
				return fmt.Errorf("pipeline %d: entry %d: %w", gid, e.Index, err)
			}
		}
		lo = ents[len(ents)-1].Index + 1
	}
	n.log.Info("pipeline recovered", "pipeline", gid, "first_index", first, "last_index", last, "chunks_adopted", adopted, "chunks_not_adopted", failed)
	return nil
}

// addGroup checks an AddPipeline (loop only): a pipeline served with the
// same members gets their addresses; one being opened, served with other
// members, or failed here is refused; otherwise its ID is reserved and
// *open set: the caller opens it and installs it with evInstallGroup.
func (n *Node) addGroup(pc PipelineConfig, open *bool) error {
	n.groupsMu.RLock()
	f, failed := n.failedGroups[pc.ID]
	n.groupsMu.RUnlock()
	if failed {
		return fmt.Errorf("pipeline %d: this node's replica failed (%s); it does not serve it again", pc.ID, f.Reason)
	}
	if n.opening[pc.ID] {
		return fmt.Errorf("pipeline %d: being added already", pc.ID)
	}
	if g := n.groups[pc.ID]; g != nil {
		if len(g.members) != len(pc.Members) {
			return fmt.Errorf("pipeline %d: already served with other members", pc.ID)
		}
		for _, m := range pc.Members {
			if _, ok := g.members[m.ID]; !ok {
				return fmt.Errorf("pipeline %d: already served with other members", pc.ID)
			}
		}
		// Same members, maybe at new addresses: the newest win.
		n.onPeers(pc.Members)
		return nil
	}
	n.setPeerAddrs(pc.Members)
	n.opening[pc.ID] = true
	*open = true
	return nil
}

func (n *Node) removeGroup(id uint64) error {
	g := n.groups[id]
	if g == nil {
		return nil
	}
	// Nothing more of it is appended or applied here: an append job
	// queued or running stops at its next entry and creates no container
	// (inContainer).
	g.failed.Store(true)
	n.failPending(g, "pipeline closed")
	n.releaseLeases(g, g.leases)
	g.leases = nil
	for _, p := range g.queue {
		n.replyErr(p, transport.StatusNotFound, fmt.Sprintf("pipeline %d closed", id), "")
	}
	g.queue = nil
	n.groupsMu.Lock()
	delete(n.groups, id)
	for i, o := range n.order {
		if o == g {
			n.order = append(n.order[:i], n.order[i+1:]...)
			break
		}
	}
	n.groupsMu.Unlock()
	// Its records in the shared log are no longer needed: compact them
	// away (in the background: Compact waits for a sync).
	last, err := n.wal.LastIndex(id)
	if err == nil && last > 0 {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.wal.Compact(id, last); err != nil {
				n.log.Warn("compacting a removed pipeline's log", "pipeline", id, "err", err)
			}
		}()
	}
	n.log.Info("pipeline removed", "pipeline", id)
	return nil
}
