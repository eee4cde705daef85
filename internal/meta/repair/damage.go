package repair

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/meta/cluster"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/meta/state/verrec"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Block-granular damage and repair (see the package comment, "Damage").
// Memory only, like the replicas it is about: the datanodes report their
// damaged blocks in every heartbeat (ContainerReport.DamagedBlocks), the
// state here is rebuilt from those reports after a restart. Runs under
// s.mu, like the replication manager.

const (
	// maxRepairAttempts: block repairs of one replica tried before its
	// replica is replaced by a whole-container copy instead.
	maxRepairAttempts = 3
	// MaxRepairs bounds the repair_blocks commands in flight in the
	// cluster.
	MaxRepairs = 64
)

// damagedReplica is a CLOSED replica at the highest BCSID on a live node
// with damage a good replica does not share.
type damagedReplica struct {
	container, node uint64
	Blocks          []uint64 // its blocks a good replica has
	totalBlocks     uint64   // the replica's blocks (0: not counted yet)
}

// damagedReplicas lists them, by container then node.
func (s *Damage) DamagedReplicas(now time.Time) []damagedReplica {
	idx, top := s.cl.ClosedIndex(now)
	var out []damagedReplica
	for _, cid := range slices.Sorted(maps.Keys(idx)) {
		ids := slices.DeleteFunc(slices.Clone(idx[cid]), func(id uint64) bool { return s.cl.Behind(id, cid, top[cid]) })
		if !slices.ContainsFunc(ids, func(id uint64) bool { return len(s.cl.DamagedOn(id, cid)) > 0 }) {
			continue
		}
		lost := s.cl.LostAmong(cid, ids)
		for _, id := range ids {
			if b := cluster.Beyond(s.cl.DamagedOn(id, cid), lost); len(b) > 0 {
				out = append(out, damagedReplica{container: cid, node: id, Blocks: b, totalBlocks: s.NodeByID[id].Containers[cid].Blocks})
			}
		}
	}
	return out
}

// byBlock says whether damaged replica d is repaired block by block
// (cheaper than a whole copy: at most MaxRepairBlocks blocks and at most
// half of the replica's) rather than replaced, and has attempts left.
func (s *Damage) byBlock(d damagedReplica) bool {
	small := len(d.Blocks) <= metaapi.MaxRepairBlocks && (d.totalBlocks == 0 || uint64(len(d.Blocks))*2 <= d.totalBlocks)
	return small && s.Repair.Damage.Attempts[state.RepairKey{Container: d.container, Node: d.node}] < maxRepairAttempts
}

// repairing counts the replicas of cid with a block repair in flight.
func (s *Damage) repairing(cid uint64) int {
	n := 0
	for k := range s.Repair.Damage.Repairs {
		if k.Container == cid {
			n++
		}
	}
	return n
}

// underRepair: node id's replica of cid is (to be) repaired block by
// block; it is neither replaced nor deleted meanwhile.
func (s *Damage) underRepair(cid, id uint64) bool {
	return s.Repair.Damage.Repairs[state.RepairKey{Container: cid, Node: id}] != nil
}

// settleRepairs ends the repairs whose blocks are no longer reported
// damaged (done), whose node is DEAD or no longer holds the replica
// CLOSED, or whose damage every replica shares now (dropped: nothing to
// repair from), or that made no progress for CopyStartTimeout (failed).
func (s *Damage) settleRepairs(now time.Time) {
	st := &s.Repair.Damage
	if len(st.Repairs) == 0 {
		return
	}
	damaged := map[state.RepairKey]bool{}
	for _, d := range s.DamagedReplicas(now) {
		damaged[state.RepairKey{Container: d.container, Node: d.node}] = true
	}
	for _, k := range slices.SortedFunc(maps.Keys(st.Repairs), cmpRepairKey) {
		t := st.Repairs[k]
		n := s.NodeByID[t.Node]
		r, holds := n.Containers[t.Container]
		left := 0
		for _, b := range t.Blocks {
			if _, ok := slices.BinarySearch(r.DamagedBlocks, b); ok {
				left++
			}
		}
		switch {
		case s.cl.HealthOf(n, now) == metaapi.HealthDead || !holds || r.State != metaapi.ContainerClosed:
			delete(st.Repairs, k)
		case left > 0 && !damaged[k]:
			// Its damage turned out to be on every replica: lost, no
			// good copy to repair from.
			delete(st.Repairs, k)
		case left == 0:
			delete(st.Repairs, k)
			delete(st.Attempts, k)
			st.RepairedBlocks += uint64(len(t.Blocks))
			s.Log.Info("damaged blocks repaired", "container", t.Container, "node", t.Node, "blocks", t.Blocks)
		case left < t.Left:
			st.RepairedBlocks += uint64(t.Left - left)
			t.Left, t.Alive = left, now
		case now.Sub(t.Alive) >= s.Cfg.CopyStartTimeout:
			delete(st.Repairs, k)
			st.FailedRepairs++
			s.Log.Warn("block repair made no progress; it will be tried again or the replica replaced", "container", t.Container,
				"node", t.Node, "blocks_left", left, "attempt", st.Attempts[k])
		}
	}
}

func cmpRepairKey(a, b state.RepairKey) int {
	return cmp.Or(cmp.Compare(a.Container, b.Container), cmp.Compare(a.Node, b.Node))
}

// scheduleRepairs decides the block repairs of the damaged replicas on
// HEALTHY nodes that byBlock picks, when a good replica on a HEALTHY node
// exists to read from, within MaxRepairs.
func (s *Damage) scheduleRepairs(idx map[uint64][]uint64, now time.Time) {
	st := &s.Repair.Damage
	for _, d := range s.DamagedReplicas(now) {
		k := state.RepairKey{Container: d.container, Node: d.node}
		if len(st.Repairs) >= MaxRepairs {
			return
		}
		if st.Repairs[k] != nil || !s.byBlock(d) || s.cl.HealthOf(s.NodeByID[d.node], now) != metaapi.HealthHealthy || s.Repair.Trims[d.container] != nil {
			continue
		}
		if !slices.ContainsFunc(idx[d.container], func(id uint64) bool { return s.cl.HealthOf(s.NodeByID[id], now) == metaapi.HealthHealthy }) {
			continue
		}
		st.Attempts[k]++
		st.Repairs[k] = &state.RepairTask{Container: d.container, Node: d.node, Blocks: d.Blocks[:min(len(d.Blocks), metaapi.MaxRepairBlocks)],
			Decided: now, Alive: now, Left: min(len(d.Blocks), metaapi.MaxRepairBlocks)}
		s.Log.Info("damaged blocks to repair from a good replica", "container", d.container, "node", d.node, "blocks", d.Blocks,
			"good_replicas", idx[d.container], "attempt", st.Attempts[k])
	}
}

// repairCommands appends a repair_blocks for every repair in flight on
// node id: Sources are the good replicas on HEALTHY nodes.
func (s *Damage) RepairCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	for _, k := range slices.SortedFunc(maps.Keys(s.Repair.Damage.Repairs), cmpRepairKey) {
		t := s.Repair.Damage.Repairs[k]
		if t.Node != id || len(cmds) >= state.MaxCommandsPerHeartbeat {
			continue
		}
		cmd := metaapi.Command{Kind: metaapi.CmdRepairBlocks, Container: t.Container, Blocks: t.Blocks}
		for _, r := range s.cl.ReplicasOf(t.Container, now) {
			if s.cl.HealthOf(s.NodeByID[r], now) == metaapi.HealthHealthy {
				cmd.Sources = append(cmd.Sources, metaapi.Member{NodeID: r, Addr: s.NodeByID[r].Rec.Addr})
			}
		}
		if len(cmd.Sources) == 0 {
			continue
		}
		if c := s.ContainerByID[t.Container]; c != nil {
			if p := s.PipelineByID[c.Rec.Pipeline]; p != nil {
				cmd.Pipeline = s.cl.PipelineView(p, now)
			}
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}

// lostBlocks lists the blocks damaged on every healthy replica of their
// CLOSED container (idx: replicaIndex), by container and block.
func (s *Damage) LostBlocks(idx map[uint64][]uint64) []metaapi.DamagedBlock {
	var out []metaapi.DamagedBlock
	for _, cid := range slices.Sorted(maps.Keys(idx)) {
		ids := idx[cid]
		if len(ids) == 0 || len(s.cl.DamagedOn(ids[0], cid)) == 0 {
			continue
		}
		// A healthy replica's damage is exactly the lost blocks.
		for _, b := range s.cl.DamagedOn(ids[0], cid) {
			out = append(out, metaapi.DamagedBlock{Container: cid, Local: b, Nodes: slices.Clone(ids)})
		}
	}
	return out
}

// damageStatus is GET /v1/damaged. The keys holding a lost block are
// found by a scan of the namespace (only when a block is lost).
func (s *Damage) damageStatus(now time.Time) (*metaapi.DamageStatus, error) {
	idx := s.cl.ReplicaIndex(now)
	st := &metaapi.DamageStatus{Lost: s.LostBlocks(idx), Keys: []metaapi.DamagedKey{}, Repairable: []metaapi.DamagedBlock{},
		Repairs: len(s.Repair.Damage.Repairs), RepairedBlocks: s.Repair.Damage.RepairedBlocks, FailedRepairs: s.Repair.Damage.FailedRepairs,
		Scrub: []metaapi.NodeScrub{}}
	if st.Lost == nil {
		st.Lost = []metaapi.DamagedBlock{}
	}
	for _, d := range s.DamagedReplicas(now) {
		for _, b := range d.Blocks {
			st.Repairable = append(st.Repairable, metaapi.DamagedBlock{Container: d.container, Local: b, Nodes: []uint64{d.node}})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.Repair.Damage.Scrub)) {
		st.Scrub = append(st.Scrub, metaapi.NodeScrub{NodeID: id, ScrubReport: s.Repair.Damage.Scrub[id]})
	}
	if len(st.Lost) == 0 {
		return st, nil
	}
	lost := map[metaapi.BlockRef]bool{}
	for _, b := range st.Lost {
		lost[metaapi.BlockRef{Container: b.Container, Local: b.Local}] = true
	}
	keys, truncated, err := s.keysHolding(lost)
	st.Keys, st.KeysTruncated = keys, truncated
	return st, err
}

// keysHolding scans every key of every bucket, and every older version
// of one (S3 versioning, 'V' records: named key@version), for the blocks
// of lost, at most metaapi.MaxDamagedKeys keys.
func (s *Damage) keysHolding(lost map[metaapi.BlockRef]bool) (_ []metaapi.DamagedKey, truncated bool, err error) {
	out := []metaapi.DamagedKey{}
	for _, p := range []byte{state.PrefixKey, verrec.Prefix} {
		if out, truncated, err = s.holding(p, lost, out); err != nil || truncated {
			return out, truncated, err
		}
	}
	return out, false, nil
}

func (s *Damage) holding(prefix byte, lost map[metaapi.BlockRef]bool, out []metaapi.DamagedKey) (_ []metaapi.DamagedKey, _ bool, err error) {
	lo := []byte{prefix}
	it, err := s.Store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: state.PrefixEnd(lo)})
	if err != nil {
		return nil, false, fmt.Errorf("meta: scanning keys for lost blocks: %w", err)
	}
	defer state.CloseInto(it, &err, "scanning keys for lost blocks")
	for it.First(); it.Valid(); it.Next() {
		rec, err := state.DecodeKey(it.Value())
		if err != nil {
			return out, false, fmt.Errorf("meta: scanning keys for lost blocks: %w", err)
		}
		var hit []metaapi.BlockRef
		for _, b := range rec.Blocks {
			if r := (metaapi.BlockRef{Container: b.Container, Local: b.Local}); lost[r] {
				hit = append(hit, r)
			}
		}
		if len(hit) == 0 {
			continue
		}
		if len(out) == metaapi.MaxDamagedKeys {
			return out, true, nil
		}
		bucket, key, _ := bytes.Cut(it.Key()[1:], []byte{0})
		name := string(key)
		if prefix == verrec.Prefix { // key | 0x00 | ^ID
			if n, _, ok := verrec.Split(verrec.KeyPrefix(string(bucket)), it.Key()); ok {
				name = n + "@" + rec.Version.String()
			}
		}
		out = append(out, metaapi.DamagedKey{Bucket: string(bucket), Key: name, Blocks: hit})
	}
	return out, false, it.Error()
}

// Damaged is GET /v1/damaged.
func (s *Damage) Damaged() (*metaapi.DamageStatus, error) {
	return state.Read(s.State, func() (*metaapi.DamageStatus, error) { return s.damageStatus(s.Cfg.Now()) })
}

// Damage tracks scrubber findings and block repairs.
type Damage struct {
	*state.State
	cl *cluster.Cluster
}

// NewDamage tracks the damage reported in cl's cluster.
func NewDamage(st *state.State, cl *cluster.Cluster) *Damage { return &Damage{st, cl} }
