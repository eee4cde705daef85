package datanode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	jitter "github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/datanode/holds"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/holdapi"
	"github.com/spindle-store/spindle/internal/pipeline"
	"github.com/spindle-store/spindle/internal/transport"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Files a datanode keeps in its log directory, next to the WAL, written
// atomically (temporary file, fsync, rename, directory fsync):
//
//	DATANODE.json   {"uuid": "<32 hex>", "node_id": N}
//	                identity: random UUID at first start; the node ID the
//	                meta service assigned to it (its raft ID everywhere)
//	PIPELINES.json  [{"ID": G, "Members": [{"ID": N, "Addr": "host:port"}, …]}, …]
//	                the pipelines the meta service told it to serve, so that
//	                it serves them again at a restart without waiting for
//	                the meta service
const (
	identityFile  = "DATANODE.json"
	pipelinesFile = "PIPELINES.json"
)

// identity is a datanode's stable identity.
type identity struct {
	UUID   string `json:"uuid"`
	NodeID uint64 `json:"node_id"`
}

// MetaClient is the part of the meta service's client a datanode uses
// (metaapi.Client implements it).
type MetaClient interface {
	Heartbeat(ctx context.Context, hb *metaapi.Heartbeat) (*metaapi.HeartbeatResponse, error)
}

func loadJSON(path string, v any) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// saveJSON writes v to path durably and atomically.
func saveJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return vfs.WriteFileAtomic(vfs.Default, path, append(b, '\n'))
}

// loadIdentity reads (or creates, with a new UUID) the identity file.
func loadIdentity(logDir string) (identity, error) {
	var id identity
	path := filepath.Join(logDir, identityFile)
	ok, err := loadJSON(path, &id)
	if err != nil {
		return id, fmt.Errorf("datanode: identity: %w", err)
	}
	if ok && len(id.UUID) == 32 {
		return id, nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return id, err
	}
	id = identity{UUID: hex.EncodeToString(b[:])}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return id, err
	}
	return id, saveJSON(path, id)
}

// register obtains the node ID from the meta service (first start), retrying
// with a bounded backoff until ctx ends.
func register(ctx context.Context, mc MetaClient, logDir string, id *identity, addr string, log *slog.Logger) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		resp, err := mc.Heartbeat(ctx, &metaapi.Heartbeat{UUID: id.UUID, NodeID: id.NodeID, Addr: addr})
		if err == nil {
			if resp.NodeID == 0 || resp.NodeID >= 1<<16 {
				return fmt.Errorf("datanode: the meta service assigned node ID %d, out of [1, 65535]", resp.NodeID)
			}
			if id.NodeID != 0 && resp.NodeID != id.NodeID {
				return fmt.Errorf("datanode: the meta service knows this datanode (%s) as node %d, its identity file says %d", id.UUID, resp.NodeID, id.NodeID)
			}
			id.NodeID = resp.NodeID
			return saveJSON(filepath.Join(logDir, identityFile), id)
		}
		if errors.Is(err, metaapi.ErrInvalid) {
			return fmt.Errorf("datanode: registration refused: %w", err)
		}
		log.Warn("meta service not reachable yet; retrying", "attempt", attempt, "err", err)
		// Jittered: datanodes waiting for a restarted meta service do
		// not all call it in step.
		if !jitter.Sleep(ctx, jitter.Jitter(backoff)) {
			return ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// heartbeater reports to the meta service and carries out its commands.
type heartbeater struct {
	mc         MetaClient
	tokens     *blocktoken.Verifier // nil: tokens not checked
	id         identity
	addr       string
	metricsURL string
	logDir     string
	eng        *engine.Engine
	node       *pipeline.Node
	log        *slog.Logger
	interval   time.Duration
	// proposals bounds the commands run in the background at once
	// (inBackground: proposals, replica deletions).
	proposals chan struct{}
	// copier runs replicate_container commands (container copies); its
	// wake channel makes the next heartbeat come at once when a copy ends.
	copier *containerCopier

	// deleted holds the acknowledgements for the next heartbeats (at most
	// maxPendingAcks).
	deleted *reportQueue[metaapi.BlockRef]
	// holds are the object lock holds (nil: none kept); held the
	// acknowledgements of hold_blocks for the next heartbeats
	// (lockholds.go).
	holds *holds.Store
	held  *reportQueue[holdapi.Ack]
	// blocks counts the containers' blocks for the reports (blockcount.go).
	blocks *blockCounter
	// savedChanges is node.PipelinesChanged() when the pipeline list was
	// last saved; peerAddrs the peers (addresses, certificates) last handed to the node
	// (heartbeat goroutine only).
	savedChanges uint64
	peerAddrs    map[uint64]metaapi.Member
	// scrub is the scrubber (its progress goes in the reports), repair
	// runs repair_blocks; bg tracks their goroutines and inBackground's,
	// bgCtx ends them.
	scrub  *scrubber
	repair *repairer
	bg     *sync.WaitGroup
	bgCtx  context.Context
	// volFound: a volume failed (report at once).
	volFound <-chan struct{}
}

// maxPendingAcks bounds the deletion acknowledgements kept between
// heartbeats (beyond it they are dropped: the meta service resends, and a
// delete is idempotent).
const maxPendingAcks = 4 * metaapi.MaxDeletedBlocksReport

// ack queues deletion acknowledgements for the next heartbeat.
func (h *heartbeater) ack(c uint64, blocks []uint64) {
	refs := make([]metaapi.BlockRef, len(blocks))
	for i, b := range blocks {
		refs[i] = metaapi.BlockRef{Container: c, Local: b}
	}
	h.deleted.add(refs...)
}

const maxConcurrentProposals = 16

func (h *heartbeater) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		if h.beat(ctx) {
			// Joined a pipeline: say so now, not a heartbeat later: the
			// meta service hands out a new pipeline once every member
			// reports it, and writers wait for that (after two datanodes
			// died, every put does).
			h.beat(ctx) // a join in its answer waits for the next tick
		}
		select {
		case <-ctx.Done():
			return
		case <-h.node.Stopped():
			return
		case <-t.C:
		case <-h.copier.wake:
		case <-h.scrub.found:
		case <-h.repair.wake:
		case <-h.volFound:
		}
	}
}

func (h *heartbeater) report() *metaapi.Heartbeat {
	hb := &metaapi.Heartbeat{UUID: h.id.UUID, NodeID: h.id.NodeID, Addr: h.addr, MetricsURL: h.metricsURL}
	hb.Containers, hb.Used = containerReports(h.eng)
	h.blocks.fill(h.eng, hb.Containers)
	if sp, err := h.eng.Space(); err != nil {
		h.log.Warn("reading the volumes' free space", "err", err)
	} else {
		hb.Capacity, hb.Available = sp.CapacityBytes, sp.AvailableBytes
		// Used counts container bytes; on a shared disk Capacity may
		// be smaller in theory (a filesystem reporting oddly): keep the
		// report valid.
		hb.Used = min(hb.Used, hb.Capacity)
	}
	for _, p := range h.node.Pipelines() {
		hb.Pipelines = append(hb.Pipelines, metaapi.PipelineReport{ID: p.ID, LeaderID: p.Leader, Term: p.Term, Applied: p.Applied, Behind: p.Behind})
	}
	hb.Copying = h.copier.copying()
	hb.Scrub = h.scrub.progress()
	hb.FailedVolumes = failedVolumeReports(h.eng.FailedVolumes())
	hb.ReadOnlyVolumes = failedVolumeReports(h.eng.ReadOnlyVolumes())
	for _, f := range h.node.FailedPipelines() {
		reason := f.Reason
		if len(reason) > metaapi.MaxCopyErrorBytes {
			reason = reason[:metaapi.MaxCopyErrorBytes]
		}
		hb.FailedPipelines = append(hb.FailedPipelines, metaapi.PipelineFailure{ID: f.ID, Container: f.Container, Reason: reason})
		if len(hb.FailedPipelines) == metaapi.MaxReportedPipelines {
			break
		}
	}
	return hb
}

// beat sends one heartbeat and runs the commands of its answer; true when
// it joined a pipeline.
func (h *heartbeater) beat(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hb := h.report()
	hb.DeletedBlocks = h.deleted.take(metaapi.MaxDeletedBlocksReport)
	hb.CopyFailures = h.copier.failures.take(metaapi.MaxCopyFailuresReport)
	if h.held != nil {
		hb.HeldBlocks = h.held.take(holdapi.MaxAcks)
	}
	resp, err := h.mc.Heartbeat(cctx, hb)
	if err != nil {
		if h.held != nil {
			h.held.putBack(hb.HeldBlocks)
		}
		h.deleted.putBack(hb.DeletedBlocks)
		h.copier.failures.putBack(hb.CopyFailures)
		h.log.Warn("heartbeat failed", "err", err)
		return false
	}
	h.updatePeers(ctx, resp.Peers)
	if h.tokens != nil && len(resp.BlockTokenKeys) > 0 {
		h.tokens.SetKeys(resp.BlockTokenKeys)
	}
	// A replica that failed took its pipeline off the list by itself.
	changed, joined := false, false
	if g := h.node.PipelinesChanged(); g != h.savedChanges {
		h.savedChanges, changed = g, true
	}
	h.hold(resp.Commands) // object lock holds first (lockholds.go)
	for _, c := range resp.Commands {
		switch c.Kind {
		case metaapi.CmdJoinPipeline:
			if c.Pipeline == nil {
				h.log.Warn("join_pipeline without a pipeline")
				continue
			}
			if err := h.node.AddPipeline(ctx, toPipelineConfig(c.Pipeline)); err != nil {
				h.log.Warn("join pipeline", "pipeline", c.Pipeline.ID, "err", err)
				continue
			}
			changed, joined = true, true
		case metaapi.CmdLeavePipeline:
			if c.Pipeline == nil {
				continue
			}
			if err := h.node.RemovePipeline(ctx, c.Pipeline.ID); err != nil {
				h.log.Warn("leave pipeline", "pipeline", c.Pipeline.ID, "err", err)
				continue
			}
			changed = true
		case metaapi.CmdCloseContainer, metaapi.CmdDeleteBlocks:
			h.propose(ctx, c)
		case metaapi.CmdReplicateContainer:
			h.copier.submit(c)
		case metaapi.CmdDeleteContainer:
			h.deleteReplica(c)
		case metaapi.CmdRepairBlocks:
			h.repair.submit(h.bgCtx, h.bg, c)
		case holdapi.Kind: // kept before this loop
		default:
			h.log.Warn("unknown command from the meta service", "kind", c.Kind)
		}
	}
	if changed {
		if err := h.savePipelines(); err != nil {
			h.log.Error("saving the pipeline list", "err", err)
		}
	}
	return joined
}

// propose runs a close or delete command. On the leader of a pipeline this
// node serves it is proposed (in the background, bounded), so that every
// replica applies it; a follower ignores it (the meta service sends it to
// the leader the reports name). For a pipeline this node does not serve
// (closed, left), the node acts on its own replica directly, and so it
// does for a close of a CLOSED pipeline it serves without a leader.
func (h *heartbeater) propose(ctx context.Context, c metaapi.Command) {
	if c.Pipeline == nil {
		h.log.Warn("command without its pipeline", "kind", c.Kind)
		return
	}
	pid := c.Pipeline.ID
	if !h.serves(pid) {
		h.local(c)
		return
	}
	l, _ := h.node.Leader(pid)
	if l == 0 && c.Kind == metaapi.CmdCloseContainer && c.Pipeline.State == metaapi.PipelineClosed {
		// A CLOSED pipeline without a leader (its other members left it,
		// as after this node's restart): no raft round will close the
		// replica, so it closes by itself, as on a pipeline it left. Were
		// a leader elected later, a PutBlock it applied would be refused
		// here and the replica would rank behind (replaced).
		h.local(c)
		return
	}
	if l != h.id.NodeID {
		return
	}
	var cmds []pipeline.Command
	if c.Kind == metaapi.CmdCloseContainer {
		cmds = append(cmds, pipeline.Command{Kind: pipeline.KindCloseContainer, Ref: transport.GetBlock{ContainerID: c.Container}})
	} else {
		for _, b := range c.Blocks {
			cmds = append(cmds, pipeline.Command{Kind: pipeline.KindDeleteBlock, Ref: transport.GetBlock{ContainerID: c.Container, LocalID: b}})
		}
	}
	h.inBackground(c.Kind, func() {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := h.node.Propose(pctx, pid, cmds)
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			h.log.Warn("command from the meta service", "kind", c.Kind, "pipeline", pid, "container", c.Container, "err", err)
			return
		}
		if c.Kind == metaapi.CmdDeleteBlocks {
			h.ack(c.Container, c.Blocks)
		}
	})
}

// serves says whether this node serves pipeline pid now.
func (h *heartbeater) serves(pid uint64) bool {
	for _, p := range h.node.Pipelines() {
		if p.ID == pid {
			return true
		}
	}
	return false
}

// inBackground runs f on a goroutine of its own, at most cap(h.proposals)
// at once (the commands of the meta service that take long: proposals,
// replica deletions); with every slot taken it drops the command, which
// the meta service sends again. h.bg tracks the goroutine, so that Run
// closes the engine only after f returned (a replica deletion still
// running when the engine closed crashed the datanode in Pebble).
func (h *heartbeater) inBackground(kind string, f func()) {
	select {
	case h.proposals <- struct{}{}:
	default:
		h.log.Warn("too many commands in progress; the meta service will resend", "kind", kind)
		return
	}
	if h.bg != nil {
		h.bg.Add(1)
	}
	go func() {
		defer func() {
			<-h.proposals
			if h.bg != nil {
				h.bg.Done()
			}
		}()
		f()
	}()
}

// local carries out a command on this node's own replica.
func (h *heartbeater) local(c metaapi.Command) {
	id := engine.ContainerID(c.Container)
	switch c.Kind {
	case metaapi.CmdCloseContainer:
		if err := h.eng.CloseContainer(id); err != nil && !errors.Is(err, engine.ErrNotFound) {
			h.log.Warn("closing a container of a pipeline not served", "container", c.Container, "err", err)
		}
	case metaapi.CmdDeleteBlocks:
		var done []uint64
		for _, b := range c.Blocks {
			err := h.eng.DeleteBlock(engine.BlockID{Container: id, Local: b})
			if err != nil && !errors.Is(err, engine.ErrNotFound) {
				h.log.Warn("deleting a block of a pipeline not served", "container", c.Container, "block", b, "err", err)
				continue
			}
			done = append(done, b)
		}
		if err := h.eng.Sync(); err != nil {
			h.log.Error("sync after deletions", "err", err)
			return
		}
		h.ack(c.Container, done)
	}
}

// deleteReplica deletes this node's replica of c.Container, one too many
// or UNHEALTHY (metaapi.CmdDeleteContainer), in the background and bounded
// like the proposals. It refuses a container of a pipeline this node
// serves (its raft group may still write to it) and one neither CLOSED
// nor UNHEALTHY here (OPEN, CLOSING, DELETING); the engine
// refuses one being exported. A replica already gone is fine. The next
// heartbeat's report lacks the container.
func (h *heartbeater) deleteReplica(c metaapi.Command) {
	id := engine.ContainerID(c.Container)
	if c.Pipeline != nil && h.serves(c.Pipeline.ID) {
		h.log.Warn("not deleting a replica of a pipeline this node serves", "container", c.Container, "pipeline", c.Pipeline.ID)
		return
	}
	info, err := h.eng.Container(id)
	if errors.Is(err, engine.ErrNotFound) {
		return
	}
	if err != nil || (info.State != engine.StateClosed && info.State != engine.StateUnhealthy) {
		h.log.Warn("not deleting a replica that is neither CLOSED nor UNHEALTHY", "container", c.Container, "state", info.State, "err", err)
		return
	}
	if h.heldReplica(c.Container) { // lockholds.go
		return
	}
	h.inBackground(c.Kind, func() {
		err := h.eng.DeleteContainer(id, false)
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			h.log.Warn("deleting an extra replica", "container", c.Container, "err", err)
			return
		}
		h.log.Info("extra replica deleted", "container", c.Container)
	})
}

// updatePeers hands the peers' addresses the meta service last heard to
// the node when they changed since the last heartbeat (a peer restarted
// on another port).
func (h *heartbeater) updatePeers(ctx context.Context, peers []metaapi.Member) {
	changed := false
	for _, m := range peers {
		if h.peerAddrs[m.NodeID] != m {
			changed = true
		}
	}
	if !changed {
		return
	}
	ms := make([]pipeline.Member, 0, len(peers))
	for _, m := range peers {
		ms = append(ms, toMember(m))
	}
	if err := h.node.UpdatePeers(ctx, ms); err != nil {
		h.log.Warn("updating peer addresses", "err", err)
		return
	}
	if h.peerAddrs == nil {
		h.peerAddrs = map[uint64]metaapi.Member{}
	}
	for _, m := range peers {
		h.peerAddrs[m.NodeID] = m
	}
	// The saved pipeline list carries the members' addresses.
	if err := h.savePipelines(); err != nil {
		h.log.Error("saving the pipeline list", "err", err)
	}
}

func (h *heartbeater) savePipelines() error {
	var pcs []pipeline.PipelineConfig
	for _, p := range h.node.Pipelines() {
		pcs = append(pcs, pipeline.PipelineConfig{ID: p.ID, Members: p.Members})
	}
	return saveJSON(filepath.Join(h.logDir, pipelinesFile), pcs)
}

func toPipelineConfig(p *metaapi.Pipeline) pipeline.PipelineConfig {
	pc := pipeline.PipelineConfig{ID: p.ID}
	for _, m := range p.Members {
		pc.Members = append(pc.Members, toMember(m))
	}
	return pc
}

// toMember is a pipeline member as the meta service describes it: its
// address and the certificate it is bound to (raft messages from it are
// accepted under that certificate only).
func toMember(m metaapi.Member) pipeline.Member {
	return pipeline.Member{ID: m.NodeID, Addr: m.Addr, CertName: m.CertName}
}

// loadPipelines reads the pipelines saved by an earlier run.
func loadPipelines(logDir string) ([]pipeline.PipelineConfig, error) {
	var pcs []pipeline.PipelineConfig
	if _, err := loadJSON(filepath.Join(logDir, pipelinesFile), &pcs); err != nil {
		return nil, fmt.Errorf("datanode: %w", err)
	}
	return pcs, nil
}
