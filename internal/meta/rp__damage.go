package meta

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
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
	blocks          []uint64 // its blocks a good replica has
	totalBlocks     uint64   // the replica's blocks (0: not counted yet)
}

// damagedReplicas lists them, by container then node.
func (s *Damage) damagedReplicas(now time.Time) []damagedReplica {
	idx, top := s.cl.closedIndex(now)
	var out []damagedReplica
	for _, cid := range slices.Sorted(maps.Keys(idx)) {
		ids := slices.DeleteFunc(slices.Clone(idx[cid]), func(id uint64) bool { return s.cl.behind(id, cid, top[cid]) })
		if !slices.ContainsFunc(ids, func(id uint64) bool { return len(s.cl.damagedOn(id, cid)) > 0 }) {
			continue
		}
		lost := s.cl.lostAmong(cid, ids)
		for _, id := range ids {
			if b := beyond(s.cl.damagedOn(id, cid), lost); len(b) > 0 {
				out = append(out, damagedReplica{container: cid, node: id, blocks: b, totalBlocks: s.nodes[id].containers[cid].Blocks})
			}
		}
	}
	return out
}

// byBlock says whether damaged replica d is repaired block by block
// (cheaper than a whole copy: at most MaxRepairBlocks blocks and at most
// half of the replica's) rather than replaced, and has attempts left.
func (s *Damage) byBlock(d damagedReplica) bool {
	small := len(d.blocks) <= metaapi.MaxRepairBlocks && (d.totalBlocks == 0 || uint64(len(d.blocks))*2 <= d.totalBlocks)
	return small && s.repl.damage.attempts[repairKey{d.container, d.node}] < maxRepairAttempts
}

// repairing counts the replicas of cid with a block repair in flight.
func (s *Damage) repairing(cid uint64) int {
	n := 0
	for k := range s.repl.damage.repairs {
		if k.container == cid {
			n++
		}
	}
	return n
}

// underRepair: node id's replica of cid is (to be) repaired block by
// block; it is neither replaced nor deleted meanwhile.
func (s *Damage) underRepair(cid, id uint64) bool {
	return s.repl.damage.repairs[repairKey{cid, id}] != nil
}

// settleRepairs ends the repairs whose blocks are no longer reported
// damaged (done), whose node is DEAD or no longer holds the replica
// CLOSED, or whose damage every replica shares now (dropped: nothing to
// repair from), or that made no progress for CopyStartTimeout (failed).
func (s *Damage) settleRepairs(now time.Time) {
	st := &s.repl.damage
	if len(st.repairs) == 0 {
		return
	}
	damaged := map[repairKey]bool{}
	for _, d := range s.damagedReplicas(now) {
		damaged[repairKey{d.container, d.node}] = true
	}
	for _, k := range slices.SortedFunc(maps.Keys(st.repairs), cmpRepairKey) {
		t := st.repairs[k]
		n := s.nodes[t.node]
		r, holds := n.containers[t.container]
		left := 0
		for _, b := range t.blocks {
			if _, ok := slices.BinarySearch(r.DamagedBlocks, b); ok {
				left++
			}
		}
		switch {
		case s.cl.healthOf(n, now) == metaapi.HealthDead || !holds || r.State != metaapi.ContainerClosed:
			delete(st.repairs, k)
		case left > 0 && !damaged[k]:
			// Its damage turned out to be on every replica: lost, no
			// good copy to repair from.
			delete(st.repairs, k)
		case left == 0:
			delete(st.repairs, k)
			delete(st.attempts, k)
			st.repairedBlocks += uint64(len(t.blocks))
			s.log.Info("damaged blocks repaired", "container", t.container, "node", t.node, "blocks", t.blocks)
		case left < t.left:
			st.repairedBlocks += uint64(t.left - left)
			t.left, t.alive = left, now
		case now.Sub(t.alive) >= s.cfg.CopyStartTimeout:
			delete(st.repairs, k)
			st.failedRepairs++
			s.log.Warn("block repair made no progress; it will be tried again or the replica replaced", "container", t.container,
				"node", t.node, "blocks_left", left, "attempt", st.attempts[k])
		}
	}
}

func cmpRepairKey(a, b repairKey) int {
	return cmp.Or(cmp.Compare(a.container, b.container), cmp.Compare(a.node, b.node))
}

// scheduleRepairs decides the block repairs of the damaged replicas on
// HEALTHY nodes that byBlock picks, when a good replica on a HEALTHY node
// exists to read from, within MaxRepairs.
func (s *Damage) scheduleRepairs(idx map[uint64][]uint64, now time.Time) {
	st := &s.repl.damage
	for _, d := range s.damagedReplicas(now) {
		k := repairKey{d.container, d.node}
		if len(st.repairs) >= MaxRepairs {
			return
		}
		if st.repairs[k] != nil || !s.byBlock(d) || s.cl.healthOf(s.nodes[d.node], now) != metaapi.HealthHealthy || s.repl.trims[d.container] != nil {
			continue
		}
		if !slices.ContainsFunc(idx[d.container], func(id uint64) bool { return s.cl.healthOf(s.nodes[id], now) == metaapi.HealthHealthy }) {
			continue
		}
		st.attempts[k]++
		st.repairs[k] = &repairTask{container: d.container, node: d.node, blocks: d.blocks[:min(len(d.blocks), metaapi.MaxRepairBlocks)],
			decided: now, alive: now, left: min(len(d.blocks), metaapi.MaxRepairBlocks)}
		s.log.Info("damaged blocks to repair from a good replica", "container", d.container, "node", d.node, "blocks", d.blocks,
			"good_replicas", idx[d.container], "attempt", st.attempts[k])
	}
}

// repairCommands appends a repair_blocks for every repair in flight on
// node id: Sources are the good replicas on HEALTHY nodes.
func (s *Damage) repairCommands(cmds []metaapi.Command, id uint64, now time.Time) []metaapi.Command {
	for _, k := range slices.SortedFunc(maps.Keys(s.repl.damage.repairs), cmpRepairKey) {
		t := s.repl.damage.repairs[k]
		if t.node != id || len(cmds) >= MaxCommandsPerHeartbeat {
			continue
		}
		cmd := metaapi.Command{Kind: metaapi.CmdRepairBlocks, Container: t.container, Blocks: t.blocks}
		for _, r := range s.cl.replicasOf(t.container, now) {
			if s.cl.healthOf(s.nodes[r], now) == metaapi.HealthHealthy {
				cmd.Sources = append(cmd.Sources, metaapi.Member{NodeID: r, Addr: s.nodes[r].rec.Addr})
			}
		}
		if len(cmd.Sources) == 0 {
			continue
		}
		if c := s.containers[t.container]; c != nil {
			if p := s.pipelines[c.rec.Pipeline]; p != nil {
				cmd.Pipeline = s.cl.pipelineView(p, now)
			}
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}

// lostBlocks lists the blocks damaged on every healthy replica of their
// CLOSED container (idx: replicaIndex), by container and block.
func (s *Damage) lostBlocks(idx map[uint64][]uint64) []metaapi.DamagedBlock {
	var out []metaapi.DamagedBlock
	for _, cid := range slices.Sorted(maps.Keys(idx)) {
		ids := idx[cid]
		if len(ids) == 0 || len(s.cl.damagedOn(ids[0], cid)) == 0 {
			continue
		}
		// A healthy replica's damage is exactly the lost blocks.
		for _, b := range s.cl.damagedOn(ids[0], cid) {
			out = append(out, metaapi.DamagedBlock{Container: cid, Local: b, Nodes: slices.Clone(ids)})
		}
	}
	return out
}

// damageStatus is GET /v1/damaged. The keys holding a lost block are
// found by a scan of the namespace (only when a block is lost).
func (s *Damage) damageStatus(now time.Time) (*metaapi.DamageStatus, error) {
	idx := s.cl.replicaIndex(now)
	st := &metaapi.DamageStatus{Lost: s.lostBlocks(idx), Keys: []metaapi.DamagedKey{}, Repairable: []metaapi.DamagedBlock{},
		Repairs: len(s.repl.damage.repairs), RepairedBlocks: s.repl.damage.repairedBlocks, FailedRepairs: s.repl.damage.failedRepairs,
		Scrub: []metaapi.NodeScrub{}}
	if st.Lost == nil {
		st.Lost = []metaapi.DamagedBlock{}
	}
	for _, d := range s.damagedReplicas(now) {
		for _, b := range d.blocks {
			st.Repairable = append(st.Repairable, metaapi.DamagedBlock{Container: d.container, Local: b, Nodes: []uint64{d.node}})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.repl.damage.scrub)) {
		st.Scrub = append(st.Scrub, metaapi.NodeScrub{NodeID: id, ScrubReport: s.repl.damage.scrub[id]})
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

// keysHolding scans every key of every bucket for the blocks of lost, at
// most metaapi.MaxDamagedKeys keys.
func (s *Damage) keysHolding(lost map[metaapi.BlockRef]bool) ([]metaapi.DamagedKey, bool, error) {
	out := []metaapi.DamagedKey{}
	lo := []byte{prefixKey}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, false, fmt.Errorf("meta: scanning keys for lost blocks: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		rec, err := decodeKey(it.Value())
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
		k := it.Key()[1:]
		bucket, key, _ := bytes.Cut(k, []byte{0})
		out = append(out, metaapi.DamagedKey{Bucket: string(bucket), Key: string(key), Blocks: hit})
	}
	return out, false, it.Error()
}

// Damaged is GET /v1/damaged.
func (s *Damage) Damaged() (*metaapi.DamageStatus, error) {
	return read(s.State, func() (*metaapi.DamageStatus, error) { return s.damageStatus(s.cfg.Now()) })
}

// Damage tracks scrubber findings and block repairs.
type Damage struct {
	*State
	cl *Cluster
}
