package meta

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

func (c *fakeCluster) damage() *metaapi.DamageStatus {
	return must[*metaapi.DamageStatus](c.t)(c.s.Damaged())
}

func repairCmd(cmds []metaapi.Command, cid uint64) *metaapi.Command {
	for i := range cmds {
		if cmds[i].Kind == metaapi.CmdRepairBlocks && cmds[i].Container == cid {
			return &cmds[i]
		}
	}
	return nil
}

// Damage reported on one replica: repaired block by block from the good
// replicas (no whole copy meanwhile), or, when it is most of the replica,
// replaced by a copy; damage on every replica is lost and names its key,
// without the container being under-replicated or unrecoverable.
func TestDamagedBlocks(t *testing.T) {
	c, cids := replCluster(t, 4, 1, func(cfg *state.Config) { cfg.DisableSafeMode = true })
	cid := cids[0]
	ki := must[*metaapi.KeyInfo](t)(c.s.GetKey("bkt", "k0"))
	b := ki.Blocks[0].Local
	n1, n2, n3, n4 := c.node(1), c.node(2), c.node(3), c.node(4)

	// 1. One replica damaged, one block of 4: a block repair.
	n1.conts[cid].DamagedBlocks, n1.conts[cid].Blocks = []uint64{b}, 4
	c.round(c.nodes...)
	cmd := repairCmd(n1.beat(), cid)
	if cmd == nil || !slices.Equal(cmd.Blocks, []uint64{b}) || !slices.Equal(memberIDs(cmd.Sources), []uint64{2, 3}) {
		t.Fatalf("repair_blocks %+v: want block %d from nodes 2 and 3", cmd, b)
	}
	if got := c.tasks(); len(got) != 0 {
		t.Fatalf("copies %v while the replica is repaired block by block", got)
	}
	if got := c.readMembers("k0"); !slices.Equal(got, []uint64{2, 3, 1}) {
		t.Fatalf("read members %v: want the damaged replica last (a last resort)", got)
	}
	if st := c.damage(); len(st.Repairable) != 1 || st.Repairs != 1 || len(st.Lost) != 0 {
		t.Fatalf("damage status %+v", st)
	}
	n1.conts[cid].DamagedBlocks = nil // repaired
	c.round(c.nodes...)
	if st := c.damage(); st.RepairedBlocks != 1 || st.Repairs != 0 || len(st.Repairable) != 0 {
		t.Fatalf("after the repair: %+v", st)
	}

	// 2. Most of the replica damaged: replaced by a whole copy.
	n2.conts[cid].DamagedBlocks, n2.conts[cid].Blocks = []uint64{b}, 1
	c.round(c.nodes...)
	c.round(c.nodes...)
	if r := n4.conts[cid]; r == nil || r.State != metaapi.ContainerClosed {
		t.Fatalf("no whole copy to node 4 for a replica damaged throughout: %+v", c.tasks())
	}
	if repairCmd(n2.got, cid) != nil {
		t.Fatal("a block repair for a replica damaged throughout")
	}
	delete(n4.conts, cid)
	n2.conts[cid].DamagedBlocks = nil

	// 3. The block damaged on every replica: lost, its key named.
	for _, n := range []*fakeDN{n1, n2, n3} {
		n.conts[cid].DamagedBlocks, n.conts[cid].Blocks = []uint64{b}, 4
	}
	c.round(c.nodes...)
	st := c.damage()
	if len(st.Lost) != 1 || st.Lost[0].Local != b || len(st.Lost[0].Nodes) != 3 {
		t.Fatalf("lost %+v, want block %d on 3 replicas", st.Lost, b)
	}
	if len(st.Keys) != 1 || st.Keys[0].Key != "k0" || len(st.Repairable) != 0 {
		t.Fatalf("damaged keys %+v, repairable %+v: want k0 only", st.Keys, st.Repairable)
	}
	if rs := c.repl(); rs.UnderReplicated != 0 || rs.Unrecoverable != 0 {
		t.Fatalf("a lost block: %+v, want nothing under-replicated or unrecoverable", rs)
	}
	// An older version of a key holding it is named too, key@version (S3
	// versioning: k0 is now the null version under a new one).
	mustNo(t, vs(c.s).SetVersioning("bkt", versionapi.Enabled))
	c.put("bkt", "k0", 1, 10)
	if st := c.damage(); len(st.Keys) != 1 || st.Keys[0].Key != "k0@null" {
		t.Fatalf("damaged keys after a new version of k0: %+v, want k0@null", st.Keys)
	}
	rec := httptest.NewRecorder()
	c.s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{"spindle_meta_damage_lost_blocks 1\n", "spindle_meta_damage_repaired_blocks_total 1\n"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if cmd := repairCmd(n1.beat(), cid); cmd != nil {
		t.Fatalf("a repair with no good replica: %+v", cmd)
	}
}
